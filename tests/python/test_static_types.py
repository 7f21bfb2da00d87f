"""A static checker sees every public class and name (ADR 36): mypy, run over a generated file
that imports each entry of ``__all__`` of devmm and of its public modules (devmm.mrs.*,
devmm.interop.*, ...), asks its type, uses each class as a type and calls nothing. Classes made
by a factory, swapped onto a module or served by a module ``__getattr__`` are what mypy cannot
see: it types them ``Any`` or ``object``, or says they are not valid as a type."""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "devmm"
# every public module, the framework bridges included: mypy reads them without importing them
# (so without torch, CuPy or RMM)
PUBLIC = sorted(
    ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).replace(".__init__", "")
    for p in PACKAGE.rglob("*.py")
    if not any(part.startswith("_") and part != "__init__.py" for part in
               p.relative_to(PACKAGE).parts))


def _exported(module: str) -> list:
    """The names in a module's ``__all__``, read from its source (nothing is imported)."""
    path = PACKAGE.parent.joinpath(*module.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                for t in node.targets):
            return [e.value for e in node.value.elts]  # type: ignore[attr-defined]
    return []


def _classes(module: str) -> set:
    """The names of a module that are classes, as the running package says."""
    import importlib
    import inspect
    try:
        mod = importlib.import_module(module)
    except ImportError:  # a framework bridge without its framework: check its names only
        return set()
    return {n for n in _exported(module) if inspect.isclass(getattr(mod, n, None))}


def _snippet() -> str:
    lines = ["from __future__ import annotations", ""]
    for m in PUBLIC:
        lines.append(f"import {m}")
    lines.append("")
    for m in PUBLIC:  # as programs import them: from devmm.mrs.cuda import CudaMemoryResource
        classes = _classes(m)
        for n in _exported(m):
            alias = f"{m.replace('.', '_')}_{n}"
            lines += [f"from {m} import {n} as {alias}", f"reveal_type({alias})"]
            if n in classes:
                lines.append(f"def use_{alias}(x: {alias}) -> None: ...")
    for n in _exported("devmm"):  # and as attributes of the package: devmm.StatisticsAdaptor
        lines.append(f"reveal_type(devmm.{n})")
    # the callable namespace devmm.profile and its attributes
    lines += ["reveal_type(devmm.profile.report)", "reveal_type(devmm.profile.Record)"]
    return "\n".join(lines) + "\n"


def _mypy() -> list:
    import importlib.util
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed in this Python (tools/requirements-test.txt has it)")
    return [sys.executable, "-m", "mypy"]


def _unseen(snippet: pathlib.Path, mypypath: pathlib.Path) -> list:
    """What mypy cannot see in snippet: an invalid type, a missing attribute, or a name whose
    type it does not know (Any: made at run time; object: a module __getattr__'s answer)."""
    env = dict(os.environ, MYPYPATH=str(mypypath))
    r = subprocess.run(_mypy() + ["--ignore-missing-imports", "--follow-imports=silent",
                                  "--no-error-summary",
                                  "--cache-dir", str(snippet.parent / ".mypy_cache"),
                                  str(snippet)],
                       capture_output=True, text=True, env=env, cwd=snippet.parent,
                       timeout=600)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    src = snippet.read_text().splitlines()
    out = []
    for line in r.stdout.splitlines():
        where = line.split(":")
        code = src[int(where[1]) - 1] if len(where) > 2 and where[1].isdigit() else ""
        if ": error:" in line or line.endswith('Revealed type is "Any"') or \
                line.endswith('Revealed type is "builtins.object"') or \
                line.endswith('Revealed type is "object"'):
            out.append(f"{line}    ({code.strip()})")
    return out


def test_mypy_sees_every_public_name_and_class(tmp_path):
    snippet = tmp_path / "uses_every_public_name.py"
    snippet.write_text(_snippet())
    assert snippet.read_text().count("def use_") >= 40  # the classes were there to check
    unseen = _unseen(snippet, ROOT / "python")
    assert not unseen, "mypy cannot see:\n" + "\n".join(unseen)


def test_the_check_catches_classes_made_at_run_time(tmp_path):
    """The check can fail: a class made by a factory, a name a module's __getattr__ answers and
    a module swapped to be callable are what it must catch."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "made.py").write_text("def factory(name: str) -> dict:\n    class K:\n        pass\n"
                                 "    return {name: K}\n\n\nMade = factory('Made')['Made']\n")
    (pkg / "lazy.py").write_text("def __getattr__(name: str) -> object:\n    return int\n")
    use = tmp_path / "use.py"
    use.write_text("import made\nimport lazy\nreveal_type(made.Made)\nreveal_type(lazy.Thing)\n"
                   "def f(x: lazy.Thing) -> None: ...\n")
    unseen = _unseen(use, pkg)
    assert len(unseen) == 3, unseen

"""The package's structure, read from its source with ``ast`` (ADR 36): no import cycle, counting
imports inside functions and devmm's lazy attributes; imports inside functions only where they
keep a cost off ``import devmm`` or reach an optional framework; no private name imported from
another module; no class made in a function or swapped onto a module; no file over 600 lines,
nor in syntax newer than Python 3.9. Nothing here imports devmm."""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "python" / "devmm"

# Imports of devmm's own modules inside functions, each with its reason. Imports of other
# packages (numpy, torch, multiprocessing, ...) inside functions need none: they keep `import
# devmm` free of them. Anything else belongs at the top of the module.
LAZY_OWN = {
    ("devmm.adaptors", "devmm._statistics"): "dataclasses costs start-up time",
    ("devmm.adaptors", "devmm._pystack"): "only with python_stack/history; start-up time",
    ("devmm", "devmm.adaptors"): "loaded with the first adaptor C hands back (_shared.loader); "
                                 "start-up time",
    ("devmm.profile", "devmm.adaptors"): "the first profiled block; start-up time",
    ("devmm", "devmm.ipc"): "loaded with the first handle, pickle or multiprocessing import "
                            "(_shared.ipc_loader); start-up time (threading, collections)",
    ("devmm.tensor", "devmm.layout"): "from_buffer_view's default strides; start-up time "
                                      "(docs/performance.md)",
    ("devmm._lib", "devmm._build_config"): "written at install time; absent in a source tree",
    ("devmm._lib", "devmm._cdecl"): "the structs and signatures import ctypes: on first use "
                                    "(start-up time, ADR 45)",
    ("devmm._tool", "devmm._build_config"): "written at install time; absent in a source tree",
    ("devmm.__main__", "devmm.timeline"): "the timeline's imports only for its subcommand",
    ("devmm.dask", "devmm.interop.torch"): "imports torch: only for route=('torch',)",
    ("devmm.dask", "devmm.interop.cupy"): "imports CuPy: only for route=('cupy',)",
}
# Private names of one module that another imports or reads (module._name), each with its reason.
PRIVATE_OK = {
    ("devmm.tensor", "devmm.dtype", "_CACHE"): "empty()'s hot path reads the dtype cache "
                                               "directly (a dict lookup, no call)",
    ("devmm.ipc", "devmm.tensor", "_tensor"): "the one way a Tensor is built, around the C "
                                              "tensor an opened handle maps",
    # Dask's serializer is devmm.ipc's other sender: it shares, holds and rebuilds tensors as
    # multiprocessing's reducer does, through the same helpers
    ("devmm.dask", "devmm.ipc", "_shared_handle"): "Dask's serializer, as the reducer",
    ("devmm.dask", "devmm.ipc", "_hold"): "Dask's serializer, as the reducer",
    ("devmm.dask", "devmm.ipc", "_by_value"): "Dask's serializer, as the reducer",
    ("devmm.dask", "devmm.ipc", "_rebuild_value"): "Dask's serializer, as the reducer",
    ("devmm.rmm_compat", "devmm._lib", "_secure_execution"): "DEVMM_LOG_FILE is read where "
                                                              "$DEVMM_LIBRARY would be",
}


def _modules() -> dict:
    """{dotted name: path} of every module of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _type_checking_only(tree: ast.AST) -> set:
    """The nodes under ``if TYPE_CHECKING:``: never run, so never an import cycle."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and \
                node.test.id == "TYPE_CHECKING":
            ids.update(id(n) for n in ast.walk(node))
    return ids


def _in_functions(tree: ast.AST) -> set:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            ids.update(id(n) for n in ast.walk(node) if n is not node)
    return ids


def _targets(module: str, node: ast.AST) -> list:
    """[(imported module, imported name or None)] of an import statement, devmm's only."""
    if isinstance(node, ast.Import):
        return [(a.name, None) for a in node.names if a.name.split(".")[0] == "devmm"]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        base = module.split(".")
        if not MODULES[module].name == "__init__.py":
            base = base[:-1]
        base = base[:len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
        if target.split(".")[0] != "devmm":
            return []
    out = []
    for a in node.names:
        sub = f"{target}.{a.name}"
        out.append((sub, None) if sub in MODULES else (target, a.name))
    return out


def _lazy_attributes(tree: ast.AST) -> set:
    """The modules devmm's __init__ imports on first use of an attribute (its _LAZY table)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_LAZY"
                                                for t in node.targets):
            return {f"devmm.{v.value}" for v in node.value.values}  # type: ignore[attr-defined]
    return set()


def _private_attributes(module: str, tree: ast.AST, skip: set) -> list:
    """(module, line, other module, name) for each ``other._name`` read through a name bound
    to another of devmm's modules (``from . import ipc`` then ``ipc._hold``)."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and id(node) not in skip:
            for (t, name), a in zip(_targets(module, node), node.names):
                if name is None and t in MODULES and t != module:
                    bound[a.asname or a.name] = t
        elif isinstance(node, ast.Import) and id(node) not in skip:
            for a in node.names:  # `import devmm.x as y` binds y; plain `import devmm.x`, devmm
                if a.asname and a.name in MODULES and a.name != module:
                    bound[a.asname] = a.name
    return [(module, n.lineno, bound[n.value.id], n.attr) for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and
            n.value.id in bound and n.attr.startswith("_") and not n.attr.startswith("__")]


class Imports:
    def __init__(self) -> None:
        self.edges: dict = {m: set() for m in MODULES}
        self.in_functions: list = []  # (module, line, imported module, external)
        self.private: list = []       # (module, line, imported module, name)
        for module, path in MODULES.items():
            tree = ast.parse(path.read_text(), str(path))
            skip, local = _type_checking_only(tree), _in_functions(tree)
            for node in ast.walk(tree):
                if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in skip:
                    continue
                targets = _targets(module, node)
                if id(node) in local:
                    if not targets:
                        self.in_functions.append((module, node.lineno, None, True))
                    for t, _ in targets:
                        self.in_functions.append((module, node.lineno, t, False))
                for t, name in targets:
                    if t in MODULES and t != module:
                        self.edges[module].add(t)
                        if name and name.startswith("_") and not name.startswith("__"):
                            self.private.append((module, node.lineno, t, name))
            if module == "devmm":
                self.edges[module] |= _lazy_attributes(tree) & set(MODULES)
            self.private += _private_attributes(module, tree, skip)


IMPORTS = Imports()


def _cycle(edges: dict) -> list:
    """One import cycle as [a, b, ..., a], or []."""
    state: dict = {}
    path: list = []

    def visit(m: str) -> list:
        state[m] = 1
        path.append(m)
        for n in sorted(edges.get(m, ())):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        path.pop()
        state[m] = 2
        return []

    for m in sorted(edges):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return []


def test_the_package_has_no_import_cycle():
    cycle = _cycle(IMPORTS.edges)
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a"}}) == []


def test_imports_inside_functions_have_a_reason():
    unexplained = [f"{m}:{line} imports {t} inside a function"
                   for m, line, t, external in IMPORTS.in_functions
                   if not external and (m, t) not in LAZY_OWN]
    assert not unexplained, ("import these at the top, or say why not in LAZY_OWN:\n" +
                             "\n".join(unexplained))
    assert IMPORTS.in_functions  # the walk sees function bodies at all


def test_no_private_name_of_another_module_is_used():
    found = [f"{m}:{line} imports {name} from {t}" for m, line, t, name in IMPORTS.private
             if (m, t, name) not in PRIVATE_OK]
    assert not found, ("give the name a home where both may use it (a small internal module, "
                       "public names inside), or say why in PRIVATE_OK:\n" + "\n".join(found))


def _defs_in_functions(tree: ast.AST) -> list:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out += [n for n in ast.walk(node) if isinstance(n, ast.ClassDef)]
    return out


@pytest.mark.parametrize("module", sorted(MODULES))
def test_classes_are_written_out(module):
    """No class made inside a function (a factory), by type(name, bases, dict), or swapped onto
    a module (``module.__class__ = ...``): a static checker sees every class where it is
    defined. devmm.dask's WorkerPlugin subclass is the one exception: its base, distributed's,
    is imported only when a plugin is made (DevmmPlugin itself is written out)."""
    tree = ast.parse(MODULES[module].read_text())
    assert not [c.name for c in _defs_in_functions(tree)], "a class defined in a function"
    swaps = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Assign) and any(
        isinstance(t, ast.Attribute) and t.attr == "__class__" for t in n.targets)]
    assert not swaps, f"__class__ assigned at lines {swaps}"
    made = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and
            isinstance(n.func, ast.Name) and n.func.id == "type" and len(n.args) == 3]
    assert not made or module == "devmm.dask", f"type(name, bases, dict) at lines {made}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_file_stays_under_600_lines_of_python_3_9(module):
    text = MODULES[module].read_text()
    n = len(text.splitlines())
    assert n <= 600, f"{MODULES[module].name}: {n} lines: split it by concern"
    ast.parse(text, str(MODULES[module]), feature_version=(3, 9))  # the oldest Python devmm runs on

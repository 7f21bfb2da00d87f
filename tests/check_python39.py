#!/usr/bin/env python3
"""The Python package runs on Python 3.9 (pyproject.toml's requires-python), checked on every
`make test` (the Meson test `python39`): no syntax and no library call newer than 3.9.

- syntax: each file parses with ast.parse(feature_version=(3, 9)) (match, except*, type
  statements ...);
- library calls: vermin (tools/requirements-test.txt) with target 3.9: zip(strict=),
  int.bit_count, itertools.pairwise, dataclass(slots=, kw_only=) and the rest of its rules;
  annotations count only in files without `from __future__ import annotations` (with it they
  are strings, never evaluated);
- `X | Y` of types evaluated at run time (PEP 604 unions are 3.10): outside annotations, or in
  annotations of a file without the __future__ import, and outside `if TYPE_CHECKING:`, an `|`
  with a type on either side: None, a builtin type, a CapWords name or attribute
  (`ctypes.Structure`), or one of those subscripted (`list[int]`, `typing.Optional[int]`); a
  subscripted value (`_C["A"] | _C["B"]`) is no type.

tools/wheel-smoke.sh proves it once more on Debian 11 with 3.9's own compiler. Checked by
tests/python/test_python39_check.py with planted files. Usage: check_python39.py SOURCE_ROOT
[FILE...] (default: python/devmm and the tools that run on the new machine). Prints
file:line: feature per violation; exit status 1 if any, 77 (a skip) when vermin is missing and
nothing else was found.
"""
import ast
import pathlib
import subprocess
import sys

TARGET = (3, 9)
# the tools tools/wheel-smoke.sh runs with the new machine's Python
TOOLS = ["tools/wheel_checks.py", "tools/doctest_gate.py"]
TYPE_NAMES = {"None", "int", "float", "complex", "str", "bytes", "bytearray", "bool", "list",
              "dict", "set", "frozenset", "tuple", "type", "object", "memoryview", "range"}
VERMIN = "import sys; from vermin.main import main; sys.argv[0] = 'vermin'; sys.exit(main())"


def future_annotations(tree):
    """Whether the module has `from __future__ import annotations`."""
    return any(isinstance(n, ast.ImportFrom) and n.module == "__future__"
               and any(a.name == "annotations" for a in n.names) for n in tree.body)


def annotation_nodes(tree):
    """The ids of every node inside an annotation."""
    roots = []
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = n.args
            args = a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x]
            roots += [x.annotation for x in args if x.annotation] + ([n.returns] if n.returns
                                                                      else [])
        elif isinstance(n, ast.AnnAssign):
            roots.append(n.annotation)
    return {id(m) for r in roots for m in ast.walk(r)}


def type_name(n):
    """Whether a name reads as a type's: a builtin type or CapWords (not an ALL_CAPS constant)."""
    return n in TYPE_NAMES or (n[0].isupper() and not n.isupper())


def looks_like_type(node):
    """Whether an operand of `|` is (very likely) a type, so that `|` makes a PEP 604 union
    (tests/python/test_python39_check.py)."""
    if isinstance(node, ast.Constant):
        return node.value is None
    if isinstance(node, ast.Subscript):  # list[int], typing.Optional[int]; not _C["A"]
        return isinstance(node.value, (ast.Name, ast.Attribute)) and looks_like_type(node.value)
    if isinstance(node, ast.Name):
        return type_name(node.id)
    if isinstance(node, ast.Attribute):  # ctypes.Structure, typing.Optional
        return type_name(node.attr)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return looks_like_type(node.left) or looks_like_type(node.right)
    return False


def type_checking_nodes(tree):
    """The ids of every node under an `if TYPE_CHECKING:` (or `typing.TYPE_CHECKING`): only
    type checkers read it."""
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.If) and (
                (isinstance(n.test, ast.Name) and n.test.id == "TYPE_CHECKING")
                or (isinstance(n.test, ast.Attribute) and n.test.attr == "TYPE_CHECKING")):
            out |= {id(m) for b in n.body for m in ast.walk(b)}
    return out


def syntax_problems(path, source):
    """Syntax newer than 3.9 and run-time `X | Y` unions in one file, as 'file:line: why'."""
    try:
        tree = ast.parse(source, str(path), feature_version=TARGET)
    except SyntaxError as e:
        return [f"{path}:{e.lineno}: syntax newer than Python 3.9: {e.msg}"]
    skip = annotation_nodes(tree) if future_annotations(tree) else set()
    skip |= type_checking_nodes(tree)
    found = []
    for n in ast.walk(tree):
        if (isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitOr) and id(n) not in skip
                and (looks_like_type(n.left) or looks_like_type(n.right))):
            found.append(f"{path}:{n.lineno}: '{ast.unparse(n)}' is a type union (PEP 604), "
                         f"evaluated at run time: Python 3.10 (use typing.Optional/Union, or "
                         f"keep it in an annotation under `from __future__ import annotations`)")
    return found


def vermin_problems(files, eval_annotations):
    """vermin's violations of target 3.9 as 'file:line: why'; None when vermin is missing."""
    if not files:
        return []
    args = [sys.executable, "-c", VERMIN, "--no-config-file", "--no-tips", "--violations",
            "--format", "parsable", f"-t={TARGET[0]}.{TARGET[1]}-"]
    args += ["--eval-annotations"] if eval_annotations else []
    r = subprocess.run(args + [str(f) for f in files], capture_output=True, text=True)
    if "No module named 'vermin'" in r.stderr:
        return None
    found = []
    for line in r.stdout.splitlines():
        # path:line:col:py2:py3:feature (a line without feature is a file's or the total verdict)
        parts = line.rsplit(":", 5)
        if len(parts) == 6 and parts[5]:
            found.append(f"{parts[0]}:{parts[1]}: {parts[5]} requires Python {parts[4]}")
    if r.returncode not in (0, 1) or (r.returncode == 1 and not found):
        found.append(f"vermin failed (exit status {r.returncode}): {r.stdout}{r.stderr}")
    return found


def main(argv):
    """Checks the files; see the module's docstring."""
    root = pathlib.Path(argv[1]) if len(argv) > 1 else pathlib.Path(".")
    if len(argv) > 2:
        files = [pathlib.Path(f) for f in argv[2:]]
    else:
        files = sorted((root / "python" / "devmm").rglob("*.py")) + [root / t for t in TOOLS]
    problems, plain, future = [], [], []
    for f in files:
        source = f.read_text(encoding="utf-8")
        problems += syntax_problems(f, source)
        try:
            (future if future_annotations(ast.parse(source)) else plain).append(f)
        except SyntaxError:
            pass  # reported above (or not Python 3.9's, nor this Python's)
    missing = False
    for group, evaluated in ((future, False), (plain, True)):
        found = vermin_problems(group, evaluated)
        missing = missing or found is None
        problems += found or []
    for p in problems:
        print(p)
    if problems:
        print(f"python39: {len(problems)} use(s) of Python newer than 3.9 in {len(files)} files")
        return 1
    if missing:
        print("SKIP: vermin is not installed in this venv (tools/requirements-test.txt; "
              "make deps); the syntax check passed")
        return 77
    print(f"python39: {len(files)} files: nothing newer than Python 3.9")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""tests/check_python39.py (the Meson test python39) finds what Python 3.9 cannot run, naming
file:line and the feature: planted into copies of the package's files, never into the tree."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest

SRC = pathlib.Path(__file__).resolve().parents[2]
CHECK = SRC / "tests" / "check_python39.py"

PLANTS = {
    "match": ("def _planted(v):\n    match v:\n        case 1:\n            return 2\n",
              2, "pattern matching requires Python 3.10"),
    "zip_strict": ("def _planted(a, b):\n    return list(zip(a, b, strict=True))\n",
                   2, "'zip(strict)' requires Python 3.10"),
    # (vermin infers no types: int(n).bit_count() is seen, n.bit_count() is not)
    "bit_count": ("def _planted(n):\n    return int(n).bit_count()\n",
                  2, "'int.bit_count' member requires Python 3.10"),
    "union": ("_Planted = int | None\n", 1, "'int | None' is a type union (PEP 604)"),
}


def _check(*files):
    pytest.importorskip("vermin", reason="vermin is not in this venv (tools/requirements-test.txt)")
    return subprocess.run([sys.executable, str(CHECK), str(SRC), *map(str, files)],
                          capture_output=True, text=True)


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_a_planted_feature_newer_than_3_9_fails(tmp_path, plant):
    code, line, why = PLANTS[plant]  # line: where in `code` the feature is
    copy = tmp_path / "layout.py"
    shutil.copy(SRC / "python" / "devmm" / "layout.py", copy)
    n = len(copy.read_text().splitlines())
    with copy.open("a") as f:
        f.write("\n\n" + code)
    r = _check(copy)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"{copy}:{n + 2 + line}: {why}" in r.stdout, r.stdout


def test_an_annotation_under_future_annotations_is_fine(tmp_path):
    f = tmp_path / "ok.py"
    f.write_text("from __future__ import annotations\n\n\ndef g(x: int | None) -> list[str]:\n"
                 "    return []\n")
    r = _check(f)
    assert r.returncode == 0, r.stdout + r.stderr


def test_an_annotation_without_future_annotations_fails(tmp_path):
    f = tmp_path / "evaluated.py"
    f.write_text("def g(x: int | None):\n    return x\n")
    r = _check(f)
    assert r.returncode == 1 and f"{f}:1: 'int | None' is a type union" in r.stdout, r.stdout


def test_the_package_and_the_smoke_tools_pass():
    r = _check()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "nothing newer than Python 3.9" in r.stdout


def test_a_bitwise_or_of_subscripts_is_no_union(tmp_path):
    f = tmp_path / "flags.py"  # `_C["A"] | _C["B"]` combines flags: no type in sight
    f.write_text("_C = {'A': 1, 'B': 2}\nBOTH = _C['A'] | _C['B']\nFIRST = [1, 2][0] | 4\n")
    r = _check(f)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_union_of_qualified_classes_fails(tmp_path):
    f = tmp_path / "qualified.py"  # a module's CapWords classes: a PEP 604 union at run time
    f.write_text("import ctypes\nimport typing\n\nBoth = ctypes.Structure | ctypes.Union\n"
                 "Maybe = typing.Optional[int] | str\n")
    r = _check(f)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"{f}:4: 'ctypes.Structure | ctypes.Union' is a type union" in r.stdout, r.stdout
    assert f"{f}:5: 'typing.Optional[int] | str' is a type union" in r.stdout, r.stdout


def test_a_union_only_type_checkers_see_is_fine(tmp_path):
    f = tmp_path / "checking.py"  # under `if TYPE_CHECKING:` nothing runs
    f.write_text("TYPE_CHECKING = False\nif TYPE_CHECKING:\n    Alias = int | None\n")
    r = _check(f)
    assert r.returncode == 0, r.stdout + r.stderr

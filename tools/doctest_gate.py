"""Runs Markdown files as doctests, skipping the examples the installed NumPy is too old for.

    python doctest_gate.py [-o FLAG]... FILE...     (tools/wheel-smoke.sh, on each new machine)

An example that needs a newer package says so in a comment of its own source,
`# needs numpy>=2.1`; the docs also run as plain doctests in `make test` (pytest, NumPy >= 2.3),
where the comment is only a comment. Here such an example is skipped only when the installed
version is older, and each skip is printed: the file and line, the version needed, the version
installed and why (REASONS: a marker without a reason is an error, exit status 2). Exit status
1 when an example that ran failed. Standard library only, Python 3.9 (tests/check_python39.py);
tested in tests/python/test_doctest_gate.py with faked versions.

>>> needs(">>> x = 1   # needs numpy>=2.1\\n")
('numpy', '2.1')
>>> too_old("2.0.2", "2.1"), too_old("2.2.5", "2.2.5"), too_old("2.10.0", "2.9")
(True, False, False)
"""

from __future__ import annotations

import argparse
import doctest
import importlib.metadata
import os
import re
import sys
from typing import Callable, Dict, List, Optional, Tuple

MARKER = re.compile(r"#.*\bneeds ([A-Za-z0-9_.-]+)>=([0-9]+(?:\.[0-9]+)*)\b")

# why each marked version is needed: what changed in that release (the docs' examples list it)
REASONS: Dict[Tuple[str, str], str] = {
    ("numpy", "2.1"): "np.from_dlpack takes device= and copy= and asks for a versioned DLPack "
                      "capsule (max_version=(1, 0), the one with a read-only flag) from NumPy 2.1 "
                      "on; older NumPy passes no keywords, so devmm hands it a legacy capsule, "
                      "which a read-only tensor cannot go out as",
    ("numpy", "2.2.5"): "NumPy before 2.2.5 makes every array it imports through DLPack "
                        "read-only, even from a writable versioned capsule (numpy#28599, fixed by "
                        "numpy#28600 in 2.3.0 and its backport numpy#28632 in 2.2.5)",
}


def needs(source: str) -> Optional[Tuple[str, str]]:
    """The (package, minimum version) an example's source asks for, or None.

    >>> needs(">>> t.strides   # the padding\\n") is None
    True
    """
    m = MARKER.search(source)
    return (m.group(1).lower(), m.group(2)) if m else None


def _numbers(version: str) -> Tuple[int, ...]:
    """The leading numeric release of a version: '2.3.0rc1' -> (2, 3, 0)."""
    parts = []
    for part in version.split("."):
        m = re.match(r"[0-9]+", part)
        if not m:
            break
        parts.append(int(m.group()))
        if m.end() != len(part):
            break
    return tuple(parts)


def too_old(installed: str, minimum: str) -> bool:
    """Whether `installed` comes before `minimum` (numeric release parts; 2.1 == 2.1.0).

    >>> too_old("1.26.4", "2.1"), too_old("2.1", "2.1.0")
    (True, False)
    """
    have, want = _numbers(installed), _numbers(minimum)
    width = max(len(have), len(want))
    return have + (0,) * (width - len(have)) < want + (0,) * (width - len(want))


def installed_version(package: str) -> Optional[str]:
    """The installed distribution's version, None when it is not installed."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def gate(test: doctest.DocTest,
         version: Callable[[str], Optional[str]] = installed_version) -> List[str]:
    """Drops from `test` the examples whose marker asks for more than `version` reports.

    Returns one line per skipped example; raises ValueError for a marker REASONS does not know.
    """
    kept, skipped = [], []
    for ex in test.examples:
        need = needs(ex.source)
        if need is None:
            kept.append(ex)
            continue
        if need not in REASONS:
            raise ValueError(f"{test.filename}:{test.lineno + ex.lineno + 1}: "
                             f"'needs {need[0]}>={need[1]}' has no reason in "
                             f"tools/doctest_gate.py's REASONS")
        have = version(need[0])
        if have is not None and not too_old(have, need[1]):
            kept.append(ex)
            continue
        first = ex.source.splitlines()[0].split("#")[0].strip()
        skipped.append(f"{test.filename}:{test.lineno + ex.lineno + 1}: `{first}` needs "
                       f"{need[0]}>={need[1]}, here {need[0]} is {have or 'not installed'}: "
                       f"{REASONS[need]}")
    test.examples = kept
    return skipped


def run(path: str, optionflags: int = 0,
        version: Callable[[str], Optional[str]] = installed_version) -> Tuple[int, int, int]:
    """Runs one Markdown file as a doctest (one namespace, as `python -m doctest` does).

    Prints each skip and each failure; returns (failed, ran, skipped).
    """
    with open(path, encoding="utf-8") as f:
        text = f.read()
    # named as python -m doctest and pytest name it (docs/api.md's tracebacks show the name)
    name = os.path.basename(path)
    test = doctest.DocTestParser().get_doctest(text, {"__name__": "__main__"}, name, path, 0)
    skipped = gate(test, version)
    for line in skipped:
        print(f"doctest-gate: SKIP {line}")
    runner = doctest.DocTestRunner(optionflags=optionflags)
    failed, ran = runner.run(test)
    return failed, ran, len(skipped)


def main(argv: Optional[List[str]] = None) -> int:
    """The command line: -o FLAG (as python -m doctest) and the files."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--option", action="append", default=[],
                    choices=sorted(doctest.OPTIONFLAGS_BY_NAME), help="a doctest option flag")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args(argv)
    flags = 0
    for name in args.option:
        flags |= doctest.OPTIONFLAGS_BY_NAME[name]
    status = 0
    for path in args.files:
        try:
            failed, ran, skipped = run(path, flags)
        except ValueError as e:
            print(f"doctest-gate: {e}", file=sys.stderr)
            return 2
        print(f"doctest-gate: {path}: {ran - failed} of {ran} examples passed, {skipped} skipped"
              f" (a newer package needed)")
        status = status or (1 if failed else 0)
    return status


if __name__ == "__main__":
    sys.exit(main())

"""``devmm.__git_commit__``, as RMM has ``rmm.__git_commit__``: the commit this devmm was built
from. An installed package has it from Meson (``_build_config.GIT_COMMIT``, stamped when the
build was configured: from ``git``, or in a source archive from the ``.git-commit`` that
``tools/dist-commit.sh`` wrote into it, so a wheel built from the sdist has it too); a source
checkout reads its own ``.git`` (no ``git`` run); anything else says ``"unknown"`` (a tree
without its history).

>>> import devmm
>>> c = devmm.__git_commit__; c == "unknown" or len(c) == 40
True
"""

from __future__ import annotations

import os

_HEX = frozenset("0123456789abcdef")


def _commit(text: str) -> str:
    text = text.strip()
    return text if len(text) == 40 and set(text) <= _HEX else ""


def _ref(gitdir: str, common: str, ref: str) -> str:
    for d in (gitdir, common):
        try:
            with open(os.path.join(d, *ref.split("/"))) as f:
                return _commit(f.read())
        except OSError:
            pass
    try:
        with open(os.path.join(common, "packed-refs")) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[1] == ref:
                    return _commit(parts[0])
    except OSError:
        pass
    return ""


def from_checkout(top: str) -> str:
    """The commit checked out at top (a devmm source tree), or "unknown"."""
    if not os.path.exists(os.path.join(top, "meson.build")):
        return "unknown"
    gitdir = os.path.join(top, ".git")
    try:
        if os.path.isfile(gitdir):  # a worktree: "gitdir: <path>"
            with open(gitdir) as f:
                gitdir = os.path.join(top, f.read().split(":", 1)[1].strip())
        common = gitdir
        if os.path.isfile(os.path.join(gitdir, "commondir")):
            with open(os.path.join(gitdir, "commondir")) as f:
                common = os.path.join(gitdir, f.read().strip())
        with open(os.path.join(gitdir, "HEAD")) as f:
            head = f.read().strip()
    except (OSError, IndexError):
        return "unknown"
    found = _ref(gitdir, common, head[4:].strip()) if head.startswith("ref:") else _commit(head)
    return found or "unknown"


try:  # written at install time next to this file
    from ._build_config import GIT_COMMIT  # type: ignore[import-not-found]
except ImportError:
    GIT_COMMIT = ""
__git_commit__: str = _commit(GIT_COMMIT) or from_checkout(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

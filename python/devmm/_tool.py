"""devmm's programs for Python users: pip's console scripts ``devmm-info`` and ``devmm-replay``,
and ``python -m devmm info``, run the program of this installation with the same arguments, so
there is one tool and one output each.

``devmm-info --check`` shows the plugins, devices and resource stacks devmm builds from its
configuration and makes a round trip on every device (``devmm.info()`` returns the same data as
a dict); ``devmm-replay LOG.csv`` replays a memory log against other stacks.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

_HERE = os.path.dirname(os.path.abspath(__file__))


def program(name: str) -> Optional[str]:
    """The path of devmm's program `name` in this installation: the one installed with the
    package, or in a source tree (no ``_build_config.py``) the one on PATH, where ``meson
    devenv`` puts the build's. None if there is neither.

    >>> prog = program("devmm-info")
    >>> prog is None or os.path.basename(prog) == "devmm-info"
    True
    """
    try:
        from ._build_config import BINDIR  # type: ignore[import-not-found]
    except ImportError:
        return shutil.which(name)
    return os.path.join(_HERE, BINDIR, name)


def run(name: str, argv: Optional[list[str]] = None) -> int:
    """Replaces this process with devmm's program `name`, passing argv (default: this process's
    arguments); returns 127 if it cannot."""
    args = sys.argv[1:] if argv is None else argv
    prog = program(name)
    if prog is None:
        print(f"{name}: this devmm package is not installed (no _build_config.py) and no {name} "
              "is on PATH; in a build tree run it under `meson devenv -C build`", file=sys.stderr)
        return 127
    # Python ignores SIGPIPE and exec keeps an ignored signal ignored: give the program the
    # default back, so that `devmm-info | head -1` ends it quietly, as it would from a shell.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        sys.stdout.flush()
        os.execv(prog, [prog] + args)
    except OSError as e:
        print(f"{name}: cannot run {prog}: {e}", file=sys.stderr)
    return 127


def main(argv: Optional[list[str]] = None) -> int:
    """``devmm-info`` (the console script, and ``python -m devmm info``)."""
    return run("devmm-info", argv)


def replay(argv: Optional[list[str]] = None) -> int:
    """``devmm-replay`` (the console script)."""
    return run("devmm-replay", argv)


if __name__ == "__main__":
    sys.exit(main())

"""``devmm-info`` for Python users: pip's console script ``devmm-info`` and ``python -m devmm
info`` both run the devmm-info program of this installation with the same arguments, so there
is one tool and one output (``--check``, ``--json``, ``--strict``, ``--config FILE``).

``devmm-info --check`` shows the plugins, devices and resource stacks devmm builds from its
configuration and makes a round trip on every device. In Python, ``devmm.info()`` returns the
same data as a dict.
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


def info_program() -> Optional[str]:
    """The devmm-info program of this installation: the one installed with the package, or in a
    source tree (no ``_build_config.py``) the one on PATH, where ``meson devenv`` puts the
    build's. None if there is neither.

    >>> prog = info_program()
    >>> prog is None or os.path.basename(prog) == "devmm-info"
    True
    """
    try:
        from ._build_config import BINDIR  # type: ignore[import-not-found]
    except ImportError:
        return shutil.which("devmm-info")
    return os.path.join(_HERE, BINDIR, "devmm-info")


def main(argv: Optional[list[str]] = None) -> int:
    """Replaces this process with devmm-info, passing argv (default: this process's arguments);
    returns 127 if it cannot."""
    args = sys.argv[1:] if argv is None else argv
    prog = info_program()
    if prog is None:
        print("devmm-info: this devmm package is not installed (no _build_config.py) and no "
              "devmm-info is on PATH; in a build tree run it under `meson devenv -C build`",
              file=sys.stderr)
        return 127
    # Python ignores SIGPIPE and exec keeps an ignored signal ignored: give devmm-info the
    # default back, so that `devmm-info | head -1` ends it quietly, as it would from a shell.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        sys.stdout.flush()
        os.execv(prog, [prog] + args)
    except OSError as e:
        print(f"devmm-info: cannot run {prog}: {e}", file=sys.stderr)
    return 127


if __name__ == "__main__":
    sys.exit(main())

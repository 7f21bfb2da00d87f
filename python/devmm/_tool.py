"""The ``devmm-info`` command of an installed package (pip's console script): runs the
devmm-info program installed with this package, with the same arguments.

``devmm-info --check`` shows the plugins, devices and resource stacks devmm builds from its
configuration and makes a round trip on every device; ``python -m devmm info`` is the
pure-Python view of the same data.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

_HERE = os.path.dirname(os.path.abspath(__file__))


def info_program() -> Optional[str]:
    """The path of the devmm-info program installed with this package (None in a source tree,
    where ``meson devenv`` puts the build's devmm-info on PATH).

    >>> prog = info_program()
    >>> prog is None or os.path.basename(prog) == "devmm-info"
    True
    """
    try:
        from ._build_config import BINDIR  # type: ignore[import-not-found]
    except ImportError:
        return None
    return os.path.join(_HERE, BINDIR, "devmm-info")


def main() -> int:
    """Replaces this process with devmm-info (argv passed on); returns 127 if it cannot."""
    prog = info_program()
    if prog is None:
        print("devmm-info: this devmm package is not installed (no _build_config.py); in a build "
              "tree run `meson devenv -C build devmm-info`", file=sys.stderr)
        return 127
    try:
        os.execv(prog, [prog] + sys.argv[1:])
    except OSError as e:
        print(f"devmm-info: cannot run {prog}: {e}", file=sys.stderr)
    return 127


if __name__ == "__main__":
    sys.exit(main())

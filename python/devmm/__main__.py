"""``python -m devmm COMMAND``.

``python -m devmm info [--check] [--json] [--strict] [--config FILE]`` runs this installation's
devmm-info with the same arguments (devmm._tool): one tool, one output.
``python -m devmm replay LOG.csv [--resource KIND]...`` runs devmm-replay the same way.
``python -m devmm timeline LOG.csv -o timeline.html``: a memory timeline (devmm.timeline).
"""

from __future__ import annotations

import argparse
import sys

from . import _tool


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["info"]:  # everything after it is devmm-info's, --help included
        return _tool.main(argv[1:])
    if argv[:1] == ["replay"]:
        return _tool.replay(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m devmm")
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("info", add_help=False,
                   help="devmm-info: the configuration, plugins, devices and stacks "
                        "(python -m devmm info --help)")
    sub.add_parser("replay", add_help=False,
                   help="devmm-replay: replay a memory log against other stacks "
                        "(python -m devmm replay --help)")
    from .timeline import add_parser as add_timeline  # its own module: separable
    add_timeline(sub)
    args = ap.parse_args(argv)
    return args.run(args)  # `info` and `replay` never get here


if __name__ == "__main__":
    sys.exit(main())

"""``python -m devmm info [--json] [--config FILE]``: what devmm sees.
``python -m devmm timeline LOG.csv -o timeline.html``: a memory timeline (devmm.timeline)."""

from __future__ import annotations

import argparse
import json
import sys

from . import _info


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return str(n)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m devmm")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="show the configuration, plugins, devices and stacks")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--config", help="read this devmm.ini")
    from .timeline import add_parser as add_timeline  # its own module: separable
    add_timeline(sub)
    args = ap.parse_args(argv)
    if args.command == "timeline":
        return args.run(args)
    from .errors import DevmmError
    try:
        data = _info.init(args.config) if args.config else _info.info()
    except DevmmError as e:
        print(f"devmm: {e}", file=sys.stderr)
        return 1
    if args.json:
        json.dump(data, sys.stdout, indent=2)
        print()
        return 0
    print(f"devmm {data['version']} (plugin ABI {data['abi']})\nconfig: {data['config']}\n")
    print("plugins:")
    for pl in data["plugins"]:
        state = (f"loaded, {pl['devices']} device(s), kinds {', '.join(pl['kinds'])}"
                 if pl["status"] == "loaded" else f"FAILED: {pl['error']}")
        print(f"  {pl['name']:<8} {pl['version'] or '-':<8} {state}")
        if pl["status"] == "loaded" and pl["error"]:
            print(f"           {pl['error']}")
    print("\ndevices:")
    for d in data["devices"]:
        print(f"  {d['device']:<8} {d['name']}  ({_human(d['total_bytes'])} total, "
              f"{_human(d['free_bytes'])} free)")
        print(f"           stack: {d['stack'] or 'NONE: ' + d['error']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Run by python/meson.build with the interpreter the package installs for: prints the
directory `meson install` should put the package in, given the prefix and Meson's choice.

    python site_dir.py PREFIX MESON_DIR

Meson's choice if it is one of this interpreter's site directories; else the first site
directory under PREFIX; else nothing (the package would not be importable without PYTHONPATH).
"""

import os
import site
import sys


def main(prefix: str, meson_dir: str) -> str:
    sites = [os.path.realpath(p) for p in site.getsitepackages()]
    if os.path.realpath(meson_dir) in sites:
        return os.path.normpath(meson_dir)
    root = os.path.realpath(prefix)
    under = [p for p in sites if p.startswith(root.rstrip(os.sep) + os.sep)]
    return under[0] if under else ""


if __name__ == "__main__":
    print(main(sys.argv[1], sys.argv[2]))

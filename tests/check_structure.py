#!/usr/bin/env python3
"""The tree's own rules (ADR 34), checked on every `make test`:

- core/ is one folder per concept, with at most three C files at its top;
- a core folder includes only its own headers and those of the folders below it (LAYERS);
- no C, C++ or Python file in core/, plugins/, tools/ or python/ runs over MAX_LINES lines;
- no comment in code cites a review's finding number (cite the test or the ADR instead).

Usage: check_structure.py SOURCE_ROOT. Prints each violation; exit status 1 if any.
"""
import pathlib
import re
import sys

# bottom to top: a folder may include the headers of folders on lower rows, never higher ones
LAYERS = [
    {"base"},
    {"resource"},
    {"adaptors", "tensor"},
    {"interchange", "ipc", "memlog"},
    {"plugin_host"},
    {"config"},
    {"python", "bridges"},
]
MAX_LINES = 600
CODE = (".c", ".h", ".cpp", ".hpp", ".py")
FINDING = re.compile(r"\bfindings? (?:[A-Z]?\d+|#\d+)\b|\(F\d+\)", re.IGNORECASE)


def level(folder):
    for i, row in enumerate(LAYERS):
        if folder in row:
            return i
    return None


def check(root):
    errors = []
    core = root / "core"
    top = [p.name for p in core.iterdir() if p.suffix in (".c", ".cpp")]
    if len(top) > 3:
        errors.append(f"core/: {len(top)} C files at its top ({', '.join(sorted(top))}): "
                      "at most 3; put each in the folder of its concept")
    for folder in sorted(p for p in core.iterdir() if p.is_dir()):
        mine = level(folder.name)
        if mine is None:
            errors.append(f"core/{folder.name}/: not in tests/check_structure.py's LAYERS: "
                          "say where it stands")
            continue
        for src in sorted(folder.rglob("*")):
            if src.suffix not in CODE:
                continue
            for n, line in enumerate(src.read_text(errors="replace").splitlines(), 1):
                m = re.match(r'\s*#\s*include\s+"\.\./([a-z_]+)/', line)
                if not m:
                    continue
                theirs = level(m.group(1))
                if theirs is None or theirs >= mine:
                    errors.append(f"{src.relative_to(root)}:{n}: includes core/{m.group(1)}/, "
                                  f"which is not below core/{folder.name}/ (LAYERS: a folder "
                                  "uses only the folders below it)")
    for part in ("core", "plugins", "tools", "python"):
        for src in sorted((root / part).rglob("*")):
            if src.suffix in CODE and src.is_file():
                n = len(src.read_text(errors="replace").splitlines())
                if n > MAX_LINES:
                    errors.append(f"{src.relative_to(root)}: {n} lines: at most {MAX_LINES} "
                                  "(split it by concern)")
    for part in ("core", "plugins", "tools", "python", "tests", "bench", "include", "examples"):
        for src in sorted((root / part).rglob("*")):
            if src.suffix not in CODE or not src.is_file() or src.name == "check_structure.py":
                continue
            for n, line in enumerate(src.read_text(errors="replace").splitlines(), 1):
                if FINDING.search(line):
                    errors.append(f"{src.relative_to(root)}:{n}: cites a review's finding: "
                                  "cite the test or the ADR that holds the fact")
    return errors


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    errors = check(root)
    for e in errors:
        print(e)
    print(f"structure: {len(errors)} violation(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

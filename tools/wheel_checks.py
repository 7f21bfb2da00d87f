"""Checks of the wheel, each naming what it expected.

    python tools/wheel_checks.py --wheel dist/devmm-*.whl     (make wheel: what the file holds)
    python wheel_checks.py                                    (tools/wheel-smoke.sh: the installed
                                                               wheel on a fresh Debian 12 with no
                                                               GPU, no NVIDIA driver, no HIP)

Exit status 1 when something is wrong. `wheel_problems` and `plugin_problems` are unit-tested in
tests/python/test_packaging.py with wheels and reports that must fail.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import struct
import subprocess
import sys

# The wheel's own plugins and what each must report here. cuda: the static CUDA runtime finds no
# driver ("CUDA driver version is insufficient ..." or "no CUDA driver was found ...").
# rocm: none of libamdhip64.so.7, .so.6, .so.5 can be opened, each named with dlerror()'s reason.
NO_DRIVER = {
    "cpu": None,
    "cuda": re.compile(r"0 devices: .*\bdriver\b.*", re.I),
    "rocm": re.compile(r"0 devices: no HIP runtime found \(libamdhip64\.so\.7: [^;()]+; "
                       r"libamdhip64\.so\.6: [^;()]+; libamdhip64\.so\.5: [^;()]+\)"),
}


# devmm-info's "build" section for the wheel (pyproject.toml's setup args): what it carries, and
# the RMM bridge left out.
BUILT = {"cpu": True, "sim": True, "cuda": True, "rocm": True, "libdevmm-torch": True,
         "rmm": False}


def plugin_problems(info: dict) -> list[str]:
    """What is wrong in a `devmm-info --json` report of the wheel on a machine without a GPU.

    >>> ok = {"plugins": [{"name": "cpu", "status": "loaded", "devices": 1, "error": ""}],
    ...       "devices": [{"device": "cpu", "stack": "statistics(cpu.malloc)", "error": ""}]}
    >>> plugin_problems(ok)[0]
    'cuda: missing (the wheel ships it and its devmm.ini lists it)'

    """
    plugins = {p["name"]: p for p in info.get("plugins", [])}
    problems = []
    for name, why in NO_DRIVER.items():
        p = plugins.get(name)
        if p is None:
            problems.append(f"{name}: missing (the wheel ships it and its devmm.ini lists it)")
            continue
        if p["status"] != "loaded":
            problems.append(f"{name}: {p['status']}: {p['error']}")
        elif why is None:
            if p["devices"] != 1 or p["error"]:
                problems.append(f"{name}: expected 1 device and no error, got {p['devices']} "
                                f"device(s), error {p['error']!r}")
        elif p["devices"] != 0 or not why.fullmatch(p["error"]):
            problems.append(f"{name}: expected 0 devices and an error matching {why.pattern!r}, "
                            f"got {p['devices']} device(s), error {p['error']!r}")
    for name, p in plugins.items():  # any other plugin the wheel lists (sim) must load
        if name not in NO_DRIVER and p["status"] != "loaded":
            problems.append(f"{name}: {p['status']}: {p['error']}")
    built = {b["name"]: b["built"] for b in info.get("build", [])}
    for name, want in BUILT.items():
        if built.get(name) is not want:
            problems.append(f"build: {name}: expected {'built' if want else 'left out'}, "
                            f"devmm-info says {built.get(name, 'nothing')}")
    devices = [d["device"] for d in info.get("devices", [])]
    if "cpu" not in devices:
        problems.append(f"no cpu device: {devices}")
    for d in info.get("devices", []):
        if d["error"] or not d["stack"]:
            problems.append(f"{d['device']}: no resource stack: {d['error']}")
    for c in info.get("check", []):
        if not c["ok"]:
            problems.append(f"{c['device']}: --check failed: {c['message']}")
    return problems


# What a wheel must hold besides the Python modules: the native parts under devmm/_native, and
# the license texts (pyproject's license-files) in .dist-info/licenses.
PROGRAMS = ["devmm-info", "devmm-replay"]  # each also a console script (pyproject.toml)
NATIVE = PROGRAMS + ["libdevmm.so", "libdevmm-torch.so", "devmm.ini", "plugins/devmm-cpu.so",
                     "plugins/devmm-cuda.so", "plugins/devmm-rocm.so", "plugins/devmm-sim.so"]
LICENSES = ["LICENSE", "LICENSES/THIRD-PARTY.md", "LICENSES/LGPL-2.1.txt",
            "LICENSES/libinih.copyright", "LICENSES/HIP-headers-MIT.txt"]


def wheel_problems(names: list[str], read) -> list[str]:
    """What is missing from a wheel whose members are `names` (read(name) -> bytes): the native
    parts, the license texts, and a notice in THIRD-PARTY.md for every library auditwheel
    vendored into devmm.libs/ (named as `devmm.libs/<stem>-`: libltdl-1a2b3c4d.so.7.3.2 is
    libltdl)."""
    problems = [f"no devmm/_native/{n}" for n in NATIVE if f"devmm/_native/{n}" not in names]
    dist_info = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
    if len(dist_info) != 1:
        return problems + [f"expected one .dist-info directory, found {sorted(dist_info)}"]
    licenses = f"{dist_info.pop()}/licenses/"
    problems += [f"no {licenses}{n} (pyproject.toml license-files)" for n in LICENSES
                 if licenses + n not in names]
    notice = licenses + "LICENSES/THIRD-PARTY.md"
    text = read(notice).decode() if notice in names else ""
    for n in names:
        if n.startswith("devmm.libs/") and not n.endswith("/"):
            stem = re.sub(r"-[0-9a-f]{8}\.so.*$", "", os.path.basename(n))
            if f"devmm.libs/{stem}-" not in text:
                problems.append(f"{n} is vendored but {notice} does not name {stem}")
    return problems


# The wheel's floor (ADR 43): its tag, and no ELF in it needing a newer glibc symbol version.
TAG = "py3-none-manylinux_2_28_x86_64"
GLIBC_FLOOR = (2, 28)


def glibc_needs(elf: bytes) -> list[tuple[int, ...]]:
    """The GLIBC_x.y symbol versions an ELF64 little-endian file needs (its SHT_GNU_verneed
    section, what `objdump -T` shows as GLIBC_x.y), as sorted tuples; [] for anything else.

    >>> glibc_needs(b"#!/bin/sh")
    []

    """
    if elf[:6] != b"\x7fELF\x02\x01":
        return []
    u = struct.unpack_from
    shoff, = u("<Q", elf, 0x28)
    shentsize, shnum = u("<HH", elf, 0x3A)
    sections = [u("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    found = set()
    for _, kind, _, _, offset, _, link, count, _, _ in sections:
        if kind != 0x6FFFFFFE:  # SHT_GNU_verneed
            continue
        strtab = sections[link][4]
        for _ in range(count):
            _, aux_count, _, aux, following = u("<HHIII", elf, offset)
            at = offset + aux
            for _ in range(aux_count):
                _, _, _, name, aux_next = u("<IHHII", elf, at)
                text = elf[strtab + name:elf.index(b"\0", strtab + name)].decode()
                if re.fullmatch(r"GLIBC_2(\.[0-9]+)+", text):
                    found.add(tuple(int(x) for x in text[6:].split(".")))
                at += aux_next
            offset += following
    return sorted(found)


def floor_problems(wheel: str, names: list[str], read) -> list[str]:
    """What breaks the floor in the wheel file `wheel`: its tag (in the file name and in
    .dist-info/WHEEL), and any member that needs a GLIBC_ version newer than GLIBC_FLOOR."""
    problems = []
    if not os.path.basename(wheel).endswith(f"-{TAG}.whl"):
        problems.append(f"the file name is not tagged {TAG}")
    tags = [line.split(":", 1)[1].strip() for n in names if n.endswith(".dist-info/WHEEL")
            for line in read(n).decode().splitlines() if line.startswith("Tag:")]
    if tags != [TAG]:
        problems.append(f".dist-info/WHEEL: tags {tags}, expected [{TAG!r}]")
    for n in names:
        newer = [v for v in glibc_needs(read(n) if not n.endswith("/") else b"")
                 if v > GLIBC_FLOOR]
        if newer:
            versions = ", ".join("GLIBC_" + ".".join(map(str, v)) for v in newer)
            problems.append(f"{n} needs {versions}, newer than the floor "
                            f"GLIBC_{'.'.join(map(str, GLIBC_FLOOR))}")
    return problems


def steady(out: str):
    """devmm-info's output (text or --json) without the free memory, which changes between two
    runs: what two runs of it must agree on."""
    if out.startswith("{"):
        data = json.loads(out)
        for d in data["devices"]:
            d.pop("free_bytes")
        return data
    return re.sub(r"[0-9.]+ [KMGT]?i?B free", "(free)", out)


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True)


def main() -> int:
    import devmm

    problems = []
    bindir = os.path.dirname(sys.executable)
    info = _run(os.path.join(bindir, "devmm-info"), "--json", "--check")
    if info.returncode != 0:
        problems.append(f"devmm-info --json --check: exit {info.returncode}: {info.stderr}")
    else:
        report = json.loads(info.stdout)
        for p in report["plugins"]:
            print(f"   plugin {p['name']}: {p['status']}, {p['devices']} device(s) {p['error']}")
        problems += plugin_problems(report)
        own = os.path.join(os.path.dirname(devmm.__file__), "_native", "devmm.ini")
        if os.path.realpath(report["config"]) != os.path.realpath(own):
            problems.append(f"config: {report['config']}, expected the wheel's own devmm.ini")
    # one tool: the console script and `python -m devmm info` print the same
    script = _run(os.path.join(bindir, "devmm-info"), "--check")
    module = _run(sys.executable, "-m", "devmm", "info", "--check")
    if script.returncode or (script.returncode, steady(script.stdout)) != \
            (module.returncode, steady(module.stdout)):
        problems.append(f"devmm-info --check (exit {script.returncode}) and python -m devmm info "
                        f"--check (exit {module.returncode}) differ or fail:\n{script.stdout}"
                        f"{script.stderr}\n{module.stdout}{module.stderr}")
    for name in PROGRAMS:  # the console scripts run the package's programs
        r = _run(os.path.join(bindir, name), "--help")
        if r.returncode != 0 or not r.stdout.startswith(f"usage: {name} "):
            problems.append(f"{name} --help (console script): exit {r.returncode}: "
                            f"{r.stdout[:200]}{r.stderr[:200]}")
    if devmm.__version__ != importlib.metadata.version("devmm"):
        problems.append(f"devmm.__version__ {devmm.__version__} is not the installed "
                        f"distribution's {importlib.metadata.version('devmm')}")
    commit = devmm.__git_commit__  # the sdist carries it (tools/dist-commit.sh): it has no .git
    if len(commit) != 40 or set(commit) - set("0123456789abcdef"):
        problems.append(f"devmm.__git_commit__ is {commit!r}, not the commit it was built from")
    lib = devmm._lib.LIBRARY_PATH
    if not lib.startswith(os.path.dirname(devmm.__file__) + os.sep):
        problems.append(f"libdevmm loaded from {lib}, not from the package")
    print("== python: devmm", devmm.__version__, "library", lib)
    for p in problems:
        print("wheel-smoke: FAILED:", p)
    return 1 if problems else 0


def check_wheel(path: str) -> int:
    import zipfile
    with zipfile.ZipFile(path) as z:
        problems = wheel_problems(z.namelist(), z.read)
        problems += floor_problems(path, z.namelist(), z.read)
    for p in problems:
        print(f"wheel_checks: {os.path.basename(path)}: {p}", file=sys.stderr)
    if not problems:
        print(f"wheel_checks: {os.path.basename(path)}: native parts, licenses, notices, "
              f"the tag {TAG} and every ELF within GLIBC_2.28: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--wheel"] and len(sys.argv) == 3:
        sys.exit(check_wheel(sys.argv[2]))
    if len(sys.argv) != 1:
        sys.exit("usage: wheel_checks.py [--wheel WHEEL]")
    sys.exit(main())

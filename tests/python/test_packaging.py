"""Packaging (issue #16): the ROCm plugin finds HIP at run time; one version; every module is
installed; a fresh clone configures without the venv; `meson install` lays out what README says.

The wheel itself is proven on a fresh Debian 12 by tools/wheel-smoke.sh (`make wheel-smoke`)."""

import os
import re
import shutil
import subprocess
import sys

import pytest

import devmm

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLUGIN_DIRS = [d for d in os.environ.get("DEVMM_PLUGIN_PATH", "").split(":") if d]
BUILD = os.path.dirname(PLUGIN_DIRS[0]) if PLUGIN_DIRS else None  # <build>/plugins


def _built(name):
    return any(os.path.exists(os.path.join(d, f"devmm-{name}.so")) for d in PLUGIN_DIRS)


def _plugin(ini, text, name):
    ini.write_text(text)
    devmm.init(str(ini))
    return {p["name"]: p for p in devmm.plugins()}[name]


# ----------------------------------------------------------------------------- ROCm


@pytest.mark.skipif(not _built("rocm-nohip"), reason="the ROCm plugin was not built (no HIP "
                    "headers: apt install libamdhip64-dev)")
def test_rocm_without_hip_loads_and_reports_no_hip_runtime(tmp_path):
    # devmm-rocm-nohip is devmm-rocm built to look for a HIP library that cannot exist
    p = _plugin(tmp_path / "devmm.ini", "[devmm]\nplugins = cpu, rocm-nohip\n", "rocm-nohip")
    assert p["status"] == "loaded", p
    assert p["devices"] == 0
    assert p["error"].startswith(
        "0 devices: no HIP runtime found (libamdhip64-devmm-test-absent.so.6: cannot open shared "
        "object file"), p["error"]
    assert "(no HIP runtime)" in p["version"], p["version"]
    # creating a resource fails with the same reason
    from devmm.mrs.rocm import RocmAsyncMemoryResource
    with pytest.raises(devmm.DevmmError, match="no rocm device 0: 0 devices: no HIP runtime found"):
        RocmAsyncMemoryResource(device=0)


@pytest.mark.skipif(not _built("rocm"), reason="the ROCm plugin was not built (no HIP headers)")
def test_rocm_links_no_hip_library():
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("no readelf (binutils) to read the plugin's DT_NEEDED")
    so = next(os.path.join(d, "devmm-rocm.so") for d in PLUGIN_DIRS
              if os.path.exists(os.path.join(d, "devmm-rocm.so")))
    needed = re.findall(r"\(NEEDED\).*\[(.*)\]", subprocess.run(
        [readelf, "-d", so], capture_output=True, text=True, check=True).stdout)
    assert needed and not [n for n in needed if "amdhip" in n], needed


def _system_hip():
    import ctypes
    for name in ("libamdhip64.so.6", "libamdhip64.so.5"):
        try:
            ctypes.CDLL(name)
            return name
        except OSError:
            pass
    return None


@pytest.mark.skipif(not _built("rocm"), reason="the ROCm plugin was not built (no HIP headers)")
@pytest.mark.skipif(_system_hip() is None, reason="no libamdhip64.so.6/.so.5 on this machine")
def test_rocm_finds_the_system_hip_at_run_time(tmp_path):
    p = _plugin(tmp_path / "devmm.ini", "[devmm]\nplugins = cpu, rocm\n", "rocm")
    assert p["status"] == "loaded", p
    # the version names the runtime it found: HIP's own version number and the library
    assert re.search(r"HIP runtime \d+, " + re.escape(_system_hip()), p["version"]), p["version"]
    assert "no HIP runtime found" not in p["error"]


# ----------------------------------------------------------------------------- version


def test_one_version_meson_library_python():
    with open(os.path.join(SRC, "meson.build")) as f:
        meson_version = re.search(r"project\('devmm'.*?version:\s*'([^']+)'", f.read(), re.S)[1]
    assert devmm.__version__ == devmm.version() == meson_version
    with open(os.path.join(SRC, "pyproject.toml")) as f:
        pyproject = f.read()
    # the wheel takes Meson's version (meson-python): no second copy to drift
    assert re.search(r'^dynamic = \["version"\]', pyproject, re.M)
    assert not re.search(r"^version\s*=", pyproject, re.M)


def test_every_python_module_is_installed():
    with open(os.path.join(SRC, "python", "meson.build")) as f:
        text = f.read()
    listed = set()
    for sub, names in re.findall(r"'([a-z_]*)': \[([^\]]*)\]", text):
        for n in re.findall(r"'([^']+\.py)'", names):
            listed.add(os.path.join(sub, n) if sub else n)
    pkg = os.path.join(SRC, "python", "devmm")
    present = {os.path.relpath(os.path.join(root, f), pkg)
               for root, _, files in os.walk(pkg) for f in files if f.endswith(".py")}
    assert present - listed == set(), f"modules python/meson.build does not install: " \
        f"{sorted(present - listed)}"
    assert listed - present == set(), f"listed but missing: {sorted(listed - present)}"


# ----------------------------------------------------------------------------- configure


def _fresh_copy(tmp_path):
    """The tracked files only: what a fresh clone has (no .venv, no build/)."""
    files = subprocess.run(["git", "-C", SRC, "ls-files", "-z"], capture_output=True,
                           check=True).stdout.decode().split("\0")
    dst = tmp_path / "src"
    for f in filter(None, files):
        if os.path.isfile(os.path.join(SRC, f)):
            os.makedirs(dst / os.path.dirname(f), exist_ok=True)
            shutil.copy2(os.path.join(SRC, f), dst / f)
    return dst


def _setup(src, build, *args):
    return subprocess.run(["meson", "setup", str(build), str(src), *args],
                          capture_output=True, text=True)


@pytest.mark.skipif(shutil.which("git") is None or shutil.which("meson") is None
                    or not os.path.isdir(os.path.join(SRC, ".git"))
                    and not os.path.isfile(os.path.join(SRC, ".git")),
                    reason="needs git, meson and a git checkout")
def test_a_fresh_clone_configures_without_the_venv(tmp_path):
    src = _fresh_copy(tmp_path)
    r = _setup(src, tmp_path / "b1")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    if "cuda plugin: yes" in re.sub(r"\s+:", ":", r.stdout):
        assert re.search(r"RMM bridge\s*: off: no \.venv \(make deps\) and no -Drmm_dir",
                         r.stdout), r.stdout[-2000:]
    # asking for the bridge without its dependency is an error that says why
    r = _setup(src, tmp_path / "b2", "-Drmm=enabled", "-Dtests=disabled")
    assert r.returncode != 0
    why = r"(no \.venv \(make deps\) and no -Drmm_dir|no CUDA toolkit)"
    assert re.search(r"ERROR: Problem encountered: rmm: " + why, r.stdout + r.stderr), \
        r.stdout[-2000:]
    # -Drmm=disabled disables, even with librmm at hand (this venv's, when it has librmm-cu13)
    import sysconfig
    r = _setup(src, tmp_path / "b3", "-Drmm=disabled", "-Dtests=disabled",
               "-Drmm_dir=" + sysconfig.get_paths()["purelib"])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert re.search(r"RMM bridge\s*: off: disabled \(-Drmm=disabled\)", r.stdout), r.stdout[-2000:]


# ----------------------------------------------------------------------------- meson install


@pytest.mark.skipif(BUILD is None or shutil.which("meson") is None,
                    reason="needs the build tree (DEVMM_PLUGIN_PATH=<build>/plugins) and meson")
def test_meson_install_layout(tmp_path):
    root = tmp_path / "root"
    r = subprocess.run(["meson", "install", "-C", BUILD, "--no-rebuild", "--quiet",
                        "--destdir", str(root)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    opts = {o["name"]: o["value"] for o in __import__("json").loads(subprocess.run(
        ["meson", "introspect", "--buildoptions", BUILD], capture_output=True, text=True,
        check=True).stdout)}
    prefix = str(root) + opts["prefix"]
    libdir = os.path.join(prefix, opts["libdir"])
    sysconf = opts["sysconfdir"] if os.path.isabs(opts["sysconfdir"]) else \
        os.path.join(opts["prefix"], opts["sysconfdir"])
    expect = [
        os.path.join(libdir, "libdevmm.so.0"),
        os.path.join(libdir, "devmm", "devmm-cpu.so"),
        os.path.join(prefix, opts["includedir"], "devmm", "devmm.h"),
        os.path.join(prefix, opts["bindir"], "devmm-info"),
        str(root) + os.path.join(sysconf, "devmm", "devmm.ini"),
    ]
    for path in expect:
        assert os.path.exists(path), f"{path} not installed"
    for p in ("cuda", "rocm"):
        if _built(p):
            assert os.path.exists(os.path.join(libdir, "devmm", f"devmm-{p}.so"))
    assert not os.path.exists(os.path.join(libdir, "devmm", "devmm-rocm-nohip.so"))
    with open(os.path.join(libdir, "pkgconfig", "devmm.pc")) as f:
        assert re.search(r"^plugindir=\$\{libdir\}/devmm$", f.read(), re.M)
    # the Python package, in the interpreter's own site-packages for this prefix
    cfgs = [os.path.join(r, "_build_config.py") for r, _, fs in os.walk(prefix)
            if "_build_config.py" in fs and r.endswith(os.path.join("", "devmm"))]
    assert len(cfgs) == 1, cfgs
    site = os.path.dirname(os.path.dirname(cfgs[0]))
    scheme = os.path.relpath(site, prefix)
    assert scheme.startswith("lib" + os.sep) and ("site-packages" in scheme or
                                                   "dist-packages" in scheme), scheme
    cfg = {}
    with open(cfgs[0]) as f:
        exec(f.read(), cfg)
    assert cfg["LIBDIR"] == os.path.join(opts["prefix"], opts["libdir"])
    assert cfg["LIBRARY"] == "libdevmm.so.0"
    assert cfg["BINDIR"] == os.path.join(opts["prefix"], opts["bindir"])
    for mod in ("__init__.py", "_lib.py", "_tool.py", os.path.join("mrs", "cpu.py")):
        assert os.path.exists(os.path.join(site, "devmm", mod)), mod
    # the installed package imports (the installed library by its recorded path, moved into
    # the destdir here) and runs the installed devmm-info
    env = dict(os.environ, PYTHONPATH=site, DEVMM_LIBRARY=os.path.join(libdir, "libdevmm.so.0"),
               DEVMM_PLUGIN_PATH=os.path.join(libdir, "devmm"), LD_LIBRARY_PATH=libdir)
    r = subprocess.run([sys.executable, "-c", "import devmm; print(devmm.__version__, "
                        "devmm.empty((2,), 'float32').shape)"], env=env, capture_output=True,
                       text=True, cwd=str(tmp_path))
    assert r.returncode == 0 and r.stdout.split() == [devmm.__version__, "(2,)"], r

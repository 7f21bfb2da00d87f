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
    # what was tried, newest ROCm first (7, 6, 5), each with dlerror()'s reason, nothing after
    absent = (r"libamdhip64-devmm-test-absent\.so\.{}: cannot open shared object file: "
              r"No such file or directory")
    assert re.fullmatch(r"0 devices: no HIP runtime found \(" + "; ".join(
        absent.format(v) for v in (7, 6, 5)) + r"\)", p["error"]), p["error"]
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
    for name in ("libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"):
        try:
            ctypes.CDLL(name)
            return name
        except OSError:
            pass
    return None


@pytest.mark.skipif(not _built("rocm"), reason="the ROCm plugin was not built (no HIP headers)")
@pytest.mark.skipif(_system_hip() is None, reason="no libamdhip64.so.7/.so.6/.so.5 on this machine")
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
        os.path.join(libdir, "cmake", "devmm", "devmmConfig.cmake"),  # find_package(devmm)
        os.path.join(libdir, "cmake", "devmm", "devmmConfigVersion.cmake"),
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
    # devmm.__git_commit__ was stamped at configure time (_build_config.GIT_COMMIT), as RMM's
    r = subprocess.run([sys.executable, "-c", "import devmm, devmm._commit as c; "
                        "print(devmm.__git_commit__, c.GIT_COMMIT)"], env=env,
                       capture_output=True, text=True, cwd=str(tmp_path))
    stamped = subprocess.run(["git", "-C", SRC, "rev-parse", "HEAD"], capture_output=True,
                             text=True).stdout.strip() or "unknown"
    assert r.returncode == 0 and r.stdout.split() == [stamped, stamped], r
    # docs/api.md's examples hold for an installed user too, whose devmm.ini is the installed
    # default (it adds a statistics adaptor on cpu): DEVMM_CONFIG stands for the lookup's
    # <sysconfdir> step, which points outside the destdir here
    env["DEVMM_CONFIG"] = str(root) + os.path.join(sysconf, "devmm", "devmm.ini")
    env["XDG_CONFIG_HOME"] = str(tmp_path / "no-xdg")
    # and the installed programs (devmm-replay), not the build's, are the ones on PATH
    env["PATH"] = os.pathsep.join([os.path.join(prefix, opts["bindir"])] + [
        d for d in env["PATH"].split(os.pathsep) if os.path.realpath(d) !=
        os.path.realpath(os.path.join(BUILD, "tools"))])
    for doc in ("README.md", os.path.join("docs", "api.md"),
                os.path.join("docs", "from-rmm.md")):
        r = subprocess.run([sys.executable, "-m", "doctest", "-o", "ELLIPSIS",
                            os.path.join(SRC, doc)], env=env, capture_output=True, text=True,
                           cwd=str(tmp_path))
        assert r.returncode == 0, doc + ":\n" + r.stdout[-4000:] + r.stderr[-2000:]


# ----------------------------------------------------------------------------- install: Python dir


DEBIAN_PYTHON = "/usr/bin/python3"


def _configure(tmp_path, name, *args):
    """`meson setup` of this checkout into tmp_path/name (no GPU plugins, no RMM bridge: only
    what these tests read): (stdout with the summary, {built file: installed path})."""
    build = tmp_path / name
    r = subprocess.run(["meson", "setup", str(build), SRC, "-Dcuda=disabled", "-Drocm=disabled",
                        "-Drmm=disabled", *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    installed = __import__("json").loads(subprocess.run(
        ["meson", "introspect", "--installed", str(build)], capture_output=True, text=True,
        check=True).stdout)
    return re.sub(r"[ \t]+:", ":", r.stdout), installed


def _site_dirs(python):
    out = subprocess.run([python, "-c", "import site; print('\\n'.join(site.getsitepackages()))"],
                         capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"})
    return [os.path.realpath(p) for p in out.stdout.split()]


def _python_dir(installed):
    cfg = [dst for dst in installed.values() if dst.endswith("/devmm/_build_config.py")]
    assert len(cfg) == 1, cfg
    return os.path.dirname(os.path.dirname(cfg[0]))


@pytest.mark.skipif(shutil.which("meson") is None or not os.path.exists(DEBIAN_PYTHON),
                    reason="needs meson and Debian's /usr/bin/python3")
def test_meson_install_puts_the_python_package_on_the_interpreters_path(tmp_path):
    # Debian's python3 with prefix /usr/local: Meson's own choice, lib/python3/dist-packages, is
    # not on that interpreter's sys.path (mesonbuild/meson#8739); the build must pick one that
    # is, and say which interpreter and directory in the summary. The interpreter is chosen as
    # meson-python chooses it, with a machine file.
    native = tmp_path / "native.ini"
    native.write_text(f"[binaries]\npython = '{DEBIAN_PYTHON}'\n")
    summary, installed = _configure(tmp_path, "b", "--prefix=/usr/local",
                                    "--native-file", str(native))
    pydir = _python_dir(installed)
    assert os.path.realpath(pydir) in _site_dirs(DEBIAN_PYTHON), \
        f"{pydir} is not on {DEBIAN_PYTHON}'s path {_site_dirs(DEBIAN_PYTHON)}"
    assert f"Python package: {DEBIAN_PYTHON} -> {pydir}" in summary, summary[-2500:]
    # the summary names every optional part, on or off: Check is here, so the suites are on
    for part in ("cuda plugin", "rocm plugin", "RMM bridge", "fuzz targets", "libdevmm-torch",
                 "Python tests (.venv)", "Python tests (Debian python3)"):
        assert re.search(rf"^\s*{re.escape(part)}: ", summary, re.M), (part, summary[-2500:])
    if shutil.which("pkg-config") and \
            subprocess.run(["pkg-config", "--exists", "check >= 0.15"]).returncode == 0:
        assert re.search(r"^\s*tests: yes", summary, re.M), summary[-2500:]


@pytest.mark.skipif(shutil.which("meson") is None or not os.path.exists(DEBIAN_PYTHON),
                    reason="needs meson and Debian's /usr/bin/python3")
def test_a_python_dir_off_the_interpreters_path_is_said_in_the_summary(tmp_path):
    # no site directory of the interpreter lies under this prefix: Meson's directory stays, and
    # the summary says what to do; -Dtests=disabled says off too
    prefix = str(tmp_path / "opt")
    summary, installed = _configure(tmp_path, "b", "--prefix=" + prefix,
                                    "-Dpython=" + DEBIAN_PYTHON, "-Dtests=disabled")
    pydir = _python_dir(installed)
    assert pydir.startswith(prefix + os.sep), pydir
    assert f"Python package: {DEBIAN_PYTHON} -> {pydir} (not on its sys.path: set PYTHONPATH, " \
        "or -Dpython.purelibdir=DIR)" in summary, summary[-2500:]
    assert re.search(r"^\s*tests: off: -Dtests=disabled$", summary, re.M), summary[-2500:]
    for part in ("Python tests (.venv)", "Python tests (Debian python3)"):
        assert re.search(rf"^\s*{re.escape(part)}: off: ", summary, re.M), (part, summary[-2500:])


# ----------------------------------------------------------------------------- python -m devmm info


def _tool_env():
    """The test environment plus the build's tools on PATH, as `meson devenv` has it."""
    return dict(os.environ, PATH=os.path.join(BUILD, "tools") + os.pathsep + os.environ["PATH"])


@pytest.mark.skipif(BUILD is None, reason="needs the build tree (DEVMM_PLUGIN_PATH=<build>/...)")
@pytest.mark.parametrize("args", [["--check"], ["--json"], ["--check", "--strict"], ["--bogus"]])
def test_python_m_devmm_info_is_devmm_info(args):
    # one tool, one output: the same arguments, the same text, the same exit status
    cfg = ["--config", os.path.join(BUILD, "conf", "devmm.ini")]
    env = _tool_env()
    tool = subprocess.run([os.path.join(BUILD, "tools", "devmm-info"), *args, *cfg], env=env,
                          capture_output=True, text=True)
    py = subprocess.run([sys.executable, "-m", "devmm", "info", *args, *cfg], env=env,
                        capture_output=True, text=True)
    steady = _wheel_checks().steady
    assert (py.returncode, steady(py.stdout), py.stderr) == \
        (tool.returncode, steady(tool.stdout), tool.stderr)
    assert tool.stdout or tool.stderr


@pytest.mark.skipif(BUILD is None, reason="needs the build tree (DEVMM_PLUGIN_PATH=<build>/...)")
@pytest.mark.parametrize("cmd", [["-m", "devmm", "info"], ["-m", "devmm._tool"]])
def test_devmm_info_into_a_closed_pipe_ends_quietly(cmd):
    # `python -m devmm info | head -1`: the reader is gone before the output is written. The
    # writer ends as `cat` does (killed by SIGPIPE), never with a Python traceback.
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([sys.executable, *cmd, "--config",
                            os.path.join(BUILD, "conf", "devmm.ini")], env=_tool_env(),
                           stdout=w, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(w)
    assert p.stderr == "", p.stderr
    assert p.returncode == -13, p.returncode  # SIGPIPE


# ----------------------------------------------------------------------------- wheel-smoke's checks


def _wheel_checks():
    import importlib.util
    spec = importlib.util.spec_from_file_location("wheel_checks",
                                                  os.path.join(SRC, "tools", "wheel_checks.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _report(cuda_devices=0, cuda_error="0 devices: CUDA driver version is insufficient for CUDA "
            "runtime version (cudaErrorInsufficientDriver)",
            rocm_error="0 devices: no HIP runtime found (libamdhip64.so.7: cannot open shared "
            "object file: No such file or directory; libamdhip64.so.6: cannot open shared "
            "object file: No such file or directory; libamdhip64.so.5: cannot open shared object "
            "file: No such file or directory)"):
    def plugin(name, n, err):
        return {"name": name, "status": "loaded", "devices": n, "error": err}
    return {"plugins": [plugin("cpu", 1, ""), plugin("cuda", cuda_devices, cuda_error),
                        plugin("rocm", 0, rocm_error)],
            "devices": [{"device": "cpu", "stack": "statistics(cpu.malloc)", "error": ""}],
            "check": [{"device": "cpu", "ok": True, "message": "ok"}],
            "build": [{"kind": "plugin", "name": n, "built": n != "rmm", "reason": ""}
                      for n in ("cpu", "sim", "cuda", "rocm", "rmm")]
            + [{"kind": "library", "name": "libdevmm-torch", "built": True, "reason": ""}]}


def test_wheel_smoke_checks_pass_what_a_machine_without_gpu_reports():
    checks = _wheel_checks()
    assert checks.plugin_problems(_report()) == []
    # the sim engineer's wording for a missing driver passes too
    assert checks.plugin_problems(_report(cuda_error="0 devices: no CUDA driver was found "
                                          "(libcuda.so.1 cannot be loaded: ...)")) == []


@pytest.mark.parametrize("report, what", [
    # the reviewer's case: cuda finds a device (or says nothing) while rocm says "0 devices"
    (_report(cuda_devices=1, cuda_error=""), "cuda: expected 0 devices"),
    (_report(cuda_error="0 devices: hipErrorNoDevice (hipErrorNoDevice)"), "cuda: expected"),
    ({**_report(), "plugins": _report()["plugins"][::2]}, "cuda: missing"),
    (_report(rocm_error="0 devices: no HIP runtime found (libamdhip64.so.6: cannot open shared "
                        "object file: No such file or directory) (dlopen)"), "rocm: expected"),
    (_report(rocm_error="0 devices: hipErrorNoDevice (hipErrorNoDevice)"), "rocm: expected"),
    ({**_report(), "check": [{"device": "cpu", "ok": False, "message": "boom"}]},
     "cpu: --check failed: boom"),
    # the wheel's build left a part out (devmm-info's build section, ADR 43)
    ({**_report(), "build": [b for b in _report()["build"] if b["name"] != "libdevmm-torch"]},
     "build: libdevmm-torch: expected built, devmm-info says nothing"),
    ({**_report(), "build": [{**b, "built": b["name"] != "rocm"} for b in _report()["build"]]},
     "build: rmm: expected left out"),
])
def test_wheel_smoke_checks_fail_on_a_wrong_report(report, what):
    problems = _wheel_checks().plugin_problems(report)
    assert any(p.startswith(what) for p in problems), problems


def _wheel_members(drop=(), extra=()):
    names = ["devmm/__init__.py"] + [f"devmm/_native/{n}" for n in _wheel_checks().NATIVE]
    names += [f"devmm-0.1.0.dist-info/licenses/{n}" for n in _wheel_checks().LICENSES]
    names += ["devmm-0.1.0.dist-info/METADATA", "devmm.libs/libltdl-0123abcd.so.7.3.2",
              "devmm.libs/", "devmm.libs/libinih-89abcdef.so.55"] + list(extra)
    return [n for n in names if not any(n.endswith(d) for d in drop)]


def _read_notice(name):
    assert name.endswith("LICENSES/THIRD-PARTY.md"), name
    with open(os.path.join(SRC, "LICENSES", "THIRD-PARTY.md"), "rb") as f:
        return f.read()


def test_pyproject_license_files_are_the_ones_the_wheel_check_wants():
    with open(os.path.join(SRC, "pyproject.toml")) as f:
        pyproject = f.read()
    assert re.search(r'^license = "BSD-3-Clause"', pyproject, re.M)
    assert re.search(r'^license-files = \["LICENSE", "LICENSES/\*"\]', pyproject, re.M)
    for n in _wheel_checks().LICENSES:
        assert os.path.isfile(os.path.join(SRC, n)), n
    # the vendored LGPL library comes with the LGPL's text, and the meson-python that has
    # license-files (PEP 639) is asked for
    with open(os.path.join(SRC, "LICENSES", "LGPL-2.1.txt")) as f:
        assert "GNU LESSER GENERAL PUBLIC LICENSE" in f.read()
    assert re.search(r'"meson-python>=0\.(1[89]|[2-9]\d)', pyproject)


def test_wheel_check_passes_a_complete_wheel():
    assert _wheel_checks().wheel_problems(_wheel_members(), _read_notice) == []


@pytest.mark.parametrize("members, what", [
    (_wheel_members(drop=["licenses/LICENSE"]), "no devmm-0.1.0.dist-info/licenses/LICENSE"),
    (_wheel_members(drop=["LGPL-2.1.txt"]), "no devmm-0.1.0.dist-info/licenses/LICENSES/LGPL"),
    (_wheel_members(drop=["THIRD-PARTY.md"]), "no devmm-0.1.0.dist-info/licenses/LICENSES/THIRD"),
    (_wheel_members(extra=["devmm.libs/libfoo-deadbeef.so.2"]),
     "devmm.libs/libfoo-deadbeef.so.2 is vendored but"),
    (_wheel_members(drop=["plugins/devmm-cuda.so"]), "no devmm/_native/plugins/devmm-cuda.so"),
])
def test_wheel_check_fails_a_wheel_without_its_licenses_or_parts(members, what):
    problems = _wheel_checks().wheel_problems(members, _read_notice)
    assert any(p.startswith(what) for p in problems), problems


def test_wheel_floor_check_refuses_another_tag_and_newer_glibc_versions():
    # ADR 43: manylinux_2_28, and no ELF needing a GLIBC_ version past 2.28
    checks = _wheel_checks()
    wheel_file = "devmm-0.1.0.dist-info/WHEEL"

    def read(tag, elf=b""):
        return lambda n: (f"Wheel-Version: 1.0\nTag: {tag}\n".encode() if n == wheel_file
                          else elf)
    good = f"dist/devmm-0.1.0-{checks.TAG}.whl"
    assert checks.floor_problems(good, [wheel_file, "devmm/__init__.py"],
                                 read(checks.TAG)) == []
    old = "py3-none-manylinux_2_34_x86_64"
    problems = checks.floor_problems(f"devmm-0.1.0-{old}.whl", [wheel_file], read(old))
    assert problems == [f"the file name is not tagged {checks.TAG}",
                        f".dist-info/WHEEL: tags [{old!r}], expected [{checks.TAG!r}]"]
    # an ELF's needs are what objdump -T lists; a floor below its newest one names that
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("no objdump to compare the ELF reader with")
    exe = os.path.realpath(sys.executable)
    listed = subprocess.run([objdump, "-T", exe], capture_output=True, text=True).stdout
    want = sorted({tuple(map(int, v.split("."))) for v in re.findall(r"\bGLIBC_(2[.0-9]*\d)\b",
                                                                     listed)})
    with open(exe, "rb") as f:
        elf = f.read()
    assert checks.glibc_needs(elf) == want and want, (want, exe)
    checks.GLIBC_FLOOR = want[-1][:1] + (want[-1][1] - 1,)
    newest = "GLIBC_" + ".".join(map(str, want[-1]))
    assert checks.floor_problems(good, [wheel_file, "devmm/_native/x"], read(checks.TAG, elf)) \
        == [f"devmm/_native/x needs {newest}, newer than the floor "
            f"GLIBC_{'.'.join(map(str, checks.GLIBC_FLOOR))}"]


def test_every_installed_program_is_a_console_script_of_the_wheel():
    # the wheel puts devmm's programs in devmm/_native, which is on nobody's PATH: each needs a
    # console script (docs/api.md runs devmm-replay by name, as an installed user would)
    with open(os.path.join(SRC, "tools", "meson.build")) as f:
        # an executable(...) call, which may hold calls of its own (files(...)), installed in bindir
        programs = re.findall(r"executable\('([^']+)'(?:[^()]|\([^()]*\))*install_dir: bindir",
                              f.read(), re.S)
    assert "devmm-info" in programs, programs
    with open(os.path.join(SRC, "pyproject.toml")) as f:
        scripts = dict(re.findall(r'^([a-z-]+) = "(devmm\._tool:[a-z_]+)"$', f.read(), re.M))
    assert sorted(scripts) == sorted(programs), (scripts, programs)
    import devmm._tool
    for name, entry in scripts.items():
        assert callable(getattr(devmm._tool, entry.split(":")[1])), entry
    assert sorted(_wheel_checks().PROGRAMS) == sorted(programs)

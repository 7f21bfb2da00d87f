"""A Python user's first hour (issue 23): every wrong input gets an answer that says what was
wrong, where and what was expected, and nothing is silently surprising."""

import subprocess
import sys

import pytest

import devmm


def test_dir_lists_each_public_name_once():
    import devmm.mrs  # noqa: F401  (a lazy name, now also a global)
    import devmm.ipc  # noqa: F401
    names = dir(devmm)
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    for private in ("annotations", "TYPE_CHECKING"):
        assert private not in names
    assert {"empty", "ipc", "mrs", "TrackingAdaptor", "__version__"} <= set(names)


def test_zeros_names_itself_in_its_errors():
    with pytest.raises(TypeError, match=r"^zeros\(\) got an unexpected keyword argument 'dtyp'"):
        devmm.zeros(3, dtyp="float32")


def test_repr_of_a_freed_tensor_says_freed():
    t = devmm.zeros(3)
    t.buffer.free()
    assert repr(t) == "<devmm.Tensor shape=(3,) dtype=float32 device=cpu (freed)>"


def test_a_misaligned_view_is_refused():
    b = devmm.Buffer(64)
    with pytest.raises(ValueError, match=r"from_buffer_view: offset 1 is not a multiple of "
                                         r"float32's alignment \(4 bytes\)"):
        devmm.from_buffer_view(b, (4,), "float32", offset=1)
    assert devmm.from_buffer_view(b, (4,), "int8", offset=1).data_ptr == b.ptr + 1
    assert devmm.from_buffer_view(b, (2,), "complex64", offset=4).data_ptr == b.ptr + 4


def test_init_returns_a_summary_that_reads_in_a_repl():
    r = devmm.init()
    text = repr(r)
    assert len(text) < 200 and text.startswith("<devmm config "), text
    assert r["config"] and r["plugins"], "still the info() dict"


def test_init_takes_ini_text_as_the_dask_plugin_does(tmp_path):
    r = devmm.init("[device cpu]\nresource = cpu.malloc\nadaptors = statistics\n")
    try:
        assert devmm.devices()[0]["stack"] == "statistics(cpu.malloc)"
        assert "ini text" in repr(r), repr(r)
    finally:
        devmm.init()


def test_every_init_warning_is_said_once(tmp_path):
    ini = tmp_path / "x.ini"
    ini.write_text("[devmm]\nplugins = cpu, absent\n")
    code = ("import warnings, devmm\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            f"    devmm.init({str(ini)!r})\n"
            "print(len(w))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1", r.stdout
    assert "plugin 'absent' not loaded" not in r.stderr, r.stderr


@pytest.mark.parametrize("case", ["double", "foreign", "size"])
def test_raw_deallocate_refuses_what_allocate_did_not_give(case):
    # run in a child: before, a double or foreign free killed the interpreter (SIGABRT/SIGSEGV)
    code = ("import ctypes, devmm\n"
            "from devmm.mrs.cpu import MallocMemoryResource\n"
            "mr = MallocMemoryResource()\n"
            "p = mr.allocate(64)\n"
            "if 'double' == CASE:\n"
            "    mr.deallocate(p, 64)\n"
            "    bad = (p, 64)\n"
            "elif 'foreign' == CASE:\n"
            "    buf = ctypes.create_string_buffer(64)\n"
            "    bad = (ctypes.addressof(buf), 64)\n"
            "else:\n"
            "    bad = (p, 32)\n"
            "try:\n"
            "    mr.deallocate(*bad)\n"
            "except devmm.DevmmValueError as e:\n"
            "    print('refused:', e)\n")
    r = subprocess.run([sys.executable, "-c", f"CASE = {case!r}\n" + code],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, (r.returncode, r.stderr[-500:])
    want = {"double": "was not given out by allocate() (or was freed already)",
            "foreign": "was not given out by allocate() (or was freed already)",
            "size": "nbytes=32, alignment=0, but allocate() gave it for nbytes=64"}[case]
    assert "refused: deallocate(0x" in r.stdout and want in r.stdout, r.stdout


@pytest.fixture
def sim_tensor(tmp_path):
    """A sim:0 tensor, freed before devmm goes back to its usual configuration (a sim buffer
    still live then would outlive its plugin's stack and trouble the tests after)."""
    ini = tmp_path / "sim.ini"
    ini.write_text("[devmm]\nplugins = cpu, sim\n[plugin sim]\njitter_us = 0\n")
    devmm.init(str(ini))
    t = devmm.empty(4, device="sim:0")
    try:
        yield t
    finally:
        t.buffer.free()
        from devmm.mrs.sim import runtime
        runtime().synchronize()
        devmm.init()


@pytest.mark.parametrize("stream", [2**64 + 1, 2**70, -2])
def test_dlpack_refuses_a_stream_that_is_no_handle(sim_tensor, stream):
    with pytest.raises(devmm.StreamError, match=rf"__dlpack__: stream {stream} is not a stream"
                                                r" handle: expected None, -1, 1, 2 or a handle "
                                                r"in 3\.\.2\*\*64-1"):
        sim_tensor.__dlpack__(stream=stream)


def test_dlpack_names_the_stream_it_was_given(sim_tensor):
    with pytest.raises(devmm.StreamError, match=r"__dlpack__: stream 12345 \(0x3039\): "):
        sim_tensor.__dlpack__(stream=12345)


@pytest.mark.parametrize("version", ["1", 1, (1,), ("1", 0), (1, 0, 0)])
def test_dlpack_max_version_must_be_a_pair_of_ints(version):
    t = devmm.empty(4)
    with pytest.raises(TypeError, match=r"__dlpack__: max_version must be None or a \(major, "
                                        r"minor\) pair of ints, got "):
        t.__dlpack__(max_version=version)


def test_cpu_shm_refuses_more_than_the_machine_has():
    # a 32 TiB memfd was created and mapped: the first touch past what memory holds is a SIGBUS
    from devmm.mrs.cpu import SharedMemoryResource
    with pytest.raises(devmm.OutOfMemoryError, match=r"cpu\.shm: 32\.0 TiB is more than this "
                                                     r"machine's memory and swap \("):
        devmm.empty(32 << 40, "int8", resource=SharedMemoryResource())


def test_a_snapshot_without_history_does_not_pass_the_live_total_off_as_the_peak():
    from devmm.mrs.cpu import MallocMemoryResource
    tr = devmm.TrackingAdaptor(MallocMemoryResource())  # as devmm.ini builds one: no history
    a = devmm.empty(256 << 10, "int8", resource=tr)
    b = devmm.empty(512 << 10, "int8", resource=tr)
    a.buffer.free()  # the peak was 768 KiB; 512 KiB is live
    snap = devmm.snapshot(tr)
    with pytest.warns(RuntimeWarning, match=r"no history recorded: 524288 bytes is the live "
                                            r"total now, not the peak"):
        assert snap.peak_bytes == 512 << 10
    note = snap.aggregate()["devices"][0]["note"]
    assert "the peak shown is the live total now" in note, note
    del b


def test_statistics_figures_do_not_drift_on_a_wrong_size_free():
    from devmm.mrs.cpu import MallocMemoryResource
    st = devmm.StatisticsAdaptor(MallocMemoryResource())
    p = st.allocate(100)
    with pytest.raises(devmm.DevmmValueError, match="nbytes=10, alignment=0, but allocate"):
        st.deallocate(p, 10)
    assert st.current_bytes == 100
    st.deallocate(p, 100)
    assert st.current_bytes == 0


def test_a_misaligned_pointer_from_an_allocate_callback_is_refused_and_given_back():
    import ctypes
    keep, freed = {}, []

    def alloc(n, align, stream):
        buf = ctypes.create_string_buffer(n + 128)
        base = ctypes.addressof(buf)
        p = (base + 63) // 64 * 64 + 1  # never aligned
        keep[p] = buf
        return p

    r = devmm.CallbackMemoryResource(alloc, lambda p, n, a, s: freed.append(keep.pop(p)))
    with pytest.raises(devmm.CallbackError, match=r"the allocate callback returned 0x[0-9a-f]+ "
                                                  r"for 64 bytes aligned to 64: not a multiple "
                                                  r"of 64"):
        r.allocate(64, 64)
    assert not keep and len(freed) == 1, "the misaligned block was given back"


def test_devmm_library_naming_another_library_says_so(tmp_path):
    import ctypes.util
    other = ctypes.util.find_library("z")
    assert other, "libz is on every Debian (zlib1g is essential)"
    import os
    path = next(p for p in (f"/lib/x86_64-linux-gnu/{other}", f"/usr/lib/x86_64-linux-gnu/{other}")
                if os.path.exists(p))
    env = dict(os.environ, DEVMM_LIBRARY=path)
    r = subprocess.run([sys.executable, "-c", "import devmm"], capture_output=True, text=True,
                       env=env, timeout=60)
    assert r.returncode == 1
    assert f"devmm: DEVMM_LIBRARY={path} is not libdevmm (it has no devmm_version)" in r.stderr, \
        r.stderr[-600:]


def test_backtraces_from_python_record_the_python_stack_too():
    # C backtraces of a Python program are the interpreter's frames ("python(+0x14de98)")
    from devmm.mrs.cpu import MallocMemoryResource
    tr = devmm.TrackingAdaptor(MallocMemoryResource(), backtraces=True)
    p = tr.allocate(64)
    try:
        stack = tr.lookup(p)["python_stack"]
        assert any(f.endswith("test_first_hour.py") and fn.startswith("test_backtraces")
                   for f, _line, fn in stack), stack
    finally:
        tr.deallocate(p, 64)


def test_a_tensor_multiprocessing_copies_is_warned_about_once():
    import warnings
    from multiprocessing.reduction import ForkingPickler
    import devmm.ipc
    devmm.ipc._warned_by_value = False
    t = devmm.empty(16, "int8")  # cpu.malloc: nothing to share
    with pytest.warns(RuntimeWarning, match=r"goes to the other process by value \(a copy: "
                                            r"what it writes there is not seen here\); "):
        ForkingPickler.dumps(t)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ForkingPickler.dumps(t)  # once


def test_import_devmm_leaves_ipc_and_threading_for_later():
    # start-up time (bench_python.py startup): devmm.ipc and what it imports load on first use
    code = ("import sys, devmm\n"
            "t = devmm.empty((1,))\n"
            "print(sorted(m for m in ('devmm.ipc', 'threading', 'multiprocessing') "
            "if m in sys.modules))\n"
            "import multiprocessing.reduction as r\n"
            "print('devmm.ipc' in sys.modules, devmm.Tensor in r.ForkingPickler._extra_reducers)\n"
            "print(devmm.open_ipc.__module__, devmm.ipc.keep_alive >= 0)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["[]", "True True", "devmm.ipc True"], r.stdout


def _axis_labels(svg: str) -> tuple:
    import re
    labels = re.findall(r'<text class="ax"[^>]*>([^<]*)</text>', svg)
    timed = [x for x in labels if x.split(" ")[-1] in ("s", "ms", "us")]
    return timed, [x for x in labels if x not in timed]


@pytest.mark.parametrize("span_us", [200, 3000, 250_000, 4_000_000])
def test_timeline_ticks_share_one_unit_and_one_precision(tmp_path, span_us):
    import re
    from devmm.timeline import from_log
    head = "Thread,Time,Action,Pointer,Size,Stream\n"

    def at(us):
        return f"10:00:{us // 1_000_000:02d}:{us % 1_000_000:06d}"
    log = tmp_path / "t.csv"
    log.write_text(head + f"1,{at(1)},allocate,0x10,1536,(nil)\n"
                   f"1,{at(span_us)},free,0x10,1536,(nil)\n")
    times, sizes = _axis_labels(from_log(str(log), "cpu").to_svg())
    for labels in (times, sizes):
        assert len(labels) >= 3, labels
        units = {x.split(" ")[1] for x in labels}
        decimals = {len(x.split(" ")[0].partition(".")[2]) for x in labels}
        assert len(units) == 1 and len(decimals) == 1, labels
        assert all(re.fullmatch(r"\d+(\.\d+)? \S+", x) for x in labels), labels


def test_a_header_only_log_draws_a_whole_byte_axis(tmp_path):
    from devmm.timeline import from_log
    log = tmp_path / "empty.csv"
    log.write_text("Thread,Time,Action,Pointer,Size,Stream\n")
    _, sizes = _axis_labels(from_log(str(log), "cpu").to_svg())
    assert sizes == ["0 B", "1 B"], sizes


# ----------------------------------------------------------------------------- fhfix (issue 23)

@pytest.mark.parametrize("limit", [0, "0", "0%", "0.0000000001%"])
def test_limiting_adaptor_refuses_a_limit_of_zero_bytes(limit):
    from devmm.mrs.cpu import MallocMemoryResource
    with pytest.raises(ValueError, match=r"^LimitingAdaptor: limit = .* would refuse every "
                                         r"allocation: expected a size or a percentage above 0"):
        devmm.LimitingAdaptor(MallocMemoryResource(), limit)


@pytest.mark.parametrize("limit, exc", [(-1, ValueError), ("-1", ValueError),
                                        ("150%", ValueError), (1.5, TypeError),
                                        ("lots", ValueError)])
def test_limiting_adaptor_size_errors_name_limit(limit, exc):
    from devmm.mrs.cpu import MallocMemoryResource
    with pytest.raises(exc, match=r"^limit\b"):
        devmm.LimitingAdaptor(MallocMemoryResource(), limit)


def test_callback_resource_checks_its_callables_at_construction():
    with pytest.raises(TypeError, match=r"^CallbackMemoryResource: allocate must be callable"
                                        r"\(nbytes, alignment, stream\) -> int, got int 42"):
        devmm.CallbackMemoryResource(42, lambda p, n, a, s: None)
    with pytest.raises(TypeError, match=r"^CallbackMemoryResource: deallocate must be callable"
                                        r"\(ptr, nbytes, alignment, stream\), got str 'x'"):
        devmm.CallbackMemoryResource(lambda n, a, s: 0, "x")


def test_a_view_of_a_freed_buffer_is_refused():
    b = devmm.Buffer(64)
    b.free()
    with pytest.raises(devmm.BufferFreedError, match=r"buffer of 64 bytes was freed"):
        devmm.from_buffer_view(b, (4,), "int8")


@pytest.mark.parametrize("value", [-1, "abc", float("nan"), True])
def test_ipc_keep_alive_is_checked_at_use(monkeypatch, value):
    from multiprocessing.reduction import ForkingPickler
    from devmm.mrs.cpu import SharedMemoryResource
    import devmm.ipc
    t = devmm.empty(4, "int8", resource=SharedMemoryResource())
    monkeypatch.setattr(devmm.ipc, "keep_alive", value)
    with pytest.raises((TypeError, ValueError),
                       match=r"^devmm\.ipc\.keep_alive = .*: expected a number of seconds >= 0"):
        ForkingPickler.dumps(t)


def test_register_reinitialize_hook_refuses_what_cannot_be_called():
    with pytest.raises(TypeError, match=r"^register_reinitialize_hook: func must be callable, "
                                        r"got int 42"):
        devmm.register_reinitialize_hook(42)


@pytest.mark.parametrize("sharded", ["yes", 1, None])
def test_statistics_adaptor_sharded_must_be_a_bool(sharded):
    from devmm.mrs.cpu import MallocMemoryResource
    with pytest.raises(TypeError, match=r"^StatisticsAdaptor: sharded must be True or False, "
                                        r"got "):
        devmm.StatisticsAdaptor(MallocMemoryResource(), sharded=sharded)


def test_is_initialized_refuses_an_unknown_device():
    code = ("import devmm\n"
            "try:\n"
            "    devmm.is_initialized('bogus')\n"
            "except ValueError as e:\n"
            "    print('ValueError', e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ValueError unknown device 'bogus'"), r.stdout
    with pytest.raises(ValueError, match=r"unknown device 'bogus'"):
        devmm.is_initialized("bogus")


def test_info_says_why_a_broken_config_failed(tmp_path):
    ini = tmp_path / "broken.ini"
    ini.write_text("[device cpu]\nresource = cpu.malloc\nlimit = lots\n")
    code = ("import devmm\n"
            "try:\n"
            "    print(devmm.info())\n"
            "except devmm.ConfigError as e:\n"
            "    print('ConfigError', e)\n")
    import os
    env = dict(os.environ, DEVMM_CONFIG=str(ini))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"ConfigError {ini}:3: "), r.stdout


def test_init_names_itself_for_a_config_of_the_wrong_type():
    with pytest.raises(TypeError, match=r"^devmm\.init: config must be a path, the text of a "
                                        r"devmm\.ini, or None; got int$"):
        devmm.init(42)


def test_init_errors_on_ini_text_name_the_text_not_a_temporary_file():
    with pytest.raises(devmm.ConfigError) as e:
        devmm.init("[device cpu]\nresource = cpu.malloc\nlimit = lots\n")
    assert str(e.value).startswith("<ini text>:3: "), str(e.value)
    assert "/tmp" not in str(e.value) and "devmm-" not in str(e.value), str(e.value)


def test_an_alignment_above_devmm_s_largest_is_refused_at_creation():
    from devmm.mrs.cpu import AlignedMemoryResource, MallocMemoryResource
    want = (r"alignment 2199023255552 is above devmm's largest, 1099511627776 \(1 TiB, "
            r"DEVMM_MAX_ALIGNMENT\): expected a power of two up to it")
    with pytest.raises(devmm.DevmmValueError, match=r"^cpu\.aligned: " + want):
        AlignedMemoryResource(alignment=2**41)
    with pytest.raises(devmm.DevmmValueError, match=r"^aligned adaptor: " + want):
        devmm.AlignedAdaptor(MallocMemoryResource(), 2**41)
    assert AlignedMemoryResource(alignment=2**40).name == f"cpu.aligned({2**40})"


@pytest.mark.parametrize("kind, option, value, said", [
    ("cpu.aligned", "alignment", "big", "bad size 'big'"),
    ("cpu.mmap", "populate", "maybe", "bad boolean 'maybe'")])
def test_cpu_kinds_name_the_option_a_value_was_refused_for(kind, option, value, said):
    from devmm.mrs import create_resource
    with pytest.raises(devmm.DevmmValueError, match=rf"^{kind}: {option}: {said}: expected "):
        create_resource(kind, **{option: value})


def test_a_device_past_its_plugin_s_last_says_how_many_it_has(tmp_path):
    ini = tmp_path / "x.ini"
    ini.write_text("[devmm]\nplugins = cpu, sim\n[plugin sim]\ndevices = 2\njitter_us = 0\n")
    devmm.init(str(ini))
    try:
        with pytest.raises(devmm.DevmmError, match=r"^no current resource for device sim:5: "
                                                   r"the sim plugin has 2 devices: sim:0, sim:1$"):
            devmm.empty(4, device="sim:5")
        with pytest.raises(devmm.DevmmError, match=r"^no current resource for device cpu:1: "
                                                   r"the cpu plugin has 1 device: cpu$"):
            devmm.empty(4, device="cpu:1")
        with pytest.raises(devmm.DevmmError, match=rf"^no current resource for device rocm:0: no "
                                                   rf"plugin of {ini} has a rocm device: expected "
                                                   r"its plugin in plugins = \.\.\. in \[devmm\]$"):
            devmm.empty(4, device="rocm:0")
    finally:
        devmm.init()


def test_ini_text_with_a_relative_plugin_path_is_said(tmp_path, monkeypatch):
    # what init's docstring promises: relative paths in ini text start at the working directory,
    # and no file is written on the way (devmm_init_text)
    import tempfile
    import warnings

    def no_files(*args, **kwargs):
        raise AssertionError("devmm.init(text) wrote a temporary file")
    monkeypatch.setattr(tempfile, "mkstemp", no_files)
    monkeypatch.setattr(tempfile, "NamedTemporaryFile", no_files)
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        got = devmm.init("[devmm]\nplugins = cpu\nplugin_path = plug\n")
    try:
        assert got["config"] == "ini text"
        assert [str(w.message) for w in said] == [
            f"devmm: <ini text>: plugin_path entry '{tmp_path}/plug' does not exist: expected a "
            "directory of devmm-<name>.so plugins"]
        from devmm import _lib
        assert _lib.config_source() == b"<ini text>"
    finally:
        devmm.init()


def test_import_devmm_and_empty_import_no_ctypes():
    # start-up time (ADR 45): libdevmm loads as the extension module devmm._libdevmm, and
    # ctypes with the first call that needs a struct or a bound C function
    code = ("import sys, devmm\n"
            "t = devmm.empty((1,), 'float32'); u = devmm.empty((2, 3), 'bfloat16')\n"
            "print('ctypes' in sys.modules, t.shape, u.itemsize)\n"
            "print(devmm.__version__ == devmm.version(), 'ctypes' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["False (1,) 2", "True True"], r.stdout


def test_a_library_found_by_the_dynamic_loader_loads_through_ctypes():
    # a bare name ("libdevmm.so.0": no DEVMM_LIBRARY, no _build_config in a source tree) is
    # what the extension loader would look for in the current directory: ctypes loads it
    import os
    env = {k: v for k, v in os.environ.items() if k != "DEVMM_LIBRARY"}
    env["LD_LIBRARY_PATH"] = os.path.dirname(devmm._lib.LIBRARY_PATH)
    code = ("import sys, devmm\n"
            "t = devmm.empty((4,), 'int16')\n"
            "print(devmm._lib.LIBRARY_PATH, 'devmm._libdevmm' in sys.modules, t.nbytes)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["libdevmm.so.0", "False", "8"], r.stdout


def test_a_dtype_name_with_a_nul_byte_is_refused():
    with pytest.raises(TypeError, match=r"dtype: the name has a NUL byte at 7: expected a name "
                                        r"such as \"float32\""):
        devmm.empty((1,), "float32\0junk")
    with pytest.raises(TypeError, match="no-such-type"):
        devmm.empty((1,), "no-such-type")


def test_first_calls_from_threads_bind_ctypes_once_for_all():
    # ADR 45: ctypes, the structs and each bound function come with their first use; threads
    # making their first calls at once all get working bindings (and lazy init, ADR 6)
    code = ("import sys, threading, devmm\n"
            "go, out = threading.Barrier(8), []\n"
            "def first():\n"
            "    go.wait()\n"
            "    r = devmm.get_current_device_resource()\n"
            "    t = devmm.empty((3,), 'int32', resource=r)\n"
            "    out.append((r.name, r.device, t.strides, len(devmm.dtype.names()) > 10))\n"
            "ts = [threading.Thread(target=first) for _ in range(8)]\n"
            "[t.start() for t in ts]; [t.join() for t in ts]\n"
            "print(len(out), len(set(out)), out[0])\n")
    for _ in range(4):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "8 1 ('cpu.malloc', 'cpu', (1,), True)", r.stdout + r.stderr

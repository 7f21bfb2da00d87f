"""The Python API: constructors, layouts, resources, adaptors, registry, errors."""

import asyncio
import ctypes
import gc
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import devmm
from devmm.mrs.cpu import AlignedMemoryResource, MallocMemoryResource, MmapMemoryResource


# ----------------------------------------------------------------------------- empty / zeros

@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint16",
                                   "uint32", "uint64", "float16", "float32", "float64",
                                   "complex64", "complex128", "bool"])
def test_empty_every_numpy_dtype(dtype):
    t = devmm.empty((3, 5), dtype)
    a = np.from_dlpack(t)
    assert a.dtype == np.dtype(dtype)
    assert a.shape == (3, 5)
    assert a.ctypes.data == t.data_ptr
    assert t.nbytes == a.nbytes


def test_dtype_like_objects():
    assert devmm.empty(4, np.float32).dtype == "float32"
    assert devmm.empty(4, np.dtype("int16")).dtype == "int16"
    assert devmm.empty(4, "bfloat16").itemsize == 2
    assert devmm.empty(4, "float8_e5m2").itemsize == 1
    with pytest.raises(TypeError, match="unknown dtype 'float33'"):
        devmm.empty(4, "float33")
    with pytest.raises(devmm.DevmmError, match="sub-byte"):
        devmm.empty(4, "float4_e2m1fn")


@pytest.mark.parametrize("shape,layout,expected", [
    ((2, 3), devmm.RowMajor(), (3, 1)),
    ((2, 3), devmm.ColumnMajor(), (1, 2)),
    ((4, 3), devmm.Aligned(devmm.RowMajor(), 128, 256), (32, 1)),
    ((4, 3), devmm.Aligned(devmm.ColumnMajor(), 64), (1, 16)),
    ((2, 3), devmm.Strided((8, 2)), (8, 2)),
    ((5,), devmm.Aligned(devmm.RowMajor(), 128), (1,)),
    ((), devmm.RowMajor(), ()),
    ((0, 4), devmm.RowMajor(), (4, 1)),
])
def test_layouts_match_numpy(shape, layout, expected):
    t = devmm.empty(shape, "float32", layout=layout)
    assert t.strides == expected
    a = np.from_dlpack(t)
    if 0 not in shape:  # numpy normalises the strides of empty arrays
        assert a.strides == tuple(4 * s for s in expected)
    if isinstance(layout, devmm.Aligned) and len(shape) > 1:
        base = layout.base_alignment or layout.unit_stride_alignment
        assert t.data_ptr % base == 0


def test_zeros_are_zero():
    z = devmm.zeros((7, 9), "float64", layout=devmm.Aligned(devmm.RowMajor(), 128))
    assert not np.from_dlpack(z).any()
    assert z.buffer.nbytes == 7 * 16 * 8


@pytest.mark.parametrize("shape,exc,match", [
    ((2, -3), ValueError, r"shape\[1\] = -3 is negative"),
    ((2**40, 2**40), ValueError, "overflows"),
    ((2**70,), ValueError, "does not fit in int64"),
    ((2.5,), TypeError, "shape entries must be ints"),
    ("abc", TypeError, "shape entries must be ints"),
    (None, TypeError, "shape must be an int or a sequence"),
    ((1,) * 33, ValueError, "at most 32"),
])
def test_empty_bad_shapes(shape, exc, match):
    with pytest.raises(exc, match=match):
        devmm.empty(shape, "float32")


def test_empty_bad_layout_and_resource():
    with pytest.raises(TypeError, match="layout must be"):
        devmm.empty(3, layout="rowmajor")
    with pytest.raises(TypeError, match="resource must be a MemoryResource"):
        devmm.empty(3, resource=object())
    with pytest.raises(ValueError, match="unit_stride_alignment 96 must be a power of two"):
        devmm.empty((2, 2), layout=devmm.Aligned(devmm.RowMajor(), 96))
    with pytest.raises(TypeError, match="RowMajor"):
        devmm.Aligned(devmm.Strided((1,)), 64)
    with pytest.raises(ValueError, match="unknown device 'gpu:0'"):
        devmm.empty(3, device="gpu:0")
    with pytest.raises(devmm.DevmmError, match="no current resource for device cuda:0"):
        devmm.empty(3, device="cuda:0")


def test_vendor_device_type_round_trip():
    """A plugin's own device type is written "deviceT:N" and read back."""
    from devmm.resource import format_device, parse_device
    d = parse_device("device14:0")
    assert (d.device_type, d.device_id) == (14, 0)
    assert format_device(parse_device((14, 2))) == "device14:2"
    for text in ("cpu", "cpu:1", "cuda:0", "cuda_host:0", "rocm_host:1", "sim:2", "device4:0"):
        assert format_device(parse_device(text)) == text
    with pytest.raises(ValueError, match=r"expected cpu\[:N\], .* or deviceT\[:N\]"):
        parse_device("tpu:0")
    with pytest.raises(devmm.DevmmError, match="no current resource for device device14:0"):
        devmm.empty(3, device="device14:0")


def test_mrs_after_a_plain_import():
    """plugins.md's Python lines run as written: `import devmm` then `devmm.mrs...` (once
    AttributeError: module 'devmm' has no attribute 'mrs')."""
    code = ("import devmm; r = devmm.mrs.create_resource('cpu.aligned', alignment=4096); "
            "print(r.name)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "cpu.aligned(4096)", out.stderr


def test_from_buffer_view_bounds():
    b = devmm.Buffer(64)
    v = devmm.from_buffer_view(b, (2, 2), "float32", strides=(4, 1), offset=8)
    assert v.data_ptr == b.ptr + 8
    with pytest.raises(ValueError, match="does not fit in the buffer of 64 bytes"):
        devmm.from_buffer_view(b, (5, 4), "float32")


# ----------------------------------------------------------------------------- buffers

def test_buffer_free_twice_and_context_manager():
    r = devmm.StatisticsAdaptor(MallocMemoryResource())
    b = devmm.Buffer(4096, resource=r, alignment=256)
    assert b.ptr % 256 == 0 and r.current_bytes == 4096
    b.free()
    b.free()
    assert b.freed and b.ptr == 0 and r.current_bytes == 0
    with devmm.Buffer(100, resource=r) as b2:
        assert r.current_bytes == 100
    assert b2.freed and r.current_bytes == 0
    with pytest.raises(ValueError, match="nbytes must be >= 0, got -1"):
        devmm.Buffer(-1)


def test_tensor_after_free_refuses_export():
    t = devmm.empty(4)
    t.buffer.free()
    assert t.data_ptr == 0
    with pytest.raises(BufferError, match="was freed"):
        np.from_dlpack(t)


# ----------------------------------------------------------------------------- resources

def test_cpu_resources():
    for r in (MallocMemoryResource(), AlignedMemoryResource(4096),
              MmapMemoryResource("transparent", populate=True)):
        p = r.allocate(10000, alignment=64)
        assert p % 64 == 0
        ctypes.memset(p, 7, 10000)
        r.deallocate(p, 10000, alignment=64)
        free, total = r.mem_info()
        assert 0 < free <= total
    assert AlignedMemoryResource(4096).allocate(1) % 4096 == 0
    with pytest.raises(ValueError, match="huge_pages = always: expected never"):
        MmapMemoryResource("always")
    with pytest.raises(ValueError, match="alignment 48 is not a power of two"):
        AlignedMemoryResource(48)


def test_adaptor_stack_names_and_upstream():
    base = MallocMemoryResource()
    s = devmm.StatisticsAdaptor(base)
    lim = devmm.LimitingAdaptor(s, "1MiB")
    assert lim.name == "limiting(statistics(cpu.malloc))"
    assert lim.upstream is s and lim.limit == 1 << 20
    with pytest.raises(TypeError, match="upstream must be a MemoryResource"):
        devmm.StatisticsAdaptor("cpu")


def test_statistics_scopes():
    s = devmm.StatisticsAdaptor(MallocMemoryResource())
    keep = devmm.empty(100, "int8", resource=s)
    s.push()
    t = devmm.empty(300, "int8", resource=s)
    del t
    inner = s.pop()
    assert inner.peak_bytes == 300 and inner.current_bytes == 0
    assert s.peak_bytes == 400 and s.current_bytes == 100
    s.reset_peak()
    assert s.peak_bytes == 100
    with pytest.raises(devmm.DevmmError, match="pop without a matching push"):
        s.pop()
    del keep


def test_statistics_sharded_threads():
    s = devmm.StatisticsAdaptor(MallocMemoryResource(), sharded=True)

    def work():
        for _ in range(2000):
            devmm.empty(16, "int8", resource=s)

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert s.current_bytes == 0 and s.total_count == 8000 and s.total_bytes == 8000 * 16


def test_limiting_is_memory_error():
    lim = devmm.LimitingAdaptor(MallocMemoryResource(), 1000)
    keep = devmm.empty(600, "int8", resource=lim)
    with pytest.raises(MemoryError, match=r"limit of 1000 bytes \(600 bytes in use\)"):
        devmm.empty(600, "int8", resource=lim)
    with pytest.raises(devmm.OutOfMemoryError):
        devmm.empty(600, "int8", resource=lim)
    assert lim.allocated_bytes == 600
    del keep
    half = devmm.LimitingAdaptor(MallocMemoryResource(), "50%")
    assert 0 < half.limit < MallocMemoryResource().mem_info()[1]
    with pytest.raises(ValueError, match="bad size '12 parsecs'"):
        devmm.LimitingAdaptor(MallocMemoryResource(), "12 parsecs")


def test_tracking_lookup_and_report():
    tr = devmm.TrackingAdaptor(MallocMemoryResource(), backtraces=True)
    t = devmm.empty((10, 10), "float32", resource=tr)
    info = tr.lookup(t.data_ptr + 123)
    assert info["bytes"] == 400 and info["frames"]
    assert "1 outstanding allocations, 400 bytes" in tr.report()
    t.buffer.free()
    assert tr.outstanding == (0, 0)
    with pytest.raises(KeyError, match="not inside a live allocation"):
        tr.lookup(info["ptr"])


def test_logging_csv(tmp_path):
    path = tmp_path / "log.csv"
    lg = devmm.LoggingAdaptor(MallocMemoryResource(), str(path), flush=True)
    t = devmm.empty(16, "int32", resource=lg)
    t.buffer.free()
    lines = path.read_text().splitlines()
    assert lines[0] == "Thread,Time,Action,Pointer,Size,Stream"
    assert ",allocate," in lines[1] and lines[1].split(",")[4] == "64"
    assert ",free," in lines[2]
    with pytest.raises(devmm.DevmmError, match="cannot open log file"):
        devmm.LoggingAdaptor(MallocMemoryResource(), str(tmp_path / "no" / "dir.csv"))


def test_failure_callback_retries_after_gc():
    lim = devmm.LimitingAdaptor(MallocMemoryResource(), 1000)
    calls = []
    hog = [devmm.empty(800, "int8", resource=lim)]

    def on_oom(nbytes, attempt):
        calls.append((nbytes, attempt))
        hog.clear()  # drop the hog, as gc.collect() would free garbage
        gc.collect()
        return True

    r = devmm.FailureCallbackAdaptor(lim, on_oom)
    t = devmm.empty(800, "int8", resource=r)
    assert calls == [(800, 0)] and t.nbytes == 800


def test_failure_callback_exception_gives_up(capsys):
    lim = devmm.LimitingAdaptor(MallocMemoryResource(), 10)
    calls = []

    def boom(nbytes, attempt):
        calls.append(attempt)
        raise RuntimeError("callback exploded")

    r = devmm.FailureCallbackAdaptor(lim, boom)
    # not retried, and the callback's own exception reaches the caller, as RMM's does
    # (docs/from-rmm.md; tests/python/test_from_rmm.py)
    with pytest.raises(RuntimeError, match="callback exploded"):
        r.allocate(100)
    assert calls == [0] and capsys.readouterr().err == ""


class _Overlaps:
    """A resource that is not thread-safe and notices it: each call sleeps inside (releasing the
    GIL) and counts the calls that found another one already inside."""

    def __init__(self):
        self.inside = self.overlaps = self.calls = 0
        self.keep = {}

    def _enter(self):
        self.inside += 1
        self.calls += 1
        if self.inside > 1:
            self.overlaps += 1
        time.sleep(0.0005)

    def allocate(self, n, alignment, stream):
        self._enter()
        b = ctypes.create_string_buffer(n + alignment)  # aligned as asked (callback.c)
        p = -(-ctypes.addressof(b) // max(alignment, 1)) * max(alignment, 1)
        self.keep[p] = b
        self.inside -= 1
        return p

    def deallocate(self, p, n, alignment, stream):
        self._enter()
        del self.keep[p]
        self.inside -= 1


def _hammer(r, threads=4, rounds=25):
    def work():
        for _ in range(rounds):
            r.deallocate(r.allocate(16), 16)

    ts = [threading.Thread(target=work) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def test_thread_safe_adaptor_serialises_calls():
    # the control: the bare resource, called from 4 threads, is entered concurrently
    bare = _Overlaps()
    _hammer(devmm.CallbackMemoryResource(bare.allocate, bare.deallocate, name="unsafe"))
    assert bare.calls == 200 and bare.overlaps > 0
    # under the adaptor, never
    u = _Overlaps()
    ts = devmm.ThreadSafeAdaptor(devmm.CallbackMemoryResource(u.allocate, u.deallocate,
                                                              name="unsafe"))
    assert ts.name == "thread_safe(unsafe)"
    _hammer(ts)
    assert u.calls == 200 and u.overlaps == 0 and not u.keep


def test_aligned_adaptor():
    a = devmm.AlignedAdaptor(MallocMemoryResource(), 4096, threshold=100)
    p = a.allocate(200)
    assert p % 4096 == 0
    a.deallocate(p, 200)


# ----------------------------------------------------------------------------- callbacks

def test_callback_resource_under_adaptors(counting):
    c, r = counting
    s = devmm.StatisticsAdaptor(devmm.TrackingAdaptor(r))
    t = devmm.zeros((8, 8), "float64", resource=s)
    assert c.allocs == 1 and s.current_bytes == 512
    assert not np.from_dlpack(t).any()
    t.buffer.free()
    assert c.frees == 1 and s.current_bytes == 0


def test_callback_exceptions_become_devmm_errors():
    def raises(n, a, s):
        raise ValueError("no memory for you")

    r = devmm.CallbackMemoryResource(raises, lambda *a: None, name="bad")
    with pytest.raises(devmm.CallbackError,
                       match="the allocate callback of 'bad' raised ValueError: no memory for you"):
        devmm.empty(4, resource=r)

    def oom(n, a, s):
        raise MemoryError("pool exhausted")

    r2 = devmm.CallbackMemoryResource(oom, lambda *a: None, name="pool")
    with pytest.raises(devmm.OutOfMemoryError, match="raised MemoryError: pool exhausted"):
        devmm.empty(4, resource=devmm.StatisticsAdaptor(r2))

    r3 = devmm.CallbackMemoryResource(lambda n, a, s: "nope", lambda *a: None, name="str")
    with pytest.raises(devmm.CallbackError, match="returned 'nope', expected a positive int"):
        devmm.empty(4, resource=r3)


def test_callback_resource_outlives_python_object(counting):
    c, r = counting
    t = devmm.empty(16, "int8", resource=r)
    del r
    gc.collect()  # the buffer still holds the C resource, and so its trampolines
    t.buffer.free()
    assert c.frees == 1


# ----------------------------------------------------------------------------- registry

def test_registry_set_and_scoped_override():
    base = devmm.get_current_device_resource()
    stats = devmm.StatisticsAdaptor(MallocMemoryResource())
    prev = devmm.set_current_device_resource(stats)
    try:
        devmm.empty(10, "int8")
        assert stats.total_bytes == 10
        other = devmm.StatisticsAdaptor(MallocMemoryResource())
        with devmm.using_memory_resource(other):
            assert devmm.get_current_device_resource() is other
            devmm.empty(5, "int8")
        assert other.total_bytes == 5 and stats.total_bytes == 10
    finally:
        devmm.set_current_device_resource(prev)
    assert devmm.get_current_device_resource().name == base.name


def test_scoped_override_is_per_thread_and_per_task():
    stats = devmm.StatisticsAdaptor(MallocMemoryResource())
    seen = {}

    def other_thread():
        devmm.empty(7, "int8")  # not under the override
        seen["thread"] = devmm.get_current_device_resource().name

    with devmm.using_memory_resource(stats):
        th = threading.Thread(target=other_thread)
        th.start()
        th.join()
    assert stats.total_bytes == 0 and seen["thread"] == "cpu.malloc"

    async def task(n, use):
        if use:
            with devmm.using_memory_resource(stats):
                await asyncio.sleep(0)
                devmm.empty(n, "int8")
        else:
            await asyncio.sleep(0)
            devmm.empty(n, "int8")

    async def main():
        await asyncio.gather(task(3, True), task(100, False), task(4, True))

    asyncio.run(main())
    assert stats.total_bytes == 7


def test_registry_errors():
    with pytest.raises(TypeError, match="expected a MemoryResource"):
        devmm.set_current_device_resource("cpu.malloc")
    with pytest.raises(TypeError, match="expected a MemoryResource"):
        with devmm.using_memory_resource(None):
            pass


# ----------------------------------------------------------------------------- init / info

def test_init_config_errors_and_plugins(tmp_path):
    bad = tmp_path / "bad.ini"
    bad.write_text("[device cpu]\nresource = cpu.malloc\nspeed = fast\n")
    with pytest.raises(devmm.ConfigError, match=r"bad.ini:3: unknown key 'speed'"):
        devmm.init(str(bad))
    good = tmp_path / "good.ini"
    good.write_text("[devmm]\nplugins = cpu, nosuch\n[device cpu]\nadaptors = statistics\n")
    with pytest.warns(RuntimeWarning, match="plugin 'nosuch' not loaded"):
        data = devmm.init(str(good))
    assert data["config"] == str(good)
    assert devmm.devices()[0]["stack"] == "statistics(cpu.malloc)"
    assert {p["name"]: p["status"] for p in devmm.plugins()} == {"cpu": "loaded",
                                                                 "nosuch": "failed"}
    # each kind with its description and options (devmm-info shows the same)
    cpu = devmm.plugins()[0]
    kinds = {k["name"]: k for k in cpu["kind_info"]}
    assert list(kinds) == cpu["kinds"] == ["cpu.malloc", "cpu.aligned", "cpu.mmap", "cpu.shm"]
    assert kinds["cpu.malloc"]["description"] == "libc malloc/free"
    assert kinds["cpu.malloc"]["options"] == []
    assert [o["key"] for o in kinds["cpu.aligned"]["options"]] == ["alignment"]
    assert "power of two" in kinds["cpu.aligned"]["options"][0]["help"]


def _fault_plugin(name: str) -> str:
    """The path of a fault plugin of the build tree (tests/plugins)."""
    d = os.environ.get("DEVMM_TEST_PLUGINS")
    if not d:
        pytest.skip("needs DEVMM_TEST_PLUGINS (run through meson test)")
    return os.path.join(d, f"devmm-{name}.so")


def test_init_relative_config_and_plugin_path(tmp_path, monkeypatch):
    # devmm.init(config="devmm.ini"): plugin_path = plug is relative to the file's directory
    (tmp_path / "plug").mkdir()
    so = tmp_path / "plug" / "devmm-faulty.so"
    so.write_bytes(open(_fault_plugin("faulty"), "rb").read())
    so.chmod(0o755)
    (tmp_path / "devmm.ini").write_text("[devmm]\nplugins = cpu, faulty\nplugin_path = plug\n")
    monkeypatch.chdir(tmp_path)
    data = devmm.init(config="devmm.ini")
    faulty = [p for p in data["plugins"] if p["name"] == "faulty"][0]
    assert faulty["status"] == "loaded", faulty["error"]
    assert faulty["path"] == os.path.realpath(so)
    # a relative DEVMM_PLUGIN_PATH entry: from the working directory at init
    (tmp_path / "abs.ini").write_text("[devmm]\nplugins = cpu, faulty\n")
    monkeypatch.setenv("DEVMM_PLUGIN_PATH", "plug" + os.pathsep + os.environ["DEVMM_PLUGIN_PATH"])
    data = devmm.init(config=str(tmp_path / "abs.ini"))
    assert [p["status"] for p in data["plugins"] if p["name"] == "faulty"] == ["loaded"]
    devmm.init()


def test_init_warns_for_a_device_without_resource(tmp_path):
    # a factory that fails is no file error, but it is worth a warning, as a failed plugin is
    cfg = tmp_path / "devmm.ini"
    cfg.write_text(f"[devmm]\nplugins = cpu, factoryfail\n"
                   f"plugin_path = {os.path.dirname(_fault_plugin('factoryfail'))}\n"
                   "[device cpu]\nresource = factoryfail.heap\n")
    with pytest.warns(RuntimeWarning,
                      match="device cpu has no resource: factoryfail.heap: simulated factory"):
        devmm.init(str(cfg))
    # and a factory's option error fails init at its line
    cfg.write_text(f"[devmm]\nplugins = cpu, faulty\n"
                   f"plugin_path = {os.path.dirname(_fault_plugin('faulty'))}\n"
                   "[device cpu]\nresource = faulty.heap\nsize = 64 MeB\n")
    with pytest.raises(devmm.ConfigError, match=r"devmm.ini:6: \[device cpu\] faulty.heap: size"):
        devmm.init(str(cfg))
    devmm.init()


def test_python_m_devmm_info():
    out = subprocess.run([sys.executable, "-m", "devmm", "info"], capture_output=True, text=True,
                         check=True).stdout
    assert "config: built-in default" in out and "stack: cpu.malloc" in out
    # what the build carries, which pip's quiet build does not show (tests/test-devmm-info.sh)
    assert "\nbuild (what meson setup built or left out, and why):\n  plugin cpu      built\n" in out
    js = subprocess.run([sys.executable, "-m", "devmm", "info", "--json"], capture_output=True,
                        text=True, check=True).stdout
    assert '"plugins"' in js
    assert {"kind": "plugin", "name": "cpu", "built": True, "reason": ""} in json.loads(js)["build"]
    bad = subprocess.run([sys.executable, "-m", "devmm", "info", "--config", "/nonexistent.ini"],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "cannot read configuration file" in bad.stderr


def test_import_needs_no_numpy():
    code = "import sys, devmm; devmm.empty((1,), 'float32'); print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_callback_free_exception_is_reported_not_swallowed(capfd):
    import ctypes as C
    keep = {}

    def alloc(n, a, s):
        b = C.create_string_buffer(n + a)  # aligned as asked (callback.c)
        p = -(-C.addressof(b) // max(a, 1)) * max(a, 1)
        keep[p] = b
        return p

    def broken_free(p, n, a, s):
        raise RuntimeError("the pool is gone")

    r = devmm.CallbackMemoryResource(alloc, broken_free, name="flaky")
    with pytest.raises(devmm.CallbackError, match="deallocate callback of 'flaky' raised "
                                                  "RuntimeError: the pool is gone"):
        r.deallocate(r.allocate(8), 8)
    t = devmm.empty(4, "int8", resource=r)
    t.buffer.free()  # nobody to raise to: the C core logs it
    err = capfd.readouterr().err
    assert "freeing 4 bytes" in err and "RuntimeError: the pool is gone" in err


# ----------------------------------------------------------------------------- small contracts

@pytest.mark.parametrize("device", ["cpu", "cuda:1", "cuda_host:0", "rocm:2", "rocm_host:0",
                                    "cuda_managed:3"])
def test_device_names_round_trip(device):
    r = devmm.CallbackMemoryResource(lambda n, a, s: 1, lambda *a: None, device=device)
    assert r.device == device


def _host_buffers():
    keep = {}

    def alloc(n, alignment, stream):
        b = ctypes.create_string_buffer(n + alignment)  # aligned as asked (callback.c)
        p = -(-ctypes.addressof(b) // max(alignment, 1)) * max(alignment, 1)
        keep[p] = (b, alignment, stream)
        return p

    return keep, alloc, lambda p, n, a, s: keep.pop(p)


@pytest.mark.parametrize("device,host", [("cpu", True), ("cuda_host:0", True),
                                         ("rocm_host:0", True), ("cuda_managed:0", True),
                                         ("cuda:0", False), ("rocm:0", False)])
def test_callback_resource_host_access_follows_its_device(device, host):
    # memory the CPU can reach is zeroed by the CPU; device memory needs the device's memset
    keep, alloc, free = _host_buffers()
    r = devmm.CallbackMemoryResource(alloc, free, device=device, name="cb")
    # its flags say host-accessible (2) or nothing: a Python resource is not thread-safe (1)
    assert devmm._lib.resource_flags(r.handle) == (2 if host else 0)
    if host:
        t = devmm.zeros((4,), "int32", resource=r, device=device)
        assert bytes((ctypes.c_char * 16).from_address(t.data_ptr)) == bytes(16)
        t.buffer.free()
    else:
        with pytest.raises(devmm.DevmmError, match="resource 'cb' does not support memset"):
            devmm.zeros((4,), "int32", resource=r, device=device)
    assert not keep  # whatever happened, the memory went back


def test_callback_resource_sees_the_callers_alignment_and_stream():
    keep, alloc, free = _host_buffers()
    freed = []

    def recording_free(p, n, a, s):
        freed.append((n, a, s))
        free(p, n, a, s)

    r = devmm.CallbackMemoryResource(alloc, recording_free, name="cb")
    default = devmm._lib.CONSTANTS["DEVMM_DEFAULT_ALIGNMENT"]
    assert default == 16
    p = r.allocate(32)
    assert keep[p][1:] == (default, None)  # ops never see 0: the host's default (ADR 25)
    r.deallocate(p, 32)
    assert freed == [(32, default, None)]
    p = r.allocate(32, alignment=16)
    assert keep[p][1] == 16
    r.deallocate(p, 32, alignment=16)
    assert not keep


def test_resource_handle_and_release():
    up = MallocMemoryResource()
    assert isinstance(up.handle, int) and up.handle
    lib = ctypes.CDLL(devmm._lib.LIBRARY_PATH)  # the test's own binding: not part of the API
    refs = lib.devmm_resource_refcount
    refs.restype, refs.argtypes = ctypes.c_long, [ctypes.c_void_p]
    assert refs(up.handle) == 1
    s = devmm.StatisticsAdaptor(up)
    assert refs(up.handle) == 2  # the adaptor holds its upstream
    del s
    gc.collect()
    assert refs(up.handle) == 1  # and lets it go with its last Python reference


def test_buffer_properties():
    r = devmm.StatisticsAdaptor(MallocMemoryResource())
    b = devmm.Buffer(48, resource=r)
    assert (b.nbytes, b.device, b.stream) == (48, "cpu", None)
    assert b.resource.name == "statistics(cpu.malloc)"
    b.free()


def test_array_interface_is_version_3():
    t = devmm.empty((2, 3), "int16")
    ai = t.__array_interface__
    assert ai["version"] == 3 and ai["typestr"] == "<i2" and ai["shape"] == (2, 3)
    # data is a buffer-protocol object that holds the memory (ADR 24): its buffer is the tensor's
    assert ai["strides"] == (6, 2) and type(ai["data"]).__name__ == "ArrayExport"
    assert np.frombuffer(ai["data"], dtype=np.uint8).ctypes.data == t.data_ptr


def test_layout_reprs_and_smallest_alignment():
    assert repr(devmm.RowMajor()) == "RowMajor()" and repr(devmm.ColumnMajor()) == "ColumnMajor()"
    assert repr(devmm.Strided([4, 1])) == "Strided((4, 1))"
    assert repr(devmm.Aligned(devmm.ColumnMajor(), 64)) == \
        "Aligned(ColumnMajor(), unit_stride_alignment=64, base_alignment=0)"
    # 1 byte is a power of two: int8 rows aligned to 1 byte are just row-major
    t = devmm.empty((2, 3), "int8", layout=devmm.Aligned(devmm.RowMajor(), 1))
    assert t.strides == (3, 1) and t.buffer.nbytes == 6


def test_dtype_fields_and_names_from_other_libraries():
    from devmm.dtype import resolve
    d = resolve("float16")
    assert (d.name, d.code, d.bits, d.itemsize) == ("float16", 2, 16, 2)
    assert d.packed == 2 | 16 << 8 | 1 << 16  # code | bits << 8 | lanes << 16, as C packs it
    assert (d.c.code, d.c.bits, d.c.lanes) == (2, 16, 1)

    class TorchLikeDtype:  # str(torch.int16) is "torch.int16": the text is what is parsed
        def __str__(self):
            return "torch.int16"

    assert devmm.empty(2, TorchLikeDtype()).dtype == "int16"
    assert devmm.empty(2, np.bool_).dtype == "bool"


def test_library_that_cannot_be_loaded_says_what_was_tried(tmp_path):
    # DEVMM_LIBRARY is the only place looked at when it is set, even if the loader's own search
    # would find a libdevmm
    missing = str(tmp_path / "libdevmm.so.0")
    r = subprocess.run([sys.executable, "-c", "import devmm"], capture_output=True, text=True,
                       env={**os.environ, "DEVMM_LIBRARY": missing})
    assert r.returncode == 1
    assert "ImportError: devmm: cannot load libdevmm (set DEVMM_LIBRARY to its path" in r.stderr
    assert f"tried {missing}: {missing}: cannot open shared object file" in r.stderr


_WHICH_LIBRARY = ("import sys; sys.path.insert(0, {path!r}); import devmm._lib as l; "
                  "print(l.LIBRARY_PATH)")


@pytest.mark.parametrize("flag", ["-I", "-E"])
def test_library_variable_ignored_where_python_ignores_the_environment(tmp_path, flag):
    # python -I and -E ignore PYTHONPATH and the rest; DEVMM_LIBRARY is ignored with them, and
    # the library is looked for where it would be without it (here: the loader's own search)
    import devmm
    lib = os.environ["DEVMM_LIBRARY"]
    copy = tmp_path / "libdevmm.so.0"
    copy.write_bytes(open(lib, "rb").read())
    code = _WHICH_LIBRARY.format(path=os.path.dirname(os.path.dirname(devmm.__file__)))
    env = {**os.environ, "DEVMM_LIBRARY": str(copy), "LD_LIBRARY_PATH": os.path.dirname(lib)}
    r = subprocess.run([sys.executable, "-c", code],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(copy)
    r = subprocess.run([sys.executable, flag, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "libdevmm.so.0"


def test_library_variable_ignored_in_a_set_id_process(monkeypatch):
    # as secure_getenv does for the C side's variables: a set-uid, set-gid or otherwise
    # secure-execution process (AT_SECURE) ignores DEVMM_LIBRARY
    from devmm import _lib
    monkeypatch.setenv("DEVMM_LIBRARY", "/some/libdevmm.so.0")
    assert _lib._candidates()[0] == "/some/libdevmm.so.0"
    monkeypatch.setattr(_lib, "_secure_execution", lambda: True)
    assert "/some/libdevmm.so.0" not in _lib._candidates()


def test_library_variable_must_be_an_absolute_path(tmp_path):
    # a relative DEVMM_LIBRARY would name a different file in each directory the program runs in
    r = subprocess.run([sys.executable, "-c", "import devmm"], capture_output=True, text=True,
                       env={**os.environ, "DEVMM_LIBRARY": "libdevmm.so.0"}, cwd=tmp_path)
    assert r.returncode == 1
    assert ("ImportError: devmm: DEVMM_LIBRARY must be an absolute path, not 'libdevmm.so.0'"
            in r.stderr)


@pytest.mark.parametrize("seq", [tuple, list])
def test_shapes_of_integer_like_entries(seq):
    t = devmm.empty(seq([np.int64(2), np.int32(3), np.uint8(1)]), "int8")
    assert t.shape == (2, 3, 1) and t.strides == (3, 1, 1)
    with pytest.raises(ValueError, match="does not fit in int64"):
        devmm.empty(seq([np.uint64(2**63)]), "int8")
    with pytest.raises(TypeError, match="shape entries must be ints"):
        devmm.empty(seq([np.float32(2)]), "int8")
    # -2**63 fits in int64: both paths normalise it and the layout refuses it as negative
    with pytest.raises(ValueError, match="is negative"):
        devmm.empty(seq([np.int64(-2**63)]), "int8")


def test_zero_bytes_and_log_buffering(tmp_path):
    r = MallocMemoryResource()
    assert r.allocate(0) == 0  # no memory: the NULL address
    r.deallocate(0, 0)
    path = tmp_path / "log.csv"
    lg = devmm.LoggingAdaptor(MallocMemoryResource(), str(path))  # flush=False: buffered
    lg.deallocate(lg.allocate(8), 8)
    assert path.read_text() == ""
    lg.flush()
    assert path.read_text().count("\n") == 3  # header, allocate, free


def test_a_limit_of_zero():
    # refused as devmm.ini's limit = 0 is: it would refuse every allocation (issue 23)
    with pytest.raises(ValueError, match="would refuse every allocation"):
        devmm.LimitingAdaptor(MallocMemoryResource(), 0)
    lim = devmm.LimitingAdaptor(MallocMemoryResource(), 1)
    with pytest.raises(devmm.OutOfMemoryError, match="limit of 1 bytes"):
        lim.allocate(2)


def test_unhashable_dtype_like_and_negative_base_alignment():
    class Unhashable:  # defines __eq__ without __hash__: cannot be a dict key
        def __eq__(self, other):
            return False

        def __str__(self):
            return "uint16"

    assert devmm.empty(3, Unhashable()).dtype == "uint16"
    with pytest.raises(ValueError, match="alignments must be positive powers of two"):
        devmm.Aligned(devmm.RowMajor(), 64, -1)


def test_host_accessible_plugin_resource_without_copy_or_memset(tmp_path):
    """faulty.heap has only allocate/deallocate: the host's memset and memmove serve zeros() and
    copy() because it is flagged HOST_ACCESSIBLE (before ADR 25 both failed with ENOTSUP)."""
    dirs = [os.environ.get("DEVMM_TEST_PLUGINS", "")] + [
        os.path.join(d, "..", "tests", "plugins")
        for d in os.environ.get("DEVMM_PLUGIN_PATH", "").split(":") if d]
    faults = next((os.path.realpath(d) for d in dirs
                   if d and os.path.exists(os.path.join(d, "devmm-faulty.so"))), None)
    if faults is None:
        pytest.skip("no devmm-faulty.so: run inside the build tree (meson test / meson devenv)")
    ini = tmp_path / "devmm.ini"
    ini.write_text(f"[devmm]\nplugins = cpu, faulty\nplugin_path = {faults}\n")
    devmm.init(str(ini))
    try:
        r = devmm.mrs.create_resource("faulty.heap")
        t = devmm.zeros((4,), "int32", resource=r)
        assert bytes((ctypes.c_char * 16).from_address(t.data_ptr)) == bytes(16)
        ctypes.memmove(t.data_ptr, (ctypes.c_int32 * 4)(1, 2, 3, 4), 16)
        u = t.copy()
        assert bytes((ctypes.c_char * 16).from_address(u.data_ptr)) == \
            bytes((ctypes.c_int32 * 4)(1, 2, 3, 4))
    finally:
        devmm.init(None)


def test_a_stack_from_devmm_ini_comes_back_as_its_adaptors_class_in_a_fresh_process(tmp_path):
    # `import devmm` does not load devmm.adaptors (start-up time); the first adaptor C hands back
    # loads it, and comes back as its class (devmm._shared.typed, ADR 36)
    ini = tmp_path / "devmm.ini"
    ini.write_text("[device cpu]\nadaptors = statistics, limiting\nlimit = 1MiB\n")
    code = ("import sys, devmm; devmm.init(sys.argv[1]); before = 'devmm.adaptors' in sys.modules; "
            "r = devmm.get_current_device_resource(); "
            "print(before, type(r).__name__, type(r.upstream).__name__, "
            "type(devmm.empty(4).buffer.resource).__name__)")
    out = subprocess.run([sys.executable, "-c", code, str(ini)], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "LimitingAdaptor", "StatisticsAdaptor", "LimitingAdaptor"]

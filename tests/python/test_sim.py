"""The simulated accelerator (devmm-sim) from Python: device memory the host cannot touch, streams
that really run out of order, and the stream rules devmm follows on a device (DLPack stream
hand-over, the CUDA array interface's stream key, frees after the last consumer, copies between
host and device, zeros() on pinned memory, Python resources on a device, several devices).
Scenarios that crashed the process before their fix run in a subprocess."""

import ctypes
import os
import signal
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

import devmm
from devmm.mrs import sim as simmod
from devmm.mrs.sim import (ManagedMemoryResource, PinnedMemoryResource, SimAsyncMemoryResource,
                           SimMemoryResource, runtime)


@pytest.fixture
def sim(tmp_path):
    """devmm with the sim plugin (2 devices, sim.async on each), with the given jitter."""
    def configure(jitter_us=200, seed=1):
        ini = tmp_path / "sim.ini"
        ini.write_text(f"[devmm]\nplugins = cpu, sim\n[plugin sim]\ndevices = 2\n"
                       f"jitter_us = {jitter_us}\nseed = {seed}\n"
                       f"[device sim:*]\nresource = sim.async\n")
        devmm.init(str(ini))
        rt = runtime()
        rt.inject(None)
        rt.set_device(0)
        return rt
    yield configure
    rt = runtime()
    rt.synchronize()


def run_python(code: str, ini) -> subprocess.CompletedProcess:
    env = dict(os.environ, DEVMM_CONFIG=str(ini))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=120)


def sim_ini(tmp_path, jitter_us=200):
    ini = tmp_path / "child.ini"
    ini.write_text(f"[devmm]\nplugins = cpu, sim\n[plugin sim]\njitter_us = {jitter_us}\n"
                   f"[device sim:*]\nresource = sim.async\n")
    return ini


def test_a_host_touch_of_sim_device_memory_is_a_crash(tmp_path):
    r = run_python("""
        import ctypes, signal, devmm
        signal.signal(signal.SIGSEGV, signal.SIG_DFL)  # a sanitizer's handler would report it
        t = devmm.empty(64, "uint8", device="sim:0")
        print("allocated", flush=True)
        ctypes.string_at(t.data_ptr, 1)
        """, sim_ini(tmp_path))
    assert "allocated" in r.stdout, r.stderr
    assert r.returncode == -signal.SIGSEGV, (r.returncode, r.stderr)


def test_sim_devices_and_their_stream_rules(sim):
    sim()
    t = devmm.empty((2, 3), "float32", device="sim:1")
    assert t.device == "sim:1" and t.__dlpack_device__() == (12, 1)
    d = devmm.resource.parse_device("sim:1")
    assert (d.device_type, d.device_id) == (12, 1)
    assert [x["device"] for x in devmm.devices()] == ["cpu", "sim:0", "sim:1"]
    with pytest.raises(ValueError, match=r"stream 0 is ambiguous for sim \(CUDA's rules\)"):
        t.__dlpack__(stream=0)
    for ok in (1, 2, -1, None):
        assert t.__dlpack__(stream=ok) is not None
    with pytest.raises(AttributeError, match="__array_interface__: sim:1 memory is not host"):
        t.__array_interface__


def test_plugin_options_are_checked_with_file_and_line(tmp_path):
    ini = tmp_path / "bad.ini"
    ini.write_text("[devmm]\nplugins = cpu, sim\n[plugin sim]\nseed = 1\ndevices = many\n")
    with pytest.raises(devmm.ConfigError,
                       match=r"bad.ini:3: \[plugin sim\]: devices = many: expected an integer"):
        devmm.init(str(ini))


# ------------------------------------------------------------------------------ copies

def test_copies_between_host_and_device_go_through_the_device(tmp_path):
    # a CPU tensor copied to the device was memmoved into device memory: SIGSEGV
    r = run_python("""
        import numpy as np, devmm
        a = np.arange(1000, dtype=np.int32)
        t = devmm.empty(1000, "int32")
        np.from_dlpack(t)[...] = a
        d = t.copy("sim:0")
        assert d.device == "sim:0"
        assert (np.from_dlpack(d.copy("cpu")) == a).all()
        assert (np.from_dlpack(d, device="cpu") == a).all()   # dl_device=(1, 0): a host copy
        cap = t.__dlpack__(dl_device=(12, 1), max_version=(1, 1))  # host -> sim:1
        padded = devmm.empty((4, 3), "int32", device="sim:0",
                             layout=devmm.Aligned(devmm.RowMajor(), 64))
        assert padded.copy("cpu").strides == (3, 1)
        try:
            d.__dlpack__(dl_device=(1, 0), copy=False)
        except BufferError as e:
            assert "needs a copy" in str(e)
        else:
            raise AssertionError("copy=False was accepted")
        print("ok")
        """, sim_ini(tmp_path))
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stdout, r.stderr)


# ----------------------------------------------------------------------------- streams

def test_dlpack_default_stream_waits_for_the_buffers_stream(sim):
    # (a) stream=None never waited, even for a buffer made on another (non-blocking) stream
    rt = sim(jitter_us=2000, seed=11)
    producer = rt.stream(0, nonblocking=True)
    n = 1 << 16
    for i in range(5):
        t = devmm.empty(n, "uint8", resource=SimAsyncMemoryResource(0), stream=producer.handle)
        rt.fill(producer, t.data_ptr, 0x5A, n)   # the producer's work, delayed by the jitter
        t.__dlpack__(stream=None)                # the consumer: the legacy default stream
        seen = rt.check(1, t.data_ptr, 0x5A, n)  # its kernel
        rt.synchronize(0)
        assert seen.value == 1, f"round {i}: the consumer ran before the producer"
        t.buffer.free()
    producer.destroy()


def test_dlpack_consumer_stream_waits_across_devices(sim):
    # the buffer on sim:1, the calling thread's current device sim:0
    rt = sim(jitter_us=1000, seed=12)
    rt.set_device(0)
    producer, consumer = rt.stream(1, nonblocking=True), rt.stream(1, nonblocking=True)
    t = devmm.empty(4096, "uint8", resource=SimAsyncMemoryResource(1), stream=producer.handle)
    for i in range(5):
        rt.fill(producer, t.data_ptr, i + 1, 4096)
        t.__dlpack__(stream=consumer.handle)
        seen = rt.check(consumer, t.data_ptr, i + 1, 4096)
        consumer.synchronize()
        assert seen.value == 1, f"round {i}"
    t.buffer.free()
    producer.destroy()
    consumer.destroy()


def test_cuda_array_interface_stream_names_pending_work(sim):
    # (b) the interface said stream None ("no synchronisation needed") with a memset queued
    rt = sim(jitter_us=2000, seed=13)
    consumer = rt.stream(0, nonblocking=True)
    n = 1 << 16
    for i in range(5):
        t = devmm.zeros(n, "uint8", resource=SimAsyncMemoryResource(0))
        cai = t._device_interface()                # what __cuda_array_interface__ returns
        assert cai["stream"] == 1                  # the legacy default stream, not None
        if cai["stream"] is not None:              # the consumer's side of the protocol
            rt._call("stream_synchronize", cai["stream"])
        seen = rt.check(consumer, t.data_ptr, 0, n)
        consumer.synchronize()
        assert seen.value == 1, f"round {i}: the consumer read before the memset"
    consumer.destroy()


def test_free_after_the_last_consumer_waits_for_its_stream(sim):
    # (d) the free ran on the allocation stream at once, under the consumer's queued kernel
    rt = sim(jitter_us=100, seed=14)
    x, c = rt.stream(0), rt.stream(0)
    t = devmm.empty(8192, "uint8", resource=SimAsyncMemoryResource(0), stream=x.handle)
    ptr = t.data_ptr
    rt.fill(x, ptr, 0x3C, 8192)
    cap = t.__dlpack__(stream=c.handle)        # handed to the consumer's stream
    rt.launch(c, lambda: __import__("time").sleep(0.03))
    seen = rt.check(c, ptr, 0x3C, 8192)       # the consumer's work, still queued
    t.buffer.free()                            # the owner lets go
    del t
    del cap                                    # the consumer lets go: the last hold
    rt.synchronize(0)
    devmm._lib.deferred_frees_wait()
    assert seen.value == 1, "the consumer's kernel read freed (poisoned) memory"
    x.destroy()
    c.destroy()


def test_free_after_the_allocation_stream_was_destroyed(sim):
    # (d) ...and it used the allocation stream even if the user had destroyed it
    rt = sim(jitter_us=0)
    live = rt.stats()["allocations_live"]
    x = rt.stream(0)
    t = devmm.empty(8192, "uint8", resource=SimAsyncMemoryResource(0), stream=x.handle)
    cap = t.__dlpack__(stream=-1)
    t.buffer.free()
    x.destroy()                                # legal: the owner is done with its stream
    del cap, t                                 # the consumer lets go
    devmm._lib.deferred_frees_wait()           # such frees wait for the device, off-thread
    rt.synchronize(0)                          # ...and are stream-ordered frees themselves
    assert rt.stats()["allocations_live"] == live


def test_zeros_on_pinned_memory_is_ready_for_the_host(sim):
    # (g) zeros() queued the memset and returned: numpy saw the uninitialised 0xCD bytes
    sim(jitter_us=500, seed=15)
    pinned = PinnedMemoryResource()
    for i in range(5):
        t = devmm.zeros(1 << 16, "uint8", resource=pinned)
        assert t.device == "sim_host:0"            # page-locked host memory (ADR 37)
        a = np.from_dlpack(t, device="cpu")        # the same memory, labelled kDLCPU
        assert a.ctypes.data == t.data_ptr
        assert not a.any(), f"round {i}: a host read before the memset ran"


def test_zeros_and_copies_on_another_device_than_the_current(sim):
    # memset/copy/synchronize on the NULL stream went to the current device's stream
    rt = sim(jitter_us=300, seed=16)
    rt.set_device(0)
    t = devmm.zeros(4096, "uint8", resource=SimAsyncMemoryResource(1))
    assert not np.from_dlpack(t.copy("cpu")).any()
    assert rt.get_device() == 0                    # and the caller's device is restored


# ------------------------------------------------------- Python resources on a device (3.4)

def test_a_python_resource_on_a_device_gets_copies_and_streams(sim):
    rt = sim(jitter_us=200, seed=17)
    dev = SimMemoryResource(0)

    def alloc(n, alignment, stream):
        return dev.allocate(n)

    def free(p, n, alignment, stream):
        dev.deallocate(p, n)

    r = devmm.StatisticsAdaptor(devmm.CallbackMemoryResource(alloc, free, device="sim:0",
                                                             name="python.pool"))
    t = devmm.zeros((64,), "float32", resource=r)  # raised: no memset
    assert r.current_bytes == 256
    assert not np.from_dlpack(t.copy("cpu")).any()
    c = rt.stream(0, nonblocking=True)
    t.__dlpack__(stream=c.handle)                  # stream order through sim.device
    seen = rt.check(c, t.data_ptr, 0, 256)
    c.synchronize()
    assert seen.value == 1
    t.buffer.free()
    devmm._lib.deferred_frees_wait()  # handed to a consumer's stream: the free is off-thread
    assert r.current_bytes == 0
    c.destroy()


def test_a_device_resource_without_stream_ops_cannot_claim_stream_order(sim):
    # (c) devmm_stream_wait answered OK for a resource without the op: no wait, no error
    sim()
    bufs = {}

    def alloc(n, alignment, stream):
        b = ctypes.create_string_buffer(n + alignment)  # aligned as asked (callback.c)
        p = -(-ctypes.addressof(b) // max(alignment, 1)) * max(alignment, 1)
        bufs[p] = b
        return p

    # sim:7: no plugin serves it (the simulator has 2 devices), so it has no runtime either
    r = devmm.CallbackMemoryResource(alloc, lambda p, n, a, s: bufs.pop(p), device="sim:7")
    t = devmm.empty(16, "uint8", resource=r)
    with pytest.raises(devmm.DevmmError, match=r"resource 'python' on sim:7 cannot order "
                                               r"streams \(it has no stream_wait op\)"):
        t.__dlpack__(stream=0x1234)
    with pytest.raises(devmm.DevmmError, match="resource 'python' does not support memset"):
        devmm.zeros(16, "uint8", resource=r)


def test_from_rmm_resource_allocates_on_devmms_stream(sim):
    rmm = pytest.importorskip("rmm", reason="rmm-cu13 comes with the PyPI test venv")
    from devmm.interop.rmm import from_rmm_resource
    rt = sim(jitter_us=100)
    dev = SimMemoryResource(0)
    seen = []

    def alloc(n, stream):
        seen.append(("allocate", stream.__cuda_stream__()[1]))
        return dev.allocate(n)

    def free(p, n, stream):
        seen.append(("free", stream.__cuda_stream__()[1]))
        dev.deallocate(p, n)

    x = rt.stream(0)
    r = from_rmm_resource(rmm.mr.CallbackMemoryResource(alloc, free), device="sim:0")
    t = devmm.zeros(256, "uint8", resource=r, stream=x.handle)
    assert seen == [("allocate", x.handle)]       # the stream was dropped: 0
    assert not np.from_dlpack(t.copy("cpu")).any()
    t.buffer.free()
    rt.synchronize(0)
    assert seen[-1] == ("free", x.handle)
    x.destroy()


# ------------------------------------------------------------- CuPy's allocator (3.5 f)

def test_cupy_allocations_are_ordered_on_cupys_current_stream(sim, monkeypatch):
    """CuPy cannot run without a GPU: a stand-in module with the five names the bridge uses
    checks the bridge's logic (the real check runs in tests/gpu/run.sh)."""
    rt = sim()
    x = rt.stream(0)
    installed = {}

    class Stream:
        ptr = x.handle

    class UnownedMemory:
        def __init__(self, ptr, size, owner, device):
            self.ptr, self.size, self.owner, self.device = ptr, size, owner, device

    class MemoryPointer:
        def __init__(self, mem, offset):
            self.mem, self.ptr = mem, mem.ptr + offset

    cuda = types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDevice=lambda: 0),
        get_current_stream=lambda: Stream(),
        UnownedMemory=UnownedMemory, MemoryPointer=MemoryPointer,
        get_allocator=lambda: None, set_allocator=lambda f: installed.update(malloc=f))
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda))
    monkeypatch.delitem(sys.modules, "devmm.interop.cupy", raising=False)
    import devmm.interop.cupy as bridge
    bridge.use_devmm(SimAsyncMemoryResource(0))
    mp = installed["malloc"](1024)
    assert mp.mem.owner.stream == x.handle         # was None: the legacy stream
    mp.mem.owner.free()
    monkeypatch.delitem(sys.modules, "devmm.interop.cupy")
    rt.synchronize(0)
    x.destroy()


# --------------------------------------------------- the real GPU plugins, without a GPU

def _built(plugin):
    return any(os.path.exists(os.path.join(d, f"devmm-{plugin}.so"))
               for d in os.environ.get("DEVMM_PLUGIN_PATH", "").split(":") if d)


@pytest.mark.skipif(not _built("rocm"), reason="devmm-rocm was not built (no libamdhip64-dev)")
def test_rocm_refuses_max_pool_size_instead_of_dropping_it():
    from devmm.mrs._kind import create
    with pytest.raises(devmm.DevmmError,
                       match=r"rocm.async: max_pool_size = 1GiB: this runtime's pools have no "
                             r"maximum size \(hipMemPoolProps has no maxSize\)"):
        create("rocm.async", 0, pool="own", max_pool_size="1GiB")


@pytest.mark.skipif(not _built("cuda"), reason="devmm-cuda was not built (no CUDA toolkit)")
def test_cuda_without_a_driver_says_that_no_driver_was_found():
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        pass
    else:
        pytest.skip("a CUDA driver is installed here: the message applies to machines without")
    from devmm.mrs._kind import create
    with pytest.raises(devmm.DevmmError) as e:
        create("cuda.device", 0)
    assert "0 devices: no CUDA driver was found (libcuda.so.1 cannot be loaded: " in str(e.value)
    assert "insufficient" not in str(e.value)


def test_sim_module_imports_nothing_heavy():
    code = ("import sys, devmm.mrs.sim; "
            "print(sorted(m for m in ('numpy', 'torch', 'cupy') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "[]", r.stderr
    assert simmod.__all__


def test_managed_round_trip_through_the_device_interface(sim):
    # tests/gpu/test_gpu.py's kind_cuda_managed on the simulator: a consumer of the CUDA array
    # interface (CuPy's cupy.asarray reads it first) writes the tensor, then the owner frees it
    rt = sim(jitter_us=100, seed=21)
    stats = devmm.StatisticsAdaptor(ManagedMemoryResource(0))
    t = devmm.zeros((256, 1024), "float32", resource=stats)
    assert stats.current_bytes == 1 << 20
    cai = t._device_interface()                    # what __cuda_array_interface__ returns
    rt._call("stream_synchronize", cai["stream"])  # the consumer's side of the protocol
    n = 256 * 1024
    view = np.ctypeslib.as_array((ctypes.c_float * n).from_address(cai["data"][0]))
    assert float(view.sum()) == 0.0
    view[...] = 2.0                                # managed memory: the host writes it
    del view
    host = np.from_dlpack(t.copy("cpu"))
    assert host.shape == (256, 1024) and (host == 2.0).all()
    # the interface's promise (Numba's CUDA array interface, "Lifetime management"): the data
    # lives as long as the object that exported it, which the consumer keeps. So free() while
    # that tensor lives gives nothing back yet; the tensor's end does (ADR 38)
    t.buffer.free()
    assert stats.current_bytes == 1 << 20, stats.current_bytes
    del t
    devmm._lib.deferred_frees_wait()               # a free for unknown streams waits off-thread
    assert stats.current_bytes == 0, stats.current_bytes


def _capsule_device(cap) -> tuple:
    """dl_tensor.device of a versioned capsule (not consumed): what a consumer reads."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    head = get(cap, b"dltensor_versioned")
    data = ctypes.c_void_p.from_address(head + 32).value  # after version, ctx, deleter, flags
    return data, tuple((ctypes.c_int32 * 2).from_address(head + 40))


def test_pinned_and_managed_sim_memory_have_device_types_of_their_own(sim):
    # as kDLCUDAHost and kDLCUDAManaged do for CUDA, so that the code keyed on those kinds runs
    # here; devmm's own codes, never CUDA's (ADR 37)
    rt = sim(jitter_us=100, seed=22)
    C = devmm._lib.CONSTANTS
    host, managed = C["DEVMM_DEVICE_SIM_HOST"], C["DEVMM_DEVICE_SIM_MANAGED"]
    assert len({host, managed, C["DEVMM_DEVICE_CPU"], C["DEVMM_DEVICE_SIM"], 2, 3, 13}) == 7
    p = devmm.zeros(16, "uint8", resource=PinnedMemoryResource())
    assert p.device == "sim_host:0" and p.__dlpack_device__() == (host, 0)
    assert np.asarray(p).ctypes.data == p.data_ptr            # host memory: the array interface
    assert _capsule_device(p.__dlpack__(max_version=(1, 0))) == (p.data_ptr, (host, 0))
    cpu = p.__dlpack__(dl_device=(1, 0), copy=False, max_version=(1, 0))  # pinned as kDLCPU
    assert _capsule_device(cpu) == (p.data_ptr, (1, 0))
    with pytest.raises(ValueError, match="stream must be None for sim_host:0 tensors"):
        p.__dlpack__(stream=1)
    m = devmm.zeros(16, "uint8", resource=ManagedMemoryResource(0))
    assert m.device == "sim_managed:0" and m.__dlpack_device__() == (managed, 0)
    with pytest.raises(ValueError, match=r"stream 0 is ambiguous for sim \(CUDA's rules\)"):
        m.__dlpack__(stream=0)
    with pytest.raises(AttributeError, match="sim_managed:0 is not CUDA memory"):
        m.__cuda_array_interface__
    with pytest.raises(AttributeError, match="sim_managed:0 memory is not host memory"):
        m.__array_interface__
    assert m._device_interface()["data"][0] == m.data_ptr
    assert devmm.resource.parse_device("sim_managed:1").device_type == managed
    rt.synchronize()

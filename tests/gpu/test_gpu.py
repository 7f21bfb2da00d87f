"""GPU checks for tests/gpu/run.sh (one GPU machine whose python3 has torch, CuPy, JAX and numpy,
but no pytest). Each check runs in a process of its own, so that a crash or a poisoned CUDA
context never hides the checks after it:

    python3 tests/gpu/test_gpu.py --list      # the checks' names
    python3 tests/gpu/test_gpu.py NAME        # one check: exit 0 pass, 1 fail, 77 skip (says why)
    python3 tests/gpu/test_gpu.py bench       # the Python GPU benchmark, with its target line

The simulator (devmm-sim) runs the same stream rules in every `make test`; these checks are
what only a real GPU can show: torch, CuPy, JAX and RMM on real device memory."""

import sys
import time
import traceback

import devmm

CHECKS = {}
SKIP = 77


class Skip(Exception):
    """A check that cannot run on this machine (the reason is printed)."""


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def torch():
    import torch as t
    return t


def cupy():
    import cupy as c
    return c


def np():
    import numpy as n
    return n


class pyfail:
    def __init__(self, exc, text):
        self.exc, self.text = exc, text

    def __enter__(self):
        return self

    def __exit__(self, t, v, tb):
        assert t is not None and issubclass(t, self.exc) and self.text in str(v), (t, v)
        return True


def cuda_mrs():
    from devmm.mrs import cuda
    return cuda


# ------------------------------------------------------------------ every kind, on its own

def _round_trip(r, consumer):
    """zeros -> a consumer writes 2.0 -> copy to the host -> free and drop the tensor:
    statistics back to 0. A consumer of __cuda_array_interface__ (CuPy) keeps the tensor, whose
    memory must live as long as it does (the interface's lifetime rule): free() then gives the
    memory back only when the tensor goes (tests/python/test_sim.py runs this on sim.managed)."""
    stats = devmm.StatisticsAdaptor(r)
    t = devmm.zeros((256, 1024), "float32", resource=stats)
    assert stats.current_bytes == 1 << 20, (r.name, stats.current_bytes)
    exported = consumer(t)
    host = np().from_dlpack(t.copy("cpu"))  # device -> host through the device's runtime
    assert host.shape == (256, 1024) and (host == 2.0).all(), r.name
    t.buffer.free()
    torch().cuda.synchronize()
    if exported:  # held by the tensor for the interface's consumers
        assert stats.current_bytes == 1 << 20, (r.name, stats.current_bytes)
    del t
    devmm._lib.deferred_frees_wait()  # a free for unknown streams synchronises off-thread
    assert stats.current_bytes == 0, (r.name, stats.current_bytes)


def _torch_fill(t):
    x = torch().from_dlpack(t)
    assert x.device.type == "cuda" and float(x.sum()) == 0.0
    x.fill_(2.0)
    torch().cuda.synchronize()


def _cupy_fill(t):
    # torch.from_dlpack refuses kDLCUDAManaged (pytorch issue 96318): CuPy reads the CUDA array
    # interface, which carries no device type
    c = cupy().asarray(t)
    assert float(c.sum()) == 0.0
    c[...] = 2.0
    cupy().cuda.runtime.deviceSynchronize()
    return True  # the tensor handed out __cuda_array_interface__: it holds its memory


@check
def kind_cuda_device():
    _round_trip(cuda_mrs().CudaMemoryResource(0), _torch_fill)


@check
def kind_cuda_async_default_pool():
    _round_trip(cuda_mrs().CudaAsyncMemoryResource(0), _torch_fill)


@check
def kind_cuda_async_own_pool():
    _round_trip(cuda_mrs().CudaAsyncMemoryResource(0, pool="own", max_pool_size="1GiB",
                                                  release_threshold="256MiB"), _torch_fill)
    with pyfail(devmm.DevmmError, "release_threshold needs pool = own"):
        cuda_mrs().CudaAsyncMemoryResource(0, release_threshold="1GiB")


@check
def kind_cuda_managed():
    _round_trip(cuda_mrs().ManagedMemoryResource(0), _cupy_fill)
    try:  # what torch does with managed memory, for the record
        torch().from_dlpack(devmm.zeros(4, "float32", resource=cuda_mrs().ManagedMemoryResource(0)))
        print("info: torch.from_dlpack accepts kDLCUDAManaged here")
    except Exception as e:
        print(f"info: torch.from_dlpack refuses kDLCUDAManaged: {e}")


@check
def kind_cuda_managed_advise_prefetch():
    _round_trip(cuda_mrs().ManagedMemoryResource(0, advise="read_mostly", prefetch=True),
                _cupy_fill)


@check
def kinds_from_rmm_on_the_first_gpu():
    # issue 24: RMM's system, SAM-headroom, managed-pool and pool-view kinds and its prefetch
    # adaptor (tests/python/test_rmm_kinds.py runs each on the simulator)
    mrs = cuda_mrs()
    try:
        system = mrs.SystemMemoryResource(0)
    except devmm.DevmmError as e:   # the refusal, with its reason, where the GPU cannot
        assert "cudaDevAttrPageableMemoryAccess = 0" in str(e), e
        print(f"info: {e}")
    else:
        _round_trip(system, _cupy_fill)
        _round_trip(mrs.SamHeadroomMemoryResource("1GiB", 0), _cupy_fill)
        _round_trip(mrs.SystemMemoryResource(0, prefetch=True), _cupy_fill)
    try:
        managed_pool = mrs.CudaAsyncManagedMemoryResource(0)
    except devmm.DevmmError as e:   # a driver older than CUDA 13: refused, saying so
        assert "pool = managed" in str(e), e
        print(f"info: {e}")
    else:
        _round_trip(managed_pool, _cupy_fill)
        _round_trip(devmm.PrefetchAdaptor(managed_pool), _cupy_fill)
    _round_trip(devmm.PrefetchAdaptor(mrs.ManagedMemoryResource(0)), _cupy_fill)
    with pyfail(devmm.DevmmError, "its memory does not move"):
        devmm.PrefetchAdaptor(mrs.CudaMemoryResource(0))
    # an existing allocation (RMM's DeviceBuffer.prefetch; test_rmm_identity.py on the simulator)
    m = devmm.zeros(1 << 20, "uint8", resource=mrs.ManagedMemoryResource(0))
    assert devmm.prefetch(m) and m.prefetch(device="cuda:0")      # cudaMemPrefetchAsync
    assert devmm.prefetch(devmm.zeros(64, "uint8", resource=mrs.CudaMemoryResource(0))) is False
    pool = cupy().cuda.runtime.deviceGetDefaultMemPool(0)   # a pool CuPy's runtime hands out
    _round_trip(mrs.CudaAsyncViewMemoryResource(pool, 0), _torch_fill)
    assert cupy().cuda.runtime.deviceGetDefaultMemPool(0) == pool   # still there, still its


@check
def kind_cuda_pinned_zeros_then_host_read():
    # zeros() queues a cudaMemsetAsync: it must be done before zeros() returns on host memory
    p = cuda_mrs().PinnedMemoryResource()
    for _ in range(20):
        t = devmm.zeros(16 << 20, "uint8", resource=p)
        assert t.__dlpack_device__() == (3, 0)
        assert not np().asarray(t).any()
        t.buffer.free()
    t = devmm.empty(1000, "int32", resource=p)
    a = np().asarray(t)  # pinned memory is host memory
    a[...] = 7
    assert a.sum() == 7000
    import os
    host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    free, total = p.mem_info()  # the host's memory, not the GPU's
    assert abs(total - host) < host // 100, (total, host)


# ------------------------------------------------------------------ hand-over and copies

@check
def host_device_copies_both_ways():
    n = np()
    a = n.arange(1 << 20, dtype=n.float32)
    h = devmm.empty(1 << 20, "float32")
    n.from_dlpack(h)[...] = a
    d = h.copy("cuda:0")  # host -> device: through the device's runtime
    assert d.device == "cuda:0"
    assert bool((torch().from_dlpack(d).cpu().numpy() == a).all())
    back = n.from_dlpack(d, device="cpu")  # dl_device=(kDLCPU, 0): a device -> host copy
    assert (back == a).all()
    cap = h.__dlpack__(dl_device=(2, 0))  # host -> device by DLPack (a legacy capsule)
    x = torch().from_dlpack(cap)
    assert x.device.type == "cuda" and float(x[-1]) == float(a[-1])
    with pyfail(BufferError, "needs a copy"):
        d.__dlpack__(dl_device=(1, 0), copy=False)
    padded = devmm.zeros((10, 3), "float64", device="cuda:0",
                         layout=devmm.Aligned(devmm.RowMajor(), 256))
    assert padded.copy("cpu").strides == (3, 1)


@check
def dlpack_zero_copy_torch_cupy_jax_both_ways():
    import jax
    devmm.init()  # the usual lookup: run.sh points DEVMM_CONFIG at devmm-gpu.ini
    t = devmm.zeros((64, 64), "float32", device="cuda:0")
    x = torch().from_dlpack(t)
    c = cupy().from_dlpack(t)
    assert x.data_ptr() == t.data_ptr == c.data.ptr
    x.fill_(3.0)
    torch().cuda.synchronize()
    assert float(c.sum()) == 3.0 * 64 * 64  # torch -> cupy through the same memory
    c[...] = 5.0
    cupy().cuda.runtime.deviceSynchronize()
    assert float(x.sum()) == 5.0 * 64 * 64  # cupy -> torch
    j = jax.dlpack.from_dlpack(t)
    assert j.unsafe_buffer_pointer() == t.data_ptr and float(j.sum()) == 5.0 * 64 * 64
    cap = t.__dlpack__(max_version=(1, 1), stream=-1)  # torch >= 2.9 takes versioned capsules
    assert "dltensor_versioned" in repr(cap)


@check
def cuda_array_interface_default_and_own_stream():
    t = devmm.zeros((10, 3), "float64", device="cuda:0",
                    layout=devmm.Aligned(devmm.RowMajor(), 256))
    cai = t.__cuda_array_interface__
    assert cai["version"] == 3 and cai["strides"] == (256, 8)
    assert cai["stream"] == 1  # the memset is queued on the legacy default stream, not "None"
    c = cupy().asarray(t)
    assert c.data.ptr == t.data_ptr and c.strides == (256, 8)
    c[...] = 1.0
    cupy().cuda.runtime.deviceSynchronize()
    assert float(torch().from_dlpack(t).sum()) == 30.0
    s = cupy().cuda.Stream(non_blocking=True)
    u = devmm.zeros(1 << 20, "float32", resource=cuda_mrs().CudaAsyncMemoryResource(0),
                    stream=s.ptr)
    assert u.__cuda_array_interface__["stream"] == s.ptr
    with cupy().cuda.Stream(non_blocking=True):  # CuPy synchronises with the reported stream
        assert float(cupy().asarray(u).sum()) == 0.0


@check
def stream_semantics_with_a_non_default_stream():
    t_ = torch()
    producer = t_.cuda.Stream()
    r = cuda_mrs().CudaAsyncMemoryResource(0)
    n = 1 << 24
    t = devmm.empty(n, "float32", resource=r, stream=producer.cuda_stream)
    with t_.cuda.stream(producer):
        t_.cuda._sleep(20_000_000)  # keep the producer busy, then write
        t_.from_dlpack(t.__dlpack__(stream=-1)).fill_(4.0)
    consumer = t_.cuda.Stream()
    with t_.cuda.stream(consumer):
        # torch passes its current stream; devmm makes it wait for the allocation's stream
        x = t_.from_dlpack(t)
        total = float(x.sum())
    assert total == 4.0 * n, total
    with pyfail(ValueError, "stream 0 is ambiguous"):
        t.__dlpack__(stream=0)


@check
def free_after_the_consumer_on_its_own_stream():
    # the owner frees; torch's queued work on its stream still reads the memory: the free waits
    t_ = torch()
    r = devmm.StatisticsAdaptor(cuda_mrs().CudaAsyncMemoryResource(0))
    t = devmm.zeros(1 << 24, "float32", resource=r)
    s = t_.cuda.Stream()
    with t_.cuda.stream(s):
        x = t_.from_dlpack(t)
        t_.cuda._sleep(20_000_000)
        total = x.sum()
    t.buffer.free()
    del x, t
    devmm._lib.deferred_frees_wait()
    assert float(total) == 0.0 and r.current_bytes == 0


@check
def statistics_and_limiting_over_cuda_async():
    base = cuda_mrs().CudaAsyncMemoryResource(0)
    stats = devmm.StatisticsAdaptor(base)
    lim = devmm.LimitingAdaptor(stats, "64MiB")
    a = devmm.empty(32 << 20, "uint8", resource=lim)
    with pyfail(MemoryError, "would exceed its limit of 67108864 bytes"):
        devmm.empty(48 << 20, "uint8", resource=lim)
    assert stats.current_bytes == 32 << 20 and stats.total_count == 1
    a.buffer.free()
    assert stats.current_bytes == 0
    free, total = lim.mem_info()
    assert total == 64 << 20 and free == 64 << 20
    pct = devmm.LimitingAdaptor(base, "90%")
    assert abs(pct.limit - 0.9 * base.mem_info()[1]) < 2


@check
def devmm_ini_stack_on_cuda():
    devs = {d["device"]: d for d in devmm.devices()}
    assert devs["cuda:0"]["stack"] == "limiting(statistics(cuda.async(own pool)))", devs["cuda:0"]
    r = devmm.get_current_device_resource("cuda:0")
    assert r.name == "limiting(statistics(cuda.async(own pool)))"


@check
def multi_gpu_resource_on_another_device():
    t_ = torch()
    if t_.cuda.device_count() < 2:
        raise Skip(f"{t_.cuda.device_count()} GPU: the multi-device paths need two")
    t_.cuda.set_device(0)
    r1 = cuda_mrs().CudaAsyncMemoryResource(1)
    t = devmm.zeros(1 << 20, "float32", resource=r1)  # memset on cuda:1 from a cuda:0 thread
    assert not np().from_dlpack(t.copy("cpu")).any()
    s = t_.cuda.Stream(device=1)
    with t_.cuda.device(1), t_.cuda.stream(s):
        assert float(t_.from_dlpack(t).sum()) == 0.0  # an event on cuda:1, recorded there


# ------------------------------------------------------------------ bridges

@check
def cupy_routed_through_devmm_on_its_stream():
    import devmm.interop.cupy
    stats = devmm.StatisticsAdaptor(cuda_mrs().CudaAsyncMemoryResource(0))
    s = cupy().cuda.Stream(non_blocking=True)
    with devmm.interop.cupy.use_devmm(stats), s:
        a = cupy().arange(1000, dtype=cupy().float64)
        assert stats.current_bytes >= 8000 and float(a.sum()) == 499500.0
        del a
    cupy().get_default_memory_pool().free_all_blocks()
    s.synchronize()
    assert stats.current_bytes == 0, stats.current_bytes


@check
def cupy_pool_under_devmm_adaptors():
    from devmm.mrs.cupy import CupyPoolResource
    pool = devmm.StatisticsAdaptor(CupyPoolResource())
    t = devmm.zeros(1 << 16, "uint8", resource=pool)  # memset through cuda.device
    assert pool.current_bytes == 1 << 16 and float(cupy().from_dlpack(t).sum()) == 0.0
    s = cupy().cuda.Stream(non_blocking=True)
    u = devmm.zeros(1 << 16, "uint8", resource=pool, stream=s.ptr)
    assert float(cupy().from_dlpack(u).sum()) == 0.0
    t.buffer.free()
    u.buffer.free()


@check
def rmm_bridge_kinds_on_a_torch_stream():
    from devmm.mrs import create_resource
    t_ = torch()
    s = t_.cuda.Stream()
    for kind, opts in (("rmm.current", {}), ("rmm.pool", {"upstream": "async",
                                                          "initial_pool_size": "64MiB"}),
                       ("rmm.arena", {"upstream": "cuda"})):
        stats = devmm.StatisticsAdaptor(create_resource(kind, 0, **opts))
        t = devmm.zeros((1024, 256), "float32", resource=stats, stream=s.cuda_stream)
        with t_.cuda.stream(t_.cuda.Stream()):  # another stream: devmm makes it wait for s
            x = t_.from_dlpack(t)
            x.add_(1.0)
            assert float(x.sum()) == 1024 * 256, kind
        t.buffer.free()
        del x
        t_.cuda.synchronize()
        devmm._lib.deferred_frees_wait()
        assert stats.current_bytes == 0, kind


@check
def rmm_current_frees_to_the_resource_that_allocated():
    import rmm
    from devmm.mrs import create_resource
    first = rmm.mr.StatisticsResourceAdaptor(
        rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource(), initial_pool_size=1 << 28))
    rmm.mr.set_current_device_resource(first)  # what RAPIDS uses from now on
    r = create_resource("rmm.current", 0)
    t = devmm.zeros(1 << 20, "uint8", resource=r)  # devmm allocates from RAPIDS' pool
    assert first.allocation_counts.current_bytes >= 1 << 20, first.allocation_counts
    second = rmm.mr.StatisticsResourceAdaptor(rmm.mr.CudaMemoryResource())
    rmm.mr.set_current_device_resource(second)  # as rmm.reinitialize() does
    t.buffer.free()  # back to `first`, which allocated it
    torch().cuda.synchronize()
    assert first.allocation_counts.current_bytes == 0, first.allocation_counts
    assert second.allocation_counts.current_bytes == 0, second.allocation_counts


@check
def rmm_resource_under_devmm_on_a_stream():
    import rmm
    from devmm.interop.rmm import from_rmm_resource
    t_ = torch()
    s = t_.cuda.Stream()
    r = devmm.StatisticsAdaptor(from_rmm_resource(rmm.mr.CudaAsyncMemoryResource(), "cuda:0"))
    t = devmm.zeros(1 << 20, "uint8", resource=r, stream=s.cuda_stream)  # memset: cuda.device
    with t_.cuda.stream(t_.cuda.Stream()):
        assert int(t_.from_dlpack(t).sum()) == 0
    t.buffer.free()
    t_.cuda.synchronize()
    devmm._lib.deferred_frees_wait()
    assert r.current_bytes == 0


@check
def torch_routed_through_devmm():
    """A fresh process (run.sh runs each check in one): torch's allocations go through devmm."""
    import devmm.interop.torch
    devmm.init()
    devmm.interop.torch.use_devmm()
    stack = devmm.get_current_device_resource("cuda:0")  # limiting(statistics(cuda.async))
    stats = devmm.StatisticsAdaptor.find(stack)
    before = stats.current_bytes
    t_ = torch()
    x = t_.empty(1 << 22, dtype=t_.float32, device="cuda")
    assert stats.current_bytes - before >= 4 << 22, (before, stats.current_bytes)
    x.fill_(1.0)
    assert float(x.sum()) == float(1 << 22)
    del x
    t_.cuda.synchronize()
    print(f"info: statistics saw {stats.total_bytes} bytes from torch")


@check
def torch_routed_out_of_memory_is_an_exception():
    """Over the limit, torch raises (it used to get NULL: a tensor at address 0), and the CUDA
    context keeps working."""
    import devmm.interop.torch
    devmm.init()
    lim = devmm.LimitingAdaptor(cuda_mrs().CudaAsyncMemoryResource(0), "64MiB")
    devmm.set_current_device_resource(lim, "cuda:0")
    devmm.interop.torch.use_devmm()
    t_ = torch()
    with pyfail(RuntimeError, "out of memory"):
        t_.empty(128 << 20, dtype=t_.uint8, device="cuda")
    x = t_.ones(1 << 20, dtype=t_.float32, device="cuda")  # the context still works
    assert float(x.sum()) == float(1 << 20)


@check
def torch_record_stream_under_use_devmm():
    """ADR 38: a tensor used on a second stream (record_stream) is not reused before that
    stream's work is done: torch's next allocation on the first stream would take the memory
    at once, and its fill would land before the second stream's read."""
    import devmm.interop.torch
    devmm.init()
    devmm.interop.torch.use_devmm()
    t_ = torch()
    print(f"info: record_stream hook installed: {devmm.interop.torch.record_stream_hooked()} "
          f"(else every free waits for the device)")
    n = 1 << 24
    bad = 0
    for _ in range(5):
        x = t_.ones(n, dtype=t_.float32, device="cuda")
        side = t_.cuda.Stream()
        side.wait_stream(t_.cuda.current_stream())
        with t_.cuda.stream(side):
            t_.cuda._sleep(100_000_000)  # the read below comes late
            y = x * 2
        x.record_stream(side)
        del x
        z = t_.empty(n, dtype=t_.float32, device="cuda")  # reuses x's memory on its stream
        z.fill_(5.0)
        t_.cuda.synchronize()
        bad += int((y != 2).sum())
        del y, z
    assert bad == 0, f"{bad} elements read after the memory was reused"


@check
def graph_capture_with_a_devmm_export_inside():
    """ADR 38: a devmm tensor exported into a torch graph capture (global mode) neither
    records on the legacy stream nor waits across the capture's boundary, and the deferred-free
    thread, busy meanwhile, neither synchronises the device nor frees until the capture ends:
    the capture is not invalidated and its replay reads the tensor."""
    t_ = torch()
    devmm.init()
    r = cuda_mrs().CudaAsyncMemoryResource(0)
    t = devmm.zeros(1 << 20, "float32", resource=r)  # zeroed on the legacy stream
    other = t_.cuda.Stream()
    busy = devmm.zeros(1 << 20, "float32", resource=r)
    with t_.cuda.stream(other):
        t_.from_dlpack(busy).fill_(1.0)  # handed to another stream: its free is deferred
    s = t_.cuda.Stream()
    g = t_.cuda.CUDAGraph()
    t_.cuda.synchronize()
    with t_.cuda.graph(g, stream=s):
        x = t_.from_dlpack(t)  # t.__dlpack__(stream=<the capturing stream>): devmm sees s
        del busy  # the deferred-free thread now waits for a device-wide point: not until the end
        y = x + 3.0
    g.replay()
    t_.cuda.synchronize()
    assert float(y.sum()) == 3.0 * (1 << 20), float(y.sum())
    devmm._lib.deferred_frees_wait()


@check
def fork_after_use_is_a_quick_devmm_error():
    """ADR 38: a child forked after the parent used CUDA gets devmm's error naming fork and
    the spawn/forkserver start methods at once, never a hang."""
    import os
    import select
    devmm.init()
    t = devmm.zeros(1024, "float32", resource=cuda_mrs().CudaAsyncMemoryResource(0))
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rd)
        try:
            devmm.empty(1024, "float32", resource=cuda_mrs().CudaAsyncMemoryResource(0))
            msg = "no error"
        except devmm.DevmmError as e:
            msg = str(e)
        os.write(wr, msg.encode()[:4000])
        os._exit(0)
    os.close(wr)
    ready, _, _ = select.select([rd], [], [], 30)
    if not ready:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raise AssertionError("the forked child hung for 30 s")
    msg = os.read(rd, 4096).decode()
    os.waitpid(pid, 0)
    assert "forked" in msg and "spawn" in msg and "forkserver" in msg, msg
    del t


# ------------------------------------------------------------------ benchmark

def bench():
    """devmm.empty over cuda.async vs torch's caching allocator vs CuPy's pool, from Python."""
    t_, c_ = torch(), cupy()
    devmm.init()
    r = cuda_mrs().CudaAsyncMemoryResource(0, pool="own", release_threshold="8GiB")
    rows = []
    for n in (256, 65536, 1 << 20, 16 << 20, 64 << 20):
        def best(fn, iters=2000):
            out = []
            for _ in range(5):
                t_.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(iters):
                    fn()
                t_.cuda.synchronize()
                out.append((time.perf_counter() - t0) / iters * 1e9)
            return min(out)
        d = best(lambda: devmm.empty(n, "uint8", resource=r).buffer.free())
        t = best(lambda: t_.empty(n, dtype=t_.uint8, device="cuda"))
        c = best(lambda: c_.empty(n, dtype=c_.uint8))
        rows.append((n, d, t, c))
    print("Python GPU benchmark: ns per allocate+free from Python (best of 5 x 2000)")
    print(f"{'size':>10} {'devmm cuda.async':>17} {'torch caching':>14} {'cupy pool':>10} "
          f"{'devmm/torch':>12}")
    ok = True
    for n, d, t, c in rows:
        print(f"{n:>10} {d:>17.0f} {t:>14.0f} {c:>10.0f} {d / t:>11.2f}x")
        ok &= d / t <= 1.5
    print(f"target devmm cuda.async within 1.5x of torch's caching allocator: "
          f"{'MET' if ok else 'MISSED'}")


def _ipc_round_trip(resource):
    """A tensor of resource opened by handle in another process (a CUDA importer must be one):
    the child checks the bytes and writes new ones; the parent sees them (#13, ADR 30)."""
    import subprocess
    import textwrap
    n = np()
    host = devmm.empty((4096,), "int32")
    n.asarray(host)[:] = n.arange(4096)
    t = devmm.empty((4096,), "int32", resource=resource)
    devmm._lib.check(devmm._lib.copy(resource._h, t.data_ptr, host.data_ptr, t.nbytes, None))
    devmm._lib.check(devmm._lib.synchronize(resource._h, None))
    child = textwrap.dedent("""
        import sys, numpy as np, devmm
        u = devmm.open_ipc(bytes.fromhex(sys.argv[1]))
        assert (np.asarray(u.copy("cpu")) == np.arange(4096)).all(), "child: wrong bytes"
        seven = devmm.empty((4096,), "int32")
        np.asarray(seven)[:] = 7
        r = u.buffer.resource
        devmm._lib.check(devmm._lib.copy(r._h, u.data_ptr, seven.data_ptr, u.nbytes, None))
        devmm._lib.check(devmm._lib.synchronize(r._h, None))
        print("child:", r.name)
    """)
    r = subprocess.run([sys.executable, "-c", child, t.ipc_handle().hex()], capture_output=True,
                       text=True, timeout=120)
    print(r.stdout, r.stderr)
    assert r.returncode == 0, r.stderr
    assert (n.asarray(t.copy("cpu")) == 7).all(), "the parent does not see the child's write"


@check
def ipc_cuda_device_between_processes():
    _ipc_round_trip(cuda_mrs().CudaMemoryResource(0))


@check
def ipc_cuda_device_interior_pointer_and_range():
    """ADR 33: a handle of an interior pointer carries its offset (CUDA maps the allocation's
    base), and a range past the allocation is refused."""
    import ctypes
    import subprocess
    n = np()
    resource = cuda_mrs().CudaMemoryResource(0)
    host = devmm.empty((2048,), "int32")
    n.asarray(host)[:] = n.arange(2048)
    t = devmm.empty((2048,), "int32", resource=resource)
    L = devmm._lib
    L.check(L.copy(resource._h, t.data_ptr, host.data_ptr, t.nbytes, None))
    L.check(L.synchronize(resource._h, None))
    out = ctypes.create_string_buffer(L.CONSTANTS["DEVMM_IPC_HANDLE_SIZE"])
    rc = L.ipc_get_handle(resource._h, t.data_ptr, t.nbytes + (1 << 20), out)
    assert rc != 0 and "runs past its allocation" in str(L.error(rc)), L.error(rc)
    L.check(L.ipc_get_handle(resource._h, t.data_ptr + 4096, 4096, out))
    child = ("import sys, numpy as np, devmm\n"
             "u = devmm.open_ipc(bytes.fromhex(sys.argv[1]))\n"
             "a = np.asarray(u.copy('cpu')).view(np.int32)\n"
             "assert (a == np.arange(1024, 2048)).all(), ('child: wrong bytes', a[:4])\n")
    r = subprocess.run([sys.executable, "-c", child, out.raw.hex()], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr


@check
def ipc_cuda_async_pool_is_refused():
    """ADR 33: ipc = true is refused, saying why (a driver descriptor cannot be reopened)."""
    try:
        cuda_mrs().CudaAsyncMemoryResource(0, pool="own", ipc=True)
    except devmm.DevmmError as e:
        assert "a pool's shareable handle is a driver descriptor" in str(e), e
    else:
        raise AssertionError("cuda.async with ipc = true was accepted")


# ------------------------------------------------------------------ CUDA's IPC boundaries
# (ADR 38 §Threads and contexts; IPC opens; ADR 40 §Device handles; the simulator's sim_ipc
# suite runs the same rules in every make test)

def _cuda_ipc_child(code, *args):
    """Runs code in a fresh python3 with args in sys.argv[1:]; its stdout, or AssertionError."""
    import subprocess
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       timeout=50)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _copy_into(host, r):
    t = devmm.empty(host.shape, host.dtype, resource=r)
    L = devmm._lib
    L.check(L.copy(r._h, t.data_ptr, host.data_ptr, t.nbytes, None))
    L.check(L.synchronize(r._h, None))
    return t


_RANGE = ("import ctypes\n"
          "cu = ctypes.CDLL('libcuda.so.1')\n"
          "def rng(p):\n"
          "    b, s = ctypes.c_ulonglong(), ctypes.c_size_t()\n"
          "    rc = cu.cuMemGetAddressRange_v2(ctypes.byref(b), ctypes.byref(s), ctypes.c_ulonglong(p))\n"
          "    assert rc == 0, ('cuMemGetAddressRange', rc)\n"
          "    return b.value, s.value\n")


@check
def ipc_cuda_device_on_a_fresh_thread():
    """A handle taken on a thread that never used CUDA (multiprocessing's feeder thread): devmm
    binds the device's context first; the tensor goes by handle, and a child sees its bytes."""
    import threading
    from multiprocessing.reduction import ForkingPickler
    devmm.init()
    t = _copy_into(_host(1 << 16, 9), cuda_mrs().CudaMemoryResource(0))
    out = {}

    def take():
        try:
            out["pickle"] = bytes(ForkingPickler.dumps(t))
            out["handle"] = t.ipc_handle()
        except Exception as e:  # reported below
            out["error"] = repr(e)
    th = threading.Thread(target=take)
    th.start()
    th.join()
    assert "error" not in out, out["error"]
    assert len(out["pickle"]) < 4096, "went by value"
    _cuda_ipc_child("import sys, numpy as np, devmm\n"
                    "u = devmm.open_ipc(bytes.fromhex(sys.argv[1]))\n"
                    "assert (np.asarray(u.copy('cpu')) == 9).all()\n", out["handle"].hex())


def _host(n, value):
    nm = np()
    host = devmm.empty((n,), "uint8")
    nm.asarray(host)[:] = value
    return host


@check
def ipc_cuda_device_in_its_own_process():
    """A handle opened by its exporter is its own memory (CUDA refuses that open: devmm does not
    ask it; needs cudaIpcGetMemHandle to give the same bytes twice), repeated opens in another
    process share one mapping, and a freed exporter's handle is StaleHandleError."""
    devmm.init()
    t = _copy_into(_host(4096, 3), cuda_mrs().CudaMemoryResource(0))
    h = t.ipc_handle()
    u = devmm.open_ipc(h)
    assert u.data_ptr == t.data_ptr, (hex(u.data_ptr), hex(t.data_ptr))
    del u
    out = _cuda_ipc_child("import sys, numpy as np, devmm\n"
                          "h = bytes.fromhex(sys.argv[1])\n"
                          "a, b = devmm.open_ipc(h), devmm.open_ipc(h)\n"
                          "assert a.data_ptr == b.data_ptr\n"
                          "del a\n"
                          "assert (np.asarray(b.copy('cpu')) == 3).all()\n"
                          "print('ok')\n", h.hex())
    assert "ok" in out
    t.buffer.free()
    del t
    devmm._lib.deferred_frees_wait()
    out = _cuda_ipc_child("import sys, devmm\n"
                          "try:\n"
                          "    devmm.open_ipc(bytes.fromhex(sys.argv[1]))\n"
                          "    print('OPENED')\n"
                          "except devmm.StaleHandleError as e:\n"
                          "    print('stale', e)\n", h.hex())
    assert out.startswith("stale"), out


@check
def ipc_cuda_device_across_a_2mib_chunk():
    """CUDA shares a small allocation as its whole 2 MiB block: with ipc_isolate=False a
    receiver reaches the neighbour; by default each allocation is a block of its own."""
    devmm.init()
    packed = cuda_mrs().CudaMemoryResource(0, ipc_isolate=False)
    a = _copy_into(_host(1024, 1), packed)
    b = _copy_into(_host(1024, 0x5A), packed)
    iso = _copy_into(_host(1024, 2), cuda_mrs().CudaMemoryResource(0))
    code = (_RANGE + "import sys, devmm\n"
            "u = devmm.open_ipc(bytes.fromhex(sys.argv[1]))\n"
            "base, size = rng(u.data_ptr)\n"
            "print(base == u.data_ptr, size, base, u.data_ptr)\n")
    same, size, *_ = _cuda_ipc_child(code, iso.ipc_handle().hex()).split()
    assert int(size) == 2 << 20, f"an isolated allocation's mapping is {size} bytes"
    out = _cuda_ipc_child(code, a.ipc_handle().hex()).split()
    print("packed 1 KiB allocation: the receiver's mapping", out, "neighbour at",
          b.data_ptr - a.data_ptr)


def main(argv):
    if argv[1:] == ["--list"]:
        print("\n".join(CHECKS))
        return 0
    if argv[1:] == ["bench"]:
        bench()
        return 0
    if len(argv) != 2 or argv[1] not in CHECKS:
        print(f"usage: test_gpu.py --list | bench | one of {', '.join(CHECKS)}")
        return 2
    name = argv[1]
    try:
        CHECKS[name]()
    except Skip as e:
        print(f"SKIP {name}: {e}", flush=True)
        return SKIP
    except Exception:
        print(f"FAIL {name}\n{traceback.format_exc()}", flush=True)
        return 1
    print(f"PASS {name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""GPU checks for tests/gpu/run.sh (one H200; its python3 has torch, CuPy, JAX with CUDA and
numpy, but no pytest): every CUDA kind, DLPack and __cuda_array_interface__ hand-off to CuPy,
torch and JAX (zero copy by pointer, values both ways, a non-default stream), statistics and
limiting over cuda.async, host copies; then the Python side of the GPU benchmark.
Prints one PASS/FAIL line per check and returns the number of failures."""

import sys
import time
import traceback

import devmm
from devmm.mrs.cuda import (CudaAsyncMemoryResource, CudaMemoryResource, ManagedMemoryResource,
                            PinnedMemoryResource)

RESULTS = []


CHECKS = []


def check(fn):
    """Registers a check; main() runs them in order."""
    CHECKS.append(fn)
    return fn


def run(fn):
    try:
        fn()
        RESULTS.append(True)
        print(f"PASS {fn.__name__}", flush=True)
    except Exception:
        RESULTS.append(False)
        print(f"FAIL {fn.__name__}\n{traceback.format_exc()}", flush=True)


def imports():
    import cupy
    import jax
    import numpy
    import torch
    return cupy, jax, numpy, torch


cupy, jax, np, torch = imports()


@check
def every_cuda_kind_allocate_write_read_free():
    for r in (CudaMemoryResource(0), CudaAsyncMemoryResource(0), ManagedMemoryResource(0),
              ManagedMemoryResource(0, advise="read_mostly", prefetch=True),
              CudaAsyncMemoryResource(0, pool="own", max_pool_size="1GiB")):
        stats = devmm.StatisticsAdaptor(r)
        t = devmm.zeros((256, 1024), "float32", resource=stats)
        assert stats.current_bytes == 1 << 20, (r.name, stats.current_bytes)
        x = torch.from_dlpack(t)
        assert x.device.type == "cuda" and float(x.sum()) == 0.0, r.name
        x.fill_(2.0)
        torch.cuda.synchronize()
        back = t.copy("cpu")  # device -> host through the resource's copy op
        host = np.from_dlpack(back)
        assert host.shape == (256, 1024) and (host == 2.0).all(), r.name
        t.buffer.free()
        del x
        torch.cuda.synchronize()
        assert stats.current_bytes == 0, (r.name, stats.current_bytes)
    p = PinnedMemoryResource()
    t = devmm.empty(1000, "int32", resource=p)
    assert t.__dlpack_device__() == (3, 0)
    a = np.asarray(t)  # pinned memory is host memory
    a[...] = 7
    assert a.sum() == 7000


@check
def dlpack_zero_copy_torch_cupy_jax_both_ways():
    devmm.init()  # the usual lookup: run.sh points DEVMM_CONFIG at devmm-gpu.ini
    t = devmm.zeros((64, 64), "float32", device="cuda:0")
    x = torch.from_dlpack(t)
    c = cupy.from_dlpack(t)
    assert x.data_ptr() == t.data_ptr == c.data.ptr
    x.fill_(3.0)
    torch.cuda.synchronize()
    assert float(c.sum()) == 3.0 * 64 * 64  # torch -> cupy through the same memory
    c[...] = 5.0
    cupy.cuda.runtime.deviceSynchronize()
    assert float(x.sum()) == 5.0 * 64 * 64  # cupy -> torch
    j = jax.dlpack.from_dlpack(t)
    assert j.unsafe_buffer_pointer() == t.data_ptr and float(j.sum()) == 5.0 * 64 * 64
    # torch >= 2.9 takes versioned capsules
    cap = t.__dlpack__(max_version=(1, 1), stream=-1)
    assert "dltensor_versioned" in repr(cap)


@check
def cuda_array_interface_zero_copy():
    t = devmm.zeros((10, 3), "float64", device="cuda:0",
                    layout=devmm.Aligned(devmm.RowMajor(), 256))
    cai = t.__cuda_array_interface__
    assert cai["version"] == 3 and cai["strides"] == (256, 8)
    c = cupy.asarray(t)
    assert c.data.ptr == t.data_ptr and c.strides == (256, 8)
    c[...] = 1.0
    cupy.cuda.runtime.deviceSynchronize()
    assert float(torch.from_dlpack(t).sum()) == 30.0


@check
def stream_semantics_with_a_non_default_stream():
    producer = torch.cuda.Stream()
    r = CudaAsyncMemoryResource(0)
    n = 1 << 24
    t = devmm.empty(n, "float32", resource=r, stream=producer.cuda_stream)
    with torch.cuda.stream(producer):
        torch.cuda._sleep(20_000_000)  # keep the producer busy, then write
        torch.from_dlpack(t.__dlpack__(stream=-1)).fill_(4.0)
    consumer = torch.cuda.Stream()
    with torch.cuda.stream(consumer):
        # torch passes its current stream; devmm makes it wait for the allocation's stream
        x = torch.from_dlpack(t)
        total = float(x.sum())
    assert total == 4.0 * n, total
    with pyfail(ValueError, "stream 0 is ambiguous"):
        t.__dlpack__(stream=0)


class pyfail:
    def __init__(self, exc, text):
        self.exc, self.text = exc, text

    def __enter__(self):
        return self

    def __exit__(self, t, v, tb):
        assert t is not None and issubclass(t, self.exc) and self.text in str(v), (t, v)
        return True


@check
def statistics_and_limiting_over_cuda_async():
    base = CudaAsyncMemoryResource(0)
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
def host_copies_dl_device_and_copy_true():
    t = devmm.zeros((5, 7), "int32", device="cuda:0")
    torch.from_dlpack(t).fill_(9)
    torch.cuda.synchronize()
    a = np.from_dlpack(t, device="cpu")  # numpy asks for dl_device=(kDLCPU, 0): a host copy
    assert a.shape == (5, 7) and (a == 9).all()
    with pyfail(BufferError, "needs a copy"):
        t.__dlpack__(dl_device=(1, 0), copy=False)
    cap = t.__dlpack__(max_version=(1, 0), copy=True)
    assert cap is not None


@check
def devmm_ini_stack_on_cuda():
    devs = {d["device"]: d for d in devmm.devices()}
    assert devs["cuda:0"]["stack"] == "limiting(statistics(cuda.async))", devs["cuda:0"]
    r = devmm.get_current_device_resource("cuda:0")
    assert r.name == "limiting(statistics(cuda.async))"


@check
def cupy_routed_through_devmm():
    import devmm.interop.cupy
    from devmm.mrs.cupy import CupyPoolResource
    stats = devmm.StatisticsAdaptor(CudaAsyncMemoryResource(0))
    with devmm.interop.cupy.use_devmm(stats):
        a = cupy.arange(1000, dtype=cupy.float64)
        assert stats.current_bytes >= 8000 and float(a.sum()) == 499500.0
        del a
    cupy.get_default_memory_pool().free_all_blocks()
    assert stats.current_bytes == 0, stats.current_bytes
    pool = devmm.StatisticsAdaptor(CupyPoolResource())
    t = devmm.zeros(1 << 16, "uint8", resource=pool)  # devmm over CuPy's pool
    assert pool.current_bytes == 1 << 16 and float(cupy.from_dlpack(t).sum()) == 0.0
    t.buffer.free()


@check
def rmm_bridge_kinds():
    from devmm.mrs import create_resource
    for kind, opts in (("rmm.current", {}), ("rmm.pool", {"upstream": "async",
                                                          "initial_pool_size": "64MiB"}),
                       ("rmm.arena", {"upstream": "cuda"})):
        stats = devmm.StatisticsAdaptor(create_resource(kind, 0, **opts))
        t = devmm.zeros((1024, 256), "float32", resource=stats)
        x = torch.from_dlpack(t)
        x.fill_(1.0)
        assert float(x.sum()) == 1024 * 256, kind
        t.buffer.free()
        del x
        torch.cuda.synchronize()
        assert stats.current_bytes == 0, kind


@check
def rmm_current_shares_rapids_pool():
    import rmm  # installed from the carried wheels by run.sh
    from devmm.mrs import create_resource
    pool = rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource(), initial_pool_size=1 << 28)
    counted = rmm.mr.StatisticsResourceAdaptor(pool)
    rmm.mr.set_current_device_resource(counted)  # what RAPIDS uses from now on
    r = create_resource("rmm.current", 0)
    t = devmm.zeros(1 << 20, "uint8", resource=r)  # devmm allocates from RAPIDS' pool
    assert counted.allocation_counts.current_bytes >= 1 << 20, counted.allocation_counts
    t.buffer.free()
    torch.cuda.synchronize()
    assert counted.allocation_counts.current_bytes == 0, counted.allocation_counts


def torch_routing():
    """In a fresh process (before torch touches CUDA): torch's allocations go through devmm."""
    import devmm.interop.torch
    devmm.init()
    devmm.interop.torch.use_devmm()
    stack = devmm.get_current_device_resource("cuda:0")  # limiting(statistics(cuda.async))
    stats = devmm.StatisticsAdaptor.find(stack)
    before = stats.current_bytes
    x = torch.empty(1 << 22, dtype=torch.float32, device="cuda")
    assert stats.current_bytes - before >= 4 << 22, (before, stats.current_bytes)
    x.fill_(1.0)
    assert float(x.sum()) == float(1 << 22)
    del x
    torch.cuda.synchronize()
    print(f"PASS torch_routed_through_devmm (statistics saw {stats.total_bytes} bytes)")


def bench():
    """devmm.empty over cuda.async vs torch's caching allocator vs CuPy's pool, from Python."""
    devmm.init()
    r = CudaAsyncMemoryResource(0, release_threshold="8GiB")
    rows = []
    for n in (256, 65536, 1 << 20, 16 << 20, 64 << 20):
        def best(fn, iters=2000):
            out = []
            for _ in range(5):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(iters):
                    fn()
                torch.cuda.synchronize()
                out.append((time.perf_counter() - t0) / iters * 1e9)
            return min(out)
        d = best(lambda: devmm.empty(n, "uint8", resource=r).buffer.free())
        t = best(lambda: torch.empty(n, dtype=torch.uint8, device="cuda"))
        c = best(lambda: cupy.empty(n, dtype=cupy.uint8))
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


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "bench":
        bench()
        sys.exit(0)
    if len(sys.argv) > 1 and sys.argv[1] == "torch-routing":
        torch_routing()
        sys.exit(0)
    for fn in CHECKS:
        run(fn)
    failed = RESULTS.count(False)
    print(f"python GPU checks: {RESULTS.count(True)} passed, {failed} failed")
    sys.exit(1 if failed else 0)

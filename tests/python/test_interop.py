"""The framework bridges, as far as a machine without a GPU allows: PyTorch's pluggable
allocator symbols in libdevmm over a CPU resource, and the clear import errors of the bridges
whose framework is missing. The GPU halves run in tests/gpu/run.sh."""

import ctypes
import importlib
import sys
import types

import pytest

import devmm
from devmm import _lib
from devmm.mrs.cpu import MallocMemoryResource

ALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)


def _torch_shim() -> ctypes.CDLL:
    """libdevmm-torch, next to libdevmm (torch's CUDAPluggableAllocator loads it by path)."""
    import os
    here = os.path.dirname(_lib.LIBRARY_PATH)
    return ctypes.CDLL(next(os.path.join(here, n) for n in ("libdevmm-torch.so.0",
                                                             "libdevmm-torch.so")
                            if os.path.exists(os.path.join(here, n))))


def _stand_in(resource, device):
    """Makes resource (a CPU one: no GPU here) device's current resource in C's registry, which
    is keyed by device only; devmm.set_current_device_resource refuses another device's
    resource (tests/python/test_rmm_devices.py). None: none again."""
    _lib.check(_lib.set_current_resource(devmm.resource.parse_device(device),
                                         resource.handle if resource else None, None))


def test_torch_pluggable_allocator_symbols_over_a_cpu_resource():
    # the exact C signatures torch's CUDAPluggableAllocator calls, found by name as torch does;
    # only successful calls here: a failure throws a C++ exception (tests/c/test-torch-alloc.cpp)
    lib = _torch_shim()
    alloc = ALLOC(("devmm_torch_alloc", lib))
    free = FREE(("devmm_torch_free", lib))
    stats = devmm.StatisticsAdaptor(MallocMemoryResource())
    # stand in a CPU resource for device 7 (no GPU here): the registry is keyed by device only
    _stand_in(stats, "cuda:7")
    try:
        p = alloc(1 << 20, 7, None)
        assert p and stats.current_bytes == 1 << 20
        ctypes.memset(p, 1, 1 << 20)
        # the resource is pinned at first use: swapping the registry does not misroute frees
        other = devmm.StatisticsAdaptor(MallocMemoryResource())
        _stand_in(other, "cuda:7")
        q = alloc(100, 7, None)
        assert stats.current_bytes == (1 << 20) + 100 and other.total_count == 0
        free(p, 1 << 20, 7, None)
        free(q, 100, 7, None)
        assert stats.current_bytes == 0
    finally:
        _stand_in(None, "cuda:7")


def test_torch_allocation_failures_are_statuses_never_null():
    # torch uses the pointer unchecked: a failure must never look like success with NULL
    out = ctypes.c_void_p(1)
    assert _lib.torch_allocate(16, 99, None, ctypes.byref(out)) == -1 and out.value is None
    assert "device 99 out of range" in _lib.last_error().decode()
    assert _lib.torch_allocate(16, 5, None, ctypes.byref(out)) == -5 and out.value is None
    assert "no current resource for device cuda:5" in _lib.last_error().decode()
    limited = devmm.LimitingAdaptor(MallocMemoryResource(), 1000)
    _stand_in(limited, "cuda:6")
    try:
        assert _lib.torch_allocate(4096, 6, None, ctypes.byref(out)) == -2  # DEVMM_ENOMEM
        assert out.value is None
        assert ("torch allocation of 4096 bytes on cuda:6: out of memory"
                in _lib.last_error().decode())
    finally:
        _stand_in(None, "cuda:6")


BRIDGES = [("devmm.interop.cupy", "cupy", "cupy-cuda13x", "use_devmm"),
           ("devmm.mrs.cupy", "cupy", "cupy-cuda13x", "CupyPoolResource"),
           ("devmm.interop.rmm", "rmm", "rmm-cu13", "as_rmm_resource"),
           ("devmm.mrs.rmm", "rmm", "rmm-cu13", "from_rmm_resource"),
           ("devmm.interop.torch", "torch", "torch", "use_devmm")]


@pytest.mark.parametrize("module,needs,package,api", BRIDGES)
def test_bridges_say_what_is_missing(module, needs, package, api, monkeypatch):
    # the framework made unimportable (None in sys.modules), whether it is installed or not
    monkeypatch.setitem(sys.modules, needs, None)
    prev = sys.modules.pop(module, None)
    try:
        with pytest.raises(ImportError, match=rf"^{module} needs {needs} \({package}\), which "
                                              rf"cannot be imported: "):
            importlib.import_module(module)
        assert module not in sys.modules  # nothing half-imported is left behind
    finally:  # whatever happened, the next test imports the bridge afresh or as it was
        sys.modules.pop(module, None)
        if prev is not None:
            sys.modules[module] = prev


@pytest.mark.parametrize("module,needs,package,api", BRIDGES)
def test_bridges_import_with_their_framework(module, needs, package, api, monkeypatch):
    pytest.importorskip(needs, reason=f"{needs} ({package}) is not installed in this Python")
    monkeypatch.delitem(sys.modules, module, raising=False)
    assert callable(getattr(importlib.import_module(module), api))


def test_rmm_both_ways_over_cpu_memory():
    # RMM's Python package imports and runs its callback resource without a GPU: enough to
    # prove both directions of the bridge with host memory
    rmm = pytest.importorskip("rmm", reason="rmm-cu13 comes with the PyPI test venv")
    import ctypes as C

    from devmm.interop.rmm import as_rmm_resource, from_rmm_resource
    stats = devmm.StatisticsAdaptor(MallocMemoryResource())
    mr = as_rmm_resource(stats)  # devmm under RMM
    p = mr.allocate(4096)
    assert stats.current_bytes == 4096
    C.memset(p, 0, 4096)
    mr.deallocate(p, 4096)
    assert stats.current_bytes == 0
    keep = {}

    def alloc(n, stream):  # 256-byte aligned, as RMM's resources are
        b = C.create_string_buffer(n + 256)
        p = -(-C.addressof(b) // 256) * 256
        keep[p] = b
        return p

    host = rmm.mr.CallbackMemoryResource(alloc, lambda ptr, n, stream: keep.pop(ptr))
    back = devmm.StatisticsAdaptor(from_rmm_resource(host, device="cpu"))  # RMM under devmm
    t = devmm.zeros(100, "int32", resource=back)
    assert len(keep) == 1 and back.current_bytes == 400
    t.buffer.free()
    assert not keep and back.current_bytes == 0


def test_torch_record_stream_hook_is_installed_where_torch_allows_it(monkeypatch):
    # ADR 38: use_devmm() sets CUDAPluggableAllocator's record_stream_fn to libdevmm's
    # devmm_torch_record_stream where torch lets Python set it; else every torch free waits
    # for the whole device. A stand-in torch: the bridge needs only its import here.
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    monkeypatch.delitem(sys.modules, "devmm.interop.torch", raising=False)
    bridge = importlib.import_module("devmm.interop.torch")
    got = []

    class Native:
        def set_record_stream_fn(self, fn):
            got.append(fn)

    class Hookable:
        def allocator(self):
            return Native()

    class Plain:
        def allocator(self):
            return object()  # torch 2.x's _cuda_CUDAAllocator: no such method

    try:
        assert bridge.install_record_stream(Hookable()) is True
        assert bridge.record_stream_hooked()
        assert got == [ctypes.cast(_lib.torch_record_stream, ctypes.c_void_p).value]
        assert bridge.install_record_stream(Plain()) is False
        assert not bridge.record_stream_hooked()
        assert bridge.install_record_stream(Plain(), device_wide=False) is False
    finally:
        _lib.torch_free_waits_for_device(0)
        sys.modules.pop("devmm.interop.torch", None)

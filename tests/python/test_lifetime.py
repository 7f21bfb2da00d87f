"""Who frees what, and when: consumers outliving tensors, capsules consumed or not, deleters
on other threads, interpreter exit with live exports, free() twice."""

import ctypes
import gc
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import devmm
from conftest import Counting
from devmm import _lib
from devmm.mrs.cpu import MallocMemoryResource

_pyapi = ctypes.pythonapi
_pyapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
_pyapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_pyapi.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_USED = ctypes.c_char_p(b"used_dltensor_versioned")  # static for the capsule's lifetime


# numpy keeps the object that had __array_interface__ (the Tensor) as the array's base and never
# says when it is done with the memory, so the tensor itself holds the memory once it has handed
# the interface out, exactly as an unreleased DLPack export does.
@pytest.mark.parametrize("export", [np.from_dlpack, np.asarray], ids=["dlpack", "asarray"])
def test_consumer_outlives_tensor_and_free(counting, export):
    c, r = counting
    stats = devmm.StatisticsAdaptor(r)
    t = devmm.empty((1000,), "float32", resource=stats)
    a = export(t)
    if export is np.asarray:
        assert a.base is t  # numpy keeps the tensor, nothing else
    t.buffer.free()
    del t
    gc.collect()
    assert stats.current_bytes == 4000 and c.frees == 0  # numpy still holds it
    a[...] = 2.0  # and may still use it
    assert a.sum() == 2000
    del a
    gc.collect()
    assert stats.current_bytes == 0 and c.frees == 1


def test_unconsumed_capsule_freed_exactly_once(counting):
    c, r = counting
    t = devmm.empty(10, "int8", resource=r)
    caps = [t.__dlpack__(max_version=(1, 0)), t.__dlpack__()]
    t.buffer.free()
    assert c.frees == 0
    del caps
    gc.collect()
    assert c.frees == 1 and c.allocs == 1  # the Counting resource raises on a double free


def test_consumed_capsule_not_freed_by_capsule(counting):
    c, r = counting
    t = devmm.empty(10, "int8", resource=r)
    held = [t.__dlpack__(max_version=(1, 0))]

    class Holder:  # np.from_dlpack wants an object with __dlpack__
        def __dlpack__(self, **kw):
            return held[0]

        def __dlpack_device__(self):
            return (1, 0)

    a = np.from_dlpack(Holder())
    assert "used_dltensor_versioned" in repr(held[0])
    t.buffer.free()
    del held[0], t
    gc.collect()
    assert c.frees == 0  # the used capsule did not free it; numpy owns it now
    del a
    gc.collect()
    assert c.frees == 1


class _Managed(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64)]


def test_deleter_on_another_thread_without_the_gil(counting):
    c, r = counting
    stats = devmm.StatisticsAdaptor(devmm.get_current_device_resource())
    t = devmm.empty(1 << 16, "uint8", resource=stats)
    cap = t.__dlpack__(max_version=(1, 0))
    # consume it by hand, as a C consumer would: take the pointer, rename the capsule
    ptr = _pyapi.PyCapsule_GetPointer(cap, b"dltensor_versioned")
    _pyapi.PyCapsule_SetName(cap, _USED)
    m = _Managed.from_address(ptr)
    assert (m.major, m.minor) == (1, 1)
    deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(m.deleter)
    t.buffer.free()
    del t, cap
    assert stats.current_bytes == 1 << 16
    # a CFUNCTYPE call through ctypes releases the GIL: the deleter runs in C without it
    th = threading.Thread(target=deleter, args=(ptr,))
    th.start()
    th.join()
    assert stats.current_bytes == 0


def test_interpreter_exit_with_live_exports():
    code = textwrap.dedent("""
        import ctypes, numpy as np, devmm
        keep = {}
        def alloc(n, a, s):
            b = ctypes.create_string_buffer(n); keep[ctypes.addressof(b)] = b
            return ctypes.addressof(b)
        r = devmm.CallbackMemoryResource(alloc, lambda p, n, a, s: keep.pop(p))
        t = devmm.empty((100,), "float64", resource=r)
        a = np.from_dlpack(t)                 # a consumer alive at exit
        cap = t.__dlpack__(max_version=(1, 0))  # an unconsumed capsule alive at exit
        u = devmm.empty(10)
        b = np.from_dlpack(u); u.buffer.free()
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok" and "Traceback" not in out.stderr


def test_free_twice_and_tensor_gone():
    s = devmm.StatisticsAdaptor(devmm.get_current_device_resource())
    t = devmm.empty(8, resource=s)
    b = t.buffer
    b.free()
    b.free()
    t.buffer.free()
    del t
    gc.collect()
    assert s.current_bytes == 0 and s.total_count == 1


# ----------------------------------------------------------------------------- array interfaces

@pytest.fixture
def cuda_double():
    """Host memory labelled cuda:0: a test double for a CUDA resource (this machine has no GPU).
    Only the Python side of __cuda_array_interface__ is under test; the memory is real."""
    c = Counting()
    return c, devmm.CallbackMemoryResource(c.allocate, c.deallocate, device="cuda:0",
                                           name="host-memory-posing-as-cuda")


def test_array_interface_hold_ends_with_the_tensor(counting):
    c, r = counting
    t = devmm.empty((10,), "int64", resource=r)
    u = devmm.empty((10,), "int64", resource=r)
    u.buffer.free()
    assert c.frees == 1  # never exported: free() gives the memory back at once
    assert np.asarray(t).shape == (10,)  # exported once; the array is gone at once
    t.buffer.free()
    assert c.frees == 1  # the tensor that handed out the interface holds it ...
    del t
    gc.collect()
    assert c.frees == 2  # ... until it goes


def test_array_interface_after_free_is_refused():
    t = devmm.empty(4)
    t.buffer.free()
    with pytest.raises(BufferError, match="was freed"):
        np.asarray(t)


@pytest.mark.parametrize("export", ["asarray", "dlpack"])
def test_read_after_free_over_mmap(export):
    # munmap'd memory faults on any read: the old __array_interface__ crashed here
    script = os.path.join(os.path.dirname(__file__), "read_after_free.py")
    out = subprocess.run([sys.executable, script, export], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, f"exit status {out.returncode}: {out.stderr[-3000:]}"
    assert out.stdout.strip() == str(7 << 20)


def test_read_after_free_through_instrumented_code():
    # The plugin's memmove reads numpy's view after free(): under `make python-asan` the
    # plugin is instrumented, so a use-after-free is a report, not silent garbage.
    r = MallocMemoryResource()
    t = devmm.empty((256,), "int32", resource=r)
    a = np.asarray(t)
    a[...] = np.arange(256, dtype=np.int32)
    t.buffer.free()
    del t
    out = devmm.Buffer(1024, resource=r)
    _lib.check(_lib.copy(r.handle, out.ptr, a.ctypes.data, 1024, None))
    got = np.frombuffer((ctypes.c_char * 1024).from_address(out.ptr), dtype=np.int32)
    assert (got == np.arange(256)).all()


def test_cuda_array_interface_holds_memory(cuda_double):
    c, r = cuda_double
    t = devmm.empty((100,), "float32", resource=r)
    iface = t.__cuda_array_interface__  # CuPy and Numba keep the object that had it
    assert iface["data"] == (t.data_ptr, False) and iface["shape"] == (100,)
    t.buffer.free()
    assert c.frees == 0  # the exporter still holds the memory for its consumer
    del t
    gc.collect()
    assert c.frees == 1

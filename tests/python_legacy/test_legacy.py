"""Legacy DLPack consumers under Debian's python3: numpy 1.24 and torch 1.13 call
__dlpack__() with no max_version and take the legacy "dltensor" capsule; numpy 1.24 makes
the array read-only, torch does not. Zero copy is proven by pointer identity and by values
written on one side seen on the other."""

import ctypes
import gc
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import devmm


def raw(t, ctype, n):
    return (ctype * n).from_address(t.data_ptr)


def test_versions_are_the_legacy_matrix():
    assert np.__version__.startswith("1.24") and torch.__version__.startswith("1.13")


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "float16",
                                   "float32", "float64", "complex64", "complex128"])
def test_numpy_124_legacy_zero_copy(dtype):
    t = devmm.zeros((3, 4), dtype)
    a = np.from_dlpack(t)
    assert a.dtype == np.dtype(dtype) and a.ctypes.data == t.data_ptr
    assert not a.flags.writeable  # numpy < 2.1 always imports read-only
    ctypes.memset(t.data_ptr, 0, t.nbytes)
    raw(t, ctypes.c_uint8, 1)[0] = 1  # devmm side writes ...
    assert a.view(np.uint8).reshape(-1)[0] == 1  # ... numpy sees it


def test_numpy_124_padded_and_array_interface():
    p = devmm.empty((4, 3), "float32",
                    layout=devmm.Aligned(devmm.RowMajor(), unit_stride_alignment=128))
    assert np.from_dlpack(p).strides == (128, 4)
    w = np.asarray(p)  # __array_interface__ gives a writable view
    assert w.ctypes.data == p.data_ptr and w.flags.writeable
    w[...] = 3
    assert np.from_dlpack(p).sum() == 36


# torch 1.13 predates DLPack's bool (kDLBool, 0.8): bool is tested apart, below
TORCH_DTYPES = {"uint8": torch.uint8, "int8": torch.int8,
                "int16": torch.int16, "int32": torch.int32, "int64": torch.int64,
                "float16": torch.float16, "bfloat16": torch.bfloat16,
                "float32": torch.float32, "float64": torch.float64,
                "complex64": torch.complex64, "complex128": torch.complex128}


@pytest.mark.parametrize("dtype", sorted(TORCH_DTYPES))
def test_torch_113_zero_copy_both_ways(dtype):
    t = devmm.zeros((5, 6), dtype)
    x = torch.from_dlpack(t)
    assert x.dtype == TORCH_DTYPES[dtype] and x.data_ptr() == t.data_ptr
    x.view(torch.uint8)[0, 0] = 7  # torch writes ...
    assert raw(t, ctypes.c_uint8, 1)[0] == 7  # ... devmm memory has it
    raw(t, ctypes.c_uint8, 1)[0] = 9  # devmm side writes ...
    assert int(x.view(torch.uint8)[0, 0]) == 9  # ... torch sees it


def test_torch_strides_of_padded_and_column_major():
    p = devmm.empty((4, 3), "float32", layout=devmm.Aligned(devmm.RowMajor(), 128))
    assert torch.from_dlpack(p).stride() == (32, 1)
    c = devmm.empty((4, 3), "float32", layout=devmm.ColumnMajor())
    assert torch.from_dlpack(c).stride() == (1, 4)


def test_torch_outlives_buffer_free():
    stats = devmm.StatisticsAdaptor(devmm.get_current_device_resource())
    t = devmm.empty(1000, "float32", resource=stats)
    x = torch.from_dlpack(t)
    t.buffer.free()
    del t
    gc.collect()
    assert stats.current_bytes == 4000
    x.fill_(1.0)
    assert float(x.sum()) == 1000.0
    del x
    gc.collect()
    assert stats.current_bytes == 0


def test_unconsumed_legacy_capsule_freed_once():
    stats = devmm.StatisticsAdaptor(devmm.get_current_device_resource())
    t = devmm.empty(64, "int8", resource=stats)
    cap = t.__dlpack__()
    assert '"dltensor"' in repr(cap)
    t.buffer.free()
    assert stats.current_bytes == 64
    del cap
    gc.collect()
    assert stats.current_bytes == 0 and stats.total_count == 1


def test_torch_113_refuses_bool_and_nothing_leaks():
    stats = devmm.StatisticsAdaptor(devmm.get_current_device_resource())
    t = devmm.empty(8, "bool", resource=stats)
    with pytest.raises(RuntimeError, match="Unsupported code 6"):
        torch.from_dlpack(t)
    t.buffer.free()
    gc.collect()
    assert stats.current_bytes == 0  # the refused capsule was freed by its destructor


# ----------------------------------------------------------------------------- zero copy by default

SHAPES = [(), (1,), (3,), (5, 7), (2, 3, 4), (1000,), (17, 33)]
NUMPY_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "float16", "float32", "float64", "complex64", "complex128"]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_default_tensor_is_zero_copy_into_numpy_124(dtype, shape):
    t = devmm.empty(shape, dtype)
    assert t.data_ptr % 64 == 0  # the default base alignment on the CPU (ADR 13)
    arrays = [np.asarray(t)]
    if dtype != "bool":  # numpy 1.24 predates DLPack's bool (it says "Unsupported dtype")
        arrays.append(np.from_dlpack(t))
    for a in arrays:
        assert a.ctypes.data == t.data_ptr and a.shape == shape and a.dtype == np.dtype(dtype)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", sorted(TORCH_DTYPES))
def test_default_tensor_is_zero_copy_into_torch_113(dtype, shape):
    t = devmm.empty(shape, dtype)
    x = torch.from_dlpack(t)  # the legacy capsule
    assert x.data_ptr() == t.data_ptr and tuple(x.shape) == shape
    assert x.dtype == TORCH_DTYPES[dtype]


# ----------------------------------------------------------------------------- array interface

def test_array_interface_holds_memory_after_free():
    stats = devmm.StatisticsAdaptor(devmm.get_current_device_resource())
    t = devmm.empty((1000,), "float32", resource=stats)
    a = np.asarray(t)
    assert type(a.base).__name__ == "ArrayExport"  # numpy 1.24 keeps the export's data object
    t.buffer.free()
    del t
    gc.collect()
    assert stats.current_bytes == 4000  # numpy 1.24 still holds it through the export
    a[...] = 2.0
    assert a.sum() == 2000
    del a
    gc.collect()
    assert stats.current_bytes == 0


def test_array_interface_read_after_free_over_mmap():
    # the versioned suite's script, run by numpy 1.24 (the crash was on both versions)
    script = os.path.join(os.path.dirname(__file__), "..", "python", "read_after_free.py")
    out = subprocess.run([sys.executable, script, "asarray"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, f"exit status {out.returncode}: {out.stderr[-3000:]}"
    assert out.stdout.strip() == str(7 << 20)


def test_readonly_tensor_in_numpy_124():
    b = devmm.Buffer(16)
    v = devmm.from_buffer_view(b, (4,), "float32", readonly=True)
    a = np.asarray(v)  # the interface carries the flag
    assert a.ctypes.data == v.data_ptr and not a.flags.writeable
    with pytest.raises(BufferError, match="read-only.*legacy"):
        np.from_dlpack(v)  # numpy 1.24 asks for a legacy capsule, which cannot say read-only


def test_readonly_tensor_is_refused_to_torch_113():
    stats = devmm.StatisticsAdaptor(devmm.get_current_device_resource())
    b = devmm.Buffer(16, resource=stats)
    v = devmm.from_buffer_view(b, (4,), "float32", readonly=True)
    with pytest.raises(BufferError, match="read-only.*legacy"):
        torch.from_dlpack(v)  # torch 1.13 would write into it
    b.free()
    assert stats.current_bytes == 0


@pytest.mark.parametrize("shape", [(0,), (0, 3), (3, 0, 2)])
def test_size_zero_through_the_array_interface(shape):
    t = devmm.empty(shape, "float32")
    a = np.asarray(t)  # numpy 1.24 took data = (0, False) for a scalar
    assert a.shape == shape and a.size == 0


# A look at the interface held the memory until the tensor died
def test_array_interface_holds_only_while_arrays_live_in_numpy_124():
    stats = devmm.StatisticsAdaptor(devmm.get_current_device_resource())
    t = devmm.empty((1 << 16,), "uint8", resource=stats)
    assert hasattr(t, "__array_interface__")
    np.asarray(t).sum()
    v = np.asarray(t)[::2]
    t.buffer.free()
    assert stats.current_bytes == 1 << 16  # the view holds it ...
    del v
    gc.collect()
    assert stats.current_bytes == 0  # ... and nothing else did
    assert not hasattr(t, "__array_interface__")  # absent, not an exception
    with pytest.raises(BufferError, match="was freed"):
        np.asarray(t)


def test_readonly_view_stays_readonly_in_numpy_124():
    v = devmm.from_buffer_view(devmm.Buffer(16), (4,), "float32", readonly=True)
    a = np.asarray(v)
    with pytest.raises(ValueError):
        a.flags.writeable = True  # the export's buffer says read-only: numpy 1.24 keeps it so


# A Python-defined resource's free while an exception propagates
def test_exception_pending_while_a_python_resource_frees():
    keep, alloc = host_allocator()
    r = devmm.CallbackMemoryResource(alloc, lambda p, n, a, s: keep.pop(p), name="py")
    for make in (lambda: devmm.empty(4, resource=r), lambda: np.asarray(devmm.empty(4, resource=r)),
                 lambda: torch.from_dlpack(devmm.empty(4, resource=r))):
        with pytest.raises(IndexError, match="list index out of range"):
            [make() for _ in range(1)][5]  # SystemError: error return without exception set
        gc.collect()
        assert keep == {}  # the free reached the resource


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn"])
def test_no_typestr_is_a_clear_error(dtype):
    t = devmm.empty(2, dtype)
    for make in (np.asarray, lambda x: np.array([x])):
        with pytest.raises(TypeError, match=f"dtype {dtype} has no NumPy array-interface type"):
            make(t)


def host_allocator():
    """(live buffers by address, allocate(n, alignment, stream)): host memory from ctypes with
    the alignment asked for (at least 64 bytes), for CallbackMemoryResource."""
    keep = {}

    def alloc(n, a, s):
        a = max(a, 64)
        buf = ctypes.create_string_buffer(n + a)
        p = (ctypes.addressof(buf) + a - 1) // a * a
        keep[p] = buf
        return p

    return keep, alloc


def test_managed_memory_is_a_clear_error():
    keep, alloc = host_allocator()
    # host memory labelled cuda_managed:0: a test double for managed memory (no GPU here)
    r = devmm.CallbackMemoryResource(alloc, lambda p, n, a, s: keep.pop(p),
                                     device="cuda_managed:0", name="host-memory-posing-as-managed")
    t = devmm.empty(4, "float32", resource=r)
    with pytest.raises(TypeError, match="cuda_managed:0 memory is not host memory"):
        np.asarray(t)


def test_stream_on_the_cpu_raises_runtime_error():
    with pytest.raises(RuntimeError, match="stream must be None for cpu"):
        devmm.empty(3).__dlpack__(stream=1)


def test_use_devmm_on_torch_113_says_which_torch_it_needs():
    # torch 1.13 has no CUDAPluggableAllocator: a raw ImportError before
    from devmm.interop import torch as dt
    with pytest.raises(ImportError, match=r"devmm\.interop\.torch\.use_devmm\(\) needs torch >= "
                                          r"2\.0 \(CUDAPluggableAllocator\); this is torch 1\.13"):
        dt.use_devmm()

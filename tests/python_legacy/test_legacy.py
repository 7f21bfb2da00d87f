"""Legacy DLPack consumers under Debian's python3: numpy 1.24 and torch 1.13 call
__dlpack__() with no max_version and take the legacy "dltensor" capsule; numpy 1.24 makes
the array read-only, torch does not. Zero copy is proven by pointer identity and by values
written on one side seen on the other."""

import ctypes
import gc

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

"""DLPack and the array interfaces with versioned consumers: NumPy >= 2.3 and JAX (CPU).
Zero copy is proven by pointer identity, and by values written on one side seen on the other."""

import ctypes

import numpy as np
import pytest

import devmm

NUMPY_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                "uint64", "float16", "float32", "float64", "complex64", "complex128"]


def raw_view(t, dtype):
    """The devmm side of the memory, without DLPack: the bytes at t.data_ptr."""
    n = t.buffer.nbytes - (t.data_ptr - t.buffer.ptr)
    return np.frombuffer((ctypes.c_char * n).from_address(t.data_ptr), dtype=dtype)


def test_numpy_version_is_a_versioned_consumer():
    assert tuple(int(x) for x in np.__version__.split(".")[:2]) >= (2, 3)


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_numpy_zero_copy_both_ways(dtype):
    t = devmm.empty((4, 5), dtype)
    a = np.from_dlpack(t)
    assert a.ctypes.data == t.data_ptr and a.flags.writeable
    a[...] = 1
    assert (raw_view(t, dtype)[:20] == 1).all()   # numpy -> devmm memory
    raw_view(t, dtype)[:20] = 0
    assert not a.any()                             # devmm memory -> numpy


def test_capsule_kinds():
    t = devmm.empty(3)
    assert 'dltensor_versioned' in repr(t.__dlpack__(max_version=(1, 2)))
    assert '"dltensor"' in repr(t.__dlpack__())
    assert '"dltensor"' in repr(t.__dlpack__(max_version=(0, 8)))
    assert t.__dlpack_device__() == (1, 0)


def test_padded_layout_reaches_numpy_with_its_strides():
    p = devmm.empty((4, 3), "float32",
                    layout=devmm.Aligned(devmm.RowMajor(), unit_stride_alignment=128,
                                         base_alignment=256))
    a = np.from_dlpack(p)
    assert a.strides == (128, 4) and a.ctypes.data == p.data_ptr
    a[...] = np.arange(12, dtype=np.float32).reshape(4, 3)
    raw = raw_view(p, "float32")
    assert list(raw[32:35]) == [3, 4, 5]  # row 1 starts 128 bytes in


def test_column_major_and_strided():
    c = devmm.empty((3, 4), "int32", layout=devmm.ColumnMajor())
    a = np.from_dlpack(c)
    assert a.flags.f_contiguous
    s = devmm.empty((2, 3), "int32", layout=devmm.Strided((10, 3)))
    assert np.from_dlpack(s).strides == (40, 12)


def test_copy_true_sets_is_copied_and_compacts():
    p = devmm.zeros((4, 3), "float32", layout=devmm.Aligned(devmm.RowMajor(), 128))
    np.from_dlpack(p)[...] = 5
    a = np.from_dlpack(p, copy=True)
    assert a.ctypes.data != p.data_ptr and a.strides == (12, 4) and (a == 5).all()
    stats = devmm.StatisticsAdaptor(devmm.get_current_device_resource())
    with devmm.using_memory_resource(stats):
        cap = p.__dlpack__(max_version=(1, 0), copy=True)
        assert stats.current_bytes == 48  # the copy came from the current resource
    del cap
    assert stats.current_bytes == 0


def test_dl_device_and_stream_rules():
    t = devmm.empty(3)
    assert np.from_dlpack(t, device="cpu").ctypes.data == t.data_ptr
    t.__dlpack__(dl_device=(1, 0), copy=False)  # same device: no copy needed
    with pytest.raises(BufferError, match="needs a copy from"):
        t.__dlpack__(dl_device=(2, 0), copy=False)
    with pytest.raises(BufferError, match="cannot copy cpu memory to device"):
        t.__dlpack__(dl_device=(2, 0))
    with pytest.raises(ValueError, match="stream must be None for cpu"):
        t.__dlpack__(stream=1)


def test_readonly_view_is_readonly_in_numpy():
    b = devmm.Buffer(16)
    v = devmm.from_buffer_view(b, (4,), "float32", readonly=True)
    a = np.from_dlpack(v)
    assert not a.flags.writeable


def test_array_interface_zero_copy():
    t = devmm.empty((2, 3), "int16", layout=devmm.ColumnMajor())
    a = np.asarray(t)
    assert a.ctypes.data == t.data_ptr and a.strides == (2, 4)
    a[...] = 7
    assert (np.from_dlpack(t) == 7).all()
    with pytest.raises(AttributeError, match="bfloat16 has no array-interface typestr"):
        devmm.empty(2, "bfloat16").__array_interface__


def test_bfloat16_is_refused_by_numpy():
    # numpy has no bfloat16: it refuses the capsule itself (and the capsule is freed)
    with pytest.raises(RuntimeError, match="Unsupported dtype"):
        np.from_dlpack(devmm.empty(2, "bfloat16"))


def test_size_zero_tensor_has_null_data():
    t = devmm.empty((0, 3), "float32")
    a = np.from_dlpack(t)
    assert a.shape == (0, 3) and t.data_ptr == 0


# ----------------------------------------------------------------------------- JAX (legacy)

jax = pytest.importorskip("jax", reason="JAX comes with the PyPI venv")  # always there in CI


# JAX without jax_enable_x64 turns 64-bit types into 32-bit ones: those are left out
@pytest.mark.parametrize("dtype", ["bool", "int8", "int16", "int32", "uint8", "uint16", "uint32",
                                   "float16", "bfloat16", "float32", "complex64"])
def test_jax_zero_copy(dtype):
    import jax.numpy as jnp
    t = devmm.zeros((16, 16), dtype)  # compact, and 64-byte aligned from malloc's big chunks
    x = jax.dlpack.from_dlpack(t)
    assert x.dtype == jnp.dtype(dtype) and x.shape == (16, 16)
    if t.data_ptr % 64 == 0:  # XLA imports buffers aligned to 64 bytes without a copy
        assert x.unsafe_buffer_pointer() == t.data_ptr


def test_jax_values_both_ways():
    t = devmm.empty((64,), "float32", layout=devmm.Aligned(devmm.RowMajor(), 64, 64))
    np.from_dlpack(t)[...] = np.arange(64)
    x = jax.dlpack.from_dlpack(t)
    assert x.unsafe_buffer_pointer() == t.data_ptr
    assert float(x.sum()) == sum(range(64))
    y = jax.numpy.arange(8.0, dtype="float32") * 2
    back = np.from_dlpack(y)  # and JAX -> the NumPy side, for symmetry of the check
    assert back[3] == 6.0


def test_jax_refuses_padded_strides_and_copy_fixes_it():
    p = devmm.zeros((4, 3), "float32", layout=devmm.Aligned(devmm.RowMajor(), 128))
    with pytest.raises(Exception, match="compact"):
        jax.dlpack.from_dlpack(p)
    x = jax.dlpack.from_dlpack(p.copy())
    assert x.shape == (4, 3) and float(x.sum()) == 0.0

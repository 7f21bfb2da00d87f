"""DLPack and the array interfaces with versioned consumers: NumPy >= 2.3 and JAX (CPU).
Zero copy is proven by pointer identity, and by values written on one side seen on the other."""

import ctypes
import re

import numpy as np
import pytest

import devmm
from conftest import Counting

NUMPY_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                "uint64", "float16", "float32", "float64", "complex64", "complex128"]
# default tensors of many shapes: 0-d, tiny, odd sizes, several dimensions
SHAPES = [(), (1,), (3,), (5, 7), (2, 3, 4), (1000,), (17, 33), (1, 1, 1, 1)]
IS_COPIED, READ_ONLY = 2, 1  # DLPack's flag bits, as the consumer reads them


def raw_view(t, dtype):
    """The devmm side of the memory, without DLPack: the bytes at t.data_ptr."""
    n = t.buffer.nbytes - (t.data_ptr - t.buffer.ptr)
    return np.frombuffer((ctypes.c_char * n).from_address(t.data_ptr), dtype=dtype)


class _Versioned(ctypes.Structure):  # the head of DLManagedTensorVersioned
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("data", ctypes.c_void_p)]


def versioned_head(cap):
    """What a consumer reads from a versioned capsule (the capsule is not consumed)."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return _Versioned.from_address(get(cap, b"dltensor_versioned"))


def host_memory_labelled(device):
    """Host memory labelled as device: a test double for GPU memory (this machine has none).
    Only devmm's Python protocol code is under test; the memory itself is real."""
    c = Counting()
    return devmm.CallbackMemoryResource(c.allocate, c.deallocate, device=device,
                                        name=f"host-memory-posing-as-{device}",
                                        host_accessible=True)  # the CPU copies it


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


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_default_tensor_is_zero_copy_into_numpy(dtype, shape):
    t = devmm.empty(shape, dtype)
    assert t.data_ptr % 64 == 0  # the default base alignment on the CPU (ADR 13)
    for a in (np.from_dlpack(t), np.asarray(t)):
        assert a.ctypes.data == t.data_ptr and a.shape == shape and a.dtype == np.dtype(dtype)


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
    cap = p.__dlpack__(max_version=(1, 0), copy=True)
    assert versioned_head(cap).flags == IS_COPIED


# The copy came from the device's current resource, not the tensor's
def test_copy_true_comes_from_the_tensors_own_resource():
    own = devmm.StatisticsAdaptor(devmm.get_current_device_resource())
    current = devmm.StatisticsAdaptor(devmm.get_current_device_resource())
    p = devmm.zeros((4, 3), "float32", resource=own)
    with devmm.using_memory_resource(current):
        cap = p.__dlpack__(max_version=(1, 0), copy=True)
        c = p.copy()
        assert own.current_count == 3 and current.current_count == 0
    del cap, c
    assert own.current_count == 1


def test_copy_must_be_a_bool_or_none():
    t = devmm.empty(3)
    for bad in ("no", 0, 1, "False"):
        with pytest.raises(TypeError, match="copy must be True, False or None"):
            t.__dlpack__(copy=bad)


# numpy's test_device expects ValueError for a device it cannot
# serve, the Array API BufferError: DeviceExportError is both
@pytest.mark.parametrize("kwargs", [dict(dl_device=(10, 0)), dict(dl_device=(2, 0), copy=False),
                                    dict(dl_device=(1, 1))])
def test_unservable_dl_device_is_a_buffer_and_value_error(kwargs):
    t = devmm.empty(3)
    with pytest.raises(ValueError):
        t.__dlpack__(**kwargs)
    with pytest.raises(BufferError) as e:
        t.__dlpack__(**kwargs)
    assert isinstance(e.value, devmm.DeviceExportError)


@pytest.mark.parametrize("dl_device, exc, text", [
    ((1, 2**32), OverflowError, "dl_device id = 4294967296 does not fit in 32 bits"),
    ((2**32 + 1, 0), OverflowError, "dl_device type"),
    ((1,), TypeError, "dl_device must be a (device_type, device_id) pair"),
    ((1, 0, 0), TypeError, "dl_device must be a (device_type, device_id) pair"),
    ("cpu", TypeError, "dl_device must be a (device_type, device_id) pair"),
    ((2.0, 0), TypeError, "dl_device type must be an int"),
])
def test_bad_dl_device_is_refused(dl_device, exc, text):
    # (1, 2**32) wrapped to cpu:0 in ctypes and went out as a copy
    with pytest.raises(exc, match=re.escape(text)):
        devmm.empty(3).__dlpack__(dl_device=dl_device)


# Pinned host memory is host memory: a CPU consumer gets it as it is
def test_pinned_host_memory_goes_to_a_cpu_consumer_without_a_copy():
    pinned = host_memory_labelled("cuda_host")
    t = devmm.zeros((4, 4), "float32", resource=pinned)
    assert t.__dlpack_device__() == (3, 0)
    cap = t.__dlpack__(dl_device=(1, 0), copy=False, max_version=(1, 0))
    head = versioned_head(cap)
    dev = (ctypes.c_int32 * 2).from_address(ctypes.addressof(head) + 40)  # dl_tensor.device
    assert head.data == t.data_ptr and tuple(dev) == (1, 0) and head.flags == 0
    a = np.from_dlpack(t, device="cpu")
    assert a.ctypes.data == t.data_ptr
    a[...] = 3
    assert (np.from_dlpack(t) == 3).all()
    c = np.from_dlpack(t, device="cpu", copy=True)  # a copy still when asked for
    assert c.ctypes.data != t.data_ptr and (c == 3).all()


def test_dl_device_and_stream_rules():
    t = devmm.empty(3)
    assert np.from_dlpack(t, device="cpu").ctypes.data == t.data_ptr
    t.__dlpack__(dl_device=(1, 0), copy=False)  # same device: no copy needed
    with pytest.raises(BufferError, match="needs a copy from"):
        t.__dlpack__(dl_device=(2, 0), copy=False)
    with pytest.raises(BufferError, match="cannot copy cpu memory to device"):
        t.__dlpack__(dl_device=(2, 0))
    t.__dlpack__(dl_device=[1, 0])  # any pair
    with pytest.raises(ValueError, match="stream must be None for cpu"):
        t.__dlpack__(stream=1)
    with pytest.raises(TypeError, match="stream must be an int or None, got str"):
        t.__dlpack__(stream="1")


@pytest.mark.parametrize("stream", [1, 2, 0, -1, 12345])
def test_stream_on_the_cpu_raises_what_numpy_raises(stream):
    # numpy's own test_dunder_dlpack_stream expects RuntimeError; devmm's error is also a
    # ValueError (a bad argument), which older callers catch
    t = devmm.empty(3)
    with pytest.raises(RuntimeError, match="stream must be None for cpu tensors"):
        t.__dlpack__(stream=stream)
    with pytest.raises(ValueError):
        t.__dlpack__(stream=stream, max_version=(1, 0))
    assert np.from_dlpack(t).ctypes.data == t.data_ptr  # and nothing was left broken


def test_stream_is_judged_against_dl_device():
    # Array API: "stream ... must be valid for dl_device when dl_device is given"
    cuda = host_memory_labelled("cuda:0")
    t = devmm.zeros(4, "float32")
    with devmm.using_memory_resource(cuda):  # where a copy for cuda:0 comes from
        cap = t.__dlpack__(stream=1, dl_device=(2, 0), max_version=(1, 0))  # 1: CUDA legacy
    assert versioned_head(cap).flags == IS_COPIED
    g = devmm.empty(4, "float32", resource=cuda)
    with pytest.raises(RuntimeError, match="stream must be None for cpu tensors, got 1"):
        g.__dlpack__(stream=1, dl_device=(1, 0))  # a CUDA stream means nothing to the CPU
    g.__dlpack__(stream=1, max_version=(1, 0))  # valid for the tensor's own device


def test_readonly_view_is_readonly_in_numpy():
    b = devmm.Buffer(16)
    v = devmm.from_buffer_view(b, (4,), "float32", readonly=True)
    a = np.from_dlpack(v)
    assert not a.flags.writeable
    assert versioned_head(v.__dlpack__(max_version=(1, 0))).flags == READ_ONLY


def test_readonly_view_through_the_array_interface():
    b = devmm.Buffer(16)
    v = devmm.from_buffer_view(b, (4,), "float32", readonly=True)
    data = v.__array_interface__["data"]
    assert memoryview(data).readonly and memoryview(data).nbytes == 16
    a = np.asarray(v)
    assert a.ctypes.data == v.data_ptr and not a.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        a[0] = 1.0
    with pytest.raises(ValueError, match="cannot set WRITEABLE flag"):
        a.flags.writeable = True  # numpy cannot make it writable again: its base says no
    w = devmm.from_buffer_view(b, (4,), "float32")
    assert not memoryview(w.__array_interface__["data"]).readonly
    assert np.asarray(w).flags.writeable


@pytest.mark.parametrize("max_version", [None, (0, 8)])
def test_readonly_view_refuses_a_legacy_capsule(max_version):
    # numpy's own test_readonly: a legacy capsule cannot carry the read-only flag
    stats = devmm.StatisticsAdaptor(devmm.get_current_device_resource())
    b = devmm.Buffer(16, resource=stats)
    v = devmm.from_buffer_view(b, (4,), "float32", readonly=True)
    with pytest.raises(BufferError, match="read-only.*legacy.*max_version"):
        v.__dlpack__(max_version=max_version)
    assert not np.from_dlpack(v).flags.writeable  # a versioned consumer gets it read-only
    b.free()
    assert stats.current_bytes == 0  # the refused export held nothing


@pytest.mark.parametrize("shape", [(0,), (0, 3), (3, 0, 2)])
def test_size_zero_through_the_array_interface(shape):
    t = devmm.empty(shape, "float64")
    a = np.asarray(t)
    assert a.shape == shape and a.size == 0 and a.dtype == np.float64
    assert a.ctypes.data != 0 and a.ctypes.data % 64 == 0  # numpy 1.24 reads 0 as a scalar
    assert memoryview(t.__array_interface__["data"]).nbytes == 0
    assert np.from_dlpack(t).shape == shape and t.data_ptr == 0


# numpy 2's __array__ protocol says copy=False never copies
def test_array_protocol_copy_rules():
    t = devmm.zeros((2, 3), "float32")
    assert t.__array__().ctypes.data == t.data_ptr
    assert t.__array__(copy=False).ctypes.data == t.data_ptr
    assert t.__array__(np.float32, copy=False).ctypes.data == t.data_ptr
    assert t.__array__(copy=True).ctypes.data != t.data_ptr
    assert t.__array__(np.float64).dtype == np.float64
    with pytest.raises(ValueError, match="needs a copy, but copy=False"):
        t.__array__(np.float64, copy=False)  # it copied silently


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_no_typestr_is_a_clear_error(dtype):
    t = devmm.empty(2, dtype)
    assert not hasattr(t, "__array_interface__")  # absent, as the protocol says ...
    for make in (np.asarray, np.array, lambda x: np.array([x])):  # ... and never an object array
        with pytest.raises(TypeError, match=f"dtype {dtype} has no NumPy array-interface type"):
            make(t)


@pytest.mark.parametrize("device", ["cuda_managed:0", "cuda:0", "rocm:0"])
def test_device_memory_is_a_clear_error_in_numpy(device):
    t = devmm.empty(4, "float32", resource=host_memory_labelled(device))
    assert not hasattr(t, "__array_interface__")
    with pytest.raises(TypeError, match=f"{device} memory is not host memory"):
        np.asarray(t)


def test_cuda_array_interface():
    cuda = host_memory_labelled("cuda:0")
    t = devmm.empty((2, 3), "int16", layout=devmm.ColumnMajor(), resource=cuda)
    d = t.__cuda_array_interface__
    assert d["shape"] == (2, 3) and d["strides"] == (2, 4) and d["typestr"] == "<i2"
    assert d["data"] == (t.data_ptr, False) and d["version"] == 3
    assert devmm.empty((0, 4), resource=cuda).__cuda_array_interface__["data"] == (0, False)
    with pytest.raises(AttributeError, match="cpu is not CUDA memory"):
        devmm.empty(2).__cuda_array_interface__


def test_array_interface_zero_copy():
    t = devmm.empty((2, 3), "int16", layout=devmm.ColumnMajor())
    a = np.asarray(t)
    assert a.ctypes.data == t.data_ptr and a.strides == (2, 4)
    a[...] = 7
    assert (np.from_dlpack(t) == 7).all()
    with pytest.raises(AttributeError, match="bfloat16 has no NumPy array-interface type"):
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

@pytest.fixture
def jax():
    """Only the tests that need JAX skip without it (it comes with the PyPI venv)."""
    return pytest.importorskip("jax", reason="JAX is not installed (tools/requirements-test.txt "
                                             "lists it for the PyPI venv)")


# JAX without jax_enable_x64 turns 64-bit types into 32-bit ones: those are left out
JAX_DTYPES = ["bool", "int8", "int16", "int32", "uint8", "uint16", "uint32", "float16",
              "bfloat16", "float32", "complex64"]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", JAX_DTYPES)
def test_default_tensor_is_zero_copy_into_jax(jax, dtype, shape):
    # XLA imports a CPU buffer without a copy only when it is 64-byte aligned: every default
    # devmm tensor is, so no import here may copy
    t = devmm.zeros(shape, dtype)
    for x in (jax.dlpack.from_dlpack(t), jax.numpy.from_dlpack(t)):
        assert x.dtype == jax.numpy.dtype(dtype) and x.shape == shape
        assert x.unsafe_buffer_pointer() == t.data_ptr


def test_jax_values_both_ways(jax):
    t = devmm.empty((64,), "float32")
    np.from_dlpack(t)[...] = np.arange(64)
    x = jax.dlpack.from_dlpack(t)
    assert x.unsafe_buffer_pointer() == t.data_ptr
    assert float(x.sum()) == sum(range(64))
    y = jax.numpy.arange(8.0, dtype="float32") * 2
    back = np.from_dlpack(y)  # and JAX -> the NumPy side, for symmetry of the check
    assert back[3] == 6.0


# jnp.asarray(t) raised ValueError: JAX reads a .dtype only through
# np.result_type, which in numpy 2 takes nothing but a numpy.dtype. __jax_array__ (JAX's
# conversion protocol, JEP 28661) hands it the tensor through DLPack instead, zero-copy.
def test_jax_numpy_takes_a_tensor_zero_copy(jax):
    t = devmm.zeros((64,), "float32")
    np.from_dlpack(t)[...] = np.arange(64)
    x = jax.numpy.asarray(t)
    assert x.unsafe_buffer_pointer() == t.data_ptr and x.dtype == jax.numpy.float32
    assert float(jax.numpy.asarray(t).sum()) == sum(range(64))
    b = devmm.zeros(8, "bfloat16")  # numpy has no bfloat16: DLPack does
    assert jax.numpy.asarray(b).dtype == jax.numpy.bfloat16
    assert t.dtype == "float32"  # the name, as before


def test_jax_numpy_copies_a_readonly_tensor(jax):
    # JAX asks __dlpack__ for a legacy capsule, which cannot say read-only: the export is
    # refused, so __jax_array__ hands JAX a copy (api.md: t.copy() for jax.dlpack.from_dlpack)
    b = devmm.Buffer(64)
    np.frombuffer((ctypes.c_char * 64).from_address(b.ptr), np.float32)[...] = 2
    v = devmm.from_buffer_view(b, (16,), "float32", readonly=True)
    with pytest.raises(BufferError, match="read-only"):
        jax.dlpack.from_dlpack(v)
    x = jax.numpy.asarray(v)
    assert float(x.sum()) == 32 and x.unsafe_buffer_pointer() != v.data_ptr
    assert jax.dlpack.from_dlpack(v.copy()).shape == (16,)


# A devmm.Buffer had the resource's alignment (16 with malloc), so JAX
# copied a view of it
def test_buffer_views_import_into_jax_without_a_copy(jax):
    from devmm.mrs.cpu import MallocMemoryResource
    for nbytes in (16, 48, 400):
        b = devmm.Buffer(nbytes, resource=MallocMemoryResource())
        v = devmm.from_buffer_view(b, (nbytes // 4,), "float32")
        assert jax.dlpack.from_dlpack(v).unsafe_buffer_pointer() == b.ptr


def test_jax_refuses_padded_strides_and_copy_fixes_it(jax):
    p = devmm.zeros((4, 3), "float32", layout=devmm.Aligned(devmm.RowMajor(), 128))
    with pytest.raises(Exception, match="compact"):
        jax.dlpack.from_dlpack(p)
    c = p.copy()
    x = jax.dlpack.from_dlpack(c)
    assert x.shape == (4, 3) and float(x.sum()) == 0.0
    assert x.unsafe_buffer_pointer() == c.data_ptr  # the copy is a default tensor: aligned

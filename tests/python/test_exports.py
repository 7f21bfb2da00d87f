"""What `__dlpack__` hands a consumer, read from the capsule itself (the DLPack structs through
ctypes): the data pointer, the flags and the contents, for each `copy` request. A consumer
could hide a wrong answer (numpy copies nothing on its side either way), so these read the
C structs directly."""

import ctypes

import pytest

import devmm

READ_ONLY, IS_COPIED = 1, 2


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def versioned(capsule) -> DLManagedTensorVersioned:
    """The DLManagedTensorVersioned inside a (not consumed) "dltensor_versioned" capsule."""
    return DLManagedTensorVersioned.from_address(_get_pointer(capsule, b"dltensor_versioned"))


def legacy(capsule) -> DLManagedTensor:
    return DLManagedTensor.from_address(_get_pointer(capsule, b"dltensor"))


def contents(dl: DLTensor, nbytes: int) -> bytes:
    return ctypes.string_at(dl.data, nbytes)


def pattern(t: devmm.Tensor) -> bytes:
    """Fills t with a non-zero pattern and returns it."""
    data = bytes(1 + i % 251 for i in range(t.nbytes))
    ctypes.memmove(t.data_ptr, data, t.nbytes)
    return data


@pytest.mark.parametrize("kwargs", [{}, {"copy": None}, {"copy": False},
                                    {"copy": False, "dl_device": (1, 0)},
                                    {"copy": None, "dl_device": [1, 0]}])
def test_no_copy_requested_exports_the_tensor_itself(kwargs):
    t = devmm.empty((4, 6), "float32")
    want = pattern(t)
    cap = t.__dlpack__(max_version=(1, 0), **kwargs)
    m = versioned(cap)
    assert m.major == 1
    assert m.dl_tensor.data == t.data_ptr, kwargs  # the same memory: zero-copy
    assert m.flags & IS_COPIED == 0, kwargs        # and it does not claim a copy
    assert m.flags & READ_ONLY == 0
    assert contents(m.dl_tensor, t.nbytes) == want
    ctypes.memset(t.data_ptr, 0, t.nbytes)  # a write through the tensor shows in the export
    assert contents(m.dl_tensor, t.nbytes) == bytes(t.nbytes)


@pytest.mark.parametrize("kwargs", [{"copy": True}, {"copy": True, "dl_device": (1, 0)}])
def test_copy_true_exports_a_copy_flagged_as_such(kwargs):
    stats = devmm.StatisticsAdaptor(devmm.get_current_device_resource())
    t = devmm.empty((3, 5), "int16", resource=stats)
    want = pattern(t)
    with devmm.using_memory_resource(stats):
        cap = t.__dlpack__(max_version=(1, 0), **kwargs)
    m = versioned(cap)
    assert m.dl_tensor.data not in (None, t.data_ptr), kwargs  # other memory
    assert m.flags & IS_COPIED, kwargs                          # and the flag says so
    assert contents(m.dl_tensor, t.nbytes) == want              # with the same contents
    assert stats.current_count == 2                             # the copy is a new allocation
    ctypes.memset(t.data_ptr, 0, t.nbytes)  # independent of the original from now on
    assert contents(m.dl_tensor, t.nbytes) == want
    del cap
    assert stats.current_count == 1  # the capsule's destructor released the copy


def test_copy_of_a_padded_tensor_is_compact():
    t = devmm.empty((3, 5), "float64", layout=devmm.Aligned(devmm.RowMajor(), 64))
    assert t.strides == (8, 1)
    m = versioned(cap := t.__dlpack__(max_version=(1, 0), copy=True))
    assert m.flags & IS_COPIED and m.dl_tensor.data != t.data_ptr
    assert [m.dl_tensor.strides[i] for i in range(2)] == [5, 1]
    del cap


def test_legacy_capsule_copy_and_no_copy():
    t = devmm.empty(16, "uint8")
    want = pattern(t)
    cap = t.__dlpack__(copy=False)
    assert legacy(cap).dl_tensor.data == t.data_ptr
    cap = t.__dlpack__(copy=True)  # a legacy capsule cannot carry IS_COPIED: other memory
    dl = legacy(cap).dl_tensor
    assert dl.data != t.data_ptr and contents(dl, 16) == want


def test_copy_false_refuses_when_a_copy_is_needed():
    t = devmm.empty(4)
    with pytest.raises(BufferError, match="needs a copy"):
        t.__dlpack__(max_version=(1, 0), dl_device=(99, 0), copy=False)


def test_view_with_an_offset_exports_its_own_first_element():
    b = devmm.Buffer(64)
    v = devmm.from_buffer_view(b, (3,), "int32", offset=12)
    assert v.data_ptr == b.ptr + 12
    m = versioned(cap := v.__dlpack__(max_version=(1, 0)))
    assert m.dl_tensor.data == b.ptr + 12 and m.dl_tensor.byte_offset == 0
    assert legacy(cap2 := v.__dlpack__()).dl_tensor.data == b.ptr + 12
    del cap, cap2


@pytest.mark.parametrize("layout,shape", [
    (devmm.Aligned(devmm.RowMajor(), 64), (3, 5)),        # padded rows: one copy per row
    (devmm.ColumnMajor(), (3, 4)),                         # not row-major: element by element
    (devmm.Strided((12, 3)), (2, 3)),                      # gaps everywhere
    (devmm.RowMajor(), (2, 3, 4)),                         # compact: one copy
])
def test_copy_holds_every_element_in_row_major_order(layout, shape):
    t = devmm.empty(shape, "int32", layout=layout)
    # element (i, j, ...) of t holds its row-major index, written through t's own strides
    n = 1
    for s in shape:
        n *= s
    for flat in range(n):
        idx, rest = [], flat
        for s in reversed(shape):
            idx.append(rest % s)
            rest //= s
        off = sum(i * st for i, st in zip(reversed(idx), t.strides))
        ctypes.c_int32.from_address(t.data_ptr + 4 * off).value = flat
    m = versioned(cap := t.__dlpack__(max_version=(1, 0), copy=True))
    assert m.flags & IS_COPIED
    got = (ctypes.c_int32 * n).from_address(m.dl_tensor.data)
    assert list(got) == list(range(n))
    del cap


def test_copy_that_cannot_be_allocated_is_a_clear_error():
    # a copy on the tensor's own device comes from the tensor's own resource (ADR 24)
    small = devmm.LimitingAdaptor(devmm.get_current_device_resource(), 600)
    t = devmm.empty((64,), "float64", resource=small)
    with pytest.raises(BufferError, match="cannot copy cpu memory .*would exceed its limit of "
                                          "600 bytes"):
        t.__dlpack__(max_version=(1, 0), copy=True)
    assert small.allocated_bytes == 512  # the tensor alone: nothing half-built is left

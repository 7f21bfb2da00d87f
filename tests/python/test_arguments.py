"""Arguments on their way to C: shapes, strides, sizes,
offsets and device ids are Python ints that fit their C type, or a clear TypeError, ValueError
or OverflowError naming them, never a value that ctypes wraps silently; the private built-ins
refuse wrong types instead of crashing; Buffer is aligned as tensors are; the small things a
reviewer tripped over (Tensor(), pop() without push, equality of wrappers)."""

import ctypes
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import devmm
from devmm import _lib
from devmm.mrs.cpu import MallocMemoryResource

# ----------------------------------------------------------------------------- shapes (6)


def test_numpy_integers_in_a_shape_become_python_ints():
    # np.uint8(200) * np.uint8(200) overflowed in t.size: 200 * 200 wraps to 64 in uint8
    t = devmm.empty((np.uint8(200), np.uint8(200)), "int8")
    assert t.shape == (200, 200) and all(type(s) is int for s in t.shape)
    assert t.size == 40000 and t.nbytes == 40000 and t.buffer.nbytes == 40000
    assert np.asarray(t).shape == (200, 200)
    u = devmm.empty((np.int64(2), 3))
    assert type(u.shape[0]) is int and repr(u) == "<devmm.Tensor shape=(2, 3) dtype=float32 " \
                                                  "device=cpu>"


def test_a_numpy_integer_is_a_1d_shape():
    assert devmm.empty(np.int64(3)).shape == (3,)
    assert devmm.from_buffer_view(devmm.Buffer(64), np.int32(4), "float32").shape == (4,)


@pytest.mark.parametrize("shape", [(True, 3), [True, 3], (3, False), True])
def test_a_bool_is_no_shape_entry(shape):
    with pytest.raises(TypeError, match="must be an int|shape entries must be ints"):
        devmm.empty(shape)


# ----------------------------------------------------------------------------- strides (7)

@pytest.mark.parametrize("strides", [(4,), (), (1, 1, 1)])
def test_from_buffer_view_wants_one_stride_per_dimension(strides):
    # too few were filled with zeros, too many raised ctypes' IndexError
    b = devmm.Buffer(256)
    with pytest.raises(ValueError, match=f"{len(strides)} strides for a shape of ndim 2"):
        devmm.from_buffer_view(b, (4, 4), "float32", strides=strides)


# ----------------------------------------------------------------------------- wrapping (8)

WRAPS = [
    # (what, call, exception, message): each went through ctypes wrapped modulo 2**64 or 2**32
    ("Buffer size", lambda: devmm.Buffer(2**64 + 16), OverflowError,
     "nbytes = 18446744073709551632 does not fit in 64 bits"),
    ("Buffer alignment", lambda: devmm.Buffer(16, alignment=2**64 + 64), OverflowError,
     "alignment = 18446744073709551680 does not fit in 64 bits"),
    ("allocate", lambda: MallocMemoryResource().allocate(2**64 + 8), OverflowError,
     "nbytes = 18446744073709551624 does not fit"),
    ("deallocate", lambda: MallocMemoryResource().deallocate(2**64, 8), OverflowError,
     "ptr = 18446744073709551616 does not fit"),
    ("limit", lambda: devmm.LimitingAdaptor(MallocMemoryResource(), 2**64 + 5), OverflowError,
     "does not fit in 64 bits"),
    ("aligned adaptor", lambda: devmm.AlignedAdaptor(MallocMemoryResource(), 2**64 + 64),
     OverflowError, "alignment = 18446744073709551680 does not fit"),
    ("tracking lookup", lambda: devmm.TrackingAdaptor(MallocMemoryResource()).lookup(2**64),
     OverflowError, "address = 18446744073709551616 does not fit"),
    ("Aligned layout", lambda: devmm.Aligned(devmm.RowMajor(), 2**64 + 64), OverflowError,
     "unit_stride_alignment = 18446744073709551680 does not fit"),
    ("Strided layout", lambda: devmm.Strided((2**64 + 1, 1)), OverflowError,
     "strides[0] = 18446744073709551617 does not fit in 64 bits"),
    ("layout shape", lambda: devmm.RowMajor().compute((2**64 + 2, 3), "float32"), OverflowError,
     "shape[0] = 18446744073709551618 does not fit"),
    ("view offset", lambda: devmm.from_buffer_view(devmm.Buffer(64), (4,), "float32",
                                                   offset=2**64), OverflowError,
     "offset = 18446744073709551616 does not fit"),
    ("view strides", lambda: devmm.from_buffer_view(devmm.Buffer(64), (4,), "float32",
                                                    strides=(2**64 + 1,)), OverflowError,
     "strides[0] = 18446744073709551617 does not fit"),
    ("device id", lambda: devmm.empty(4, device=(1, 2**32)), OverflowError,
     "device id = 4294967296 does not fit in 32 bits"),
    ("device type", lambda: devmm.empty(4, device=(2**32 + 1, 0)), OverflowError,
     "device type = 4294967297 does not fit in 32 bits"),
    ("dl_device", lambda: devmm.empty(4).__dlpack__(dl_device=(1, 2**32)), OverflowError,
     "dl_device id = 4294967296 does not fit"),
    ("negative size", lambda: devmm.Buffer(-1), ValueError, "nbytes must be >= 0, got -1"),
    ("float size", lambda: devmm.Buffer(16.0), TypeError, "nbytes must be an int, got float"),
    ("bool size", lambda: MallocMemoryResource().allocate(True), TypeError,
     "nbytes must be an int, got bool"),
]


@pytest.mark.parametrize("what, call, exc, text", WRAPS, ids=[w[0] for w in WRAPS])
def test_integers_never_wrap_on_their_way_to_c(what, call, exc, text):
    with pytest.raises(exc, match=re.escape(text)):
        call()


def test_one_helper_says_what_fits():
    assert _lib.cint(np.uint8(200), ctypes.c_size_t, "n") == 200
    assert _lib.cint(-2**63, ctypes.c_int64, "s") == -2**63
    with pytest.raises(OverflowError, match=re.escape("s = -9223372036854775809 does not fit in "
                                                      "64 bits (at least -9223372036854775808)")):
        _lib.cint(-2**63 - 1, ctypes.c_int64, "s")


# ----------------------------------------------------------------------------- Buffer (9)

@pytest.mark.parametrize("nbytes", [1, 4, 24, 100, 1000, 4096, 65537])
def test_buffer_is_aligned_as_tensors_are(nbytes):
    r = MallocMemoryResource()  # malloc gives 16 bytes; tensors ask for 64 on the CPU (ADR 13)
    bufs = [devmm.Buffer(nbytes, resource=r) for _ in range(16)]
    assert [b.ptr % 64 for b in bufs] == [0] * 16
    assert devmm.Buffer(nbytes, resource=r, alignment=4096).ptr % 4096 == 0  # more if asked


def test_buffer_alignment_no_power_of_two_is_still_refused():
    with pytest.raises(ValueError, match="alignment 3 is not a power of two"):
        devmm.Buffer(16, alignment=3)


# ----------------------------------------------------------------------------- built-ins (13)

T = devmm.empty(4)
PACKED = T._dt.packed
BUILTIN_CALLS = [
    # (call, exception, message): wrong types and out-of-range values of the private built-ins
    ("py_empty(None, [1, 0], None, (2,), PACKED, None)", TypeError, "device must be a tuple"),
    ("py_empty(None, None, None, (2,), PACKED, None)", TypeError, "device must be a tuple"),
    ("py_empty(None, (1,), None, (2,), PACKED, None)", TypeError, "a (type, id) tuple"),
    ("py_empty(None, (1, 2**33), None, (2,), PACKED, None)", OverflowError, "device id must be"),
    ("py_empty(None, (1, 0), None, [2], PACKED, None)", TypeError, "shape must be a tuple"),
    ("py_empty(None, (1, 0), None, None, PACKED, None)", TypeError, "shape must be a tuple"),
    ("py_empty(None, (1, 0), None, (True,), PACKED, None)", TypeError, "shape entries"),
    ("py_empty(None, (1, 0), None, (2,), 2**33 + PACKED, None)", OverflowError, "dtype must be"),
    ("py_empty(None, (1, 0), None, (2,), -1, None)", OverflowError, "dtype must be"),
    ("py_empty(-1, (1, 0), None, (2,), PACKED, None)", OverflowError, "resource must be"),
    ("py_empty('x', (1, 0), None, (2,), PACKED, None)", TypeError, "resource must be"),
    ("py_empty(None, (1, 0), None, (2,), PACKED, 1.0)", TypeError, "stream must be"),
    ("py_own_tensor('x')", TypeError, "the address must be"),
    ("py_own_tensor(-1)", OverflowError, "the address must be"),
    ("py_own_resource(-1.0)", TypeError, "the address must be"),
    ("py_handle(None)", TypeError, "capsule"),
    ("py_handle(T.__dlpack__())", TypeError, "capsule"),
    ("py_buffer_of(1)", TypeError, "capsule"),
    ("py_buffer_free(object())", TypeError, "capsule"),
    ("py_hold(None)", TypeError, "capsule"),
    ("py_array_export(devmm.Buffer(8)._cap)", TypeError, "capsule"),
    ("py_dlpack(devmm.Buffer(8)._cap, 0, 1)", TypeError, "capsule"),
    ("py_dlpack(T._cap, 'x', 1)", TypeError, "flags must be an int"),
    ("py_dlpack(T._cap, -1, 1)", OverflowError, "flags must be"),
    ("py_dlpack(T._cap, 0)", TypeError, "dlpack() takes 3 arguments (2 given)"),
    ("py_dlpack(T._cap, 0, 1, 1, 1)", TypeError, "dlpack() takes 3 arguments (5 given)"),
    ("py_buffer(devmm.get_current_device_resource()._h, -1, 0, None)", OverflowError,
     "nbytes must be"),
    # the ones `import devmm` uses without ctypes (ADR 45)
    ("py_dtype('float32')", TypeError, "expected bytes, str found"),
    ("py_dtype(b'float32', 1)", TypeError, "dtype() takes 1 arguments (2 given)"),
    ("devmm._lib._builtin('version')(1)", TypeError, "version() takes 0 arguments (1 given)"),
    ("py_callbacks_disable(1)", TypeError, "callbacks_disable() takes 0 arguments (1 given)"),
    ("devmm._lib._make('empty')", TypeError, "expected bytes, str found"),
    ("devmm._lib._make(b'empty' + bytes(1))", ValueError, "embedded null byte"),
]


@pytest.mark.parametrize("call, exc, text", BUILTIN_CALLS, ids=[c[0] for c in BUILTIN_CALLS])
def test_builtins_refuse_wrong_arguments(call, exc, text):
    # in a child: before, some of these crashed the interpreter (py_empty(-1, ...): SIGSEGV)
    code = textwrap.dedent(f"""
        import devmm
        from devmm._lib import *
        T = devmm.empty(4)
        PACKED = T._dt.packed
        try:
            {call}
        except {exc.__name__} as e:
            print("raised", e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"exit status {out.returncode}: {out.stderr[-2000:]}"
    assert out.stdout.startswith("raised") and text in out.stdout, out.stdout + out.stderr


def test_builtins_check_their_arguments_cheaply():
    # the checks are pointer comparisons: the hot path still takes plain ints and tuples
    assert _lib.py_empty(None, (1, 0), None, (2, 3), PACKED, None) is not None


# ----------------------------------------------------------------------------- nits (14)

def test_tensor_cannot_be_made_directly():
    with pytest.raises(TypeError, match="devmm.Tensor cannot be made directly: use devmm.empty"):
        devmm.Tensor()


def test_pop_without_push_is_a_state_error_not_a_buffer_error():
    s = devmm.StatisticsAdaptor(MallocMemoryResource())
    with pytest.raises(devmm.DevmmStateError) as e:
        s.pop()
    assert not isinstance(e.value, BufferError) and isinstance(e.value, RuntimeError)
    t = devmm.empty(2)
    t.buffer.free()
    with pytest.raises(devmm.BufferFreedError):  # a freed export is both
        t.__dlpack__()
    assert issubclass(devmm.BufferFreedError, (devmm.DevmmStateError, BufferError))


def test_wrappers_of_one_c_object_are_equal():
    a, b = devmm.get_current_device_resource(), devmm.empty(1).buffer.resource  # two wrappers
    assert a is not b and a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != MallocMemoryResource() and a != "cpu"
    t = devmm.empty(4)
    assert t.buffer == t.buffer and hash(t.buffer) == hash(t.buffer)
    assert t.buffer != devmm.empty(4).buffer

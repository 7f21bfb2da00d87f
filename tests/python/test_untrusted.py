"""Untrusted input through every public Python function: wrong types, negative, zero, huge and
overflowing values each give a clear exception (never a crash), and nothing is left behind."""

import pytest

import devmm
from devmm.mrs.cpu import AlignedMemoryResource, MallocMemoryResource, MmapMemoryResource

HUGE = 2**63
CASES = [
    # (callable, exception, text in the message)
    (lambda: devmm.empty(None), TypeError, "shape must be"),
    (lambda: devmm.empty((HUGE,)), ValueError, "does not fit in int64"),
    (lambda: devmm.empty((2**62, 2**62)), ValueError, "overflows"),
    (lambda: devmm.empty((-1,)), ValueError, "negative"),
    (lambda: devmm.empty((1.5,)), TypeError, "must be ints"),
    (lambda: devmm.empty(3, dtype=None), TypeError, "unknown dtype 'None'"),
    (lambda: devmm.empty(3, dtype=""), TypeError, "unknown dtype ''"),
    (lambda: devmm.empty(3, dtype="x" * 10000), TypeError, "unknown dtype"),
    (lambda: devmm.empty(3, device=""), ValueError, "unknown device"),
    (lambda: devmm.empty(3, device="cuda:99999999999"), ValueError, "integer 0..65535"),
    (lambda: devmm.empty(3, device=(1,)), TypeError, "device must be"),
    (lambda: devmm.empty(3, device=object()), TypeError, "device must be"),
    (lambda: devmm.empty(3, layout=devmm.Strided((-1,))), ValueError, "negative"),
    (lambda: devmm.empty(3, layout=devmm.Strided((1, 1))), ValueError, "2 strides for a shape of 1"),
    (lambda: devmm.empty((2, 2), layout=devmm.Aligned(devmm.RowMajor(), 2**62)), ValueError,
     "exceeds the largest allocation"),
    (lambda: devmm.Aligned(devmm.RowMajor(), 0), ValueError, "positive powers of two"),
    (lambda: devmm.Aligned(devmm.RowMajor(), -64), ValueError, "positive powers of two"),
    (lambda: devmm.Buffer(-5), ValueError, "nbytes must be >= 0, got -5"),
    (lambda: devmm.Buffer(HUGE), MemoryError, "could not allocate 9223372036854775808 bytes"),
    (lambda: devmm.Buffer(16, alignment=-64), ValueError, "must be >= 0"),
    (lambda: devmm.Buffer(2**62), MemoryError, "out of memory"),
    (lambda: devmm.Buffer(16, alignment=3), ValueError, "alignment 3 is not a power of two"),
    (lambda: MallocMemoryResource().deallocate(-8, 8), ValueError, "ptr must be >= 0"),
    (lambda: MallocMemoryResource().allocate(-1), ValueError, "nbytes must be >= 0, got -1"),
    (lambda: MallocMemoryResource().allocate(2**62), MemoryError, "could not allocate"),
    (lambda: MallocMemoryResource().deallocate(0, 0), None, None),  # NULL: a no-op
    (lambda: AlignedMemoryResource(0), ValueError, "not a power of two"),
    (lambda: MmapMemoryResource("sometimes"), ValueError, "expected never, transparent"),
    (lambda: MmapMemoryResource().allocate(2**62), MemoryError, "could not map"),
    (lambda: devmm.LimitingAdaptor(MallocMemoryResource(), -1), ValueError, "size must be >= 0"),
    (lambda: devmm.LimitingAdaptor(MallocMemoryResource(), "101%"), ValueError, "0..100%"),
    (lambda: devmm.LimitingAdaptor(None, 1), TypeError, "upstream must be"),
    (lambda: devmm.AlignedAdaptor(MallocMemoryResource(), 24), ValueError, "not a power of two"),
    (lambda: devmm.FailureCallbackAdaptor(MallocMemoryResource(), None), TypeError, "callable"),
    (lambda: devmm.LoggingAdaptor(MallocMemoryResource(), "/nonexistent/x.csv"), devmm.DevmmError,
     "cannot open log file"),
    (lambda: devmm.TrackingAdaptor(MallocMemoryResource()).lookup(0), KeyError, "not inside"),
    (lambda: devmm.set_current_device_resource(None), TypeError, "expected a MemoryResource"),
    (lambda: devmm.init("/nonexistent/devmm.ini"), devmm.ConfigError, "cannot read"),
    (lambda: devmm.init("\0"), ValueError, "NUL byte"),
    (lambda: devmm.empty(3).__dlpack__(stream="x"), TypeError, "stream must be an int or None"),
    (lambda: devmm.empty(3).__dlpack__(dl_device=(99, 0)), BufferError, "cannot copy"),
    (lambda: devmm.from_buffer_view(devmm.Buffer(8), (4,), "float64"), ValueError,
     "does not fit in the buffer of 8 bytes"),
    (lambda: devmm.from_buffer_view(devmm.Buffer(8), (1,), "int8", offset=-1), ValueError,
     "offset must be >= 0"),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_untrusted_input(case):
    fn, exc, text = CASES[case]
    stats_before = devmm.get_current_device_resource().mem_info()  # still usable afterwards
    if exc is None:
        fn()
    else:
        with pytest.raises(exc) as e:
            fn()
        assert text in str(e.value), str(e.value)
    assert devmm.get_current_device_resource().mem_info()[1] == stats_before[1]
    devmm.empty(4).buffer.free()  # and devmm still works

"""Untrusted input through every public Python function: wrong types, negative, zero, huge and
overflowing values each give a clear exception (never a crash), and nothing is left behind.

Each case gets `w`: w() is the current resource for the case (statistics over tracking over
cpu.malloc, installed with using_memory_resource), w(upstream) puts the same watch over another
resource. After the case every watched stack must hold nothing, have counted no refused request
and still work."""

import gc

import pytest

import devmm
from devmm.mrs.cpu import AlignedMemoryResource, MallocMemoryResource, MmapMemoryResource

HUGE = 2**63
CASES = [
    # (callable, exception, text in the message)
    (lambda w: devmm.empty(None), TypeError, "shape must be"),
    (lambda w: devmm.empty((HUGE,)), ValueError, "does not fit in int64"),
    (lambda w: devmm.empty((2**62, 2**62)), ValueError, "overflows"),
    (lambda w: devmm.empty((-1,)), ValueError, "negative"),
    (lambda w: devmm.empty((1.5,)), TypeError, "must be ints"),
    (lambda w: devmm.empty(3, dtype=None), TypeError, "unknown dtype 'None'"),
    (lambda w: devmm.empty(3, dtype=""), TypeError, "unknown dtype ''"),
    (lambda w: devmm.empty(3, dtype="x" * 10000), TypeError, "unknown dtype"),
    (lambda w: devmm.empty(3, device=""), ValueError, "unknown device"),
    (lambda w: devmm.empty(3, device="cuda:99999999999"), ValueError, "integer 0..65535"),
    (lambda w: devmm.empty(3, device=(1,)), TypeError, "device must be"),
    (lambda w: devmm.empty(3, device=object()), TypeError, "device must be"),
    (lambda w: devmm.empty(3, layout=devmm.Strided((-1,))), ValueError, "negative"),
    (lambda w: devmm.empty(3, layout=devmm.Strided((1, 1))), ValueError, "2 strides for a shape of 1"),
    (lambda w: devmm.empty((2, 2), layout=devmm.Aligned(devmm.RowMajor(), 2**62)), ValueError,
     "exceeds the largest allocation"),
    (lambda w: devmm.Aligned(devmm.RowMajor(), 0), ValueError, "positive powers of two"),
    (lambda w: devmm.Aligned(devmm.RowMajor(), -64), ValueError, "positive powers of two"),
    (lambda w: devmm.Buffer(-5), ValueError, "nbytes must be >= 0, got -5"),
    (lambda w: devmm.Buffer(HUGE), MemoryError, "could not allocate 9223372036854775808 bytes"),
    (lambda w: devmm.Buffer(16, alignment=-64), ValueError, "must be >= 0"),
    (lambda w: devmm.Buffer(2**62), MemoryError, "out of memory"),
    (lambda w: devmm.Buffer(2**62, resource=devmm.LimitingAdaptor(w(), 4096)), MemoryError,
     "would exceed its limit of 4096 bytes"),
    (lambda w: devmm.LimitingAdaptor(w(), 64).allocate(65), MemoryError, "(0 bytes in use)"),
    (lambda w: devmm.Buffer(16, alignment=3), ValueError, "alignment 3 is not a power of two"),
    (lambda w: w().deallocate(-8, 8), ValueError, "ptr must be >= 0"),
    (lambda w: w().allocate(-1), ValueError, "nbytes must be >= 0, got -1"),
    (lambda w: w().allocate(2**62), MemoryError, "could not allocate"),
    (lambda w: w().deallocate(0, 0), None, None),  # NULL: a no-op that reaches no adaptor
    (lambda w: AlignedMemoryResource(0), ValueError, "not a power of two"),
    (lambda w: MmapMemoryResource("sometimes"), ValueError, "expected never, transparent"),
    (lambda w: w(MmapMemoryResource()).allocate(2**62), MemoryError, "could not map"),
    (lambda w: devmm.LimitingAdaptor(w(), -1), ValueError, "limit must be >= 0"),
    (lambda w: devmm.LimitingAdaptor(w(), "101%"), ValueError, "0..100%"),
    (lambda w: devmm.LimitingAdaptor(None, 1), TypeError, "upstream must be"),
    (lambda w: devmm.AlignedAdaptor(w(), 24), ValueError, "not a power of two"),
    (lambda w: devmm.FailureCallbackAdaptor(w(), None), TypeError, "callable"),
    (lambda w: devmm.LoggingAdaptor(w(), "/nonexistent/x.csv"), devmm.DevmmError,
     "cannot open log file"),
    (lambda w: devmm.TrackingAdaptor(w()).lookup(0), KeyError, "not inside"),
    (lambda w: devmm.set_current_device_resource(None), TypeError, "expected a MemoryResource"),
    (lambda w: devmm.init("/nonexistent/devmm.ini"), devmm.ConfigError, "cannot read"),
    (lambda w: devmm.init("\0"), ValueError, "NUL byte"),
    (lambda w: devmm.empty(3).__dlpack__(stream="x"), TypeError, "stream must be an int or None"),
    (lambda w: devmm.empty(3).__dlpack__(dl_device=(99, 0)), BufferError, "cannot copy"),
    (lambda w: devmm.from_buffer_view(devmm.Buffer(8), (4,), "float64"), ValueError,
     "does not fit in the buffer of 8 bytes"),
    (lambda w: devmm.from_buffer_view(devmm.Buffer(8), (1,), "int8", offset=-1), ValueError,
     "offset must be >= 0"),
]


class Watch:
    """statistics(tracking(upstream)) stacks, each checked to hold nothing after the case."""

    def __init__(self):
        self.stacks = []

    def __call__(self, upstream=None):
        if upstream is None:
            return self.stacks[0][0]
        tr = devmm.TrackingAdaptor(upstream)
        st = devmm.StatisticsAdaptor(tr)
        self.stacks.append((st, tr))
        return st

    def check_empty(self):
        for st, tr in self.stacks:
            assert (st.current_bytes, st.current_count) == (0, 0), st.name
            assert tr.outstanding == (0, 0), st.name


@pytest.mark.parametrize("case", range(len(CASES)))
def test_untrusted_input(case):
    fn, exc, text = CASES[case]
    w = Watch()
    current = w(MallocMemoryResource())
    with devmm.using_memory_resource(current):
        if exc is None:
            assert fn(w) is None
        else:
            with pytest.raises(exc) as e:
                fn(w)
            assert text in str(e.value), str(e.value)
            del e  # its traceback holds the case's objects
        gc.collect()
        w.check_empty()  # nothing left behind, nothing half-counted
        counted = current.total_count
        t = devmm.empty(4)  # and devmm still works, through the same stack
        assert current.current_bytes == 16 and current.total_count == counted + 1
        t.buffer.free()
        w.check_empty()

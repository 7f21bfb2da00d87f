"""What RMM-shaped arguments devmm takes, and what it refuses saying so (docs/from-rmm.md): which
objects are streams, which shape a callback's signature picks, an int device for a prefetch,
numpy integers and bools for levels and flags."""

import ctypes

import pytest

import devmm
from devmm._shared import StreamHandle
from devmm.mrs.cpu import MallocMemoryResource

np = pytest.importorskip("numpy")

SIM_INI = "[devmm]\nplugins = cpu, sim\n[plugin sim]\ndevices = 2\n[device sim:*]\n" \
          "resource = sim.async\n"


# ----------------------------------------------------------------------------- streams

def test_only_stream_objects_are_streams():
    devmm.init(SIM_INI)
    from devmm.mrs.sim import SimAsyncMemoryResource, runtime
    r = SimAsyncMemoryResource(0)
    t = devmm.empty(4, "uint8")

    class Handled:  # a .handle alone makes no stream (a resource, a buffer have one)
        handle = 1

    for bad in (r, t.buffer, t, Handled()):
        for call in (lambda s: r.allocate(256, s), lambda s: r.allocate(256, stream=s),
                     lambda s: devmm.Buffer(64, r, stream=s)):
            with pytest.raises(TypeError, match=r"(a stream is|stream must be) None, an int "
                                                r"handle, .*__cuda_stream__.*StreamHandle"):
                call(bad)

    class CudaStream:
        def __cuda_stream__(self):
            return (0, 1)

    rt = runtime()
    with rt.stream() as s:
        for good in (s, StreamHandle(s.handle), CudaStream(), s.handle, None):
            if type(good) is not int:  # a plain int there is the alignment
                p = r.allocate(256, good)
                r.deallocate(p, 256, good)
            p = r.allocate(256, stream=good)
            r.deallocate(p, 256, stream=good)
        s.synchronize()


# ----------------------------------------------------------------------------- callback shapes

def _host(live):
    def alloc(nbytes):
        buf = ctypes.create_string_buffer(nbytes + 256)
        ptr = -(-ctypes.addressof(buf) // 256) * 256
        live[ptr] = buf
        return ptr
    return alloc


def test_callback_shape_by_parameter_names():
    base, seen = MallocMemoryResource(), []

    def rmm_alloc(nbytes, stream, base=base):  # RMM's, a default bound: RMM's shape by name
        seen.append(("a", stream))
        return base.allocate(nbytes, stream)

    def rmm_free(p, n, stream, base=base):
        seen.append(("f", stream))
        base.deallocate(p, n, stream)

    r = devmm.CallbackMemoryResource(rmm_alloc, rmm_free)
    t = devmm.empty(10, "int8", resource=r)
    del t
    assert seen == [("a", None), ("f", None)]
    live, got = {}, []
    alloc = _host(live)

    def dev_alloc(nbytes, alignment, stream=None, extra=0):  # devmm's, by `alignment`
        got.append(alignment)
        return alloc(nbytes)

    def dev_free(p, n, alignment, s=None, extra=0):
        got.append(alignment)
        del live[p]

    d = devmm.CallbackMemoryResource(dev_alloc, dev_free)
    p = d.allocate(8, 128)
    d.deallocate(p, 8, 128)
    assert got == [128, 128] and not live

    def by_count(n, s, x=None):  # no telling name: the required count (2, RMM's)
        got.append(("count", s, x))
        return alloc(n)

    c = devmm.CallbackMemoryResource(by_count, lambda p, n, s: live.pop(p))
    p = c.allocate(8)
    c.deallocate(p, 8)
    assert got[-1] == ("count", None, None) and not live


def test_failure_callback_shape_by_parameter_names():
    seen = []

    def rmm(nbytes, tries=3):  # RMM's one required parameter, a default: RMM's (nbytes)
        seen.append(tries)
        return False

    def dev(nbytes, attempt, log=None):  # devmm's, by `attempt`
        seen.append(attempt)
        return False

    limited = devmm.LimitingAdaptor(MallocMemoryResource(), 10)
    for cb in (rmm, dev):
        with pytest.raises(devmm.OutOfMemoryError):
            devmm.FailureCallbackAdaptor(limited, cb).allocate(100)
    assert seen == [3, 0]  # devmm counts attempts from 0


# ----------------------------------------------------------------------------- the minor ones

def test_limiting_names_allocation_limit_in_its_refusal():
    with pytest.raises(ValueError, match=r"^LimitingAdaptor: allocation_limit = 0 would"):
        devmm.LimitingAdaptor(MallocMemoryResource(), allocation_limit=0)
    with pytest.raises(ValueError, match=r"^LimitingAdaptor: limit = 0 would"):
        devmm.LimitingAdaptor(MallocMemoryResource(), 0)


def test_prefetch_takes_rmms_int_device(tmp_path):
    (tmp_path / "devmm.ini").write_text("[devmm]\nplugins = cpu, sim\n[device sim:*]\n"
                                        "resource = sim.managed\n")
    devmm.init(str(tmp_path / "devmm.ini"))
    t = devmm.zeros(4096, "uint8", device="sim:0")  # sim_managed:0, home sim:0
    assert t.prefetch(0) is True and t.buffer.prefetch(device=0) is True
    assert devmm.prefetch(t, np.int64(0)) is True
    with pytest.raises(devmm.DevmmValueError, match="prefetch to sim:1"):
        devmm.prefetch(t, 1)
    for bad in (True, -1):
        with pytest.raises((TypeError, ValueError), match="device"):
            t.prefetch(bad)
    assert devmm.prefetch(devmm.empty(8, "uint8"), 0) is False  # cpu:0: nothing moves
    t.buffer.free()


BOOL = r"got (bool|bool_) (True|np.True_) \(an int, not a bool\)$"


def test_levels_take_numpy_integers_not_bools():
    was = devmm.get_logging_level()
    try:
        devmm.set_logging_level(np.int64(2))
        assert devmm.get_logging_level() == devmm.level_enum.info
        with pytest.raises(TypeError, match=BOOL):
            devmm.set_logging_level(True)
        with pytest.raises(TypeError, match=BOOL):
            devmm.set_logging_level(np.True_)
    finally:
        devmm.set_logging_level(was)


def test_capture_stacks_names_a_numpy_bool():
    with pytest.raises(TypeError, match=r"capture_stacks must be True or False \(a Python "
                                        r"bool\), got numpy\.bool"):
        devmm.TrackingAdaptor(MallocMemoryResource(), capture_stacks=np.True_)

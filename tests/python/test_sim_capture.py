"""Graph capture and the per-thread default stream on the simulator, from Python (ADR 37, 38):
the simulator's capture rules through ``runtime()``, and devmm's exports at that boundary and
across threads (the C suite sim_capture holds the rest)."""

import threading

import pytest

import devmm
from devmm.mrs.sim import SimAsyncMemoryResource, SimMemoryResource, runtime


@pytest.fixture
def sim(tmp_path):
    """devmm with the sim plugin (2 devices, sim.async on each), without jitter."""
    ini = tmp_path / "sim.ini"
    ini.write_text("[devmm]\nplugins = cpu, sim\n[plugin sim]\ndevices = 2\njitter_us = 0\n"
                   "[device sim:*]\nresource = sim.async\n")
    devmm.init(str(ini))
    rt = runtime()
    rt.inject(None)
    rt.set_device(0)
    yield rt
    rt.synchronize()


def on_thread(fn):
    """fn() on a new thread: its result, or the exception it raised."""
    out = []

    def run():
        try:
            out.append(fn())
        except Exception as e:  # handed back to the test
            out.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out[0]


def test_a_global_capture_is_invalidated_by_another_threads_device_synchronize(sim):
    s = sim.stream(0)
    sim.begin_capture(s, "global")
    assert sim.capture_status(s)[0] == "active"
    err = on_thread(lambda: sim.synchronize(0))
    assert isinstance(err, devmm.DevmmError) and "StreamCaptureUnsupported" in str(err)
    assert sim.capture_status(s)[0] == "invalidated"
    with pytest.raises(devmm.DevmmError, match="simErrorStreamCaptureInvalidated"):
        sim.end_capture(s)
    sim.begin_capture(s, "thread_local")  # only this thread's calls count
    assert on_thread(lambda: sim.synchronize(0)) is None
    g = sim.end_capture(s)
    assert g.nodes == 0
    g.destroy()
    s.destroy()


def test_an_export_inside_a_capture_never_uses_the_legacy_stream(sim):
    t = devmm.zeros(4096, "uint8", resource=SimAsyncMemoryResource(0))  # on the legacy stream
    s = sim.stream(0)
    sim.begin_capture(s, "global")
    t.__dlpack__(stream=s.handle)  # recorded nothing on the legacy stream
    ok = sim.check(s, t.data_ptr, 0, 4096)
    g = sim.end_capture(s)  # not invalidated
    g.launch(s)
    s.synchronize()
    assert ok.value == 1
    g.destroy()
    s.destroy()


def test_device_malloc_inside_a_capture_is_refused_with_a_message(sim):
    s = sim.stream(0)
    sim.begin_capture(s, "global")
    with pytest.raises(devmm.DevmmStateError, match="refused .*graph capture"):
        devmm.empty(256, "uint8", resource=SimMemoryResource(0), stream=s.handle)
    g = sim.end_capture(s)  # the refusal did not invalidate it
    g.destroy()
    s.destroy()


def test_a_per_thread_stream_tensor_exported_on_another_thread_waits_for_its_thread(sim):
    t = devmm.empty(1 << 16, "uint8", resource=SimAsyncMemoryResource(0), stream=2)
    sim.launch(2, lambda: __import__("time").sleep(0.2))  # this thread's stream 2 is busy
    sim.fill(2, t.data_ptr, 0x11, 1 << 16)

    def consume():
        b = sim.stream(0)
        t.__dlpack__(stream=b.handle)  # b must wait for the allocating thread's stream 2
        ok = sim.check(b, t.data_ptr, 0x11, 1 << 16)
        b.synchronize()
        b.destroy()
        return ok.value

    assert on_thread(consume) == 1


def test_legacy_stream_alloc_and_free_during_a_blocking_capture_are_refused_not_invalidating(sim):
    # devmm.empty's default stream is the legacy stream, unusable while a blocking stream
    # captures: devmm asks (a question invalidates nothing) and refuses before the call
    t = devmm.empty(4096, "uint8", device="sim:0")
    sim.synchronize()
    s = sim.stream(0)  # blocking, as cupy.cuda.Stream() is by default
    sim.begin_capture(s, "global")
    with pytest.raises(devmm.DevmmStateError, match="refused while a blocking stream"):
        devmm.empty(4096, "uint8", device="sim:0")
    del t  # its free on the legacy stream waits for the capture's end
    assert sim.capture_status(s)[0] == "active"
    g = sim.end_capture(s)  # not invalidated
    g.destroy()
    s.destroy()


def test_an_export_into_a_nonblocking_capture_waits_for_the_legacy_streams_work(sim):
    # a non-blocking capturing stream is not ordered after the legacy stream, even at the graph's
    # launch: the export waits for the producer's legacy-stream work on the host (the legacy
    # stream is usable during a capture on a non-blocking stream)
    t = devmm.empty(4096, "uint8", resource=SimAsyncMemoryResource(0))  # on the legacy stream
    ptr = t.data_ptr

    def slow_fill():
        __import__("time").sleep(0.3)
        sim.write(ptr, b"\x11" * 4096)

    sim.launch(None, slow_fill)  # pending legacy-stream work producing t
    s = sim.stream(0, nonblocking=True)
    sim.begin_capture(s, "global")
    t.__dlpack__(stream=s.handle)
    ok = sim.check(s, ptr, 0x11, 4096)
    g = sim.end_capture(s)
    g.launch(s)
    s.synchronize()
    assert ok.value == 1, "the graph ran before the producer's legacy-stream work"
    g.destroy()
    s.destroy()

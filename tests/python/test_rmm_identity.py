"""RMM code run on devmm (docs/from-rmm.md, ADR 41): the current resource comes back as the same
object each time, whoever built it; setting one returns the previous one even as the very first
call of a process, on any device; and an existing allocation of managed memory is prefetched
(RMM's ``DeviceBuffer.prefetch``), memory that does not move being left as it is."""

import ctypes
import os
import subprocess
import sys
import textwrap
import threading

import pytest

import devmm
from devmm.mrs import sim as simmrs
from devmm.mrs.cpu import MallocMemoryResource

SIM = ("[devmm]\nplugins = cpu, sim\n[plugin sim]\ndevices = 1\nmemory = 64MiB\njitter_us = 0\n"
       "[device sim:*]\nresource = sim.managed\nadaptors = statistics\n")


def fresh(tmp_path, body):
    """Runs body in a fresh interpreter with DEVMM_CONFIG = SIM; its stdout, or the test fails."""
    ini = tmp_path / "devmm.ini"
    ini.write_text(SIM)
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(body)], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, DEVMM_CONFIG=str(ini)))
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


# ----------------------------------------------------------------------------- identity


@pytest.mark.parametrize("device", ["cpu", "sim:0"])
def test_the_configured_resource_comes_back_as_the_same_object(tmp_path, device):
    (tmp_path / "devmm.ini").write_text(SIM)
    devmm.init(str(tmp_path / "devmm.ini"))
    a = devmm.get_current_device_resource(device)
    assert devmm.get_current_device_resource(device) is a  # RMM's test_context does `is`
    mine = MallocMemoryResource() if device == "cpu" else simmrs.ManagedMemoryResource(0)
    previous = devmm.set_current_device_resource(mine, device=device)
    assert previous is a                      # what get gave, not a second wrapper of it
    assert devmm.get_current_device_resource(device) is mine
    assert devmm.set_current_device_resource(previous, device=device) is mine
    assert devmm.get_current_device_resource(device) is a
    devmm.set_current_device_resource(mine, device=device)
    devmm.reset_current_device_resource(device)
    assert devmm.get_current_device_resource(device) is a


def test_init_drops_the_object_of_the_resource_it_replaced(tmp_path):
    (tmp_path / "devmm.ini").write_text(SIM)
    devmm.init(str(tmp_path / "devmm.ini"))
    refs = ctypes.CDLL(devmm._lib.LIBRARY_PATH).devmm_resource_refcount  # the test's own binding
    refs.restype, refs.argtypes = ctypes.c_long, [ctypes.c_void_p]
    a = devmm.get_current_device_resource("sim:0")
    h = a.handle
    devmm.init(str(tmp_path / "devmm.ini"))
    b = devmm.get_current_device_resource("sim:0")
    assert b is not a and b.handle != h and devmm.get_current_device_resource("sim:0") is b
    assert refs(h) == 1  # only `a` holds the replaced stack: no cache keeps it alive
    del a


def test_threads_get_one_object(tmp_path):
    (tmp_path / "devmm.ini").write_text(SIM)
    devmm.init(str(tmp_path / "devmm.ini"))
    got, start = [], threading.Barrier(8)

    def get():
        start.wait()
        got.append(devmm.get_current_device_resource("cpu"))
    threads = [threading.Thread(target=get) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(r) for r in got}) == 1
    assert devmm.get_current_device_resource("cpu") is got[0]


def test_a_set_racing_a_get_keeps_its_object():
    # a get that wraps C's resource while another thread sets one must not store its wrapper
    # over the set one (docs/api.md, the registry: one object while it is current)
    lost, was = 0, sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(100):
            devmm.init()
            mine, stop = MallocMemoryResource(), threading.Event()

            def getter():
                while not stop.is_set():
                    devmm.get_current_device_resource()
            t = threading.Thread(target=getter)
            t.start()
            devmm.set_current_device_resource(mine)
            stop.set()
            t.join()
            lost += devmm.get_current_device_resource() is not mine
    finally:
        sys.setswitchinterval(was)
    assert lost == 0, f"the set object was lost in {lost} of 100 runs"


def test_a_set_landing_inside_a_get_is_kept(monkeypatch):
    # the same race made certain: another thread's set starts while a get is wrapping C's
    # resource; it completes only after the get, and its object is the current one after both
    import devmm.resource as R
    mine, done, setter = MallocMemoryResource(), [], []
    wrap = R.typed

    def slow_typed(h):
        monkeypatch.setattr(R, "typed", wrap)
        t = threading.Thread(target=lambda: done.append(devmm.set_current_device_resource(mine)))
        setter.append(t)
        t.start()
        t.join(1.0)  # a set that waits for the get waits here the whole second
        return wrap(h)
    monkeypatch.setattr(R, "typed", slow_typed)
    got = devmm.get_current_device_resource()
    setter[0].join(10)
    assert done and done[0] is got  # the set replaced what the get returned
    assert devmm.get_current_device_resource() is mine


def test_identity_in_a_forked_child(tmp_path):
    out = fresh(tmp_path, """
        import os, devmm
        a = devmm.get_current_device_resource()
        pid = os.fork()
        if pid == 0:
            b = devmm.get_current_device_resource()
            os._exit(0 if b is a and devmm.get_current_device_resource() is b else 1)
        print(os.waitpid(pid, 0)[1])
    """)
    assert out.split() == ["0"]


# ----------------------------------------------------------------------------- set as first call


@pytest.mark.parametrize("device", ["cpu", "sim:0"])
def test_set_returns_the_previous_resource_as_the_first_call(tmp_path, device):
    # docs/api.md's idiom, in a process whose first devmm call is the set (a resource built
    # from Python callbacks initialises nothing; a sim one only the sim runtime)
    mine = ("devmm.CallbackMemoryResource(lambda n, a, s: 0, lambda *a: None)" if device == "cpu"
            else "devmm.StatisticsAdaptor(simmrs.ManagedMemoryResource(0))")
    out = fresh(tmp_path, f"""
        import devmm
        from devmm.mrs import sim as simmrs
        mr = {mine}
        assert {device == "sim:0"} or not devmm.is_initialized()
        previous = devmm.set_current_device_resource(mr, device={device!r})
        print(previous.name)
        print(devmm.get_current_device_resource({device!r}) is mr)
        devmm.set_current_device_resource(previous, device={device!r})
        print(devmm.get_current_device_resource({device!r}) is previous)
    """)
    configured = "cpu.malloc" if device == "cpu" else "statistics(sim.managed)"
    assert out.split() == [configured, "True", "True"]


# ----------------------------------------------------------------------------- prefetch


def sim_init(tmp_path):
    (tmp_path / "devmm.ini").write_text(SIM)
    devmm.init(str(tmp_path / "devmm.ini"))
    return simmrs.runtime()


def test_prefetch_an_existing_allocation_of_managed_memory(tmp_path):
    rt = sim_init(tmp_path)
    t = devmm.zeros(4096, "uint8", device="sim:0")   # statistics(sim.managed)
    assert devmm.prefetch(t) is True
    assert t.prefetch(stream=None) is True and t.buffer.prefetch(device="sim:0") is True
    rt.inject("MemPrefetchAsync", 0, 2)               # the prefetch is made: its failure is said
    with pytest.raises(devmm.DevmmError, match=r"sim.managed on sim:0: simMemPrefetchAsync"):
        devmm.prefetch(t)
    rt.inject(None)
    s = rt.stream(0)
    assert devmm.prefetch(t.buffer, stream=s.handle) is True   # on a stream of the caller's
    s.synchronize()
    s.destroy()


def test_prefetch_leaves_memory_that_does_not_move_as_rmm_does(tmp_path):
    sim_init(tmp_path)
    assert devmm.prefetch(devmm.empty(64, "uint8")) is False     # cpu.malloc
    assert devmm.prefetch(devmm.empty(64, "uint8"), device="sim:0") is False  # whatever device
    dev = devmm.empty(64, "uint8", resource=simmrs.SimMemoryResource(0))
    assert dev.prefetch() is False                                # sim.device


def test_prefetch_refuses_what_it_cannot_do(tmp_path):
    sim_init(tmp_path)
    t = devmm.empty(64, "uint8", device="sim:0")
    with pytest.raises(devmm.DevmmError, match=r"prefetch to cpu: .*moves memory only to its own "
                                               r"device \(sim:0\)"):
        devmm.prefetch(t, device="cpu")
    with pytest.raises(TypeError, match="devmm.prefetch: expected a devmm Tensor or Buffer"):
        devmm.prefetch(b"abc")
    b = devmm.Buffer(64, device="sim:0")
    b.free()
    with pytest.raises(devmm.DevmmError, match="freed"):
        b.prefetch()

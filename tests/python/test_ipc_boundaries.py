"""CUDA's boundaries on IPC, as devmm honours them over the simulator (ADR 38 §Threads and
contexts; IPC opens): a handle is taken on any thread (multiprocessing pickles on its feeder
thread), a handle that cannot be taken raises instead of becoming a copy, and a handle opened in
the process that made it is that process's own memory."""

import gc
import multiprocessing
import threading
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest

import devmm
from devmm.mrs.sim import SimMemoryResource, runtime


@pytest.fixture
def sim(tmp_path, monkeypatch):
    ini = tmp_path / "sim.ini"
    ini.write_text("[devmm]\nplugins = cpu, sim\n[plugin sim]\njitter_us = 50\n"
                   "[device sim:*]\nresource = sim.device\n")
    monkeypatch.setenv("DEVMM_CONFIG", str(ini))  # a spawned child reads it too
    devmm.init(str(ini))
    rt = runtime()
    rt.inject(None)
    yield rt
    rt.inject(None)
    devmm.ipc.release_held()


def sim_tensor(n: int = 1 << 16) -> devmm.Tensor:
    host = devmm.empty((n,), "uint8")
    np.asarray(host)[:] = 5
    return host.copy("sim:0")


def test_a_handle_is_taken_on_a_thread_that_never_used_the_device(sim):
    t = sim_tensor()
    out = {}

    def pickle_here() -> None:  # as multiprocessing's queue feeder thread does
        try:
            out["bytes"] = bytes(ForkingPickler.dumps(t))
        except Exception as e:  # noqa: BLE001 - reported below
            out["error"] = e
    th = threading.Thread(target=pickle_here)
    th.start()
    th.join()
    assert "error" not in out, out.get("error")
    assert len(out["bytes"]) < 4096, "the tensor went by value, not by handle"


def test_a_handle_that_cannot_be_taken_raises_and_never_becomes_a_copy(sim):
    t = sim_tensor()
    sim.inject("IpcGetMemHandle", 0, 999)
    with pytest.raises(devmm.DevmmError) as e:
        ForkingPickler.dumps(t)
    assert "cannot send this sim:0 tensor to another process by handle" in str(e.value)
    assert "simIpcGetMemHandle" in str(e.value)


def test_a_handle_opened_by_its_exporter_is_its_own_memory(sim):
    t = sim_tensor(1024)
    u = devmm.open_ipc(t.ipc_handle())
    assert u.data_ptr == t.data_ptr  # CUDA opens nothing here: devmm gives the memory itself
    assert (np.asarray(u.copy("cpu")) == 5).all()
    del u
    assert (np.asarray(t.copy("cpu")) == 5).all()  # closing it freed nothing


def test_sim_device_resources_share_isolated_or_packed(sim):
    assert devmm.ipc.supported(SimMemoryResource(0))
    assert devmm.ipc.supported(SimMemoryResource(0, ipc_isolate=False))


def child_reads_later(inbox, outbox):
    """Opens the tensor sent, says so, waits for the word, then reads it."""
    t = inbox.get(timeout=60)
    outbox.put("opened")
    inbox.get(timeout=60)
    try:
        outbox.put(bool((np.asarray(t.copy("cpu")) == 5).all()))
    except devmm.DevmmError as e:
        outbox.put(str(e))


def test_device_memory_outlives_the_senders_hold_while_a_receiver_maps_it(sim):
    """The sender's hold ends (its timer, here release_held) while the receiver still maps the
    memory: the exporter's plugin keeps it until the receiver closes (ADR 38), so the receiver
    reads the bytes, never the simulator's fault."""
    t = sim_tensor(4096)
    ctx = multiprocessing.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=child_reads_later, args=(inbox, outbox))
    p.start()
    inbox.put(t)
    assert outbox.get(timeout=60) == "opened"
    del t
    devmm.ipc.release_held()  # what keep_alive's timer does
    gc.collect()
    inbox.put("go")
    assert outbox.get(timeout=60) is True
    p.join(60)
    assert p.exitcode == 0
    sim_tensor(16).buffer.free()  # the plugin's next free does the deferred one

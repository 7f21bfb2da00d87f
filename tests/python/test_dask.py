"""devmm.dask on a real cluster: distributed.LocalCluster with two worker processes. Every worker
takes one devmm.ini through DevmmPlugin; tasks allocate through devmm; statistics come back per
worker; a worker's limit trips as devmm's OutOfMemoryError in the client; a tensor crosses
workers by IPC handle (the same memory: a write on one worker is seen on the other, and the
receiver allocated nothing)."""
import os

import numpy as np
import pytest

import devmm

try:
    import distributed
except ImportError as e:  # a test requirement: a missing one fails, it is never a skip
    pytest.fail(f"test_dask.py needs distributed ({e}): it is in tools/requirements-test.txt "
                f"(make deps installs it)", pytrace=False)
import devmm.dask  # noqa: E402

REGISTERED_AT_IMPORT = bool(devmm.dask._registered)  # before any test could register it by hand

LIMIT = 4 << 20
INI = ("[devmm]\nplugins = cpu, sim\n[plugin sim]\ndevices = 1\nmemory = 16MiB\n"
       "[device cpu]\nresource = cpu.shm\n"
       f"adaptors = statistics, limiting\nlimit = {LIMIT}\n"
       "[device sim:0]\nresource = sim.device\nadaptors = statistics\n")


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None, worker_dashboard_address=None)
    c = distributed.Client(cluster, timeout=60)
    try:  # no register_serializers() here: importing devmm.dask did it
        c.register_plugin(devmm.dask.DevmmPlugin(config=INI))
        yield c
    finally:
        c.close()
        cluster.close()


def workers(client):
    return sorted(client.scheduler_info()["workers"])


def make(n, value):
    t = devmm.empty((n,), "int32")  # the worker's current resource: from the plugin's config
    np.asarray(t)[:] = value
    return t


def stack():
    return devmm.get_current_device_resource("cpu").name, os.getpid()


def touch(t):
    """On the receiving worker: reads the tensor, writes a mark into it."""
    a = np.asarray(t)
    total = int(a.sum())
    a[0] = -1
    return total, t.buffer.resource.name, devmm.dask._received.copy()


def first(t):
    return int(np.asarray(t)[0])


def cpu_rows(client):
    return {r["worker"]: r for r in devmm.dask.statistics(client) if r["device"] == "cpu"}


def make_sim(n, value):
    h = devmm.empty((n,), "float32")
    np.asarray(h)[:] = value
    return h.copy("sim:0")


def sim_total(t):
    return float(np.asarray(t.copy("cpu")).sum()), t.buffer.resource.name


def add_one(t):
    """Returns the tensor it received (a mapping of the exporter's memory), one added."""
    np.asarray(t)[:] += 1
    return t


def total(t):
    return int(np.asarray(t).sum())


def test_every_worker_takes_the_configuration(client):
    got = client.run(stack)
    assert len(got) == 2
    assert {name for name, _ in got.values()} == {"limiting(statistics(cpu.shm))"}
    assert len({pid for _, pid in got.values()}) == 2  # two processes


def test_tasks_allocate_through_devmm_and_statistics_come_back_per_worker(client):
    a, b = workers(client)
    before = {(r["worker"], r["device"]): r for r in devmm.dask.statistics(client)}
    x = client.submit(make, 1000, 1, workers=[a], pure=False)
    y = client.submit(make, 2000, 2, workers=[b], pure=False)
    distributed.wait([x, y])
    rows = [r for r in devmm.dask.statistics(client) if r["device"] == "cpu"]
    assert sorted(r["worker"] for r in rows) == [a, b]
    now = {(r["worker"], r["device"]): r for r in rows}
    assert now[(a, "cpu")]["stack"] == "limiting(statistics(cpu.shm))"
    assert now[(a, "cpu")]["current_bytes"] - before[(a, "cpu")]["current_bytes"] >= 4000
    assert now[(b, "cpu")]["current_bytes"] - before[(b, "cpu")]["current_bytes"] >= 8000
    del x, y


def test_a_limit_trips_as_devmms_out_of_memory_error(client):
    a = workers(client)[0]
    f = client.submit(make, LIMIT, 0, workers=[a], pure=False)  # 4 bytes each: 4x the limit
    with pytest.raises(devmm.OutOfMemoryError, match="limit"):
        f.result(timeout=60)
    assert client.submit(make, 16, 3, workers=[a], pure=False).result(timeout=60) is not None


def test_a_tensor_crosses_workers_zero_copy(client):
    a, b = workers(client)
    x = client.submit(make, 1 << 16, 2, workers=[a], pure=False)
    distributed.wait(x)
    before = cpu_rows(client)
    total, name, received = client.submit(touch, x, workers=[b], pure=False).result(timeout=60)
    assert total == 2 << 16  # the same contents
    assert name == "ipc(cpu.shm)"  # a mapping of worker a's memory
    assert received["ipc_received"] >= 1
    after = cpu_rows(client)
    assert after[b]["copies_received"] == before[b]["copies_received"]  # no copy
    assert after[b]["ipc_received"] == before[b]["ipc_received"] + 1
    assert after[b]["total_count"] == before[b]["total_count"]  # b allocated nothing
    # the mark b wrote is in a's memory: it was never copied
    assert client.submit(first, x, workers=[a], pure=False).result(timeout=60) == -1


def test_route_needs_the_framework():
    with pytest.raises(ValueError, match="route = 'jax': expected any of torch, cupy"):
        devmm.dask.DevmmPlugin(route=("jax",))
    plugin = devmm.dask.DevmmPlugin(config=INI, route=("cupy",))
    assert isinstance(plugin, distributed.WorkerPlugin)
    import sys
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if k.split(".")[0] == "cupy"}
    sys.modules["cupy"] = None  # a worker without CuPy, whether or not this machine has it
    try:
        with pytest.raises(ImportError, match="devmm.interop.cupy needs cupy"):
            plugin.setup(None)  # what a worker without CuPy reports
    finally:
        del sys.modules["cupy"]
        sys.modules.update(saved)
    devmm.init()


def test_the_plugin_cleans_up(tmp_path):
    """Teardown gives the worker back the configuration it had."""
    usual = tmp_path / "usual.ini"
    usual.write_text("[devmm]\nplugins = cpu\n[device cpu]\nresource = cpu.mmap\n")
    devmm.init(str(usual))  # what the worker ran before the plugin came
    work = tmp_path / "worker"
    work.mkdir()
    plugin = devmm.dask.DevmmPlugin(config=INI)

    class Worker:
        local_directory = str(work)

    plugin.setup(Worker())
    assert devmm.get_current_device_resource("cpu").name == "limiting(statistics(cpu.shm))"
    assert len(list(work.iterdir())) == 1  # the configuration it wrote
    plugin.teardown(Worker())
    assert list(work.iterdir()) == []
    assert devmm.get_current_device_resource("cpu").name == "cpu.mmap"
    devmm.init()


def test_the_serializer_sends_bytes_unless_sender_and_recipient_share_a_host():
    from distributed.protocol import deserialize, serialize
    from devmm.mrs.cpu import SharedMemoryResource
    t = devmm.empty((1000,), "int32", resource=SharedMemoryResource())
    np.asarray(t)[:] = 5
    def between(a, b):
        return {"sender": {"address": a}, "recipient": {"address": b}}
    here = between("tcp://10.0.0.1:1", "tcp://10.0.0.1:2")
    away = between("tcp://10.0.0.1:1", "tcp://10.0.0.2:2")
    for context, kind in ((here, "ipc"), (away, "value"), (None, "value")):
        header, frames = serialize(t, serializers=["dask"], context=context)
        assert header["sub-header"]["devmm"] == kind, (context, header)
        size = sum(len(memoryview(f).cast("B")) for f in frames)
        assert (size < 1024) if kind == "ipc" else (size >= t.nbytes)
        u = deserialize(header, frames)
        assert (np.asarray(u) == 5).all()
        assert u.data_ptr != t.data_ptr
    # memory that cannot be shared goes by value even to the same host
    m = devmm.empty((10,), "int32")
    assert serialize(m, serializers=["dask"], context=here)[0]["sub-header"]["devmm"] == "value"


# ------------------------------------------------ serializing, replicas, sending on

def test_importing_devmm_dask_registers_the_serializer_for_the_client(client):
    """The docs' example calls no register_serializers(); a gather must work."""
    assert REGISTERED_AT_IMPORT
    a = workers(client)[0]
    x = client.submit(make, 100, 4, workers=[a], pure=False)
    got = x.result(timeout=60)
    assert isinstance(got, devmm.Tensor) and int(np.asarray(got).sum()) == 400


def test_device_memory_crosses_by_value_and_survives_the_exporters_replica_removal(client):
    """Dask's memory manager may drop the exporter's replica while another worker
    holds its copy; device memory therefore goes by value (a mapping would read freed
    memory: the simulator's 0xDD poison)."""
    a, b = workers(client)
    x = client.submit(make_sim, 1000, 1.0, workers=[a], pure=False)
    distributed.wait(x)
    before = cpu_rows(client)
    assert client.submit(sim_total, x, workers=[b], pure=False).result(timeout=60)[0] == 1000.0
    after = cpu_rows(client)
    assert after[b]["copies_received"] == before[b]["copies_received"] + 1
    assert after[b]["ipc_received"] == before[b]["ipc_received"]
    assert set(client.who_has(x)[x.key]) == {a, b}

    async def drop(dask_scheduler, key, address):
        dask_scheduler.worker_send(address, {"op": "remove-replicas", "keys": [key],
                                             "stimulus_id": "test-drop"})

    client.run_on_scheduler(drop, key=x.key, address=a)
    import time
    deadline = time.monotonic() + 20
    while set(client.who_has(x)[x.key]) != {b} and time.monotonic() < deadline:
        time.sleep(0.05)
    assert set(client.who_has(x)[x.key]) == {b}
    total_b, name = client.submit(sim_total, x, workers=[b], allow_other_workers=False,
                                  pure=False).result(timeout=60)
    assert total_b == 1000.0  # b's own copy: the exporter's free took nothing from it
    assert "ipc" not in name


def test_a_received_tensor_travels_on(client):
    """A tensor b received by handle, returned by b, reaches a and the client."""
    a, b = workers(client)
    x = client.submit(make, 1000, 1, workers=[a], pure=False)
    y = client.submit(add_one, x, workers=[b], pure=False)  # b returns its mapping
    z = client.submit(total, y, workers=[a], pure=False)
    assert z.result(timeout=30) == 2000
    assert int(np.asarray(y.result(timeout=30)).sum()) == 2000  # the client gathers b's copy

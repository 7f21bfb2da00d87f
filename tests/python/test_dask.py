"""devmm.dask on a real cluster: distributed.LocalCluster with two worker processes. Every worker
takes one devmm.ini through DevmmPlugin; tasks allocate through devmm; statistics come back per
worker; a worker's limit trips as devmm's OutOfMemoryError in the client; a tensor crosses
workers by IPC handle (the same memory: a write on one worker is seen on the other, and the
receiver allocated nothing)."""
import os

import numpy as np
import pytest

import devmm

distributed = pytest.importorskip("distributed", reason="distributed is in "
                                  "tools/requirements-test.txt (make deps installs it)")
import devmm.dask  # noqa: E402

LIMIT = 4 << 20
INI = ("[devmm]\nplugins = cpu\n[device cpu]\nresource = cpu.shm\n"
       f"adaptors = statistics, limiting\nlimit = {LIMIT}\n")


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None, worker_dashboard_address=None)
    c = distributed.Client(cluster, timeout=60)
    try:
        devmm.dask.register_serializers()
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
    rows = devmm.dask.statistics(client)
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
    before = {r["worker"]: r for r in devmm.dask.statistics(client)}
    total, name, received = client.submit(touch, x, workers=[b], pure=False).result(timeout=60)
    assert total == 2 << 16  # the same contents
    assert name == "ipc(cpu.shm)"  # a mapping of worker a's memory
    assert received["ipc_received"] >= 1
    after = {r["worker"]: r for r in devmm.dask.statistics(client)}
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
    import importlib.util
    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("CuPy is installed: routing needs a GPU, which tests/gpu/ covers")
    with pytest.raises(ImportError, match="devmm.interop.cupy needs cupy"):
        plugin.setup(None)  # what a worker without CuPy reports
    devmm.init()


def test_the_plugin_cleans_up(tmp_path):
    plugin = devmm.dask.DevmmPlugin(config=INI)

    class Worker:
        local_directory = str(tmp_path)

    plugin.setup(Worker())
    assert devmm.get_current_device_resource("cpu").name == "limiting(statistics(cpu.shm))"
    assert len(list(tmp_path.iterdir())) == 1  # the configuration it wrote
    plugin.teardown(Worker())
    assert list(tmp_path.iterdir()) == []
    assert not devmm._lib.is_initialized() or \
        devmm.get_current_device_resource("cpu").name == "cpu.malloc"
    devmm.init()


def test_the_serializer_sends_bytes_unless_sender_and_recipient_share_a_host():
    from distributed.protocol import deserialize, serialize
    from devmm.mrs.cpu import SharedMemoryResource
    devmm.dask.register_serializers()
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

"""Tensors shared between real processes (devmm.ipc, ADR 30): multiprocessing with the spawn and
fork contexts, ProcessPoolExecutor, pickling by handle or by value, the lifetime rules (a freed or
exited exporter), bad handles (a clear error, never a crash: forged ones run in a subprocess),
and no descriptor or mapping left behind."""
import concurrent.futures
import gc
import multiprocessing
import os
import pickle
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import devmm
from devmm.errors import StaleHandleError
from devmm.mrs.cpu import MallocMemoryResource, SharedMemoryResource


def shm_usage(pid="self"):
    """(descriptors, mappings) of a process that are cpu.shm memfds."""
    fds = 0
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            fds += "memfd:devmm-cpu.shm" in os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            pass
    with open(f"/proc/{pid}/maps") as f:
        maps = sum("devmm-cpu.shm" in line for line in f)
    return fds, maps


def shared(shape, dtype="int64", resource=None):
    return devmm.empty(shape, dtype, resource=resource or SharedMemoryResource())


# ---------------------------------------------------------------- children (top level: spawn)

def child_add_one(inbox, outbox):
    """Gets a tensor (unpickled: opened by handle), checks it, adds one in place, reports."""
    before = shm_usage()  # a forked child has the parent's descriptors and mappings too
    t = inbox.get(timeout=60)
    a = np.asarray(t)
    ok = bool((a == np.arange(a.size).reshape(a.shape)).all())
    a += 1
    del a
    outbox.put((ok, t.shape, t.dtype, os.getpid(), shm_usage()))
    del t
    outbox.put((before, shm_usage()))  # after the opened tensor is gone


def child_make(n):
    """A ProcessPoolExecutor task: a new shared tensor filled with n, returned by handle."""
    t = shared((1000,), "int32")
    np.asarray(t)[:] = n
    return t


def child_sum(t):
    return int(np.asarray(t).sum()), os.getpid()


def child_sim_fill(inbox, outbox):
    """On sim device memory: reads it through a copy, writes 7s back through a copy."""
    t = inbox.get(timeout=60)
    host = np.asarray(t.copy("cpu"))
    ok = bool((host == np.arange(host.size, dtype=host.dtype)).all())
    seven = devmm.empty(t.shape, t.dtype)
    np.asarray(seven)[:] = 7
    devmm.ipc  # the module is loaded by unpickling
    r = t.buffer.resource
    from devmm import _lib
    _lib.check(_lib.copy(r._h, t.data_ptr, seven.data_ptr, t.nbytes, None))
    _lib.check(_lib.synchronize(r._h, None))
    outbox.put(ok)
    del t


def round_trip(ctx_name):
    ctx = multiprocessing.get_context(ctx_name)
    t = shared((4, 5))
    np.asarray(t)[:] = np.arange(20).reshape(4, 5)
    inbox, outbox = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=child_add_one, args=(inbox, outbox))
    p.start()
    inbox.put(t)
    ok, shape, dtype, pid, usage = outbox.get(timeout=60)
    after = outbox.get(timeout=60)
    p.join(60)
    assert p.exitcode == 0
    assert ok and shape == (4, 5) and dtype == "int64"
    assert pid != os.getpid()
    assert usage[1] >= after[0][1] + 1  # the child mapped it ...
    assert after[1] == after[0]  # ... and let go of it with the tensor
    assert (np.asarray(t) == np.arange(1, 21).reshape(4, 5)).all()  # the child's write
    return t


# JAX (imported by other tests of the session) warns at any fork; this child touches neither JAX
# nor its threads: it only unpickles, maps and writes through NumPy
@pytest.mark.filterwarnings(r"ignore:os\.fork\(\) was called:RuntimeWarning")
@pytest.mark.parametrize("ctx_name", ["spawn", "fork"])
def test_a_write_in_the_child_is_seen_by_the_parent(ctx_name):
    t = round_trip(ctx_name)
    del t
    devmm.ipc.release_held()
    assert shm_usage() == (0, 0)  # nothing left in the parent either


def test_no_leak_after_both_exit_and_statistics_count_the_export_once():
    stats = devmm.StatisticsAdaptor(SharedMemoryResource())
    ctx = multiprocessing.get_context("spawn")
    t = shared((10, 10), resource=stats)
    np.asarray(t)[:] = np.arange(100).reshape(10, 10)
    inbox, outbox = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=child_add_one, args=(inbox, outbox))
    p.start()
    inbox.put(t)
    assert outbox.get(timeout=60)[0]
    outbox.get(timeout=60)
    p.join(60)
    assert not os.path.exists(f"/proc/{p.pid}/fd")  # the child is gone
    assert stats.statistics.current_bytes >= t.nbytes
    assert stats.statistics.total_count == 1  # the child's mapping is no allocation here
    del t
    devmm.ipc.release_held()
    assert stats.statistics.current_bytes == 0
    assert shm_usage() == (0, 0)
    assert not [f for f in os.listdir("/dev/shm") if "devmm" in f]  # memfds name nothing there


def test_process_pool_passes_tensors_both_ways():
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
        made = list(pool.map(child_make, [3, 4]))  # returned by handle: held for keep_alive
        assert [int(np.asarray(m)[0]) for m in made] == [3, 4]
        assert all(not m.buffer.resource.name.startswith("cpu.malloc") for m in made)
        t = shared((1000,), "int32")
        np.asarray(t)[:] = 2
        total, pid = pool.submit(child_sum, t).result(timeout=60)
        assert total == 2000 and pid != os.getpid()
    del made, t
    devmm.ipc.release_held()
    assert shm_usage() == (0, 0)


def test_pickle_sends_a_handle_for_shared_memory_and_the_bytes_otherwise():
    """(multiprocessing's pickler: plain pickle copies, see below.)"""
    t = shared((1 << 20,), "uint8")
    np.asarray(t)[:] = 5
    by_handle = forking_dumps(t)
    assert len(by_handle) < 1024
    u = pickle.loads(by_handle)  # this process: a second mapping of the same memory
    assert u.data_ptr != t.data_ptr
    np.asarray(u)[0] = 9
    assert np.asarray(t)[0] == 9
    m = devmm.empty((1 << 20,), "uint8", resource=MallocMemoryResource())
    np.asarray(m)[:] = 6
    by_value = pickle.dumps(m)
    assert len(by_value) >= m.nbytes
    v = pickle.loads(by_value)
    assert np.asarray(v).sum() == 6 * m.nbytes and v.data_ptr != m.data_ptr
    # a strided view of shared memory keeps its layout
    s = devmm.from_buffer_view(t.buffer, (4, 3), "uint8", strides=(100, 2), offset=8)
    w = pickle.loads(forking_dumps(s))
    assert (w.shape, w.strides, w.data_ptr - w.buffer.ptr) == ((4, 3), (100, 2), 8)
    # copy.deepcopy copies, never shares
    import copy
    d = copy.deepcopy(t)
    np.asarray(d)[0] = 1
    assert np.asarray(t)[0] == 9
    del u, w


def test_buffer_handles_open_as_bytes():
    b = devmm.Buffer(4096, resource=SharedMemoryResource())
    devmm.from_buffer_view(b, (4096,), "uint8")
    h = b.ipc_handle()
    assert len(h) == devmm._lib.CONSTANTS["DEVMM_IPC_HANDLE_SIZE"]
    t = devmm.open_ipc(h)
    assert (t.shape, t.dtype) == ((4096,), "uint8")
    assert devmm.ipc.info(h)["bytes"] == 4096
    with pytest.raises(devmm.DevmmError, match="cannot share memory with other processes"):
        devmm.Buffer(64, resource=MallocMemoryResource()).ipc_handle()


def test_bad_handles_get_a_clear_error():
    t = shared((16,))
    h = t.ipc_handle()
    with pytest.raises(devmm.DevmmValueError, match="truncated"):
        devmm.open_ipc(h[:-1])
    with pytest.raises(devmm.DevmmValueError, match="truncated"):
        devmm.open_ipc(h[:40])
    c = bytearray(t.buffer.ipc_handle())
    with pytest.raises(devmm.DevmmValueError, match="expected the 256 bytes"):
        devmm.open_ipc(bytes(c[:100]))
    c[0] ^= 0xFF
    with pytest.raises(devmm.DevmmValueError, match="not a devmm IPC handle"):
        devmm.open_ipc(bytes(c))
    c[0] ^= 0xFF
    c[200] ^= 1
    with pytest.raises(devmm.DevmmValueError, match="IPC handle corrupted"):
        devmm.open_ipc(bytes(c))
    with pytest.raises(TypeError, match="a handle is bytes"):
        devmm.open_ipc("not bytes")
    # a layout that does not fit the memory (its CRC-32 recomputed, as a forger would)
    import zlib
    n = len(b"devmmT\x02\x00") + 256
    bad = bytearray(h)
    struct.pack_into("<q", bad, n + 36, 1 << 40)  # shape[0]
    struct.pack_into("<I", bad, n + 32, 0)
    struct.pack_into("<I", bad, n + 32, zlib.crc32(bytes(bad[n:])))
    with pytest.raises(devmm.DevmmValueError, match="does not fit"):
        devmm.open_ipc(bytes(bad))


def test_a_freed_exporter_allocation_is_a_stale_handle():
    t = shared((16,))
    h = t.ipc_handle()
    t.buffer.free()
    with pytest.raises(StaleHandleError, match="freed the memory"):
        devmm.open_ipc(h)


def test_an_open_mapping_outlives_the_exporters_free():
    t = shared((8,))
    np.asarray(t)[:] = 3
    u = devmm.open_ipc(t.ipc_handle())
    t.buffer.free()
    del t
    assert (np.asarray(u) == 3).all()
    np.asarray(u)[:] = 4
    assert (np.asarray(u) == 4).all()


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)


def test_an_exited_exporter_is_a_stale_handle_and_forged_handles_never_crash():
    exporter = run_python("""
        import devmm
        from devmm.mrs.cpu import SharedMemoryResource
        t = devmm.empty((16,), "int64", resource=SharedMemoryResource())
        print(t.ipc_handle().hex())
    """)
    assert exporter.returncode == 0, exporter.stderr
    # the importer runs in a subprocess too: a forged handle must not take the process down
    r = run_python(f"""
        import struct, devmm
        from devmm import _lib
        from devmm.errors import StaleHandleError
        h = bytes.fromhex({exporter.stdout.strip()!r})
        try:
            devmm.open_ipc(h)
        except StaleHandleError as e:
            print("exited:", e)

        def fnv(b):  # the checksum of ipc.c, to forge handles the header accepts
            x = 2166136261
            for i, c in enumerate(b):
                x = ((x ^ (0 if 8 <= i < 12 else c)) * 16777619) & 0xFFFFFFFF
            return x

        def forge(c, **fields):
            c = bytearray(c)
            for off, fmt, v in fields.values():
                struct.pack_into(fmt, c, off, v)
            struct.pack_into("<I", c, 8, fnv(c))
            return bytes(c)

        from devmm.mrs.cpu import SharedMemoryResource
        t = devmm.empty((16,), "int64", resource=SharedMemoryResource())
        c = t.buffer.ipc_handle()
        tries = {{
            "stdin": dict(fd=(96 + 24, "<i", 0)),              # another file of this process
            "huge": dict(bytes=(24, "<Q", 1 << 50)),            # more than the file holds
            "no pid": dict(pid=(20, "<i", 0)),
            "pid 1": dict(pid=(20, "<i", 1)),                   # not ours to open
            "kind": dict(kind=(48, "<8s", b"cpu.nope")),
            "device": dict(dev=(12, "<i", 99)),
        }}
        for name, fields in tries.items():
            try:
                devmm.open_ipc(forge(c, **fields))
                print(name, "OPENED")
            except devmm.DevmmError as e:
                print(name + ":", type(e).__name__, e)
    """)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "exited: cpu.shm: cannot open the IPC handle: the exporting process" in out
    assert "has exited or freed the memory" in out
    assert "OPENED" not in out
    assert "stdin: StaleHandleError" in out and "is another file now" in out
    assert "huge: DevmmValueError" in out and "-byte allocation" in out
    assert "no pid: DevmmValueError" in out and "names no process" in out
    assert ("pid 1: DevmmError cpu.shm: cannot open the IPC handle: not allowed to open "
            "/proc/1/fd/") in out
    assert "kind: DevmmError" in out and "no loaded plugin offers kind 'cpu.nope'" in out
    assert ("device: DevmmValueError IPC handle of device99:0 memory: resource 'cpu.shm' is "
            "on cpu\n") in out


def test_sim_device_memory_crosses_processes(tmp_path, monkeypatch):
    ini = tmp_path / "sim.ini"
    ini.write_text("[devmm]\nplugins = cpu, sim\n[plugin sim]\njitter_us = 200\n"
                   "[device sim:*]\nresource = sim.device\n")
    monkeypatch.setenv("DEVMM_CONFIG", str(ini))  # the spawned child reads it too
    devmm.init(str(ini))
    host = devmm.empty((256,), "int32")
    np.asarray(host)[:] = np.arange(256)
    t = host.copy("sim:0")
    assert "sim.device" in t.buffer.resource.name
    ctx = multiprocessing.get_context("spawn")  # a fork would not copy the sim's threads
    inbox, outbox = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=child_sim_fill, args=(inbox, outbox))
    p.start()
    inbox.put(t)
    assert outbox.get(timeout=60)
    p.join(60)
    assert p.exitcode == 0
    assert (np.asarray(t.copy("cpu")) == 7).all()
    del t
    devmm.ipc.release_held()


# ------------------------------------------- lifetimes of sends, pickles and handles

def forking_dumps(obj):
    """What multiprocessing sends (Queue, Pool, ProcessPoolExecutor): a ForkingPickler's bytes."""
    from multiprocessing.reduction import ForkingPickler
    return bytes(ForkingPickler.dumps(obj))


def test_plain_pickle_copies_and_only_multiprocessing_sends_a_handle():
    """A pickle written to a file, or pickle.loads(pickle.dumps(t)), holds
    the bytes (a handle there would name memory that is gone by the time it is read)."""
    t = shared((1 << 16,), "uint8")
    np.asarray(t)[:] = 5
    plain = pickle.dumps(t)
    assert len(plain) >= t.nbytes  # by value
    u = pickle.loads(plain)
    np.asarray(u)[0] = 9
    assert np.asarray(t)[0] == 5  # a copy, not an alias
    assert len(forking_dumps(t)) < 1024  # by handle
    v = pickle.loads(forking_dumps(t))
    np.asarray(v)[0] = 8
    assert np.asarray(t)[0] == 8  # the same memory
    del t, u, v
    devmm.ipc.release_held()


def test_a_hold_ends_after_keep_alive_without_another_pickle(monkeypatch):
    """A send never received holds nothing past keep_alive (before, holds went only
    at the next pickling). cpu.shm travels with its memfd: the sender's allocation goes at
    once, the duplicate multiprocessing keeps for a receiver goes after keep_alive; device
    memory is held keep_alive seconds."""
    import time
    from devmm.mrs import create_resource
    monkeypatch.setattr(devmm.ipc, "keep_alive", 0.3)
    devmm.ipc.release_held()  # earlier tests' sends
    gc.collect()  # and their tensors in reference cycles (Dask's)
    before = shm_usage()  # other tests of the session may keep cpu.shm memory
    stats = devmm.StatisticsAdaptor(SharedMemoryResource())
    for _ in range(4):
        t = devmm.empty((1 << 20,), "uint8", resource=stats)
        data = forking_dumps(t)
        del t
    assert stats.statistics.current_bytes == 0  # nothing held in the sender's allocation
    assert devmm.ipc.held() == 4
    u = pickle.loads(data)  # the last send still opens: its memfd travelled
    assert u.nbytes == 1 << 20
    del u
    sim = devmm.StatisticsAdaptor(create_resource("sim.device"))
    s = devmm.empty((1 << 16,), "uint8", resource=sim)
    forking_dumps(s)
    del s
    assert sim.statistics.current_bytes == 1 << 16  # device memory: held for the trip
    deadline = time.monotonic() + 5
    while (devmm.ipc.held() or shm_usage() != before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert devmm.ipc.held() == 0
    assert shm_usage() == before  # the duplicates nobody took are gone
    assert sim.statistics.current_bytes == 0


def test_a_received_tensor_pickles_again():
    """A tensor received by handle is sent on by handle (cpu.shm: the mapping's own
    descriptor), or by value; never an error."""
    ctx = multiprocessing.get_context("spawn")
    devmm.ipc.release_held()  # earlier tests' sends
    gc.collect()  # and their tensors in reference cycles (Dask's)
    before = shm_usage()
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
        r = pool.submit(child_make, 6).result(timeout=60)
        again = forking_dumps(r)
        assert len(again) < 1024
        w = pickle.loads(again)
        np.asarray(w)[0] = 1
        assert int(np.asarray(r)[0]) == 1
        assert pool.submit(child_sum, r).result(timeout=60)[0] == 6 * 999 + 1
        assert (np.asarray(pickle.loads(pickle.dumps(r))) == np.asarray(r)).all()
    del r, w
    devmm.ipc.release_held()
    assert shm_usage() == before


def test_read_only_survives_pickling():
    """A read-only tensor stays read-only by handle and by value."""
    from devmm import _lib
    t = shared((8,), "float64")
    ro = devmm.from_buffer_view(t.buffer, (8,), "float64", readonly=True)
    m = devmm.from_buffer_view(devmm.Buffer(64, resource=MallocMemoryResource()), (8,), "float64",
                               readonly=True)
    for how, data in (("handle", forking_dumps(ro)), ("value", pickle.dumps(ro)),
                      ("value", forking_dumps(m))):
        w = pickle.loads(data)
        assert _lib.tensor_readonly(w._h) == 1, how
        assert not np.asarray(w).flags.writeable, how
    devmm.ipc.release_held()


def test_corrupted_layouts_and_empty_tensors_get_a_clear_error():
    """The layout is under a checksum; a 0-byte tensor says why it has no handle."""
    t = shared((4,), "float32")
    h = bytearray(t.ipc_handle())
    head = 8 + 256
    h[head] ^= 0x01  # the dtype name's first byte
    with pytest.raises(devmm.DevmmValueError,
                       match=r"devmm.open_ipc: the tensor handle's layout is corrupted"):
        devmm.open_ipc(bytes(h))
    z = shared((0, 3), "float32")
    with pytest.raises(devmm.DevmmValueError,
                       match=r"Tensor.ipc_handle: a 0-byte tensor \(shape \(0, 3\)\) has no "
                             r"memory to share"):
        z.ipc_handle()
    w = pickle.loads(forking_dumps(z))  # by value
    assert (w.shape, w.dtype) == ((0, 3), "float32")


def test_the_reducer_is_registered_when_multiprocessing_comes_after_devmm():
    """import devmm does not import multiprocessing; importing it later registers the reducer."""
    r = run_python("""
        import sys, devmm
        from devmm.mrs.cpu import SharedMemoryResource
        t = devmm.zeros((1 << 16,), "uint8", resource=SharedMemoryResource())
        print("multiprocessing" in sys.modules)
        from multiprocessing.reduction import ForkingPickler
        print(len(ForkingPickler.dumps(t)) < 1024)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "True"]

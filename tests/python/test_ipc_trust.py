"""IPC from a process that is not trusted (ADR 40): a pickled tensor whose data does not match
its size, a stride-0 view whose element count wraps, and a handle from another pid namespace.
What crashed before its fix runs in a subprocess."""

import shutil
import subprocess
import sys
import textwrap

import pytest

import devmm


def run_python(code: str, *prefix: str) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-c", textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("nbytes,shape,dtype", [
    (1 << 20, (1,), "float32"),  # 1 MiB for 4 bytes: wrote past the allocation
    (1, (4,), "float32"),  # too little: the rest would be left uninitialised
    (3, (), "float32"),
])
def test_a_pickled_tensors_data_must_be_its_size(nbytes, shape, dtype):
    r = run_python(f"""
        import devmm
        from devmm import ipc
        try:
            ipc._rebuild_value(b"\\x01" * {nbytes}, {shape!r}, {dtype!r}, "cpu")
        except ValueError as e:
            print("refused:", e)
        else:
            print("accepted")
    """)
    assert r.returncode == 0, f"the rebuild crashed (status {r.returncode}): {r.stderr[-2000:]}"
    assert r.stdout.startswith("refused:"), r.stdout + r.stderr[-2000:]
    assert f"{nbytes} bytes of data for a tensor of shape {shape!r}" in r.stdout, r.stdout


def test_a_pickled_tensor_through_an_allow_list_unpickler_is_checked():
    """The reviewer's attack: a pickle that names only devmm.ipc._rebuild_value."""
    r = run_python("""
        import io, pickle
        import devmm
        from devmm import ipc

        class Only(pickle.Unpickler):
            def find_class(self, module, name):
                if (module, name) == ("devmm.ipc", "_rebuild_value"):
                    return ipc._rebuild_value
                raise pickle.UnpicklingError(name)

        class Forged:
            def __reduce__(self):
                return (ipc._rebuild_value, (b"\\xff" * (1 << 20), (1,), "int32", "cpu"))
        try:
            Only(io.BytesIO(pickle.dumps(Forged()))).load()
        except ValueError as e:
            print("refused:", e)
    """)
    assert r.returncode == 0, f"crashed (status {r.returncode}): {r.stderr[-2000:]}"
    assert "refused: 1048576 bytes of data for a tensor of shape (1,)" in r.stdout, r.stdout


def test_pickled_tensors_still_round_trip():
    import pickle

    import numpy as np
    t = devmm.empty((3, 2), "int16")
    np.from_dlpack(t)[...] = np.arange(6, dtype=np.int16).reshape(3, 2)
    u = pickle.loads(pickle.dumps(t))
    assert u.shape == (3, 2) and np.from_dlpack(u).tolist() == [[0, 1], [2, 3], [4, 5]]
    e = pickle.loads(pickle.dumps(devmm.empty((0, 4), "float64")))
    assert e.shape == (0, 4)
    with pytest.raises(ValueError, match=r"8 bytes of data for a tensor of shape \(2,\)"):
        devmm.ipc._rebuild_value(b"\0" * 8, [2], "uint8", "cpu")  # a list: checked after empty
    with pytest.raises(TypeError, match="data must be bytes"):
        devmm.ipc._rebuild_value("abcd", (4,), "uint8", "cpu")


def test_a_stride0_view_of_2_64_elements_is_refused():
    """2^32 x 2^32 elements of stride 0 count 0 in 64 bits: the view was accepted."""
    b = devmm.Buffer(64)
    with pytest.raises(ValueError, match=r"the number of elements overflows int64 at shape\[1\]"):
        devmm.from_buffer_view(b, (2**32, 2**32), "uint8", strides=(0, 0))
    with pytest.raises(ValueError, match="size in bytes overflows int64"):
        devmm.from_buffer_view(b, (2**61, 2), "int64", strides=(0, 0))
    v = devmm.from_buffer_view(b, (2**20, 2**20), "uint8", strides=(0, 0))  # 2^40: it counts
    assert v.size == 2**40


def test_a_handle_from_another_pid_namespace_says_why():
    """A container's pid names another process here: the handle reports same_machine (the
    boot is the same), and opening it says that the pid namespace differs."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare(1) (util-linux) to start an exporter in a pid namespace")
    why = ""
    for flags in (["--pid", "--fork"], ["--user", "--map-root-user", "--pid", "--fork"]):
        probe = subprocess.run([unshare, *flags, "true"], capture_output=True, text=True)
        if probe.returncode == 0:
            break
        why = probe.stderr.strip()
    else:
        pytest.skip(f"cannot make a pid namespace here (as root, or in a user namespace): {why}")
    exporter = subprocess.Popen(
        [unshare, *flags, sys.executable, "-c", textwrap.dedent("""
            import os, sys, devmm
            from devmm.mrs.cpu import SharedMemoryResource
            t = devmm.empty((16,), "int64", resource=SharedMemoryResource())
            print(os.getpid(), t.ipc_handle().hex(), flush=True)
            sys.stdin.read()  # alive until the test is done
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pid, handle = exporter.stdout.readline().split()
        h = bytes.fromhex(handle)
        assert devmm.ipc.info(h)["same_machine"] is True
        r = run_python(f"""
            import devmm
            try:
                devmm.open_ipc(bytes.fromhex({handle!r}))
            except devmm.DevmmError as e:
                print("refused:", type(e).__name__, e)
        """)
    finally:
        exporter.communicate("", timeout=60)
    assert pid == "1", f"the exporter is pid {pid} in its namespace, expected 1"
    assert r.returncode == 0, r.stderr[-2000:]
    assert "refused:" in r.stdout, r.stdout + r.stderr[-2000:]
    assert "of another pid namespace (a container?), where its pid names another process: send " \
        "the descriptor with it (devmm_ipc_open_fd; multiprocessing does)" in r.stdout, r.stdout


def _forge_kind(handle: bytes, kind: bytes) -> bytes:
    """handle with its kind (bytes 48..95) replaced and its FNV-1a checksum made right again."""
    import struct
    c = bytearray(handle)
    c[48:96] = kind.ljust(48, b"\0")[:48]
    x = 2166136261
    for i, b in enumerate(c):
        x = ((x ^ (0 if 8 <= i < 12 else b)) * 16777619) & 0xFFFFFFFF
    struct.pack_into("<I", c, 8, x)
    return bytes(c)


def test_a_handles_kind_is_a_plain_kind_name_shown_escaped():
    from devmm.mrs.cpu import SharedMemoryResource
    t = devmm.empty((16,), "int64", resource=SharedMemoryResource())
    h = t.buffer.ipc_handle()
    for kind, shown in [(b"/tmp/devmm-forged.so", "/tmp/devmm-forged.so"),
                        (b"x.y\ndevmm: info: IPC handle verified OK\x1b[2K",
                         r"x.y\x0adevmm: info: IPC handle verified OK\x1b[2K")]:
        forged = _forge_kind(h, kind)
        for call in (devmm.ipc.info, devmm.open_ipc):
            with pytest.raises(devmm.DevmmError) as e:
                call(forged)
            assert f"kind '{shown}' is not a plain kind name" in str(e.value)
            assert not any(ord(ch) < 32 for ch in str(e.value)), str(e.value)
    with pytest.raises(devmm.DevmmError, match="no loaded plugin offers kind 'nope.device'"):
        devmm.open_ipc(_forge_kind(h, b"nope.device"))

"""The tensor handle's wire format (include/devmm/ipc.h, ADR 35): what C writes for
``Tensor.ipc_handle()`` is version 2 byte for byte as struct and zlib write it (the format
devmm's Python side wrote before it moved into C), and a handle written that way opens. The C
suite ``ipc_tensor`` checks the same from C, with a Python process writing the handles."""

import struct
import zlib

import numpy as np
import pytest

import devmm
from devmm.mrs.cpu import SharedMemoryResource


def reference(buffer_handle, dtype, shape, strides, offset, readonly):
    """A tensor handle of version 2, from ADR 35's table alone."""
    n = len(shape)
    layout = struct.pack("<16sIIQ", dtype.encode(), n, int(readonly), offset)
    dims = struct.pack(f"<{2 * n}q", *shape, *strides)
    crc = zlib.crc32(layout + bytes(4) + dims)
    return (b"devmmT" + struct.pack("<H", 2) + buffer_handle + layout + struct.pack("<I", crc)
            + dims)


CASES = [("int32", (3, 4), (1, 3), 16, True), ("float64", (), (), 8, False),
         ("uint16", (5,), (3,), 2, False), ("complex128", (2, 3), (0, 2), 32, True),
         ("float8_e4m3fnuz", (4096,), (1,), 0, False)]


@pytest.mark.parametrize("dtype, shape, strides, offset, readonly", CASES)
def test_c_writes_version_2_byte_for_byte_and_opens_it(dtype, shape, strides, offset, readonly):
    b = devmm.Buffer(4096, resource=SharedMemoryResource())
    t = devmm.from_buffer_view(b, shape, dtype, strides=strides, offset=offset, readonly=readonly)
    h = t.ipc_handle()
    assert h == reference(b.ipc_handle(), dtype, shape, strides, offset, readonly)
    u = devmm.open_ipc(h)
    assert (u.shape, u.dtype, u.strides, u.data_ptr - u.buffer.ptr) == (shape, dtype, strides,
                                                                        offset)
    assert devmm._lib.tensor_readonly(u._h) == readonly
    assert u.data_ptr != t.data_ptr and u.buffer.nbytes == 4096


def test_a_handle_written_in_python_opens_and_says_what_it_holds():
    t = devmm.empty((32,), "int16", resource=SharedMemoryResource())
    np.asarray(t)[:] = np.arange(32)
    h = reference(t.buffer.ipc_handle(), "int16", (2, 3), (1, 2), 4, True)
    info = devmm.ipc.info(h)
    assert (info["shape"], info["dtype"], info["kind"], info["bytes"]) == ((2, 3), "int16",
                                                                           "cpu.shm", 64)
    u = devmm.open_ipc(h)
    a = np.asarray(u)
    assert not a.flags.writeable
    assert a.tolist() == [[2, 4, 6], [3, 5, 7]]  # element (i, j) at 4 + 2 * (i + 2 * j) bytes
    np.asarray(t)[2] = 99
    assert a[0, 0] == 99  # the same memory


def test_a_forged_python_handle_is_refused_as_c_refuses_it():
    t = devmm.empty((8,), "float32", resource=SharedMemoryResource())
    c = t.buffer.ipc_handle()
    with pytest.raises(devmm.DevmmValueError, match=r"devmm.open_ipc: a tensor handle of 33 "
                                                    r"dimensions: a devmm tensor has at most 32"):
        devmm.open_ipc(reference(c, "float32", (1,) * 33, (1,) * 33, 0, False))
    with pytest.raises(devmm.DevmmValueError, match=r"does not fit the 32 bytes of its buffer"):
        devmm.open_ipc(reference(c, "float32", (9,), (1,), 0, False))
    with pytest.raises(devmm.DevmmValueError, match=r"devmm.ipc.info: a tensor handle of "
                                                    r"version 3: this devmm reads version 2"):
        devmm.ipc.info(b"devmmT\x03\x00" + reference(c, "float32", (8,), (1,), 0, False)[8:])
    with pytest.raises(devmm.DevmmValueError, match=r"layout overflows 64 bits at dimension 0"):
        devmm.open_ipc(reference(c, "float32", (1 << 62,), (8,), 0, False))

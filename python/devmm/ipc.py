"""Sharing tensors between processes without copying (ADR 30).

A tensor whose resource shares memory (``cpu.shm``, ``sim.device``, ``cuda.device``,
``cuda.async`` with ``ipc = true``) gives a handle, plain bytes; another process on the same
machine opens it and sees the same memory. Pickling such a tensor sends its handle, so
``multiprocessing``, ``concurrent.futures.ProcessPoolExecutor`` and queues pass it zero-copy;
other tensors pickle by value.

>>> import devmm, pickle
>>> from devmm.mrs.cpu import SharedMemoryResource
>>> t = devmm.zeros((2, 3), "int32", resource=SharedMemoryResource())
>>> h = t.ipc_handle()
>>> u = devmm.open_ipc(h)            # in this process too: a second mapping of the same memory
>>> u.shape, u.dtype, u.data_ptr != t.data_ptr
((2, 3), 'int32', True)
>>> ctypes.c_int32.from_address(t.data_ptr).value = 7
>>> ctypes.c_int32.from_address(u.data_ptr).value
7
>>> len(pickle.dumps(devmm.empty((1 << 20,), "uint8", resource=SharedMemoryResource()))) < 1024
True

Lifetime: a handle opens only while the exporting tensor's memory is live in the exporting
process (its owner has not freed it, the process has not exited); a mapping already open stays
valid until it is closed (the opened tensor is gone). So a sender keeps the tensor alive until
the receiver has opened it; :func:`pickle` support helps: each pickled tensor's memory is held
for :data:`keep_alive` seconds (default 10) after it was pickled.
"""

from __future__ import annotations

import collections
import ctypes
import struct
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

    from .resource import MemoryResource
    from .tensor import Buffer, Tensor

from . import _lib
from .errors import DevmmError, DevmmValueError, StaleHandleError

_HANDLE_SIZE = _lib.CONSTANTS["DEVMM_IPC_HANDLE_SIZE"]
_TENSOR_MAGIC = b"devmmT\x01\x00"  # a tensor handle: this, the C handle, then the layout
_LAYOUT = struct.Struct("<16sIQ")  # dtype name, ndim, byte offset; then shape, strides (int64)

keep_alive: float = 10.0
"""Seconds a pickled tensor's memory is held after pickling, so that a receiver can open it
after the sender let go (0: not held; the sender must keep the tensor alive itself)."""

_held: collections.deque = collections.deque()  # (deadline, hold capsule)
_held_lock = threading.Lock()


def supported(resource: "MemoryResource") -> bool:
    """Whether the resource's stack can share its memory with other processes.

    >>> import devmm
    >>> from devmm.mrs.cpu import MallocMemoryResource, SharedMemoryResource
    >>> supported(SharedMemoryResource()), supported(MallocMemoryResource())
    (True, False)
    """
    return bool(_lib.ipc_supported(resource._h))


def buffer_handle(buffer: "Buffer") -> bytes:
    """The handle of a buffer's memory (:meth:`devmm.Buffer.ipc_handle`)."""
    out = ctypes.create_string_buffer(_HANDLE_SIZE)
    _lib.check(_lib.ipc_get_handle(_lib.buffer_resource(buffer._h), buffer.ptr or None,
                                   buffer.nbytes, out))
    return out.raw


def tensor_handle(t: "Tensor") -> bytes:
    """The handle of a tensor: its buffer's handle and its layout
    (:meth:`devmm.Tensor.ipc_handle`)."""
    b = t.buffer
    name = t.dtype.encode()
    if len(name) > 16:
        raise DevmmValueError(f"Tensor.ipc_handle: dtype name {t.dtype!r} is over 16 bytes",
                              "DEVMM_EINVAL")
    n = t.ndim
    offset = t.data_ptr - b.ptr if t.size else 0
    return b"".join((_TENSOR_MAGIC, buffer_handle(b), _LAYOUT.pack(name, n, offset),
                     struct.pack(f"<{2 * n}q", *t.shape, *t.strides)))


def info(handle: bytes) -> dict:
    """What a handle says: ``kind``, ``device``, ``bytes``, ``pid`` (the exporter),
    ``same_machine``; a tensor handle adds ``shape`` and ``dtype``.

    >>> import devmm
    >>> from devmm.mrs.cpu import SharedMemoryResource
    >>> d = info(devmm.empty((4,), "float64", resource=SharedMemoryResource()).ipc_handle())
    >>> d["kind"], d["device"], d["shape"], d["dtype"], d["same_machine"]
    ('cpu.shm', 'cpu', (4,), 'float64', True)
    """
    from .resource import format_device
    c, layout = _split(handle, "devmm.ipc.info")
    i = _lib.IpcInfo()
    _lib.check(_lib.ipc_handle_info(c, ctypes.byref(i)))
    out = {"kind": i.kind.decode(), "device": format_device(i.device), "bytes": i.bytes,
           "pid": i.pid, "same_machine": bool(i.same_machine)}
    if layout:
        out["shape"], out["dtype"] = layout[0], layout[1]
    return out


def _split(handle: object, where: str) -> tuple:
    """(the C handle, (shape, dtype, strides, offset) or None) of a handle, or a clear error."""
    if not isinstance(handle, (bytes, bytearray, memoryview)):
        raise TypeError(f"{where}: a handle is bytes (from Tensor.ipc_handle() or "
                        f"Buffer.ipc_handle()), got {type(handle).__name__}")
    h = bytes(handle)
    if not h.startswith(_TENSOR_MAGIC):
        if len(h) != _HANDLE_SIZE:
            raise DevmmValueError(f"{where}: a handle of {len(h)} bytes: expected the "
                                  f"{_HANDLE_SIZE} bytes of Buffer.ipc_handle() or a "
                                  f"Tensor.ipc_handle() (truncated?)", "DEVMM_EINVAL")
        return h, None
    head = len(_TENSOR_MAGIC) + _HANDLE_SIZE
    if len(h) < head + _LAYOUT.size:
        raise DevmmValueError(f"{where}: a tensor handle of {len(h)} bytes is truncated: it "
                              f"holds at least {head + _LAYOUT.size}", "DEVMM_EINVAL")
    name, n, offset = _LAYOUT.unpack_from(h, head)
    want = head + _LAYOUT.size + 16 * n
    if len(h) != want:
        raise DevmmValueError(f"{where}: a tensor handle of {len(h)} bytes for {n} dimensions: "
                              f"expected {want} (truncated?)", "DEVMM_EINVAL")
    dims = struct.unpack_from(f"<{2 * n}q", h, head + _LAYOUT.size)
    dtype = name.rstrip(b"\0").decode(errors="replace")
    return h[len(_TENSOR_MAGIC):head], (tuple(dims[:n]), dtype, tuple(dims[n:]), offset)


def open_ipc(handle: bytes, resource: "Optional[MemoryResource]" = None) -> "Tensor":
    """The tensor a handle names, mapped into this process (the same memory the exporter
    sees). A buffer's handle opens as a 1-D ``uint8`` tensor of its bytes. The resource that
    opens it is ``resource``'s stack, else the current resource of the handle's device if its
    stack is of the handle's kind, else a new resource of that kind. The mapping is closed when
    the tensor (and every array made from it) is gone.

    A handle that is not one raises :class:`~devmm.DevmmValueError`; one whose memory the
    exporter has freed, or whose exporter has exited, :class:`~devmm.errors.StaleHandleError`.
    """
    from .tensor import Buffer, _new_buffer, from_buffer_view
    c, layout = _split(handle, "devmm.open_ipc")
    out = ctypes.c_void_p()
    status = _lib.ipc_open(resource._h if resource is not None else None, c, ctypes.byref(out))
    if status:
        e = _lib.error(status)
        if e.status == "DEVMM_ENOENT":
            raise StaleHandleError(str(e), e.status) from None
        raise e
    b: Buffer = _new_buffer(Buffer)
    b._cap = _lib.py_own_buffer(out.value)
    if layout is None:
        return from_buffer_view(b, (b.nbytes,), "uint8")
    shape, dtype, strides, offset = layout
    try:
        return from_buffer_view(b, shape, dtype, strides=strides, offset=offset)
    except DevmmError as e:
        raise DevmmValueError(f"devmm.open_ipc: the handle's layout does not fit its "
                              f"{b.nbytes} bytes: {e}", "DEVMM_EINVAL") from None


def _hold(t: "Tensor") -> None:
    """Holds t's memory for keep_alive seconds (and lets go of holds that expired)."""
    now = time.monotonic()
    with _held_lock:
        while _held and _held[0][0] <= now:
            _held.popleft()
        if keep_alive > 0:
            got = _lib.py_hold(t._cap)
            if got is not None:
                _held.append((now + keep_alive, got[0]))


def release_held() -> int:
    """Lets go of every pickled tensor's memory held for receivers now; returns how many."""
    with _held_lock:
        n = len(_held)
        _held.clear()
    return n


def _reduce(t: "Tensor") -> tuple:
    """Tensor.__reduce__: by handle when its resource shares memory, else by value."""
    b = t.buffer
    if t.size and _lib.ipc_supported(_lib.buffer_resource(b._h)):
        h = tensor_handle(t)
        _hold(t)
        return (_rebuild_shared, (h,))
    host = t.copy("cpu") if t.device != "cpu" else t.copy()
    data = ctypes.string_at(host.data_ptr, host.nbytes) if host.size else b""
    return (_rebuild_value, (data, t.shape, t.dtype, t.device))


def _rebuild_shared(handle: bytes) -> "Tensor":
    return open_ipc(handle)


def _rebuild_value(data: bytes, shape: tuple, dtype: str, device: str) -> "Tensor":
    from .tensor import empty
    t = empty(shape, dtype, device="cpu")
    if data:
        ctypes.memmove(t.data_ptr, data, len(data))
    return t if device == "cpu" else t.copy(device)


__all__ = ["open_ipc", "supported", "info", "keep_alive", "release_held"]

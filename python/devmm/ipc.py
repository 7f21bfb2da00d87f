"""Sharing tensors between processes without copying (ADR 30).

A tensor whose resource shares memory (``cpu.shm``, ``sim.device``, ``cuda.device``) gives a
handle, plain bytes; another process on the same machine (and boot) opens it and sees the same
memory. ``multiprocessing`` (its queues, pools, ``Process`` arguments) and
``concurrent.futures.ProcessPoolExecutor`` send such a tensor as its handle: devmm registers a
reducer with ``multiprocessing.reduction.ForkingPickler``, as ``torch.multiprocessing`` does.
A plain ``pickle.dumps`` (a file, a cache, ``copy.deepcopy``) copies the bytes, always: a
handle in a file would name memory gone by the time it is read (ADR 33).

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
>>> from multiprocessing.reduction import ForkingPickler
>>> big = devmm.empty((1 << 20,), "uint8", resource=SharedMemoryResource())
>>> len(ForkingPickler.dumps(big)) < 1024, len(pickle.dumps(big)) > 1 << 20
(True, True)

Lifetime: through ``multiprocessing`` a ``cpu.shm`` tensor travels with its memfd
(``multiprocessing.reduction.DupFd``, as torch's file_descriptor strategy): the sender may free
it at once, the receiver maps the descriptor it got; a duplicate no receiver took within
:data:`keep_alive` seconds (default 10) is withdrawn. A raw handle (:meth:`Tensor.ipc_handle`,
Dask's transfers) opens only while the exporting tensor's memory is live in the exporting
process (its owner has not freed it, the process has not exited); Dask's sends and device
memory sent through multiprocessing are held ``keep_alive`` seconds, released by a timer, and a
receiver that opens later gets :class:`~devmm.errors.StaleHandleError`. Once open, a
``cpu.shm`` mapping is the receiver's own (it keeps its own descriptor of the memory): it
outlives the sender's free and can be sent on. Device memory (``sim.device``, ``cuda.device``)
follows CUDA's rule instead: the sender must keep the tensor alive until every receiver has
dropped what it opened; the hold only covers the trip, it does not know when receivers close.
"""

from __future__ import annotations

import collections
import ctypes
import os
import struct
import sys
import threading
import time
import zlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

    from .resource import MemoryResource
    from .tensor import Buffer, Tensor

from . import _lib
from .errors import DevmmError, DevmmValueError, StaleHandleError

_HANDLE_SIZE = _lib.CONSTANTS["DEVMM_IPC_HANDLE_SIZE"]
_TENSOR_MAGIC = b"devmmT\x02\x00"  # a tensor handle: this, the C handle, then the layout
# dtype name, ndim, flags (1: read-only), byte offset, CRC-32 of the layout (this field read
# as 0, up to the last stride; the C handle has its own checksum); then shape, strides (int64)
_LAYOUT = struct.Struct("<16sIIQI")  # flags: bit 0 read-only (this format's own, not C's)

keep_alive: float = 10.0
"""Seconds a send waits for its receiver: device memory sent through ``multiprocessing`` and
``cpu.shm`` memory sent by Dask are held that long after pickling (0: not held; the sender keeps
the tensor alive itself); a ``cpu.shm`` memfd sent through ``multiprocessing`` that no receiver
took by then is withdrawn (0: kept until taken or the sender exits). A timer lets go."""

_held: collections.deque = collections.deque()  # (deadline, hold capsule), by deadline
_held_cv = threading.Condition(threading.Lock())
_timer: list = []  # the thread that lets go of expired holds, once started


def supported(resource: "MemoryResource") -> bool:
    """Whether the resource's stack can share its memory with other processes.

    >>> import devmm
    >>> from devmm.mrs.cpu import MallocMemoryResource, SharedMemoryResource
    >>> supported(SharedMemoryResource()), supported(MallocMemoryResource())
    (True, False)
    """
    return bool(_lib.ipc_supported(resource._h))


def buffer_handle(buffer: "Buffer", where: str = "Buffer.ipc_handle") -> bytes:
    """The handle of a buffer's memory (:meth:`devmm.Buffer.ipc_handle`)."""
    if not buffer.nbytes:
        raise DevmmValueError(f"{where}: a 0-byte buffer has no memory to share (pickling "
                              f"sends an empty tensor by value)", "DEVMM_EINVAL")
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
    if not t.size or not b.nbytes:
        raise DevmmValueError(f"Tensor.ipc_handle: a 0-byte tensor (shape {t.shape}) has no "
                              f"memory to share (pickling sends it by value)", "DEVMM_EINVAL")
    n = t.ndim
    offset = t.data_ptr - b.ptr
    flags = 1 if _lib.tensor_readonly(t._h) else 0
    dims = struct.pack(f"<{2 * n}q", *t.shape, *t.strides)
    c = buffer_handle(b, "Tensor.ipc_handle")
    crc = zlib.crc32(_LAYOUT.pack(name, n, flags, offset, 0) + dims)  # the C handle has its own
    return b"".join((_TENSOR_MAGIC, c, _LAYOUT.pack(name, n, flags, offset, crc), dims))


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
    i.struct_size = ctypes.sizeof(i)
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
    name, n, flags, offset, crc = _LAYOUT.unpack_from(h, head)
    want = head + _LAYOUT.size + 16 * n
    if len(h) != want:
        raise DevmmValueError(f"{where}: a tensor handle of {len(h)} bytes for {n} dimensions: "
                              f"expected {want} (truncated?)", "DEVMM_EINVAL")
    zeroed = h[head:head + _LAYOUT.size - 4] + b"\0\0\0\0" + h[head + _LAYOUT.size:]
    if zlib.crc32(zeroed) != crc:
        raise DevmmValueError(f"{where}: the tensor handle's layout is corrupted (its CRC-32 is "
                              f"0x{crc:08x}, its bytes sum to 0x{zlib.crc32(zeroed):08x})",
                              "DEVMM_EINVAL")
    dims = struct.unpack_from(f"<{2 * n}q", h, head + _LAYOUT.size)
    dtype = name.rstrip(b"\0").decode(errors="replace")
    return h[len(_TENSOR_MAGIC):head], (tuple(dims[:n]), dtype, tuple(dims[n:]), offset,
                                        bool(flags & 1))


def open_ipc(handle: bytes, resource: "Optional[MemoryResource]" = None) -> "Tensor":
    """The tensor a handle names, mapped into this process (the same memory the exporter
    sees). A buffer's handle opens as a 1-D ``uint8`` tensor of its bytes. The resource that
    opens it is ``resource``'s stack, else the current resource of the handle's device if its
    stack is of the handle's kind, else a new resource of that kind. The mapping is closed when
    the tensor (and every array made from it) is gone.

    A handle that is not one raises :class:`~devmm.DevmmValueError`; one whose memory the
    exporter has freed, or whose exporter has exited, :class:`~devmm.errors.StaleHandleError`.
    """
    return _open(handle, resource, -1)


def _open(handle: bytes, resource: "Optional[MemoryResource]", fd: int) -> "Tensor":
    """open_ipc, or (fd >= 0) the same mapping the descriptor fd the exporter sent."""
    from .tensor import Buffer, _new_buffer, from_buffer_view
    c, layout = _split(handle, "devmm.open_ipc")
    out = ctypes.c_void_p()
    r = resource._h if resource is not None else None
    status = (_lib.ipc_open_fd(r, c, fd, ctypes.byref(out)) if fd >= 0 else
              _lib.ipc_open(r, c, ctypes.byref(out)))
    if status:
        e = _lib.error(status)
        if e.status == "DEVMM_ENOENT":
            raise StaleHandleError(str(e), e.status) from None
        raise e
    b: Buffer = _new_buffer(Buffer)
    b._cap = _lib.py_own_buffer(out.value)
    if layout is None:
        return from_buffer_view(b, (b.nbytes,), "uint8")
    shape, dtype, strides, offset, readonly = layout
    try:
        return from_buffer_view(b, shape, dtype, strides=strides, offset=offset,
                                readonly=readonly)
    except DevmmError as e:
        raise DevmmValueError(f"devmm.open_ipc: the handle's layout does not fit its "
                              f"{b.nbytes} bytes: {e}", "DEVMM_EINVAL") from None


def _hold(t: "Tensor") -> None:
    """Holds t's memory for keep_alive seconds; a timer thread lets go of it then."""
    if keep_alive <= 0:
        return
    got = _lib.py_hold(t._cap)
    if got is not None:
        _hold_object(got[0])


def _hold_object(obj: object) -> None:
    """Keeps obj keep_alive seconds (0: not at all), then drops it in the timer thread."""
    if keep_alive <= 0:
        return
    with _held_cv:
        _held.append((time.monotonic() + keep_alive, obj))
        if not _timer or not _timer[0].is_alive():
            th = threading.Thread(target=_expire, name="devmm-ipc-holds", daemon=True)
            _timer[:] = [th]
            th.start()
        _held_cv.notify()


def _expire() -> None:
    """The timer thread: lets go of each hold at its deadline; ends when none is left."""
    with _held_cv:
        while _held:
            now = time.monotonic()
            while _held and _held[0][0] <= now:
                _held.popleft()  # the capsule goes: the memory with it, if nothing else holds it
            if _held:
                _held_cv.wait(_held[0][0] - now)
        _timer.clear()


def held() -> int:
    """How many sends are waiting out keep_alive now (holds, and memfds sent within it)."""
    with _held_cv:
        return len(_held)


def release_held() -> int:
    """Lets go now of every hold, and withdraws every sent memfd no receiver took; returns how
    many sends were waiting."""
    with _held_cv:
        n = len(_held)
        _held.clear()
        _held_cv.notify()
    return n


def _after_fork() -> None:  # a forked child holds nothing for the parent's receivers
    global _held_cv
    _held.clear()
    _timer.clear()
    _held_cv = threading.Condition(threading.Lock())


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _host_copy(t: "Tensor") -> "Tensor":
    """A compact copy of t in host memory from the current cpu resource (an opened mapping's
    own resource allocates nothing)."""
    from .resource import parse_device
    from .tensor import _current, _py_own_tensor, _tensor
    d = parse_device("cpu")
    cpu = (d.device_type, d.device_id)
    out = ctypes.c_void_p()
    _lib.check(_lib.tensor_copy(t._h, _current(cpu)._h, ctypes.byref(out)))
    return _tensor(_py_own_tensor(out.value), t.shape, t._dt, cpu)


def _by_value(t: "Tensor") -> tuple:
    host = _host_copy(t)
    data = ctypes.string_at(host.data_ptr, host.nbytes) if host.size else b""
    return (_rebuild_value, (data, t.shape, t.dtype, t.device, bool(_lib.tensor_readonly(t._h))))


def _reduce(t: "Tensor") -> tuple:
    """Tensor.__reduce__ (plain pickle, copy.deepcopy): by value, always."""
    return _by_value(t)


def _reduce_shared(t: "Tensor") -> tuple:
    """multiprocessing's reducer: by handle when the memory can be shared, else by value. A
    cpu.shm handle travels with its memfd (multiprocessing's DupFd, as torch's
    file_descriptor strategy): the receiver maps its own descriptor, so nothing is held for
    it; device memory is held keep_alive seconds."""
    handle = _shared_handle(t)
    if handle is None:
        return _by_value(t)
    fd = _handle_fd(handle)
    if fd is not None:
        from multiprocessing.reduction import DupFd
        df = DupFd(fd)  # a duplicate, kept by multiprocessing until the receiver takes it
        if keep_alive > 0:  # 0: until a receiver takes it, or this process exits
            _hold_object(_Unshared(df))
        return (_rebuild_fd, (handle, df))
    _hold(t)
    return (_rebuild_shared, (handle,))


def _handle_fd(handle: bytes) -> "Optional[int]":
    """The descriptor of a handle's memory in this process, or None (device memory)."""
    c = handle[len(_TENSOR_MAGIC):len(_TENSOR_MAGIC) + _HANDLE_SIZE]
    fd = ctypes.c_int(-1)
    return fd.value if _lib.ipc_handle_fd(c, ctypes.byref(fd)) == 0 else None


class _Unshared:
    """When dropped (keep_alive seconds after the send), withdraws a DupFd's duplicate that no
    receiver took from multiprocessing's resource sharer: a never-received send holds the memory
    no longer than a hold does. A duplicate already taken, or passed at a spawn, is left as it
    is."""

    def __init__(self, df: object) -> None:
        self.key = getattr(df, "_id", None)

    def __del__(self) -> None:
        if not isinstance(self.key, tuple) or len(self.key) != 2:
            return
        try:
            from multiprocessing import resource_sharer
            sharer = resource_sharer._resource_sharer
            with sharer._lock:
                entry = sharer._cache.pop(self.key[1], None)
            if entry is not None:
                entry[1]()  # closes the duplicate
        except Exception:  # another Python's resource sharer: it keeps the duplicate
            pass


def _rebuild_fd(handle: bytes, df: object) -> "Tensor":
    fd = df.detach()
    try:
        return _open(handle, None, fd)
    finally:
        os.close(fd)


def _shared_handle(t: "Tensor") -> "Optional[bytes]":
    """t's handle, or None when it has none (no elements, a stack that shares nothing, a
    mapping its runtime cannot export again): such a tensor goes by value."""
    if not t.size or not _lib.ipc_supported(_lib.buffer_resource(t.buffer._h)):
        return None
    try:
        return tensor_handle(t)
    except DevmmError:
        return None


def _rebuild_shared(handle: bytes) -> "Tensor":
    return open_ipc(handle)


def _rebuild_value(data: bytes, shape: tuple, dtype: str, device: str,
                   readonly: bool = False) -> "Tensor":
    from .tensor import empty, from_buffer_view
    t = empty(shape, dtype, device="cpu")
    if data:
        ctypes.memmove(t.data_ptr, data, len(data))
    if device != "cpu":
        t = t.copy(device)
    if readonly:
        t = from_buffer_view(t.buffer, t.shape, t.dtype, strides=t.strides,
                             offset=t.data_ptr - t.buffer.ptr if t.size else 0, readonly=True)
    return t


def _register_with(module: object) -> None:
    """Registers the reducer with multiprocessing.reduction.ForkingPickler."""
    from .tensor import Tensor
    module.ForkingPickler.register(Tensor, _reduce_shared)


class _ReductionHook:
    """A meta path finder that registers the reducer once multiprocessing.reduction is
    imported (so that ``import devmm`` does not import multiprocessing)."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        if name != "multiprocessing.reduction":
            return None
        import importlib.machinery
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        real = spec.loader.exec_module

        def exec_module(module: object) -> None:
            real(module)
            _register_with(module)
        spec.loader.exec_module = exec_module
        return spec


def _install_reducer() -> None:
    """Called by devmm.tensor at import."""
    m = sys.modules.get("multiprocessing.reduction")
    if m is not None:
        _register_with(m)
    elif not any(isinstance(f, _ReductionHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _ReductionHook())


__all__ = ["open_ipc", "supported", "info", "keep_alive", "held", "release_held"]

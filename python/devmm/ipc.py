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
memory sent through multiprocessing are held ``keep_alive`` seconds for the trip, released by
a timer, and a receiver that opens later gets :class:`~devmm.errors.StaleHandleError`. Once
open, a ``cpu.shm`` mapping is the receiver's own (it keeps its own descriptor of the memory):
it outlives the sender's free and can be sent on. Device memory (``sim.device``,
``cuda.device``) follows CUDA's rule, which devmm's GPU plugin keeps for the sender: its free of
memory a receiver has open waits for the receiver's last close (ADR 38), so the hold only has to
cover the trip; an opened device mapping cannot be sent on (pickling it raises).
"""

from __future__ import annotations

import collections
import ctypes
import os
import sys
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

    from .resource import MemoryResource
    from .tensor import Buffer

from . import _lib, _shared
from .dtype import resolve
from .errors import DevmmError, DevmmValueError, StaleHandleError
from .resource import format_device, get_current_device_resource, parse_device
from .tensor import Tensor, _tensor, empty, from_buffer_view

_HANDLE_SIZE = _lib.CONSTANTS["DEVMM_IPC_HANDLE_SIZE"]
# a tensor handle (its wire format and checks are C's: include/devmm/ipc.h, ADR 35)
_TENSOR_HANDLE_MAX = _lib.CONSTANTS["DEVMM_IPC_TENSOR_HANDLE_MAX"]


class IpcInfo(ctypes.Structure):
    """devmm_ipc_info (ipc.h): what a handle's header says."""
    _fields_ = [("struct_size", ctypes.c_size_t),
                ("kind", ctypes.c_char * _lib.CONSTANTS["DEVMM_IPC_KIND_MAX"]),
                ("device", _lib.Device), ("bytes", ctypes.c_uint64), ("pid", ctypes.c_int32),
                ("same_machine", ctypes.c_int)]


class IpcTensorInfo(ctypes.Structure):
    """devmm_ipc_tensor_info (ipc.h): what a tensor handle's own fields say."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("is_tensor", ctypes.c_int),
                ("ndim", ctypes.c_int), ("dtype", _lib.DType), ("readonly", ctypes.c_int),
                ("byte_offset", ctypes.c_uint64),
                ("shape", ctypes.c_int64 * _lib.CONSTANTS["DEVMM_MAX_NDIM"]),
                ("strides", ctypes.c_int64 * _lib.CONSTANTS["DEVMM_MAX_NDIM"]),
                ("buffer", ctypes.c_uint8 * _lib.CONSTANTS["DEVMM_IPC_HANDLE_SIZE"])]


keep_alive: float = 10.0
"""Seconds a send waits for its receiver to open it: device memory sent through
``multiprocessing`` and ``cpu.shm`` memory sent by Dask are held that long after pickling (0: not
held; the sender keeps the tensor alive itself); a ``cpu.shm`` memfd sent through
``multiprocessing`` that no receiver took by then is withdrawn (0: kept until taken or the sender
exits). A timer lets go; device memory a receiver has opened stays until it closes (ADR 38)."""

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
    (:meth:`devmm.Tensor.ipc_handle`; ``devmm_ipc_get_tensor_handle``)."""
    out = ctypes.create_string_buffer(_TENSOR_HANDLE_MAX)
    n = ctypes.c_size_t()
    status = _lib.ipc_get_tensor_handle(t._h, out, len(out), ctypes.byref(n))
    if status:
        raise _failed(status, "Tensor.ipc_handle")
    return out.raw[:n.value]


def _failed(status: int, where: str) -> DevmmError:
    """The exception of a failed C call, its message led by where."""
    e = _lib.error(status)
    return type(e)(f"{where}: {e}", e.status)


def _dtype_name(c: "_lib.DType") -> str:
    name = ctypes.create_string_buffer(64)
    _lib.check(_lib.dtype_format(c, name, len(name)))
    return name.value.decode()


def info(handle: bytes) -> dict:
    """What a handle says: ``kind``, ``device``, ``bytes``, ``pid`` (the exporter),
    ``same_machine``; a tensor handle adds ``shape`` and ``dtype``.

    >>> import devmm
    >>> from devmm.mrs.cpu import SharedMemoryResource
    >>> d = info(devmm.empty((4,), "float64", resource=SharedMemoryResource()).ipc_handle())
    >>> d["kind"], d["device"], d["shape"], d["dtype"], d["same_machine"]
    ('cpu.shm', 'cpu', (4,), 'float64', True)
    """
    _, ti = _layout(handle, "devmm.ipc.info")
    i = IpcInfo()
    i.struct_size = ctypes.sizeof(i)
    _lib.check(_lib.ipc_handle_info(ti.buffer, ctypes.byref(i)))
    out = {"kind": i.kind.decode(), "device": format_device(i.device), "bytes": i.bytes,
           "pid": i.pid, "same_machine": bool(i.same_machine)}
    if ti.is_tensor:
        out["shape"], out["dtype"] = tuple(ti.shape[:ti.ndim]), _dtype_name(ti.dtype)
    return out


def _layout(handle: object, where: str) -> tuple:
    """(the handle's bytes, what its own fields say: an ``IpcTensorInfo``), checked by C
    (``devmm_ipc_tensor_handle_info``), or a clear error led by where."""
    if not isinstance(handle, (bytes, bytearray, memoryview)):
        raise TypeError(f"{where}: a handle is bytes (from Tensor.ipc_handle() or "
                        f"Buffer.ipc_handle()), got {type(handle).__name__}")
    h = bytes(handle)
    ti = IpcTensorInfo()
    ti.struct_size = ctypes.sizeof(ti)
    status = _lib.ipc_tensor_handle_info(h, len(h), ctypes.byref(ti))
    if status:
        raise _failed(status, where) from None
    return h, ti


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
    h, _ = _layout(handle, "devmm.open_ipc")  # the handle's own fields, before anything opens
    out = ctypes.c_void_p()
    r = resource._h if resource is not None else None
    status = (_lib.ipc_open_tensor_fd(r, h, len(h), fd, ctypes.byref(out)) if fd >= 0 else
              _lib.ipc_open_tensor(r, h, len(h), ctypes.byref(out)))
    if status:
        e = _lib.error(status)
        if e.status == "DEVMM_ENOENT":
            raise StaleHandleError(str(e), e.status) from None
        raise e
    p = out.value
    cap = _lib.py_own_tensor(p)  # the tensor holds the mapping's only reference
    shape = tuple(_lib.tensor_shape(p)[:_lib.tensor_ndim(p)])
    d = _lib.buffer_device(_lib.tensor_buffer(p))
    return _tensor(cap, shape, resolve(_dtype_name(_lib.tensor_dtype(p))),
                   (d.device_type, d.device_id))


def _keep_alive() -> float:
    """keep_alive, checked where it is used: a module attribute cannot check its assignment
    (ADR 36), so a wrong one is said here, by name (test_ipc_keep_alive_is_checked_at_use)."""
    k = keep_alive
    if type(k) is not int and type(k) is not float:
        raise TypeError(f"devmm.ipc.keep_alive = {k!r}: expected a number of seconds >= 0 (0: "
                        f"not held), got {type(k).__name__}")
    if not 0 <= k < float("inf"):
        raise ValueError(f"devmm.ipc.keep_alive = {k!r}: expected a number of seconds >= 0 (0: "
                         "not held)")
    return k


def _hold(t: "Tensor") -> None:
    """Holds t's memory for keep_alive seconds; a timer thread lets go of it then."""
    if _keep_alive() == 0:
        return
    got = _lib.py_hold(t._cap)
    if got is not None:
        _hold_object(got[0])


def _hold_object(obj: object) -> None:
    """Keeps obj keep_alive seconds (0: not at all), then drops it in the timer thread."""
    k = _keep_alive()
    if k == 0:
        return
    with _held_cv:
        _held.append((time.monotonic() + k, obj))
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
    d = parse_device("cpu")
    cpu = (d.device_type, d.device_id)
    out = ctypes.c_void_p()
    _lib.check(_lib.tensor_copy(t._h, get_current_device_resource(cpu)._h, ctypes.byref(out)))
    return _tensor(_lib.py_own_tensor(out.value), t.shape, t._dt, cpu)


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
    k = _keep_alive()  # said before anything is duplicated or held
    handle = _shared_handle(t)
    if handle is None:
        _warn_by_value(t)
        return _by_value(t)
    fd = _handle_fd(handle)
    if fd is not None:
        from multiprocessing.reduction import DupFd
        df = DupFd(fd)  # a duplicate, kept by multiprocessing until the receiver takes it
        if k > 0:  # 0: until a receiver takes it, or this process exits
            _hold_object(_Unshared(df))
        return (_rebuild_fd, (handle, df))
    _hold(t)
    return (_rebuild_shared, (handle,))


_warned_by_value = False


def _warn_by_value(t: "Tensor") -> None:
    """Once per process: a tensor multiprocessing sends by value, whose writes in the other
    process are lost (test_a_tensor_multiprocessing_copies_is_warned_about_once)."""
    global _warned_by_value
    if _warned_by_value or not t.size:
        return
    _warned_by_value = True
    import warnings  # on first use: start-up time
    name = _lib.resource_name(_lib.buffer_resource(t.buffer._h)).decode(errors="replace")
    warnings.warn(f"devmm: a {name} tensor goes to the other process by value (a copy: what it "
                  "writes there is not seen here); allocate from cpu.shm or device memory to "
                  "share it (docs/api.md, \"Other processes\"); said once", RuntimeWarning,
                  stacklevel=3)


def _handle_fd(handle: bytes) -> "Optional[int]":
    """The descriptor of a handle's memory in this process, or None (device memory)."""
    _, ti = _layout(handle, "devmm.ipc")
    fd = ctypes.c_int(-1)
    return fd.value if _lib.ipc_handle_fd(ti.buffer, ctypes.byref(fd)) == 0 else None


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
    """t's handle, or None when its memory cannot be shared at all (no elements, a stack that
    shares nothing): such a tensor goes by value. A stack that shares memory but gives no handle
    (a runtime's refusal, an opened device mapping, which CUDA cannot export again) raises with
    the reason: a failure to take a handle never silently becomes a copy (ADR 38)."""
    if not t.size or not _lib.ipc_supported(_lib.buffer_resource(t.buffer._h)):
        return None
    try:
        return tensor_handle(t)
    except DevmmError as e:
        raise type(e)(f"cannot send this {t.device} tensor to another process by handle: {e} "
                      f"(send a copy explicitly: t.copy('cpu'))", e.status) from None


def _rebuild_shared(handle: bytes) -> "Tensor":
    return open_ipc(handle)


def _check_length(data: bytes, shape: tuple, dtype: str, itemsize: int) -> None:
    nbytes = itemsize
    for n in shape:
        nbytes *= n
    if len(data) != nbytes:
        raise ValueError(f"{len(data)} bytes of data for a tensor of shape {shape!r} and dtype "
                         f"{dtype} ({nbytes} bytes): the pickle is corrupted or forged")


def _rebuild_value(data: bytes, shape: tuple, dtype: str, device: str,
                   readonly: bool = False) -> "Tensor":
    """A tensor pickled by value, rebuilt: data must be exactly the tensor's bytes (a pickle is
    input from elsewhere: more would be written past the allocation, ADR 40)."""
    if not isinstance(data, (bytes, bytearray)):
        raise TypeError(f"a pickled devmm tensor's data must be bytes, not {type(data).__name__}")
    dt = resolve(dtype)
    if isinstance(shape, tuple) and all(type(n) is int and n >= 0 for n in shape):
        _check_length(data, shape, dt.name, dt.itemsize)  # before anything is allocated for it
    t = empty(shape, dt, device="cpu")  # a shape of another form: refused here, or checked next
    _check_length(data, tuple(t.shape), dt.name, dt.itemsize)
    if data:
        ctypes.memmove(t.data_ptr, bytes(data), len(data))
    if device != "cpu":
        t = t.copy(device)
    if readonly:
        t = from_buffer_view(t.buffer, t.shape, t.dtype, strides=t.strides,
                             offset=t.data_ptr - t.buffer.ptr if t.size else 0, readonly=True)
    return t


def register_with(module: object) -> None:
    """Registers the reducer with multiprocessing.reduction.ForkingPickler (devmm._shared's
    hook calls it when multiprocessing.reduction is imported after devmm)."""
    module.ForkingPickler.register(Tensor, _reduce_shared)


# This module builds on devmm.tensor, which therefore cannot import it: it plugs in the
# tensor's and the buffer's process side itself (devmm._shared, ADR 36), and devmm's
# __init__ loads it on first use (a handle, a pickle, multiprocessing).
_shared.plug(buffer_handle, tensor_handle, _reduce)
if "multiprocessing.reduction" in sys.modules:  # else devmm._shared's hook registers it later
    register_with(sys.modules["multiprocessing.reduction"])

__all__ = ["open_ipc", "supported", "info", "keep_alive", "held", "release_held"]

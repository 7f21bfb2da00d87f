"""Buffers: ref-counted devmm allocations (:class:`devmm.Buffer`, also
``devmm.tensor.Buffer``), which tensors view.

>>> import devmm
>>> b = devmm.Buffer(64); b.nbytes, b.freed
(64, False)
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is imported only by type checkers: it costs start-up time
if TYPE_CHECKING:
    from typing import Optional, Union

from . import _lib, _shared
from ._lib import ctypes  # imported on first use (ADR 45)
from ._shared import SameHandle, is_bool, stream_arg, typed
from .resource import MemoryResource, format_device, get_current_device_resource, parse_device

_py_buffer_of = _lib.py_buffer_of
_py_buffer_free = _lib.py_buffer_free


class Buffer(SameHandle):
    """A ref-counted allocation: ``ptr``, ``nbytes``, ``resource``. ``free()`` gives the
    memory back now, or when the last consumer (a DLPack export, an array that viewed a tensor
    of it) releases it; freeing twice is harmless. Aligned as a tensor is (ADR 13, ADR 24): to
    the larger of ``alignment`` and 64 bytes on host memory, 256 on GPUs, so a tensor viewing
    it from offset 0 imports into JAX without a copy.

    >>> import devmm
    >>> with devmm.Buffer(1024) as b:
    ...     b.nbytes, b.ptr % 64
    (1024, 0)
    >>> b.freed, b.ptr
    (True, 0)
    """

    __slots__ = ("_cap",)  # a capsule owning a buffer reference, or the viewing tensor's capsule

    def __init__(self, nbytes: int, resource: Optional[MemoryResource] = None,
                 device: Union[str, tuple, None] = None, alignment: int = 0,
                 stream: Optional[int] = None) -> None:
        r = resource if resource is not None else get_current_device_resource(device)
        nbytes = _lib.cint(nbytes, ctypes.c_size_t, "nbytes")
        alignment = _lib.cint(alignment, ctypes.c_size_t, "alignment")
        cap = _lib.py_buffer(r._h, nbytes, alignment, stream_arg(stream))
        if cap is None:
            raise _lib.failed()
        self._cap = cap

    @property
    def _h(self) -> int:
        """The C devmm_buffer * (borrowed)."""
        return _py_buffer_of(self._cap)

    def free(self) -> None:
        """The owner gives the memory up (consumers keep it until they let go)."""
        _py_buffer_free(self._cap)

    @property
    def freed(self) -> bool:
        """True once :meth:`free` was called."""
        return bool(_lib.buffer_is_freed(self._h))

    @property
    def ptr(self) -> int:
        """The allocation's address (0 after :meth:`free`)."""
        return _lib.buffer_ptr(self._h) or 0

    @property
    def nbytes(self) -> int:
        """Size in bytes."""
        return _lib.buffer_nbytes(self._h)

    @property
    def resource(self) -> MemoryResource:
        """The resource the memory came from (typed: a stack comes back as its top adaptor)."""
        return typed(_lib.resource_retain(_lib.buffer_resource(self._h)))

    @property
    def device(self) -> str:
        return format_device(_lib.buffer_device(self._h))

    @property
    def stream(self) -> Optional[int]:
        return _lib.buffer_stream(self._h)

    def prefetch(self, device: Union[str, tuple, int, None] = None,
                 stream: Optional[int] = None) -> bool:
        """Prefetches the memory to device (an int: RMM's device id), as :func:`devmm.prefetch`
        does (RMM's ``DeviceBuffer.prefetch``)."""
        return prefetch_buffer(self._h, device, stream)

    def ipc_handle(self) -> bytes:
        """A handle another process opens with :func:`devmm.open_ipc` to map this memory
        (a 1-D ``uint8`` tensor there), when the resource shares memory (``cpu.shm``,
        ``sim.device``, ...: see :mod:`devmm.ipc`); else :class:`~devmm.DevmmError`."""
        return _shared.buffer_handle(self)

    def __enter__(self) -> "Buffer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()

    def __repr__(self) -> str:
        state = "freed" if self.freed else hex(self.ptr)
        return f"<devmm.Buffer {self.nbytes} bytes on {self.device} at {state}>"


_new_buffer = Buffer.__new__


def prefetch_buffer(h: int, device: Union[str, tuple, int, None], stream: Optional[int]) -> bool:
    """devmm_buffer_prefetch of the C buffer h (:func:`devmm.prefetch`): True once queued, False
    where the memory does not move (nothing is done). An int device N is RMM's device id: device
    N of the memory's home type (``0`` is ``sim:0`` for ``sim_managed:0``; not a bool)."""
    if device is None:
        d = _lib.buffer_device(h)
    elif not isinstance(device, (str, tuple)) and hasattr(type(device), "__index__"):
        if is_bool(device):
            raise TypeError(f"prefetch: device must be a device id (an int), a string like "
                            f"'cuda:0' or None, not a bool: got {device!r}")
        n = _lib.cint(device, ctypes.c_int32, "device")
        if n < 0:  # RMM's cudaCpuDeviceId (-1): devmm prefetches only to the memory's device
            raise ValueError(f"prefetch: device = {n} is not a device id (>= 0): devmm moves "
                             f"memory only to its own device")
        d = _lib.Device()
        d.device_type, d.device_id = _lib.device_home(_lib.buffer_device(h)).device_type, n
    else:
        d = parse_device(device)
    s = _lib.buffer_stream(h) if stream is None else stream_arg(stream)
    rc = _lib.buffer_prefetch(h, d, s)
    if rc == _lib.CONSTANTS["DEVMM_ENOTSUP"]:  # memory that does not move: RMM's no-op
        _lib.clear_error()
        return False
    _lib.check(rc)
    return True


def wrap_buffer(cap: object) -> Buffer:
    """A Buffer around a capsule: one owning a C buffer reference (``_lib.py_own_buffer``), or
    a tensor's capsule, which keeps its C buffer alive (:attr:`devmm.Tensor.buffer`)."""
    b = _new_buffer(Buffer)
    b._cap = cap
    return b

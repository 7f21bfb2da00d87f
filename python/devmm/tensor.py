"""Tensors: typed, shaped views of devmm buffers, handed out zero-copy through DLPack
(:class:`Tensor`, :func:`empty`, :func:`zeros`, :func:`from_buffer_view`). Buffers are
:mod:`devmm._buffer`'s, the exports' shared rules :mod:`devmm._interchange`'s; both are
importable from here as before.

>>> import devmm
>>> t = devmm.empty((2, 3), "float32")
>>> t.shape, t.strides, t.dtype, t.device, t.nbytes
((2, 3), (3, 1), 'float32', 'cpu', 24)
>>> z = devmm.zeros((4,), "int64")
>>> bytes((ctypes.c_char * 32).from_address(z.data_ptr)) == bytes(32)
True
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is imported only by type checkers: it costs start-up time
if TYPE_CHECKING:
    from typing import Optional, Sequence, Union

    from .layout import Layout

from . import _lib, _shared
from ._buffer import Buffer, prefetch_buffer, wrap_buffer
from ._interchange import (CPU_KEY, CUDA_DEVICES, HOST_DEVICES, I64_MAX, IS_COPIED, PINNED,
                           STREAM_ALL, STREAMED, TYPESTR, Interface, check_stream,
                           export_error, parse_dl_device, stream_wait)
from ._lib import ctypes  # imported on first use (ADR 45)
from ._shared import device_key, scoped
from .dtype import _CACHE as _dtype_cache
from .dtype import DType, resolve
from .errors import DeviceExportError, DevmmError
from .resource import (MemoryResource, format_device, get_current_device_resource, home_device,
                       parse_device)

# The built-ins libdevmm makes (ADR 12): one cheap call each, capsules that own the C objects
_py_empty = _lib.py_empty
_py_dlpack = _lib.py_dlpack
_py_handle = _lib.py_handle
_py_hold = _lib.py_hold
_py_own_tensor = _lib.py_own_tensor
_py_array_export = _lib.py_array_export
_current = get_current_device_resource


class Tensor:
    """A typed, shaped view of a :class:`Buffer`. Strides are in elements. Exported zero-copy
    with ``__dlpack__`` (NumPy, PyTorch, CuPy, JAX), ``__array_interface__`` on host memory and
    ``__cuda_array_interface__`` on CUDA; ``jax.numpy`` takes it through ``__jax_array__``.
    Made by :func:`empty`, :func:`zeros`, :func:`from_buffer_view` and :meth:`copy`, never
    directly.

    Each array-interface export holds the memory for as long as the arrays made from it live
    (NumPy keeps the export's ``data`` object as their base), so ``buffer.free()`` can never
    pull the memory from under such an array, and looking at the interface holds nothing. The
    CUDA array interface has no such object: a tensor that handed it out holds its memory until
    the tensor itself is gone."""

    # _cap: the capsule owning the C tensor; _dev: (device type, id); _held: a capsule holding
    # the memory for a CUDA-array-interface consumer; _strides: filled on first use
    __slots__ = ("_cap", "shape", "_dt", "_dev", "_strides", "_held", "__weakref__")

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("devmm.Tensor cannot be made directly: use devmm.empty, devmm.zeros, "
                        "devmm.from_buffer_view or Tensor.copy")

    @property
    def _h(self) -> int:
        """The C devmm_tensor * (borrowed), for the C API's calls."""
        return _py_handle(self._cap)

    # ------------------------------------------------------------------ properties
    @property
    def dtype(self) -> str:
        """The element type's name, e.g. ``"float32"`` (``numpy.dtype(t.dtype)`` for NumPy's;
        NumPy 2 reads a ``.dtype`` only when it is a ``numpy.dtype``)."""
        return self._dt.name

    @property
    def strides(self) -> tuple[int, ...]:
        """Strides in elements."""
        try:
            return self._strides
        except AttributeError:
            p = _lib.tensor_strides(self._h)
            s = self._strides = tuple(p[i] for i in range(len(self.shape)))
            return s

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def itemsize(self) -> int:
        return self._dt.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of the elements (padding excluded); ``buffer.nbytes`` includes it."""
        return self.size * self._dt.itemsize

    @property
    def device(self) -> str:
        """``"cpu"``, ``"cuda:0"``, ..."""
        return format_device(parse_device(self._dev))

    @property
    def buffer(self) -> Buffer:
        """The buffer this tensor views."""
        return wrap_buffer(self._cap)  # a view: the tensor's capsule keeps the C buffer alive

    @property
    def data_ptr(self) -> int:
        """Address of element 0 (0 if freed or empty)."""
        return _lib.tensor_data(self._h) or 0

    def __repr__(self) -> str:
        freed = " (freed)" if self.buffer.freed else ""
        return f"<devmm.Tensor shape={self.shape} dtype={self.dtype} device={self.device}{freed}>"

    # ------------------------------------------------------------------ processes
    def ipc_handle(self) -> bytes:
        """A handle (bytes: the buffer's and this tensor's shape, dtype, strides and offset)
        that another process opens with :func:`devmm.open_ipc` to see this tensor's memory,
        when its resource shares memory (see :mod:`devmm.ipc`)."""
        return _shared.tensor_handle(self)

    def __reduce__(self) -> tuple:
        """Pickles by value (``multiprocessing`` sends a tensor whose memory can be shared
        by IPC handle instead: :mod:`devmm.ipc`)."""
        return _shared.reduce(self)

    def __copy__(self) -> "Tensor":
        return self.copy()

    def __deepcopy__(self, memo: dict) -> "Tensor":
        return self.copy()  # a copy, never a second mapping of the same memory

    # ------------------------------------------------------------------ interchange
    def __dlpack_device__(self) -> tuple[int, int]:
        """(DLPack device type, device id)."""
        return self._dev

    def __dlpack__(self, *, stream: Optional[int] = None,
                   max_version: Optional[tuple[int, int]] = None,
                   dl_device: Optional[tuple[int, int]] = None,
                   copy: Optional[bool] = None) -> object:
        """A DLPack capsule of this tensor, per the Array API standard: a versioned capsule
        when ``max_version >= (1, 0)``, else the legacy one; ``copy=True`` (or a ``dl_device``
        that needs it) copies (from this tensor's own resource on its own device, else from
        the target device's current resource) and sets IS_COPIED. A ``dl_device`` that cannot
        be served, or that needs a copy when ``copy=False``, raises
        :class:`~devmm.errors.DeviceExportError` (a ``BufferError`` and a ``ValueError``).
        Pinned host memory asked for as ``(kDLCPU, 0)`` goes out as it is, labelled CPU. On a
        device with streams the consumer's ``stream`` (None: the default stream) waits for this
        tensor's; -1 asks for no wait."""
        if max_version is None:
            versioned = False
        else:
            try:
                major, minor = max_version  # type: ignore[misc]
                if not (isinstance(major, int) and isinstance(minor, int)):
                    raise TypeError
                versioned = major >= 1
            except (TypeError, ValueError):
                raise TypeError(f"__dlpack__: max_version must be None or a (major, minor) pair "
                                f"of ints, got {max_version!r}") from None
        dev = self._dev
        if (stream is None and (copy is None or copy is False) and dev[0] not in STREAMED and
                (dl_device is None or dl_device == dev)):  # the common case: host memory
            cap = _py_dlpack(self._cap, 0, versioned)
            if cap is None:  # the C message says why
                raise export_error()
            return cap
        if copy is not None and copy is not True and copy is not False:
            raise TypeError(f"__dlpack__: copy must be True, False or None, got {copy!r}")
        target = dev if dl_device is None else parse_dl_device(dl_device)
        check_stream(target[0], stream)  # Array API: the stream is dl_device's when given
        as_cpu = target == CPU_KEY and dev[0] in PINNED and not copy  # the same memory
        need_copy = target != dev and not as_cpu
        if need_copy and copy is False:
            raise DeviceExportError(f"__dlpack__: exporting to device {target} needs a copy "
                                    f"from {dev}, but copy=False")
        src, flags = self, 0
        if need_copy or copy:
            try:
                src = self._copy_to(target)
            except DevmmError as e:
                raise DeviceExportError(f"__dlpack__: cannot copy {self.device} memory to "
                                        f"device {target}: {e}") from e
            flags |= IS_COPIED
        if src._dev[0] in STREAMED:
            stream_wait(src, stream)
        cap = _py_dlpack(src._cap, flags, versioned, as_cpu)
        if cap is None:
            raise export_error()
        return cap

    def _copy_to(self, target: tuple[int, int]) -> "Tensor":
        """A compact copy on target: from this tensor's own resource on its own device (it
        serves this device, and the copy is counted where the original is), else from target's
        current resource."""
        out = ctypes.c_void_p()
        if target == self._dev:
            _lib.check(_lib.tensor_copy(self._h, _lib.buffer_resource(_lib.tensor_buffer(
                self._h)), ctypes.byref(out)))
        else:
            dst = _current(target)
            _lib.check(_lib.tensor_copy(self._h, dst._h, ctypes.byref(out)))
            target = dst._devkey  # its memory's, as empty()'s (tests/python/test_rmm_devices.py)
        return _tensor(_py_own_tensor(out.value), self.shape, self._dt, target)

    def copy(self, device: Union[str, tuple, None] = None) -> "Tensor":
        """A compact row-major copy of this tensor (padding dropped) on device (default: the
        same device, from this tensor's own resource; another device: from its current
        resource).

        >>> import devmm
        >>> p = devmm.empty((4, 3), "float32", layout=devmm.Aligned(devmm.RowMajor(), 128))
        >>> p.strides, p.copy().strides
        ((32, 1), (3, 1))
        """
        if device is None:
            return self._copy_to(self._dev)
        d = parse_device(device)
        return self._copy_to((d.device_type, d.device_id))

    def prefetch(self, device: Union[str, tuple, int, None] = None,
                 stream: Optional[int] = None) -> bool:
        """Prefetches the memory of this tensor's buffer to device (an int: RMM's device id),
        as :func:`devmm.prefetch` does."""
        return prefetch_buffer(_lib.tensor_buffer(self._h), device, stream)

    def _no_array_interface(self) -> Optional[str]:
        """Why NumPy's array interface cannot describe this tensor, or None."""
        if self._dev[0] not in HOST_DEVICES:
            return (f"{self.device} memory is not host memory (the array interface covers cpu, "
                    f"cuda_host, rocm_host and sim_host): copy it with t.copy('cpu'), or export "
                    f"it with DLPack to a consumer on its device")
        if self._dt.name not in TYPESTR:
            return (f"dtype {self._dt.name} has no NumPy array-interface type: export it with "
                    f"DLPack to a consumer that knows it (torch.from_dlpack, jax.dlpack)")
        return None

    def _iface(self, data: object) -> dict:
        """The v3 interface dict around data (an ArrayExport, or an address tuple)."""
        item = self._dt.itemsize
        return {"shape": self.shape, "typestr": TYPESTR[self._dt.name], "version": 3,
                "data": data, "strides": tuple(s * item for s in self.strides)}

    @property
    def __array_interface__(self) -> dict:
        """NumPy's array interface v3 (host memory and dtypes NumPy has). ``data`` is a new
        :class:`ArrayExport` each time: a buffer-protocol object that holds the memory (read-only
        when the tensor is) and that NumPy keeps as the array's base, so the memory lives as
        long as the arrays made from it. The attribute is absent (AttributeError, saying why)
        where it cannot describe the tensor, or once the buffer was freed.

        >>> import devmm, numpy as np
        >>> t = devmm.empty((2, 3), "int16")
        >>> type(t.__array_interface__["data"]).__name__
        'ArrayExport'
        >>> a = np.asarray(t); type(a.base).__name__, a.ctypes.data == t.data_ptr
        ('ArrayExport', True)
        """
        why = self._no_array_interface()
        if why:
            raise AttributeError(f"__array_interface__: {why}")
        data = _py_array_export(self._cap)
        if data is None:  # a probe after free(): absent, as hasattr expects
            raise AttributeError(f"__array_interface__: {_lib.last_error().decode()}")
        return self._iface(data)

    def __array__(self, dtype: object = None, copy: Optional[bool] = None) -> object:
        """NumPy calls this where ``__array_interface__`` is absent: a TypeError saying why
        (never a 0-d object array), or a ``BufferError`` once the buffer was freed. Called
        directly on host memory, NumPy 2's protocol: a zero-copy view (it holds the memory as
        the array interface does), a copy with ``copy=True`` or another ``dtype``, and
        ``ValueError`` when that copy is needed but ``copy=False``."""
        why = self._no_array_interface()
        if why:
            raise TypeError(f"NumPy cannot view this devmm tensor: {why}")
        data = _py_array_export(self._cap)
        if data is None:
            raise _lib.export_failed()  # BufferFreedError: the buffer was freed
        import numpy
        a = numpy.asarray(Interface(self._iface(data)))
        if dtype is not None and numpy.dtype(dtype) != a.dtype:
            if copy is False:
                raise ValueError(f"__array__: a {numpy.dtype(dtype)} array of this "
                                 f"{self._dt.name} tensor needs a copy, but copy=False")
            return a.astype(dtype)
        return a.copy() if copy else a

    def __jax_array__(self) -> object:
        """``jax.numpy``'s conversion protocol (JEP 28661): the tensor through DLPack, zero-copy
        on the CPU for a default tensor; a read-only tensor goes as a copy (JAX asks for a
        legacy capsule, which cannot carry the flag)."""
        import jax.dlpack
        readonly = _lib.tensor_readonly(self._h)
        return jax.dlpack.from_dlpack(self.copy() if readonly else self)

    @property
    def __cuda_array_interface__(self) -> dict:
        """The CUDA array interface v3 (CUDA device and managed memory); ``data`` is
        ``(0, readonly)`` for a tensor with no elements, as the protocol says. Its consumers
        (CuPy, Numba) keep the tensor and never say when they are done: a tensor that handed it
        out holds its memory until the tensor itself is gone. Absent once the buffer was freed."""
        if self._dev[0] not in CUDA_DEVICES:
            raise AttributeError(f"__cuda_array_interface__: {self.device} is not CUDA memory")
        return self._device_interface()

    def _device_interface(self) -> dict:
        """The CUDA array interface v3 dict, for any device with CUDA's stream rules (the
        simulator's tests read it). ``stream`` is the stream a consumer must synchronise with
        before touching the data: the buffer's (1, the legacy default stream, for the NULL
        handle), never None, since a memset or a pool allocation may still be queued on it."""
        if self._dt.name not in TYPESTR:
            raise AttributeError(f"__cuda_array_interface__: dtype {self._dt.name} has no "
                                 f"array-interface type: use DLPack")
        held = _py_hold(self._cap)  # the hold and the address in one step
        if held is None:
            raise AttributeError(f"__cuda_array_interface__: {_lib.last_error().decode()}")
        self._held = held[0]
        h = self._h
        d = self._iface((held[1] or 0, bool(_lib.tensor_readonly(h))))
        buf = _lib.tensor_buffer(h)
        d["stream"] = _lib.buffer_stream(buf) or 1
        # its consumer's streams are unknown: a safe free. Once the owner freed it (maybe on
        # another thread since the hold), the hold's own release is the free, deferred anyway.
        rc = _lib.buffer_stream_wait(buf, STREAM_ALL)
        if rc and not _lib.buffer_is_freed(buf):
            _lib.check(rc)
        return d




# ----------------------------------------------------------------------------- constructors

def _shape(shape: Union[int, Sequence[int]]) -> tuple:
    """shape as a tuple of Python ints (an integer is a 1-d shape): TypeError for entries that
    are no integers (bools included), ValueError for ones out of int64.

    >>> import numpy as np
    >>> _shape((np.uint8(200), 3)), _shape(np.int64(4))
    ((200, 3), (4,))
    """
    if type(shape) is int:
        return (shape,)
    if not isinstance(shape, bool) and hasattr(type(shape), "__index__"):
        shape = (shape,)  # numpy's integers: a 1-d shape too
    try:
        entries = tuple(shape)
    except TypeError:
        raise TypeError(f"shape must be an int or a sequence of ints, got "
                        f"{type(shape).__name__}") from None
    for i, s in enumerate(entries):
        if type(s) is not int:
            if isinstance(s, bool) or not hasattr(type(s), "__index__"):
                raise TypeError(f"shape entries must be ints, got {s!r} in {entries!r}")
            s = s.__index__()  # numpy's integers keep their width: t.shape holds Python ints
        if not -I64_MAX - 1 <= s <= I64_MAX:
            raise ValueError(f"shape entry {s} does not fit in int64 (shape {entries!r})")
        if s is not entries[i]:
            entries = entries[:i] + (s,) + entries[i + 1:]
    return entries


def empty(shape: Union[int, Sequence[int]], dtype: object = "float32", *,
          layout: Optional[Layout] = None, device: Union[str, tuple, None] = None,
          resource: Optional[MemoryResource] = None, stream: Optional[int] = None) -> Tensor:
    """A new uninitialised tensor laid out with ``layout`` (default row-major) from
    ``resource`` (default: the current resource of ``device``, default cpu). Its base is
    aligned to at least 64 bytes on the CPU and 256 on GPUs (ADR 13), so NumPy, PyTorch and JAX
    all import it without a copy.

    >>> import devmm
    >>> devmm.empty((4, 3), "float32", layout=devmm.ColumnMajor()).strides
    (1, 4)
    >>> devmm.empty(3).data_ptr % 64
    0
    >>> devmm.empty((2, -1))
    Traceback (most recent call last):
    ...
    devmm.errors.DevmmValueError: layout: shape[1] = -1 is negative: expected an extent >= 0
    """
    # This is the hot path: one built-in call into C, everything else cached. A tuple goes to C
    # as it is; C takes only plain ints, and anything else comes back here to be normalised.
    if type(shape) is not tuple:
        shape = _shape(shape)
    try:
        dt = _DTYPES[dtype]
    except (KeyError, TypeError):
        dt = resolve(dtype)  # caches it in _DTYPES
    if resource is None:
        over = scoped.get()
        if over:  # sim_managed:0 is sim:0's, by either route (tests/python/test_rmm_devices.py)
            resource = over[None] if device is None else over.get(device_key(home_device(device)))
    if resource is not None:
        try:
            dev = resource._devkey
            rh = resource._h
        except AttributeError:
            raise TypeError(f"resource must be a MemoryResource, got "
                            f"{type(resource).__name__}") from None
    elif device is None:
        dev, rh = CPU_KEY, None
    else:
        d = home_device(device)
        dev, rh = (d.device_type, d.device_id), None
    if layout is None:
        lp = None
    else:  # a Layout holds its C struct (the layout module is imported on first use)
        c = getattr(layout, "_c", None)
        if type(c) is not _lib.Layout:
            raise TypeError(f"layout must be RowMajor(), ColumnMajor(), Strided(...) or "
                            f"Aligned(...), got {layout!r}")
        lp = ctypes.addressof(c)
    if stream is not None and (type(stream) is not int or stream < 0):
        raise TypeError(f"stream must be a non-negative int (a stream handle) or None, got "
                        f"{stream!r}")
    try:
        cap = _py_empty(rh, dev, lp, shape, dt[5], stream)
    except (TypeError, OverflowError):  # an entry that is no plain int (bool, numpy's), or huge
        try:
            shape = _shape(shape)  # Python ints, or the precise TypeError/ValueError
        except (TypeError, ValueError) as e:
            raise e from None  # C's terse complaint is no part of the story
        cap = _py_empty(rh, dev, lp, shape, dt[5], stream)
    if cap is None:
        raise _lib.failed()
    if rh is None and dev is not CPU_KEY and dev != CPU_KEY:
        # the device's current resource may allocate memory of another kind (sim.managed on
        # sim:0 gives sim_managed:0): the tensor is on its memory's device, as its DLPack
        # capsule is (tests/python/test_rmm_devices.py); the CPU path reads nothing more
        d = _lib.buffer_device(_lib.tensor_buffer(_py_handle(cap)))
        dev = (d.device_type, d.device_id)
    return _tensor(cap, shape, dt, dev)


def _tensor(cap: object, shape: tuple, dt: DType, dev: tuple) -> Tensor:
    """The one way a Tensor is built: around a capsule that owns its C tensor."""
    t = _new(Tensor)
    t._cap = cap
    t.shape = shape
    t._dt = dt
    t._dev = dev
    return t


_new = Tensor.__new__
_DTYPES = _dtype_cache


def zeros(shape: Union[int, Sequence[int]], dtype: object = "float32", *,
          layout: Optional[Layout] = None, device: Union[str, tuple, None] = None,
          resource: Optional[MemoryResource] = None, stream: Optional[int] = None) -> Tensor:
    """Like :func:`empty`, filled with zero bytes through the resource's memset.

    >>> import devmm
    >>> t = devmm.zeros((3,), "float64"); t.nbytes
    24
    """
    t = empty(shape, dtype, layout=layout, device=device, resource=resource, stream=stream)
    _lib.check(_lib.tensor_zero(t._h))
    return t


def from_buffer_view(buffer: Buffer, shape: Sequence[int], dtype: object,
                     strides: Optional[Sequence[int]] = None, offset: int = 0,
                     readonly: bool = False) -> Tensor:
    """A tensor viewing an existing buffer (strides in elements, offset in bytes); every
    element must lie inside the buffer, and a freed buffer is a :class:`BufferFreedError`.

    >>> import devmm
    >>> b = devmm.Buffer(64)
    >>> devmm.from_buffer_view(b, (4,), "float32", offset=16).data_ptr - b.ptr
    16
    """
    shape = _shape(shape)
    dt = resolve(dtype)
    n = len(shape)
    if type(offset) is int and offset < 0:
        raise ValueError(f"from_buffer_view: offset must be >= 0, got {offset}")
    offset = _lib.cint(offset, ctypes.c_size_t, "from_buffer_view: offset")
    # an element's natural alignment: its size, a complex's half (test_a_misaligned_view_is_refused)
    align = dt.itemsize // 2 if dt.code == 5 else dt.itemsize  # 5: kDLComplex
    if align > 1 and align & (align - 1) == 0 and offset % align:
        raise ValueError(f"from_buffer_view: offset {offset} is not a multiple of {dt.name}'s "
                         f"alignment ({align} bytes): the view would be misaligned")
    if strides is None:
        from .layout import RowMajor
        strides = RowMajor().strides(shape, dt) if n else ()
    else:
        strides = tuple(_lib.cint(s, ctypes.c_int64, f"from_buffer_view: strides[{i}]")
                        for i, s in enumerate(strides))
        if len(strides) != n:
            raise ValueError(f"from_buffer_view: {len(strides)} strides for a shape of ndim "
                             f"{n} ({shape}): expected one stride per dimension")
    out = ctypes.c_void_p()
    shp = (ctypes.c_int64 * max(n, 1))(*shape)
    st = (ctypes.c_int64 * max(n, 1))(*strides)
    if _lib.tensor_create(buffer._h, dt.c, n, shp, st, offset, 1 if readonly else 0,
                          ctypes.byref(out)):
        raise _lib.export_failed()  # a freed buffer: BufferFreedError
    d = _lib.buffer_device(buffer._h)
    return _tensor(_py_own_tensor(out.value), shape, dt, (d.device_type, d.device_id))


def prefetch(obj: Union[Tensor, Buffer], device: Union[str, tuple, int, None] = None,
             stream: Optional[int] = None) -> bool:
    """Prefetches the memory of a devmm Tensor (its whole buffer) or Buffer to device, ordered
    on stream (default: the buffer's), as RMM's ``DeviceBuffer.prefetch`` does; C:
    ``devmm_buffer_prefetch``. device is the memory's own (the default; ``"sim:0"`` for
    ``sim_managed:0``, or RMM's device id ``0``: an int N is device N of the memory's home type,
    a bool is refused): the GPU plugins' managed and system memory moves only there. True once
    it is queued; False where the memory does not move (``cpu.malloc``, plain device memory):
    nothing is done, as RMM does. Another device is a :class:`DevmmValueError`, a freed buffer
    a :class:`DevmmStateError`.

    >>> import devmm
    >>> devmm.prefetch(devmm.empty(64, "uint8"))   # host memory: nothing moves
    False
    """
    if isinstance(obj, (Tensor, Buffer)):
        return obj.prefetch(device, stream)
    raise TypeError(f"devmm.prefetch: expected a devmm Tensor or Buffer, got {type(obj).__name__}")


__all__ = ["Buffer", "Tensor", "empty", "zeros", "from_buffer_view", "prefetch", "DType"]

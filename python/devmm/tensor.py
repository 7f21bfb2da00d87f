"""Tensors and buffers: devmm allocations handed out zero-copy through DLPack.

>>> import devmm
>>> t = devmm.empty((2, 3), "float32")
>>> t.shape, t.strides, t.dtype, t.device, t.nbytes
((2, 3), (3, 1), 'float32', 'cpu', 24)
>>> z = devmm.zeros((4,), "int64")
>>> bytes((ctypes.c_char * 32).from_address(z.data_ptr)) == bytes(32)
True
"""

from __future__ import annotations

import ctypes

TYPE_CHECKING = False  # typing is imported only by type checkers: it costs start-up time
if TYPE_CHECKING:
    from typing import Optional, Sequence, Union

from . import _lib
from .dtype import _CACHE as _dtype_cache
from .dtype import DType, resolve
from .errors import DevmmError
from .layout import Layout, RowMajor
from .resource import (MemoryResource, _key, _nonnegative, _scoped, format_device,
                       parse_device)

_c_void_p = ctypes.c_void_p
_byref = ctypes.byref
_buffer_free = _lib.buffer_free


class _Handle(ctypes.c_void_p):
    """A devmm_tensor * as returned by the hot-path call: passed back to C as it is."""


# The hot path calls these two without argtypes, each argument already a ctypes object or a
# plain int that fits a C int: ctypes then converts nothing (measured ~150 ns less per
# empty()+del). Every other binding keeps its checked signature in _lib.
# (A handle of its own: these function objects must not share _lib's checked argtypes.)
_untyped = ctypes.CDLL(_lib.LIBRARY_PATH)
_ffi_empty = _untyped.devmm_ffi_tensor_empty
_ffi_empty.restype = _Handle
_tensor_destroy = _untyped.devmm_tensor_destroy
_tensor_destroy.restype = None
# The export hot path likewise: PyDLL (the GIL stays held), a py_object result, flags prebuilt.
_ffi_capsule = ctypes.PyDLL(_lib.LIBRARY_PATH).devmm_ffi_dlpack_capsule
_ffi_capsule.restype = ctypes.py_object
_NO_FLAGS = ctypes.c_uint64(0)
_DEVICES: dict = {}  # (type, id) -> c_int64 of the packed device


def _packed(dev: tuple) -> ctypes.c_int64:
    p = _DEVICES.get(dev)
    if p is None:
        p = _DEVICES[dev] = ctypes.c_int64(dev[0] << 32 | dev[1])
    return p


_PACKERS: dict = {}
_CPU_KEY = (1, 0)
_I64_MAX = (1 << 63) - 1


def _i64(values) -> bytes:
    """values packed as int64s, for a const int64_t * argument (struct.error if not ints)."""
    n = len(values)
    pack = _PACKERS.get(n)
    if pack is None:
        import struct
        pack = _PACKERS[n] = struct.Struct(f"<{n}q").pack
    return pack(*values)


# DLPack device types, flags and the stream rules of the Array API standard (the simulated
# accelerator, kDLExtDev, follows CUDA's)
_CPU, _CUDA, _CUDA_HOST, _ROCM, _ROCM_HOST, _SIM, _CUDA_MANAGED = 1, 2, 3, 10, 11, 12, 13
_STREAMED = (_CUDA, _CUDA_MANAGED, _ROCM, _SIM)  # device memory ordered by streams
_STREAM_ALL = ctypes.c_void_p(-2)  # DEVMM_STREAM_ALL: a consumer on streams devmm does not know
_READ_ONLY, _IS_COPIED = 1, 2
_TYPESTR = {"bool": "|b1", "int8": "|i1", "uint8": "|u1", "int16": "<i2", "uint16": "<u2",
            "int32": "<i4", "uint32": "<u4", "int64": "<i8", "uint64": "<u8",
            "float16": "<f2", "float32": "<f4", "float64": "<f8", "complex64": "<c8",
            "complex128": "<c16"}


class Buffer:
    """A ref-counted allocation: ``ptr``, ``nbytes``, ``resource``. ``free()`` gives the
    memory back now, or when the last DLPack consumer releases it; freeing twice is harmless.

    >>> import devmm
    >>> with devmm.Buffer(1024) as b:
    ...     b.nbytes, b.ptr % 16
    (1024, 0)
    >>> b.freed, b.ptr
    (True, 0)
    """

    __slots__ = ("_h", "_owner")

    def __init__(self, nbytes: int, resource: Optional[MemoryResource] = None,
                 device: Union[str, tuple, None] = None, alignment: int = 0,
                 stream: Optional[int] = None) -> None:
        r = resource if resource is not None else _current(device)
        out = _c_void_p()
        _nonnegative(nbytes=nbytes, alignment=alignment)
        _lib.check(_lib.buffer_allocate(r._h, nbytes, alignment, stream, _byref(out)))
        self._h = out.value
        self._owner = None  # this object holds its own reference

    @classmethod
    def _view(cls, handle: int, owner: "Tensor") -> "Buffer":
        b = cls.__new__(cls)
        b._h, b._owner = handle, owner  # the tensor keeps the C buffer alive
        return b

    def __del__(self) -> None:
        h = getattr(self, "_h", None)
        if h and self._owner is None and _lib is not None and _lib.buffer_release is not None:
            self._h = None
            _lib.buffer_release(h)

    def free(self) -> None:
        """The owner gives the memory up (DLPack consumers keep it until they let go)."""
        _buffer_free(self._h)

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
        """The resource the memory came from."""
        return MemoryResource._from_new(_lib.resource_retain(_lib.buffer_resource(self._h)))

    @property
    def device(self) -> str:
        return format_device(_lib.buffer_device(self._h))

    @property
    def stream(self) -> Optional[int]:
        return _lib.buffer_stream(self._h)

    def __enter__(self) -> "Buffer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()

    def __repr__(self) -> str:
        state = "freed" if self.freed else hex(self.ptr)
        return f"<devmm.Buffer {self.nbytes} bytes on {self.device} at {state}>"


def _current(device) -> MemoryResource:
    from .resource import get_current_device_resource
    return get_current_device_resource(device)


class Tensor:
    """A typed, shaped view of a :class:`Buffer`. Strides are in elements. Exported zero-copy
    with ``__dlpack__`` (NumPy, PyTorch, CuPy, JAX), ``__array_interface__`` on the CPU and
    ``__cuda_array_interface__`` on CUDA."""

    __slots__ = ("_h", "shape", "_dt", "_dev", "_strides", "__weakref__")  # _dev: (type, id)

    def __del__(self) -> None:
        h = getattr(self, "_h", None)
        if h and _tensor_destroy is not None:
            self._h = None
            _tensor_destroy(h)  # a _Handle: the untyped call passes it as a pointer

    # ------------------------------------------------------------------ properties
    @property
    def dtype(self) -> str:
        """The element type's name, e.g. ``"float32"``."""
        return self._dt.name

    @property
    def strides(self) -> tuple[int, ...]:
        """Strides in elements."""
        s = self._strides
        if s is None:
            n = len(self.shape)
            p = _lib.tensor_strides(self._h)
            s = self._strides = tuple(p[i] for i in range(n))
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
        return Buffer._view(_lib.tensor_buffer(self._h), self)

    @property
    def data_ptr(self) -> int:
        """Address of element 0 (0 if freed or empty)."""
        return _lib.tensor_data(self._h) or 0

    def __repr__(self) -> str:
        return f"<devmm.Tensor shape={self.shape} dtype={self.dtype} device={self.device}>"

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
        that needs it) copies through the resource and sets IS_COPIED; ``copy=False`` when a
        copy is needed raises ``BufferError``. On a device with streams the consumer's
        ``stream`` (None: the default stream) waits for this tensor's; -1 asks for no wait."""
        versioned = 1 if max_version is not None and max_version[0] >= 1 else 0
        dev = self._dev
        if (stream is None and not copy and dev[0] not in _STREAMED and
                (dl_device is None or dl_device == dev or tuple(dl_device) == dev)):
            cap = _ffi_capsule(self._h, _NO_FLAGS, versioned)  # the common case: host memory
            if cap is None:  # the C message says why
                raise _lib.error(_lib.last_status())
            return cap
        target = dev if dl_device is None else (int(dl_device[0]), int(dl_device[1]))
        _check_stream(dev[0], stream)
        need_copy = target != dev
        if need_copy and copy is False:
            raise BufferError(f"__dlpack__: exporting to device {target} needs a copy from "
                              f"{dev}, but copy=False")
        src, flags = self, 0
        if need_copy or copy:
            try:
                src = self._copy_to(target)
            except DevmmError as e:
                raise BufferError(f"__dlpack__: cannot copy {self.device} memory to device "
                                  f"{target}: {e}") from e
            flags |= _IS_COPIED
        if src._dev[0] in _STREAMED:
            _stream_wait(src, stream)
        cap = _ffi_capsule(src._h, ctypes.c_uint64(flags), versioned)
        if cap is None:
            raise _lib.error(_lib.last_status())
        return cap

    def _copy_to(self, target: tuple[int, int]) -> "Tensor":
        dst = _current(target)
        out = _c_void_p()
        _lib.check(_lib.tensor_copy(self._h, dst._h, _byref(out)))
        t = Tensor.__new__(Tensor)
        t._h, t.shape, t._dt, t._strides, t._dev = _Handle(out.value), self.shape, self._dt, None, \
            target
        return t

    def copy(self, device: Union[str, tuple, None] = None) -> "Tensor":
        """A compact row-major copy of this tensor (padding dropped) on device (default:
        the same device, from its current resource).

        >>> import devmm
        >>> p = devmm.empty((4, 3), "float32", layout=devmm.Aligned(devmm.RowMajor(), 128))
        >>> p.strides, p.copy().strides
        ((32, 1), (3, 1))
        """
        if device is None:
            return self._copy_to(self._dev)
        d = parse_device(device)
        return self._copy_to((d.device_type, d.device_id))

    def _interface(self) -> dict:
        try:
            typestr = _TYPESTR[self._dt.name]
        except KeyError:
            raise AttributeError(f"dtype {self._dt.name} has no array-interface typestr; "
                                 f"use DLPack") from None
        item = self._dt.itemsize
        return {"shape": self.shape, "typestr": typestr, "version": 3,
                "data": (self.data_ptr, False),
                "strides": tuple(s * item for s in self.strides)}

    @property
    def __array_interface__(self) -> dict:
        """NumPy's array interface v3 (CPU and host-accessible memory only)."""
        if self._dev[0] not in (_CPU, _CUDA_HOST, _ROCM_HOST):
            raise AttributeError(f"__array_interface__: {self.device} memory is not host memory")
        return self._interface()

    @property
    def __cuda_array_interface__(self) -> dict:
        """The CUDA array interface v3 (CUDA device and managed memory)."""
        if self._dev[0] not in (_CUDA, _CUDA_MANAGED):
            raise AttributeError(f"__cuda_array_interface__: {self.device} is not CUDA memory")
        return self._device_interface()

    def _device_interface(self) -> dict:
        """The CUDA array interface v3 dict, for any device with CUDA's stream rules (the
        simulator's tests read it). ``stream`` is the stream a consumer must synchronise with
        before touching the data: the buffer's (1, the legacy default stream, for the NULL
        handle), never None, since a memset or a pool allocation may still be queued on it."""
        d = self._interface()
        buf = _lib.tensor_buffer(self._h)
        d["stream"] = _lib.buffer_stream(buf) or 1
        if not _lib.buffer_is_freed(buf):  # its consumer's streams are unknown: a safe free
            _lib.check(_lib.buffer_stream_wait(buf, _STREAM_ALL))
        return d


def _check_stream(device_type: int, stream: Optional[int]) -> None:
    if stream is None:
        return
    if not isinstance(stream, int):
        raise TypeError(f"__dlpack__: stream must be an int or None, got {type(stream).__name__}")
    if device_type in (_CUDA, _CUDA_MANAGED, _SIM):
        if stream == 0:
            rt = "sim (CUDA's rules)" if device_type == _SIM else "CUDA"
            raise ValueError(f"__dlpack__: stream 0 is ambiguous for {rt}; use 1 (legacy "
                             f"default), 2 (per-thread default), -1 (no sync) or a stream handle")
    elif device_type == _ROCM:
        if stream in (1, 2):
            raise ValueError(f"__dlpack__: stream {stream} is not valid for ROCm; use 0 "
                             f"(default), -1 or a hipStream_t")
    else:
        raise ValueError(f"__dlpack__: stream must be None for {format_device(parse_device((device_type, 0)))} "
                         f"tensors, got {stream}")


def _stream_wait(t: Tensor, stream: Optional[int]) -> None:
    """Hands t's buffer to the consumer's stream: that stream waits for the buffer's (an event
    on CUDA/ROCm/sim), and the buffer's free is ordered after the consumer. None is the default
    stream (the Array API's rule); -1: the consumer orders its work itself, nothing waits."""
    buf = _lib.tensor_buffer(t._h)
    if stream == -1:
        consumer = _STREAM_ALL
    elif stream is None or (stream == 1 and t._dev[0] != _ROCM):
        consumer = None  # the legacy default stream is the NULL handle; ROCm's default is 0
    else:
        consumer = stream or None  # CUDA's 2 is cudaStreamPerThread itself; ROCm's 0 is NULL
    _lib.check(_lib.buffer_stream_wait(buf, consumer))


# ----------------------------------------------------------------------------- constructors

def _shape(shape: Union[int, Sequence[int]]) -> tuple:
    """shape as a tuple (an int is a 1-d shape)."""
    if type(shape) is int:
        return (shape,)
    try:
        shape = tuple(shape)
    except TypeError:
        raise TypeError(f"shape must be an int or a sequence of ints, got "
                        f"{type(shape).__name__}") from None
    if any(type(s) is not int for s in shape):
        _shape_check(shape)
        shape = tuple(int(s.__index__()) for s in shape)
    return shape


def _shape_check(shape: tuple) -> None:
    """Raises TypeError for entries that are not integers, ValueError for ones out of int64."""
    for s in shape:
        if isinstance(s, bool) or not hasattr(s, "__index__"):
            raise TypeError(f"shape entries must be ints, got {s!r} in {shape!r}")
        if not -_I64_MAX <= s.__index__() <= _I64_MAX:
            raise ValueError(f"shape entry {s} does not fit in int64 (shape {shape!r})")


def empty(shape: Union[int, Sequence[int]], dtype: object = "float32", *,
          layout: Optional[Layout] = None, device: Union[str, tuple, None] = None,
          resource: Optional[MemoryResource] = None, stream: Optional[int] = None) -> Tensor:
    """A new uninitialised tensor laid out with ``layout`` (default row-major) from
    ``resource`` (default: the current resource of ``device``, default cpu).

    >>> import devmm
    >>> devmm.empty((4, 3), "float32", layout=devmm.ColumnMajor()).strides
    (1, 4)
    >>> devmm.empty((2, -1))
    Traceback (most recent call last):
    ...
    devmm.errors.DevmmValueError: layout: shape[1] = -1 is negative: expected an extent >= 0
    """
    # This is the hot path: one foreign call, everything else cached.
    if type(shape) is not tuple:
        shape = _shape(shape)
    try:
        dt = _DTYPES[dtype]
    except (KeyError, TypeError):
        dt = resolve(dtype)  # caches it in _DTYPES
    try:
        packed = _i64(shape)
    except Exception:
        _shape_check(shape)  # raises the right TypeError/ValueError
        raise
    if resource is None:
        scoped = _scoped.get()
        if scoped:
            resource = scoped[None] if device is None else scoped.get(_key(parse_device(device)))
    if resource is not None:
        try:
            dev = resource._devkey
            rh = resource._cptr
        except AttributeError:
            raise TypeError(f"resource must be a MemoryResource, got "
                            f"{type(resource).__name__}") from None
    elif device is None:
        dev, rh = _CPU_KEY, None
    else:
        d = parse_device(device)
        dev, rh = (d.device_type, d.device_id), None
    if layout is None or type(layout) is RowMajor:
        lp = None
    elif isinstance(layout, Layout):
        lp = _byref(layout._c)
    else:
        raise TypeError(f"layout must be RowMajor(), ColumnMajor(), Strided(...) or "
                        f"Aligned(...), got {layout!r}")
    n = len(shape)
    if n > 32:
        raise ValueError(f"empty: {n} dimensions, at most 32 are supported")
    h = _ffi_empty(rh, _DEVICES.get(dev) or _packed(dev), lp, n, packed, dt[5],
                   None if stream is None else _c_void_p(stream))
    if not h:
        raise _lib.error(_lib.last_status())
    t = _new(Tensor)
    t._h = h
    t.shape = shape
    t._dt = dt
    t._dev = dev
    t._strides = None
    return t


_new = Tensor.__new__
_DTYPES = _dtype_cache

def zeros(shape: Union[int, Sequence[int]], dtype: object = "float32", **kwargs) -> Tensor:
    """Like :func:`empty`, filled with zero bytes through the resource's memset.

    >>> import devmm
    >>> t = devmm.zeros((3,), "float64"); t.nbytes
    24
    """
    t = empty(shape, dtype, **kwargs)
    _lib.check(_lib.tensor_zero(t._h))
    return t


def from_buffer_view(buffer: Buffer, shape: Sequence[int], dtype: object,
                     strides: Optional[Sequence[int]] = None, offset: int = 0,
                     readonly: bool = False) -> Tensor:
    """A tensor viewing an existing buffer (strides in elements, offset in bytes); every
    element must lie inside the buffer.

    >>> import devmm
    >>> b = devmm.Buffer(64)
    >>> devmm.from_buffer_view(b, (4,), "float32", offset=16).data_ptr - b.ptr
    16
    """
    shape = _shape(shape)
    dt = resolve(dtype)
    n = len(shape)
    if offset < 0:
        raise ValueError(f"from_buffer_view: offset must be >= 0, got {offset}")
    if strides is None:
        strides = RowMajor().strides(shape, dt) if n else ()
    out = _c_void_p()
    shp = (ctypes.c_int64 * max(n, 1))(*shape)
    st = (ctypes.c_int64 * max(n, 1))(*strides)
    _lib.check(_lib.tensor_create(buffer._h, dt.c, n, shp, st, offset, 1 if readonly else 0,
                                  _byref(out)))
    d = _lib.buffer_device(buffer._h)
    t = Tensor.__new__(Tensor)
    t._h, t.shape, t._dt, t._strides = _Handle(out.value), shape, dt, tuple(strides)
    t._dev = (d.device_type, d.device_id)
    return t


__all__ = ["Buffer", "Tensor", "empty", "zeros", "from_buffer_view", "DType"]

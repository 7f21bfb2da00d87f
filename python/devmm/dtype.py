"""Element types by name: ``"float32"``, ``"bfloat16"``, ... or anything whose ``str()`` is
such a name (a numpy dtype, ``torch.float32``) — without importing numpy.

>>> from devmm.dtype import resolve
>>> resolve("bfloat16").itemsize
2
>>> resolve("float8_e4m3fn").code
10
>>> resolve("bfloat16")
DType('bfloat16')
"""

from __future__ import annotations

import ctypes

from . import _lib


class DType(tuple):
    """An element type: ``(name, code, bits, itemsize)``, plus its C struct and the packed form
    the C entry points take (ffi.h)."""

    __slots__ = ()

    def __new__(cls, name: str, code: int, bits: int, itemsize: int, c: "_lib.DType"):
        return tuple.__new__(cls, (name, code, bits, itemsize, c, _lib.ffi_dtype_pack(c)))

    name = property(lambda self: self[0])
    code = property(lambda self: self[1])
    bits = property(lambda self: self[2])
    itemsize = property(lambda self: self[3])
    c = property(lambda self: self[4])
    packed = property(lambda self: self[5])

    def __repr__(self) -> str:
        return f"DType({self[0]!r})"


_CACHE: dict[object, DType] = {}


def names() -> list[str]:
    """Every dtype name the core knows."""
    return [_lib.dtype_name_at(i).decode() for i in range(_lib.dtype_count())]


def _parse(name: str) -> DType:
    c = _lib.DType()
    rc = _lib.dtype_parse(name.encode(), ctypes.byref(c))
    if rc:
        raise TypeError(_lib.last_error().decode())
    return DType(name, c.code, c.bits, _lib.dtype_itemsize(c), c)


def resolve(dtype: object) -> DType:
    """The DType for a name or dtype-like object (cached)."""
    try:
        return _CACHE[dtype]
    except (KeyError, TypeError):
        pass
    if isinstance(dtype, DType):
        return dtype
    text = dtype if isinstance(dtype, str) else str(dtype)
    if text.startswith("torch."):
        text = text[6:]
    if text.startswith("<class 'numpy."):  # np.float32, the scalar type
        text = text[14:-2]
    if text == "bool_":  # numpy 1.x's np.bool_
        text = "bool"
    d = _parse(text)
    try:
        _CACHE[dtype] = d
    except TypeError:  # unhashable dtype-like
        pass
    return d

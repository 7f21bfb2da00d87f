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

from . import _lib


class DType(tuple):
    """An element type: ``(name, code, bits, itemsize)``, plus its lanes, the packed form the C
    entry points take (ffi.h) and its C struct (``c``, made when asked for: ctypes costs
    start-up time, ADR 45)."""

    __slots__ = ()

    def __new__(cls, name: str, code: int, bits: int, itemsize: int, lanes: int, packed: int):
        return tuple.__new__(cls, (name, code, bits, itemsize, lanes, packed))

    name = property(lambda self: self[0])
    code = property(lambda self: self[1])
    bits = property(lambda self: self[2])
    itemsize = property(lambda self: self[3])
    lanes = property(lambda self: self[4])
    packed = property(lambda self: self[5])

    @property
    def c(self) -> "_lib.DType":
        """The C struct (``devmm_dtype``), for the C calls that take one."""
        return _lib.DType(self[1], self[2], self[4])

    def __repr__(self) -> str:
        return f"DType({self[0]!r})"


_CACHE: dict[object, DType] = {}


def names() -> list[str]:
    """Every dtype name the core knows."""
    return [_lib.dtype_name_at(i).decode() for i in range(_lib.dtype_count())]


def _parse(name: str) -> DType:
    found = _lib.py_dtype(name.encode())  # devmm_dtype_parse, in C
    if found is None:
        raise TypeError(_lib.last_error().decode())
    code, bits, lanes, itemsize, packed = found
    return DType(name, code, bits, itemsize, lanes, packed)


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

"""Layout policies: how a shape is laid out in memory. The C core computes every stride.

>>> import devmm
>>> devmm.Aligned(devmm.RowMajor(), unit_stride_alignment=128).strides((4, 3), "float32")
(32, 1)
>>> devmm.ColumnMajor().strides((2, 3), "float32")
(1, 2)
"""

from __future__ import annotations

import ctypes

TYPE_CHECKING = False  # typing is imported only by type checkers: it costs start-up time
if TYPE_CHECKING:
    from typing import Sequence

from . import _lib
from .dtype import resolve


class Layout:
    """Base of the layout policies; ``strides(shape, dtype)`` asks the core."""

    __slots__ = ("_c", "_keep")

    def compute(self, shape: Sequence[int], dtype: object) -> tuple[tuple[int, ...], int, int]:
        """(strides in elements, span in bytes, base alignment) for shape and dtype.

        >>> import devmm
        >>> devmm.Aligned(devmm.RowMajor(), 128, 256).compute((4, 3), "float32")
        ((32, 1), 512, 256)
        """
        d = resolve(dtype)
        shape = tuple(_lib.cint(x, ctypes.c_int64, f"shape[{i}]") for i, x in enumerate(shape))
        n = len(shape)
        shp = (ctypes.c_int64 * max(n, 1))(*shape)
        st = (ctypes.c_int64 * max(n, 1))()
        res = _lib.LayoutResult()
        _lib.check(_lib.layout_compute(ctypes.byref(self._c), n, shp, d.itemsize, st,
                                       ctypes.byref(res)))
        return tuple(st[:n]), res.span_bytes, res.base_alignment

    def strides(self, shape: Sequence[int], dtype: object) -> tuple[int, ...]:
        """Strides in elements of shape laid out with this policy."""
        return self.compute(shape, dtype)[0]


class RowMajor(Layout):
    """C order: the last dimension has unit stride.

    >>> RowMajor().strides((2, 3), "float32")
    (3, 1)
    """

    __slots__ = ()

    def __init__(self) -> None:
        self._c = _lib.layout_row_major()
        self._keep = None

    def __repr__(self) -> str:
        return "RowMajor()"


class ColumnMajor(Layout):
    """Fortran order: the first dimension has unit stride.

    >>> ColumnMajor().strides((2, 3), "int8")
    (1, 2)
    """

    __slots__ = ()

    def __init__(self) -> None:
        self._c = _lib.layout_column_major()
        self._keep = None

    def __repr__(self) -> str:
        return "ColumnMajor()"


class Strided(Layout):
    """Explicit strides in elements (>= 0); the allocation spans the last element.

    >>> Strided((10, 2)).compute((2, 3), "float32")
    ((10, 2), 60, 4)
    """

    __slots__ = ("_strides",)

    def __init__(self, strides: Sequence[int]) -> None:
        self._strides = tuple(_lib.cint(s, ctypes.c_int64, f"strides[{i}]")
                              for i, s in enumerate(strides))
        n = len(self._strides)
        self._keep = (ctypes.c_int64 * max(n, 1))(*self._strides)
        self._c = _lib.layout_strided(n, self._keep)

    def __repr__(self) -> str:
        return f"Strided({self._strides!r})"


class Aligned(Layout):
    """Pads the unit-stride dimension so every row (row-major) or column (column-major)
    starts on ``unit_stride_alignment`` bytes; the base is aligned to ``base_alignment``
    (default: the same). Like C++26 ``layout_right_padded`` or a BLAS leading dimension.

    >>> Aligned(RowMajor(), unit_stride_alignment=128, base_alignment=256).strides((4, 3), "float32")
    (32, 1)
    >>> Aligned(ColumnMajor(), 128).strides((4, 3), "float32")
    (1, 32)
    """

    __slots__ = ("inner", "unit_stride_alignment", "base_alignment")

    def __init__(self, inner: Layout, unit_stride_alignment: int,
                 base_alignment: int = 0) -> None:
        if not isinstance(inner, (RowMajor, ColumnMajor)):
            raise TypeError(f"Aligned needs RowMajor() or ColumnMajor() as its inner layout, "
                            f"got {inner!r}")
        if not (type(unit_stride_alignment) is int and unit_stride_alignment > 0 and
                type(base_alignment) is int and base_alignment >= 0):
            if (isinstance(unit_stride_alignment, int) and isinstance(base_alignment, int) and
                    (unit_stride_alignment <= 0 or base_alignment < 0)):
                raise ValueError(f"Aligned: alignments must be positive powers of two, got "
                                 f"unit_stride_alignment={unit_stride_alignment}, "
                                 f"base_alignment={base_alignment}")
        unit_stride_alignment = _lib.cint(unit_stride_alignment, ctypes.c_size_t,
                                          "unit_stride_alignment")
        base_alignment = _lib.cint(base_alignment, ctypes.c_size_t, "base_alignment")
        self.inner = inner
        self.unit_stride_alignment = unit_stride_alignment
        self.base_alignment = base_alignment
        self._keep = None
        self._c = _lib.layout_aligned(inner._c.kind, self.unit_stride_alignment,
                                      self.base_alignment)

    def __repr__(self) -> str:
        return (f"Aligned({self.inner!r}, unit_stride_alignment={self.unit_stride_alignment}, "
                f"base_alignment={self.base_alignment})")

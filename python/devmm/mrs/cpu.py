"""Host memory from the cpu plugin (devmm-cpu).

>>> from devmm.mrs.cpu import MallocMemoryResource, AlignedMemoryResource, MmapMemoryResource
>>> MallocMemoryResource().name
'cpu.malloc'
>>> AlignedMemoryResource(alignment=4096).name
'cpu.aligned(4096)'
>>> MmapMemoryResource(huge_pages="transparent", populate=True).name
'cpu.mmap(transparent)'
>>> from devmm.mrs.cpu import SharedMemoryResource
>>> SharedMemoryResource().name
'cpu.shm'
"""

from __future__ import annotations

from ._kind import KindResource


class MallocMemoryResource(KindResource):
    """libc malloc/free (posix_memalign for alignments above 16 bytes)."""

    __slots__ = ()
    KIND = "cpu.malloc"

    def __init__(self) -> None:
        super().__init__(0)


class AlignedMemoryResource(KindResource):
    """posix_memalign with a minimum alignment (default 64 bytes)."""

    __slots__ = ()
    KIND = "cpu.aligned"

    def __init__(self, alignment: int = 64) -> None:
        super().__init__(0, alignment=alignment)


class MmapMemoryResource(KindResource):
    """Anonymous mmap; ``huge_pages`` = "never" | "transparent" | "explicit"; ``populate``
    pre-faults the pages."""

    __slots__ = ()
    KIND = "cpu.mmap"

    def __init__(self, huge_pages: str = "never", populate: bool = False) -> None:
        super().__init__(0, huge_pages=huge_pages, populate=populate)


class SharedMemoryResource(KindResource):
    """A memfd per allocation, mapped shared: tensors other processes can open without a copy
    (:func:`devmm.open_ipc`, pickling; ADR 30). Each live allocation holds one descriptor."""

    __slots__ = ()
    KIND = "cpu.shm"

    def __init__(self) -> None:
        super().__init__(0)

"""The kinds every GPU plugin (cuda, rocm, and the simulator's sim) offers, as base classes:
each plugin's module (:mod:`devmm.mrs.cuda`, :mod:`devmm.mrs.rocm`, :mod:`devmm.mrs.sim`) writes
its classes out over these, with its kind names and its runtime's calls in the docstrings.

>>> from devmm.mrs.cuda import CudaAsyncMemoryResource
>>> issubclass(CudaAsyncMemoryResource, AsyncResource), CudaAsyncMemoryResource.KIND
(True, 'cuda.async')
"""

from __future__ import annotations

from ._kind import KindResource

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional, Union


class DeviceResource(KindResource):
    """``<plugin>.device``: the runtime's synchronous malloc/free on one device. Each allocation
    is a 2 MiB block of its own (``ipc_isolate``, the default), so that an IPC export shows the
    receiver nothing else; ``ipc_isolate=False`` packs small allocations as the runtime does
    (ADR 38)."""

    __slots__ = ()

    def __init__(self, device: int = 0, ipc_isolate: bool = True) -> None:
        super().__init__(device, ipc_isolate=None if ipc_isolate else False)


class AsyncResource(KindResource):
    """``<plugin>.async``: stream-ordered allocation from the device's default pool or a pool of
    its own."""

    __slots__ = ()

    def __init__(self, device: int = 0, pool: str = "default",
                 release_threshold: Optional[Union[int, str]] = None,
                 max_pool_size: Optional[Union[int, str]] = None,
                 ipc: bool = False) -> None:
        super().__init__(device, pool=pool, release_threshold=release_threshold,
                         max_pool_size=max_pool_size, ipc=True if ipc else None)


class AsyncViewResource(KindResource):
    """``<plugin>.async`` with ``pool = 0x<address>``: stream-ordered allocation from a pool
    another library owns (a ``cudaMemPool_t`` from CuPy, torch or the runtime itself), which
    devmm never destroys; the owner keeps it alive while the resource lives (RMM's
    ``CudaAsyncViewMemoryResource``)."""

    __slots__ = ()

    def __init__(self, pool_handle: int, device: int = 0) -> None:
        if not isinstance(pool_handle, int) or pool_handle <= 0:
            raise TypeError(f"{type(self).__name__}: pool_handle must be a pool's address (a "
                            f"positive int), not {pool_handle!r}")
        super().__init__(device, pool=hex(pool_handle))


class AsyncManagedResource(KindResource):
    """``<plugin>.async`` with ``pool = managed``: stream-ordered allocation from the device's
    default pool of managed memory (host-accessible; CUDA 13, refused elsewhere with the reason;
    RMM's ``CudaAsyncManagedMemoryResource``)."""

    __slots__ = ()

    def __init__(self, device: int = 0) -> None:
        super().__init__(device, pool="managed")


class SystemResource(KindResource):
    """``<plugin>.system``: ``malloc``'ed memory the device addresses directly (HMM or ATS),
    refused where the device cannot (RMM's ``SystemMemoryResource``). ``headroom`` (bytes or
    "1GiB") leaves that much device memory free: the part of an allocation past the device's
    free memory less the headroom prefers the host, as RMM's ``SamHeadroomMemoryResource``;
    ``prefetch=True`` prefetches what prefers the device, on the allocation's stream."""

    __slots__ = ()

    def __init__(self, device: int = 0, headroom: Optional[Union[int, str]] = None,
                 prefetch: bool = False) -> None:
        super().__init__(device, headroom=headroom, prefetch=True if prefetch else None)


class SamHeadroomResource(SystemResource):
    """``<plugin>.system`` with a ``headroom`` (RMM's ``SamHeadroomMemoryResource(headroom)``)."""

    __slots__ = ()

    def __init__(self, headroom: Union[int, str], device: int = 0) -> None:
        super().__init__(device, headroom=headroom)


class ManagedResource(KindResource):
    """``<plugin>.managed``: managed (unified) memory, with an optional advice and prefetch."""

    __slots__ = ()

    def __init__(self, device: int = 0, advise: Optional[str] = None,
                 prefetch: bool = False) -> None:
        super().__init__(device, advise=advise, prefetch=prefetch)


class PinnedResource(KindResource):
    """``<plugin>.pinned``: page-locked host memory."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(0)

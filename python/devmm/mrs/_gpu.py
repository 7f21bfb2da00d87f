"""The four kinds every GPU plugin (cuda, rocm, and the simulator's sim) offers, as base classes:
each plugin's module (:mod:`devmm.mrs.cuda`, :mod:`devmm.mrs.rocm`, :mod:`devmm.mrs.sim`) writes
its four classes out over these, with its kind names and its runtime's calls in the docstrings.

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
    """``<plugin>.device``: the runtime's synchronous malloc/free on one device."""

    __slots__ = ()

    def __init__(self, device: int = 0) -> None:
        super().__init__(device)


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

"""CUDA memory from the cuda plugin (devmm-cuda, the CUDA runtime linked statically).

Each class creates a resource of the plugin's kind for one device; without a driver or a
device, creation raises :class:`devmm.DevmmError` with the runtime's reason ("0 devices: CUDA
driver version is insufficient for CUDA runtime version"). On a GPU machine (this runs in tests/gpu/run.sh, not in the CPU doctests)::

    from devmm.mrs.cuda import CudaAsyncMemoryResource
    r = CudaAsyncMemoryResource(device=0, release_threshold="4GiB")
    t = devmm.empty((1024, 1024), "float32", resource=r)
    x = torch.from_dlpack(t)
"""

from __future__ import annotations

from ._kind import KindResource

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional, Union


class CudaMemoryResource(KindResource):
    """``cudaMalloc`` / ``cudaFree`` on one device (synchronous)."""

    __slots__ = ()
    KIND = "cuda.device"

    def __init__(self, device: int = 0) -> None:
        super().__init__(device)


class CudaAsyncMemoryResource(KindResource):
    """Stream-ordered ``cudaMallocFromPoolAsync`` / ``cudaFreeAsync`` on the device's default
    pool (``pool="default"``) or a pool of its own (``pool="own"``, with ``max_pool_size``);
    ``release_threshold`` (bytes, "4GiB" or "50%") keeps freed memory in the pool."""

    __slots__ = ()
    KIND = "cuda.async"

    def __init__(self, device: int = 0, pool: str = "default",
                 release_threshold: Optional[Union[int, str]] = None,
                 max_pool_size: Optional[Union[int, str]] = None) -> None:
        super().__init__(device, pool=pool, release_threshold=release_threshold,
                         max_pool_size=max_pool_size)


class ManagedMemoryResource(KindResource):
    """``cudaMallocManaged``; ``advise`` = None | "read_mostly" | "preferred_location" |
    "accessed_by" (for this device), ``prefetch=True`` moves new memory to the device."""

    __slots__ = ()
    KIND = "cuda.managed"

    def __init__(self, device: int = 0, advise: Optional[str] = None,
                 prefetch: bool = False) -> None:
        super().__init__(device, advise=advise, prefetch=prefetch)


class PinnedMemoryResource(KindResource):
    """Page-locked host memory, ``cudaHostAlloc`` (DLPack device CUDAHost)."""

    __slots__ = ()
    KIND = "cuda.pinned"

    def __init__(self) -> None:
        super().__init__(0)

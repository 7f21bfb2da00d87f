"""CUDA memory from the cuda plugin (devmm-cuda, the CUDA runtime linked statically).

Each class creates a resource of the plugin's kind for one device; without a driver or a
device, creation raises :class:`devmm.DevmmError` with the runtime's reason ("0 devices: CUDA
driver version is insufficient for CUDA runtime version"). On a GPU machine (this runs in
tests/gpu/run.sh, not in the CPU doctests)::

    from devmm.mrs.cuda import CudaAsyncMemoryResource
    r = CudaAsyncMemoryResource(device=0, pool="own", release_threshold="4GiB")
    t = devmm.empty((1024, 1024), "float32", resource=r)
    x = torch.from_dlpack(t)
"""

from __future__ import annotations

from ._gpu import (AsyncManagedResource, AsyncResource, AsyncViewResource, DeviceResource,
                   ManagedResource, PinnedResource, SamHeadroomResource, SystemResource)


class CudaMemoryResource(DeviceResource):
    """``cudaMalloc`` / ``cudaFree`` on one device (synchronous)."""

    __slots__ = ()
    KIND = "cuda.device"


class CudaAsyncMemoryResource(AsyncResource):
    """Stream-ordered ``cudaMallocFromPoolAsync`` / ``cudaFreeAsync`` on the device's default pool
    (``pool="default"``) or a pool of its own (``pool="own"``, with ``max_pool_size`` and
    ``release_threshold`` (bytes, "4GiB" or "50%"): freed memory the pool keeps; the default
    pool is the whole process's, devmm leaves its settings alone); ``ipc=True`` with an own
    pool: other processes can open its allocations (devmm.open_ipc; CUDA only)."""

    __slots__ = ()
    KIND = "cuda.async"


class ManagedMemoryResource(ManagedResource):
    """``cudaMallocManaged``; ``advise`` = None | "read_mostly" | "preferred_location" |
    "accessed_by" (for this device), ``prefetch=True`` moves new memory to the device."""

    __slots__ = ()
    KIND = "cuda.managed"


class PinnedMemoryResource(PinnedResource):
    """Page-locked host memory, ``cudaHostAlloc`` (DLPack device CUDAHost)."""

    __slots__ = ()
    KIND = "cuda.pinned"


class CudaAsyncViewMemoryResource(AsyncViewResource):
    """A view of a pool another library owns: ``cudaMallocFromPoolAsync`` on it, never
    ``cudaMemPoolDestroy`` (``cuda.async`` with ``pool = 0x<address>``)."""

    __slots__ = ()
    KIND = "cuda.async"


class CudaAsyncManagedMemoryResource(AsyncManagedResource):
    """``cudaMallocFromPoolAsync`` on the device's default pool of managed memory
    (``cuda.async`` with ``pool = managed``): needs CUDA 13 (cudaMemGetDefaultMemPool with
    cudaMemAllocationTypeManaged), refused with the reason on an older driver."""

    __slots__ = ()
    KIND = "cuda.async"


class SystemMemoryResource(SystemResource):
    """``malloc``'ed memory that cuda's device addresses, where
    ``cudaDevAttrPageableMemoryAccess`` is 1 (HMM: Linux >= 6.1 with the open kernel modules;
    or ATS, as on Grace Hopper); ``headroom``, ``prefetch``: see
    :class:`devmm.mrs._gpu.SystemResource`."""

    __slots__ = ()
    KIND = "cuda.system"


class SamHeadroomMemoryResource(SamHeadroomResource):
    """``cuda.system`` with a ``headroom`` (RMM's ``SamHeadroomMemoryResource``)."""

    __slots__ = ()
    KIND = "cuda.system"


__all__ = ["CudaMemoryResource", "CudaAsyncMemoryResource", "ManagedMemoryResource",
           "PinnedMemoryResource",
           "CudaAsyncViewMemoryResource", "SystemMemoryResource", "SamHeadroomMemoryResource",
           "CudaAsyncManagedMemoryResource"]

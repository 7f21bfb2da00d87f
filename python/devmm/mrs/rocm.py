"""ROCm memory from the rocm plugin (devmm-rocm, HIP).

Each class creates a resource of the plugin's kind for one device; without a device, creation
raises :class:`devmm.DevmmError` with the runtime's reason ("0 devices: hipErrorNoDevice").
On a GPU machine (this runs in tests/gpu/run.sh, not in the CPU doctests)::

    from devmm.mrs.rocm import RocmAsyncMemoryResource
    r = RocmAsyncMemoryResource(device=0)
    t = devmm.empty((1024, 1024), "float32", resource=r)
    x = torch.from_dlpack(t)
"""

from __future__ import annotations

from ._gpu import (AsyncManagedResource, AsyncResource, AsyncViewResource, DeviceResource,
                   ManagedResource, PinnedResource, SamHeadroomResource, SystemResource)


class RocmMemoryResource(DeviceResource):
    """``hipMalloc`` / ``hipFree`` on one device (synchronous)."""

    __slots__ = ()
    KIND = "rocm.device"


class RocmAsyncMemoryResource(AsyncResource):
    """Stream-ordered ``hipMallocFromPoolAsync`` / ``hipFreeAsync`` on the device's default pool
    (``pool="default"``) or a pool of its own (``pool="own"``, with ``max_pool_size`` and
    ``release_threshold`` (bytes, "4GiB" or "50%"): freed memory the pool keeps; the default
    pool is the whole process's, devmm leaves its settings alone); ``ipc=True`` with an own
    pool: other processes can open its allocations (devmm.open_ipc; CUDA only)."""

    __slots__ = ()
    KIND = "rocm.async"


class ManagedMemoryResource(ManagedResource):
    """``hipMallocManaged``; ``advise`` = None | "read_mostly" | "preferred_location" |
    "accessed_by" (for this device), ``prefetch=True`` moves new memory to the device."""

    __slots__ = ()
    KIND = "rocm.managed"


class PinnedMemoryResource(PinnedResource):
    """Page-locked host memory, ``hipHostMalloc`` (DLPack device ROCMHost)."""

    __slots__ = ()
    KIND = "rocm.pinned"


class RocmAsyncViewMemoryResource(AsyncViewResource):
    """A view of a pool another library owns: ``hipMallocFromPoolAsync`` on it, never
    ``hipMemPoolDestroy`` (``rocm.async`` with ``pool = 0x<address>``)."""

    __slots__ = ()
    KIND = "rocm.async"


class RocmAsyncManagedMemoryResource(AsyncManagedResource):
    """``hipMallocFromPoolAsync`` on the device's default pool of managed memory
    (``rocm.async`` with ``pool = managed``): HIP has none: creating one raises DevmmError
    saying so."""

    __slots__ = ()
    KIND = "rocm.async"


class SystemMemoryResource(SystemResource):
    """``malloc``'ed memory that rocm's device addresses, where
    ``hipDeviceAttributePageableMemoryAccess`` is 1 (HMM with XNACK); ``headroom``,
    ``prefetch``: see :class:`devmm.mrs._gpu.SystemResource`."""

    __slots__ = ()
    KIND = "rocm.system"


class SamHeadroomMemoryResource(SamHeadroomResource):
    """``rocm.system`` with a ``headroom`` (RMM's ``SamHeadroomMemoryResource``)."""

    __slots__ = ()
    KIND = "rocm.system"


__all__ = ["RocmMemoryResource", "RocmAsyncMemoryResource", "ManagedMemoryResource",
           "PinnedMemoryResource",
           "RocmAsyncViewMemoryResource", "SystemMemoryResource", "SamHeadroomMemoryResource",
           "RocmAsyncManagedMemoryResource"]

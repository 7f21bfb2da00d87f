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

from ._gpu import classes

_C = classes("rocm", "Rocm", {
    "malloc": "hipMalloc",
    "free": "hipFree",
    "pool_malloc": "hipMallocFromPoolAsync",
    "free_async": "hipFreeAsync",
    "managed": "hipMallocManaged",
    "host": "hipHostMalloc",
    "host_device": "ROCMHost",
})
RocmMemoryResource = _C["RocmMemoryResource"]
RocmAsyncMemoryResource = _C["RocmAsyncMemoryResource"]
ManagedMemoryResource = _C["ManagedMemoryResource"]
PinnedMemoryResource = _C["PinnedMemoryResource"]

__all__ = ["RocmMemoryResource", "RocmAsyncMemoryResource", "ManagedMemoryResource",
           "PinnedMemoryResource"]

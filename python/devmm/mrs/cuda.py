"""CUDA memory from the cuda plugin (devmm-cuda, the CUDA runtime linked statically).

Each class creates a resource of the plugin's kind for one device; without a driver or a
device, creation raises :class:`devmm.DevmmError` with the runtime's reason ("0 devices: CUDA
driver version is insufficient for CUDA runtime version"). On a GPU machine (this runs in tests/gpu/run.sh, not in the CPU doctests)::

    from devmm.mrs.cuda import CudaAsyncMemoryResource
    r = CudaAsyncMemoryResource(device=0, pool="own", release_threshold="4GiB")
    t = devmm.empty((1024, 1024), "float32", resource=r)
    x = torch.from_dlpack(t)
"""

from __future__ import annotations

from ._gpu import classes

_C = classes("cuda", "Cuda", {
    "malloc": "cudaMalloc",
    "free": "cudaFree",
    "pool_malloc": "cudaMallocFromPoolAsync",
    "free_async": "cudaFreeAsync",
    "managed": "cudaMallocManaged",
    "host": "cudaHostAlloc",
    "host_device": "CUDAHost",
})
CudaMemoryResource = _C["CudaMemoryResource"]
CudaAsyncMemoryResource = _C["CudaAsyncMemoryResource"]
ManagedMemoryResource = _C["ManagedMemoryResource"]
PinnedMemoryResource = _C["PinnedMemoryResource"]

__all__ = ["CudaMemoryResource", "CudaAsyncMemoryResource", "ManagedMemoryResource",
           "PinnedMemoryResource"]

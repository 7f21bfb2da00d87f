"""CuPy into devmm: a CuPy memory pool as a devmm resource, ``CupyPoolResource(pool=None)``
(default: CuPy's current pool), so devmm adaptors (statistics, limits, logs) can sit over CuPy's
pool. Copies, memsets and stream order go through the device's CUDA runtime (``cuda.device``).

    from devmm.mrs.cupy import CupyPoolResource
    stats = devmm.StatisticsAdaptor(CupyPoolResource())

The other direction, CuPy allocating from devmm, is :mod:`devmm.interop.cupy`
(docs/frameworks.md).
"""

from __future__ import annotations

from ..adaptors import CallbackMemoryResource
from .._optional import require

cupy = require("cupy", "cupy-cuda13x", "devmm.mrs.cupy")


class CupyPoolResource(CallbackMemoryResource):
    """Allocates from a CuPy ``MemoryPool`` (keeps each ``MemoryPointer`` alive until freed)."""

    __slots__ = ()

    def __init__(self, pool: object = None, device: int = None) -> None:
        pool = pool if pool is not None else cupy.get_default_memory_pool()
        device = cupy.cuda.runtime.getDevice() if device is None else device
        live: dict = {}

        def allocate(nbytes: int, alignment: int, stream: int) -> int:
            # CuPy's pool keys blocks by its current stream: make it devmm's
            with cupy.cuda.Device(device), cupy.cuda.ExternalStream(stream or 0):
                mp = pool.malloc(nbytes)
            live[mp.ptr] = mp
            return mp.ptr

        def deallocate(ptr: int, nbytes: int, alignment: int, stream: int) -> None:
            live.pop(ptr)

        super().__init__(allocate, deallocate, device=f"cuda:{device}", name="cupy.pool")

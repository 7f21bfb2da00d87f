"""Route CuPy's allocations through devmm (devmm serving CuPy; the other direction, CuPy's pool
under devmm's adaptors, is :mod:`devmm.mrs.cupy`: docs/frameworks.md).

``use_devmm(resource=None)`` makes devmm CuPy's allocator (``cupy.cuda.set_allocator``): each
CuPy allocation is a devmm buffer from ``resource`` (default: the current resource of CuPy's
current device), ordered on CuPy's current stream (as CuPy's own pool does) and freed when
CuPy drops it. As a context manager it restores the previous allocator on exit.

    import devmm.interop.cupy
    with devmm.interop.cupy.use_devmm(stats):
        a = cupy.zeros(1000)                    # counted by stats
"""

from __future__ import annotations

from ..tensor import Buffer
from .._optional import require
from ..resource import MemoryResource, get_current_device_resource

cupy = require("cupy", "cupy-cuda13x", "devmm.interop.cupy")

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional


class use_devmm:
    """Installs the devmm allocator now; restores the previous one when used as a context
    manager and the block ends."""

    def __init__(self, resource: Optional[MemoryResource] = None) -> None:
        def malloc(size: int):
            device = cupy.cuda.runtime.getDevice()
            r = resource if resource is not None else get_current_device_resource(
                f"cuda:{device}")
            # CuPy's current stream: the allocation and the free are ordered on it, like the
            # work CuPy queues on this memory (0, the legacy default stream, is devmm's NULL)
            stream = cupy.cuda.get_current_stream().ptr or None
            buf = Buffer(size, resource=r, stream=stream)  # freed when CuPy lets go
            mem = cupy.cuda.UnownedMemory(buf.ptr, size, buf, device)
            return cupy.cuda.MemoryPointer(mem, 0)

        self._previous = cupy.cuda.get_allocator()
        cupy.cuda.set_allocator(malloc)

    def __enter__(self) -> "use_devmm":
        return self

    def __exit__(self, *exc: object) -> None:
        cupy.cuda.set_allocator(self._previous)

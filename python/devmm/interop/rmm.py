"""RMM and devmm, both ways; this module is devmm serving RMM.

``as_rmm_resource(resource)`` is an ``rmm.mr.CallbackMemoryResource`` over a devmm resource
(set it with ``rmm.mr.set_current_device_resource`` and RAPIDS allocates through devmm).
``from_rmm_resource(mr, device=0)``, the other direction (a Python RMM resource as a devmm
resource), lives in :mod:`devmm.mrs.rmm` with the rest of RMM-into-devmm and is importable from
here too (docs/frameworks.md).
"""

from __future__ import annotations

from .._optional import require

rmm = require("rmm", "rmm-cu13", "devmm.interop.rmm")  # first: its message names this module
from ..mrs.rmm import from_rmm_resource  # noqa: E402

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..resource import MemoryResource


def _stream_handle(stream: object) -> int:
    """RMM passes its Stream object; devmm wants the cudaStream_t (0: the default). RMM's
    streams speak the ``__cuda_stream__`` protocol: ``(version, handle)``."""
    if stream is None:
        return 0
    if hasattr(stream, "__cuda_stream__"):
        return int(stream.__cuda_stream__()[1])
    return int(stream)


def as_rmm_resource(resource: MemoryResource) -> object:
    """An RMM resource that allocates from a devmm resource."""
    return rmm.mr.CallbackMemoryResource(
        lambda size, stream=None: resource.allocate(size, stream=_stream_handle(stream) or None),
        lambda ptr, size, stream=None: resource.deallocate(ptr, size,
                                                           stream=_stream_handle(stream) or None))


__all__ = ["as_rmm_resource", "from_rmm_resource"]

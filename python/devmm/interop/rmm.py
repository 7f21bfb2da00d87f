"""RMM and devmm, both ways.

``as_rmm_resource(resource)`` is an ``rmm.mr.CallbackMemoryResource`` over a devmm resource
(set it with ``rmm.mr.set_current_device_resource`` and RAPIDS allocates through devmm);
``from_rmm_resource(mr, device=0)`` wraps a Python RMM resource as a devmm resource.
"""

from __future__ import annotations

from ..adaptors import CallbackMemoryResource
from . import _require

rmm = _require("rmm", "rmm-cu13", "devmm.interop.rmm")

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


class _Handle:
    """A raw stream handle speaking the ``__cuda_stream__`` protocol, for RMM's Stream."""

    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


def _rmm_stream(stream: object) -> object:
    """devmm's stream (an int handle or None, the default stream) as RMM's Stream."""
    from rmm.pylibrmm.stream import DEFAULT_STREAM, Stream
    return DEFAULT_STREAM if not stream else Stream(_Handle(int(stream)))


def from_rmm_resource(mr: object, device: str = "cuda:0") -> CallbackMemoryResource:
    """A devmm resource on device that allocates from an RMM resource, on devmm's stream
    (copies and stream order come from the device's runtime: see CallbackMemoryResource)."""
    return CallbackMemoryResource(lambda n, a, s: mr.allocate(n, _rmm_stream(s)),
                                  lambda p, n, a, s: mr.deallocate(p, n, _rmm_stream(s)),
                                  device=device, name="rmm")

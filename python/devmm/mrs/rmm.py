"""RMM into devmm. Two inputs, one place:

- RMM's own C++ resources, by name: the devmm-rmm plugin's kinds ``rmm.current`` (RMM's current
  resource of the device at each allocation: devmm and RAPIDS share one pool), ``rmm.pool`` and
  ``rmm.arena`` (plugins/rmm, C++, no Python on the allocation path). From Python:
  ``devmm.mrs.create_resource("rmm.pool", 0, upstream="async")``; from C and devmm.ini: the
  kind's name.
- A Python RMM resource *object* (one a program built, or RMM's ``CallbackMemoryResource``):
  :func:`from_rmm_resource`. RMM's Python objects do not expose their C++ resource, so the plugin
  cannot take one; this wraps its ``allocate``/``deallocate`` as a
  :class:`devmm.CallbackMemoryResource`, on any device (ADR 36).

The other direction, RMM allocating from devmm, is :mod:`devmm.interop.rmm`
(docs/frameworks.md). ``devmm.interop.rmm.from_rmm_resource`` is this function.
"""

from __future__ import annotations

from .._optional import require
from ..adaptors import CallbackMemoryResource

rmm = require("rmm", "rmm-cu13", "devmm.mrs.rmm")
from rmm.pylibrmm.stream import DEFAULT_STREAM, Stream  # noqa: E402 (rmm is there now)


class _Handle:
    """A raw stream handle speaking the ``__cuda_stream__`` protocol, for RMM's Stream."""

    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


def _rmm_stream(stream: object) -> object:
    """devmm's stream (an int handle or None, the default stream) as RMM's Stream."""
    return DEFAULT_STREAM if not stream else Stream(_Handle(int(stream)))


def from_rmm_resource(mr: object, device: str = "cuda:0") -> CallbackMemoryResource:
    """A devmm resource on device that allocates from an RMM resource, on devmm's stream
    (copies and stream order come from the device's runtime: see CallbackMemoryResource)."""
    return CallbackMemoryResource(lambda n, a, s: mr.allocate(n, _rmm_stream(s)),
                                  lambda p, n, a, s: mr.deallocate(p, n, _rmm_stream(s)),
                                  device=device, name="rmm")


__all__ = ["from_rmm_resource"]

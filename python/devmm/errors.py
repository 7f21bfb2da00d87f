"""Exceptions raised by devmm; each carries the C core's message.

>>> import devmm
>>> issubclass(devmm.OutOfMemoryError, MemoryError)
True
>>> issubclass(devmm.BufferFreedError, BufferError), issubclass(devmm.DevmmStateError, BufferError)
(True, False)
"""

from __future__ import annotations


class DevmmError(Exception):
    """Base class of devmm's errors; ``.status`` is the C status name."""

    def __init__(self, message: str, status: str = "DEVMM_ERROR") -> None:
        super().__init__(message)
        self.status = status


class OutOfMemoryError(DevmmError, MemoryError):
    """A resource (or a limiting adaptor) could not allocate."""


class ConfigError(DevmmError):
    """devmm.ini is invalid: the message says file:line and what was expected."""


class PluginError(DevmmError):
    """A plugin could not be loaded or used."""


class DevmmValueError(DevmmError, ValueError):
    """An argument was invalid (also a ``ValueError``)."""


class StreamError(DevmmError, ValueError, RuntimeError):
    """A ``__dlpack__`` stream that the device cannot use: a ``ValueError`` (a bad argument),
    and the ``RuntimeError`` NumPy raises for a stream on the CPU (its tests expect it)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "DEVMM_EINVAL")


class DevmmStateError(DevmmError, RuntimeError):
    """The object is in the wrong state for the call: a statistics scope popped that was never
    pushed, callbacks disabled at exit, a copy of freed memory (also a ``RuntimeError``)."""


class BufferFreedError(DevmmStateError, BufferError):
    """An export (DLPack, an array interface) of memory whose owner freed it: also a
    ``BufferError``, what the Array API and NumPy's tests expect of a failed export."""


class DeviceExportError(DevmmError, BufferError, ValueError):
    """``__dlpack__(dl_device=...)`` for a device this tensor cannot be exported to, or not
    without the copy that ``copy=False`` forbids: a ``BufferError`` (the Array API's word) and
    the ``ValueError`` NumPy raises for it (its ``test_device`` expects that)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "DEVMM_ENOTSUP")


class CallbackError(DevmmError):
    """A Python callback of a resource raised."""

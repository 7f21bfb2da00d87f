"""Exceptions raised by devmm; each carries the C core's message.

>>> import devmm
>>> issubclass(devmm.OutOfMemoryError, MemoryError)
True
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


class DevmmStateError(DevmmError, BufferError):
    """The object is in the wrong state, e.g. its buffer was freed (also a ``BufferError``)."""


class CallbackError(DevmmError):
    """A Python callback of a resource raised."""

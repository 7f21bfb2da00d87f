"""Exceptions raised by devmm; each carries the C core's message.

>>> import devmm
>>> issubclass(devmm.OutOfMemoryError, MemoryError)
True
>>> issubclass(devmm.BufferFreedError, BufferError), issubclass(devmm.DevmmStateError, BufferError)
(True, False)
"""

from __future__ import annotations

import _thread  # built in: no start-up cost


class DevmmError(Exception):
    """Base class of devmm's errors; ``.status`` is the C status name."""

    def __init__(self, message: str, status: str = "DEVMM_ERROR") -> None:
        super().__init__(message)
        self.status = status


class OutOfMemoryError(DevmmError, MemoryError):
    """A resource (or a limiting adaptor) could not allocate.

    When devmm refused an allocation, the message explains it and the figures are attributes,
    read from C (``devmm_last_oom``), ``None`` where unknown: ``device``, ``stack`` (the
    resource the request went to), ``requested_bytes``, ``alignment``, ``reason`` (what the
    refusing layer said), ``current_bytes`` and ``peak_bytes`` (devmm's, from the stack's
    statistics or limiting adaptor named by ``counted_by``), ``free_bytes`` and
    ``total_bytes`` (the device as the stack reports it), and with a tracking adaptor in the
    stack ``live_count``, ``live_bytes`` and ``largest``: the largest live allocations as
    ``(ptr, bytes, thread_id, where)`` tuples, largest first.
    """

    def __new__(cls, *args: object, **kwargs: object) -> "OutOfMemoryError":
        # BaseException's __new__, not MemoryError's: a subclass whose first base is
        # DevmmError may not call MemoryError.__new__ directly, which is what unpickling with
        # tblib does (Dask sends a task's exception that way)
        return Exception.__new__(cls, *args)

    device = stack = reason = counted_by = None
    requested_bytes = alignment = current_bytes = peak_bytes = None
    free_bytes = total_bytes = live_count = live_bytes = None
    largest: tuple = ()

    def _set_figures(self, rep: object, device: str) -> None:
        """Copies the figures of a C devmm_oom_report (``_lib.OomReport``); device is its
        device as the C core writes it (``_lib`` formats it: this module imports nothing of
        devmm's, so that ``_lib`` can import it)."""
        text, known = _text, _known
        self.device = device
        self.stack, self.reason, self.counted_by = text(rep.stack), text(rep.reason), \
            text(rep.counted_by)
        self.requested_bytes, self.alignment = rep.requested_bytes, rep.alignment
        self.current_bytes, self.peak_bytes = known(rep.current_bytes), known(rep.peak_bytes)
        self.free_bytes, self.total_bytes = known(rep.free_bytes), known(rep.total_bytes)
        if rep.tracking:
            self.live_count, self.live_bytes = rep.live_count, rep.live_bytes
            self.largest = tuple((a.ptr, a.bytes, a.thread_id, text(a.where))
                                 for a in rep.largest[:rep.nlargest])


class StaleHandleError(DevmmError, LookupError):
    """An IPC handle names memory that is gone: its exporter freed it or exited
    (:func:`devmm.open_ipc`)."""


def _text(b: bytes) -> object:
    return b.decode(errors="replace") or None


def _known(v: int) -> object:
    return None if v < 0 else v


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


class StatisticsScopeError(DevmmStateError, IndexError):
    """A statistics scope popped that was never pushed: a :class:`DevmmStateError` and, as
    RMM's ``pop_counters`` raises it, an ``IndexError`` (docs/from-rmm.md)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "DEVMM_ESTATE")


class BufferFreedError(DevmmStateError, BufferError):
    """An export (DLPack, an array interface) of memory whose owner freed it: also a
    ``BufferError``, what the Array API and NumPy's tests expect of a failed export."""


class DeviceExportError(DevmmError, BufferError, ValueError):
    """``__dlpack__(dl_device=...)`` for a device this tensor cannot be exported to, or not
    without the copy that ``copy=False`` forbids: a ``BufferError`` (the Array API's word) and
    the ``ValueError`` NumPy raises for it (its ``test_device`` expects that)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "DEVMM_ENOTSUP")


class CallbackError(DevmmError, RuntimeError):
    """A Python callback of a resource raised: also a ``RuntimeError``, what RMM turns a
    callback's exception into (its tests expect it; docs/from-rmm.md)."""


# ----------------------------------------------------------------------------- callbacks' own
# A Python callback that C calls cannot raise through C: it holds its exception here (per
# thread) and fails with a devmm status whose message contains `said`; devmm._lib.error takes
# it back when it builds the exception for that status (tests/python/test_from_rmm.py).
_held: dict = {}


def hold(exc: BaseException, said: str, reraise: bool) -> None:
    """Keeps exc for this thread: reraise=True gives it back as it is (a failure callback's),
    False as the ``__cause__`` of the devmm error (a callback resource's)."""
    _held[_thread.get_ident()] = (exc, said, reraise)


def take(message: str) -> tuple:
    """(exception, reraise) this thread held for a failure whose message is message, or
    (None, False); what was held goes either way."""
    got = _held.pop(_thread.get_ident(), None)
    if got is None or got[1] not in message:
        return None, False
    return got[0], got[2]

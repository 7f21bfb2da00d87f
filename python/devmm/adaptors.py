"""Adaptors: resources over an upstream that add one behaviour each.

>>> import devmm
>>> from devmm.mrs.cpu import MallocMemoryResource
>>> stack = devmm.LimitingAdaptor(devmm.StatisticsAdaptor(MallocMemoryResource()), "1MiB")
>>> stack.name
'limiting(statistics(cpu.malloc))'
"""

from __future__ import annotations

import ctypes
import sys

TYPE_CHECKING = False  # typing is imported only by type checkers: it costs start-up time
if TYPE_CHECKING:
    from typing import Callable, Optional, Union

    from ._statistics import Statistics

from . import _lib
from ._callback import CallbackMemoryResource, arity
from ._shared import register
from .errors import StatisticsScopeError, hold
from .resource import MemoryResource

_C = _lib.CONSTANTS
_ECALLBACK = _C["DEVMM_ECALLBACK"]


def _new(create, *args) -> int:
    out = ctypes.c_void_p()
    _lib.check(create(*args, ctypes.byref(out)))
    return out.value


def _upstream(r: object) -> MemoryResource:
    if not isinstance(r, MemoryResource):
        raise TypeError(f"upstream must be a MemoryResource, got {type(r).__name__}")
    return r


def _size(value: Union[int, str], total: int = 0, name: str = "size") -> int:
    if not isinstance(value, str):
        return _lib.cint(value, ctypes.c_size_t, name)
    out = ctypes.c_size_t()
    rc = _lib.parse_size(str(value).encode(), total, ctypes.byref(out))
    if rc:  # the C message names no argument: say which one it is
        said = _lib.last_error().decode(errors="replace")
        _lib.check(_lib.set_error(rc, b"%s", f"{name}: {said}".encode()))
    return out.value


class Adaptor(MemoryResource):
    """What every adaptor has: :attr:`upstream`, also as RMM's ``get_upstream()`` and
    ``upstream_mr``."""

    __slots__ = ()

    def get_upstream(self) -> Optional[MemoryResource]:
        """:attr:`upstream` (RMM's name)."""
        return self.upstream

    upstream_mr = property(get_upstream, doc=":attr:`upstream` (RMM's name).")


class StatisticsAdaptor(Adaptor):
    """Counts bytes and allocations: current, peak and total (lock-free).
    ``sharded=True`` keeps per-thread counters that scale with threads (the peak is then a
    lower bound under concurrent allocation). :attr:`statistics` and :meth:`pop` give a
    :class:`devmm.Statistics` (RMM's fields); each counter is also a property.

    >>> import devmm
    >>> from devmm.mrs.cpu import MallocMemoryResource
    >>> s = StatisticsAdaptor(MallocMemoryResource())
    >>> p = s.allocate(100); s.current_bytes, s.peak_bytes, s.total_count
    (100, 100, 1)
    >>> s.statistics
    Statistics(current_bytes=100, current_count=1, peak_bytes=100, peak_count=1, total_bytes=100, total_count=1)
    >>> s.deallocate(p, 100); s.current_bytes
    0
    """

    __slots__ = ()

    def __init__(self, upstream: MemoryResource, sharded: bool = False) -> None:
        up = _upstream(upstream)
        if sharded is not True and sharded is not False:  # as __dlpack__(copy=) has it
            raise TypeError(f"StatisticsAdaptor: sharded must be True or False, got "
                            f"{type(sharded).__name__} {sharded!r}")
        flags = _C["DEVMM_STATISTICS_SHARDED"] if sharded else 0
        super().__init__(_new(_lib.statistics_adaptor_create_ex, up._h, flags), up)

    @classmethod
    def find(cls, resource: MemoryResource) -> "StatisticsAdaptor":
        """The first statistics adaptor in resource's stack (itself or an upstream): how to read
        the figures of a stack devmm.ini built. LookupError if there is none.

        >>> import devmm
        >>> from devmm.mrs.cpu import MallocMemoryResource
        >>> stack = devmm.LimitingAdaptor(devmm.StatisticsAdaptor(MallocMemoryResource()), 4096)
        >>> devmm.StatisticsAdaptor.find(stack).name
        'statistics(cpu.malloc)'
        """
        h = resource._h
        s = _lib.Statistics()
        while h:
            if _lib.statistics_get(h, ctypes.byref(s)) == 0:
                return cls._from_new(_lib.resource_retain(h))
            h = _lib.resource_upstream(h)
        _lib.clear_error()
        raise LookupError(f"no statistics adaptor in '{resource.name}'")

    @property
    def statistics(self) -> Statistics:
        """All six counters of the innermost scope, as a frozen :class:`devmm.Statistics`
        (also RMM's ``allocation_counts``: it reads as RMM's dict too)."""
        s = _lib.Statistics()
        _lib.check(_lib.statistics_get(self._h, ctypes.byref(s)))
        return _frozen(s)

    allocation_counts = statistics

    def _get(self, field: str) -> int:
        s = _lib.Statistics()
        _lib.check(_lib.statistics_get(self._h, ctypes.byref(s)))
        return getattr(s, field)

    current_bytes = property(lambda self: self._get("current_bytes"), doc="Bytes live now.")
    peak_bytes = property(lambda self: self._get("peak_bytes"), doc="Most bytes live at once.")
    total_bytes = property(lambda self: self._get("total_bytes"), doc="Bytes ever allocated.")
    current_count = property(lambda self: self._get("current_count"), doc="Live allocations.")
    peak_count = property(lambda self: self._get("peak_count"), doc="Most live at once.")
    total_count = property(lambda self: self._get("total_count"), doc="Allocations ever made.")

    def push(self) -> Statistics:
        """Starts a nested scope whose counters start at zero; returns the figures of the scope
        it nests in, as they were before the push (RMM's ``push_counters``)."""
        before = self.statistics
        _lib.check(_lib.statistics_push(self._h))
        return before

    def pop(self) -> Statistics:
        """Ends the innermost scope; returns its counters (merged into the outer scope).
        Popping the last scope raises :class:`~devmm.errors.StatisticsScopeError`, a
        :class:`DevmmStateError` and an ``IndexError`` saying RMM's "cannot pop the last
        counter pair"."""
        s = _lib.Statistics()
        rc = _lib.statistics_pop(self._h, ctypes.byref(s))
        if rc == _C["DEVMM_ESTATE"]:
            said = _lib.last_error().decode(errors="replace")  # then RMM's words, which RMM's
            raise StatisticsScopeError(f"{said}: cannot pop the last counter pair")  # tests match
        _lib.check(rc)
        return _frozen(s)

    push_counters, pop_counters = push, pop  # RMM's names

    def reset_peak(self) -> None:
        """Sets the peaks of the innermost scope to the current values."""
        _lib.check(_lib.statistics_reset_peak(self._h))


def _frozen(s: _lib.Statistics) -> Statistics:
    from ._statistics import Statistics  # imported on first use: dataclasses costs start-up time
    return Statistics(**{name: getattr(s, name) for name, _ in _lib.Statistics._fields_})


class LimitingAdaptor(Adaptor):
    """Refuses allocations that would take its live bytes over ``limit`` (an int, or a size
    like ``"4GiB"`` or ``"90%"`` of the device's memory; RMM's ``allocation_limit=`` is the
    same argument) with :class:`OutOfMemoryError`.

    >>> import devmm
    >>> from devmm.mrs.cpu import MallocMemoryResource
    >>> lim = LimitingAdaptor(MallocMemoryResource(), 1000)
    >>> lim.allocate(2000)
    Traceback (most recent call last):
    ...
    devmm.errors.OutOfMemoryError: out of memory: allocating 2000 bytes through 'limiting(cpu.malloc)' would exceed its limit of 1000 bytes (0 bytes in use)
      request: 1.95 KiB (2000 bytes) on cpu through limiting(cpu.malloc)
      devmm on cpu: 0 B in use through limiting(cpu.malloc) (peak unknown: no statistics adaptor in the stack)
      device: 1000 B free of 1000 B
      (a tracking adaptor in the stack would list the largest live allocations)
    """

    __slots__ = ()

    def __init__(self, upstream: MemoryResource, limit: Union[None, int, str] = None, *,
                 allocation_limit: Union[None, int, str] = None) -> None:
        up, what = _upstream(upstream), "limit"
        if allocation_limit is not None:  # RMM's name (test_limiting_takes_rmms_names)
            if limit is not None:
                raise TypeError("LimitingAdaptor: give limit or allocation_limit, not both")
            limit, what = allocation_limit, "allocation_limit"
        if limit is None:
            raise TypeError("LimitingAdaptor: missing the limit (limit= or allocation_limit=)")
        total = 0
        if isinstance(limit, str) and limit.strip().endswith("%"):
            total = up.mem_info()[1]
        nbytes = _size(limit, total, what)
        if nbytes == 0:  # as devmm.ini's limit = 0 (tests/config/limit-zero.ini)
            raise ValueError(f"LimitingAdaptor: {what} = {limit!r} would refuse every "
                             "allocation: expected a size or a percentage above 0 (to limit "
                             "nothing, leave the LimitingAdaptor out)")
        super().__init__(_new(_lib.limiting_adaptor_create, up._h, nbytes), up)

    def _get(self) -> tuple[int, int]:
        a, lim = ctypes.c_size_t(), ctypes.c_size_t()
        _lib.check(_lib.limiting_get(self._h, ctypes.byref(a), ctypes.byref(lim)))
        return a.value, lim.value

    allocated_bytes = property(lambda self: self._get()[0], doc="Bytes live through it.")
    limit = property(lambda self: self._get()[1], doc="The limit in bytes.")

    def get_allocated_bytes(self) -> int:
        """:attr:`allocated_bytes` (RMM's name)."""
        return self._get()[0]

    def get_allocation_limit(self) -> int:
        """:attr:`limit` (RMM's name)."""
        return self._get()[1]


class TrackingAdaptor(Adaptor):
    """Records every live allocation: find the allocation containing any address, list the
    outstanding ones (with C backtraces when ``backtraces=True``, with the allocating Python
    stack, at most ``python_stack`` frames, when it is > 0). ``history=N`` keeps the last N
    allocate/free events for :func:`devmm.snapshot` timelines. From Python, a C backtrace is
    mostly the interpreter's own frames (``python(+0x14de98)``), so ``backtraces=True``
    records the Python stack too (16 frames) unless ``python_stack`` says otherwise. RMM's
    ``capture_stacks=True`` is ``python_stack=16`` (False: 0); give one of the two.

    >>> import devmm
    >>> from devmm.mrs.cpu import MallocMemoryResource
    >>> tr = TrackingAdaptor(MallocMemoryResource())
    >>> p = tr.allocate(64)
    >>> tr.lookup(p + 10)["ptr"] == p, tr.outstanding
    (True, (1, 64))
    >>> tr.deallocate(p, 64)
    """

    __slots__ = ()

    def __init__(self, upstream: MemoryResource, backtraces: bool = False,
                 python_stack: Optional[int] = None, history: int = 0, *,
                 capture_stacks: Optional[bool] = None) -> None:
        up = _upstream(upstream)
        if capture_stacks is not None:  # RMM's (test_tracking_takes_rmms_capture_stacks)
            if capture_stacks is not True and capture_stacks is not False:
                k = type(capture_stacks)  # numpy.bool named so (test_rmm_shapes.py)
                name = k.__qualname__ if k.__module__ == "builtins" else \
                    f"{k.__module__}.{k.__qualname__}"
                raise TypeError(f"TrackingAdaptor: capture_stacks must be True or False (a "
                                f"Python bool), got {name} {capture_stacks!r}")
            if python_stack is not None:
                raise TypeError("TrackingAdaptor: give capture_stacks or python_stack, not both")
            python_stack = 16 if capture_stacks else 0
        if python_stack is None:  # test_backtraces_from_python_record_the_python_stack_too
            python_stack = 16 if backtraces else 0
        if python_stack or history:  # the options (devmm._pystack); none of their cost otherwise
            from ._pystack import create
            h = create(up._h, backtraces, python_stack, history)
        else:
            h = _new(_lib.tracking_adaptor_create, up._h, 1 if backtraces else 0)
        super().__init__(h, up)

    @property
    def outstanding(self) -> tuple[int, int]:
        """(count, bytes) of live allocations."""
        c, b = ctypes.c_size_t(), ctypes.c_size_t()
        _lib.check(_lib.tracking_outstanding(self._h, ctypes.byref(c), ctypes.byref(b)))
        return c.value, b.value

    def lookup(self, address: int) -> dict:
        """The live allocation containing address (KeyError if none); ``python_stack`` lists
        ``(file, line, function)`` innermost first when Python stacks are recorded."""
        info = _lib.AllocationInfo()
        address = _lib.cint(address, ctypes.c_size_t, "address")
        rc = _lib.tracking_lookup(self._h, address, ctypes.byref(info))
        if rc:
            raise KeyError(_lib.last_error().decode())
        stack = []
        if info.tag:
            from ._pystack import stack_of
            stack = stack_of(info.tag)
        return {"ptr": info.ptr, "bytes": info.bytes, "alignment": info.alignment,
                "stream": info.stream, "thread_id": info.thread_id,
                "frames": [info.frames[i] for i in range(info.nframes)],
                "time_ns": info.time_ns, "python_stack": stack}

    def report(self) -> str:
        """A human-readable list of the live allocations."""
        out = ctypes.c_void_p()
        _lib.check(_lib.tracking_report(self._h, ctypes.byref(out)))
        try:
            return ctypes.string_at(out.value).decode(errors="replace")
        finally:
            _lib.string_free(out.value)

    def get_outstanding_allocations_str(self) -> str:
        """:meth:`report`, or ``""`` when nothing is outstanding (RMM's name and behaviour)."""
        return self.report() if self.outstanding[0] else ""

    def get_allocated_bytes(self) -> int:
        """Bytes live through it (RMM's name; ``outstanding[1]``)."""
        return self.outstanding[1]

    def log_outstanding_allocations(self) -> None:
        """Writes :meth:`report` to devmm's diagnostics (stderr) at the debug level, as RMM
        logs them at its debug level: nothing unless ``devmm.set_logging_level("debug")`` or
        ``DEVMM_LOG_LEVEL=debug``."""
        if _lib.log_level() == b"debug":
            for line in self.report().splitlines():
                sys.stderr.write(f"devmm: debug: {line}\n")


class LoggingAdaptor(Adaptor):
    """Logs every allocate/free as CSV (``Thread,Time,Action,Pointer,Size,Stream``, RMM's
    columns) to ``path`` (created 0600, or truncated if it is this user's; a symbolic link or
    another user's file is refused; adaptors naming one file share it), or stderr when path is
    None."""

    __slots__ = ("_path",)

    def __init__(self, upstream: MemoryResource, path: Optional[str] = None,
                 flush: bool = False) -> None:
        up = _upstream(upstream)
        p = None if path is None else str(path).encode()
        super().__init__(_new(_lib.logging_adaptor_create, up._h, p, 1 if flush else 0), up)
        self._path = None if path is None else str(path)

    def flush(self) -> None:
        """Flushes the log file."""
        _lib.check(_lib.logging_flush(self._h))

    def get_file_name(self) -> Optional[str]:
        """The path it was made with (RMM's name); None for stderr, and for one devmm.ini built
        (its ``log_file``)."""
        return getattr(self, "_path", None)


class AlignedAdaptor(Adaptor):
    """Gives allocations of at least ``threshold`` bytes an alignment of at least
    ``alignment`` (over-allocating from upstreams that cannot align that far).

    >>> from devmm.mrs.cpu import MallocMemoryResource
    >>> a = AlignedAdaptor(MallocMemoryResource(), 4096)
    >>> p = a.allocate(10); p % 4096
    0
    >>> a.deallocate(p, 10)
    """

    __slots__ = ()

    def __init__(self, upstream: MemoryResource, alignment: int, threshold: int = 0) -> None:
        up = _upstream(upstream)
        alignment = _lib.cint(alignment, ctypes.c_size_t, "alignment")
        threshold = _lib.cint(threshold, ctypes.c_size_t, "threshold")
        super().__init__(_new(_lib.aligned_adaptor_create, up._h, alignment, threshold), up)


_FAILURE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
_PINNED: list = []


class FailureCallbackAdaptor(Adaptor):
    """On out-of-memory from upstream, calls ``callback(nbytes, attempt)`` (attempt 0 first),
    or RMM's ``callback(nbytes)`` when its signature takes one argument; a true result
    retries the allocation (e.g. after ``gc.collect()``), false gives up. ``any_error=True``
    calls it on any failed allocation, not only out-of-memory (RMM's
    ``failure_callback_resource_adaptor<bad_alloc>``). An exception the callback raises is
    not retried: it reaches the caller of the allocation as it is (RMM's behaviour).

    >>> import gc
    >>> from devmm.mrs.cpu import MallocMemoryResource
    >>> r = FailureCallbackAdaptor(LimitingAdaptor(MallocMemoryResource(), 100),
    ...                            lambda nbytes, attempt: attempt < 2)
    >>> r.allocate(1000)
    Traceback (most recent call last):
    ...
    devmm.errors.OutOfMemoryError: out of memory: allocating 1000 bytes through 'limiting(cpu.malloc)' would exceed its limit of 100 bytes (0 bytes in use) (failure callback gave up after 3 attempts)
      request: 1000 B (1000 bytes) on cpu through failure_callback(limiting(cpu.malloc))
      devmm on cpu: 0 B in use through limiting(cpu.malloc) (peak unknown: no statistics adaptor in the stack)
      device: 100 B free of 100 B
      (a tracking adaptor in the stack would list the largest live allocations)
    """

    __slots__ = ()

    def __init__(self, upstream: MemoryResource,
                 callback: Union[Callable[[int, int], bool], Callable[[int], bool]],
                 any_error: bool = False) -> None:
        up = _upstream(upstream)
        n = arity(callback, "FailureCallbackAdaptor: callback", " -> bool", "nbytes, attempt",
                   "nbytes")

        def trampoline(nbytes: int, attempt: int, _user: int) -> int:
            try:
                return 1 if (callback(nbytes, attempt) if n == 2 else callback(nbytes)) else 0
            except BaseException as e:  # never across C: held, then raised by the caller
                said = f"the failure callback raised {type(e).__name__} (not retried)"
                hold(e, said, True)
                return _lib.set_error(_ECALLBACK, b"%s", said.encode())

        fn = _FAILURE_FN(trampoline)
        # The C adaptor can outlive this object (a buffer or the registry may hold it), and it
        # has no hook to say when it is gone: the trampoline stays alive with the module.
        _PINNED.append(fn)
        flags = _C["DEVMM_FAILURE_CALLBACK_ANY_ERROR"] if any_error else 0
        super().__init__(_new(_lib.failure_callback_adaptor_create_ex, up._h,
                              ctypes.cast(fn, ctypes.c_void_p), None, flags), up, keep=fn)


class ThreadSafeAdaptor(Adaptor):
    """Serialises every operation on upstream with a mutex."""

    __slots__ = ()

    def __init__(self, upstream: MemoryResource) -> None:
        up = _upstream(upstream)
        super().__init__(_new(_lib.thread_safe_adaptor_create, up._h), up)


class PrefetchAdaptor(Adaptor):
    """Prefetches each allocation to the device on its stream (RMM's
    ``PrefetchResourceAdaptor``), over any stack whose resource has memory that moves:
    ``<gpu>.managed``, ``<gpu>.system``, ``<gpu>.async`` with ``pool="managed"``, adaptors
    between them included; refused (:class:`devmm.DevmmError`, ENOTSUP) over others."""

    __slots__ = ()

    def __init__(self, upstream: MemoryResource) -> None:
        up = _upstream(upstream)
        super().__init__(_new(_lib.prefetch_adaptor_create, up._h), up)

    def prefetch(self, ptr: int, nbytes: int, stream: Optional[int] = None) -> None:
        """Prefetches [ptr, ptr + nbytes) of this resource's memory to its device again (after
        the host touched it), ordered on stream."""
        _lib.check(_lib.prefetch(self._h, ptr, nbytes, stream))


# The Python class of each adaptor type C reports (devmm_adaptor_kind): how a stack built from
# devmm.ini comes back as its top adaptor's class (devmm._shared.typed).
_CLASSES = {"statistics": StatisticsAdaptor, "limiting": LimitingAdaptor,
            "tracking": TrackingAdaptor, "logging": LoggingAdaptor, "aligned": AlignedAdaptor,
            "failure_callback": FailureCallbackAdaptor, "thread_safe": ThreadSafeAdaptor,
            "prefetch": PrefetchAdaptor}
for _kind, _cls in _CLASSES.items():
    register(_kind, _cls)

__all__ = ["Adaptor", "AlignedAdaptor", "CallbackMemoryResource", "FailureCallbackAdaptor",
           "LimitingAdaptor", "LoggingAdaptor", "PrefetchAdaptor", "StatisticsAdaptor",
           "ThreadSafeAdaptor", "TrackingAdaptor"]

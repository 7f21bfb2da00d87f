"""``devmm.profile``: memory profiling of your own functions and blocks, like RAPIDS'
``rmm.statistics.profiler``, on every device.

``devmm.profile`` is a decorator and a context manager; ``devmm.profile.report()`` prints, per
function or named block, the calls, the peak bytes allocated inside, the total bytes, the
allocations and what was still allocated when the block ended, sorted by peak.

>>> import devmm
>>> devmm.profile.clear()
>>> @devmm.profile
... def step():
...     a = devmm.empty(1000, "int8"); b = devmm.empty(3000, "int8")
>>> step(); step()
>>> with devmm.profile("load"):
...     keep = devmm.empty(500, "int8")
>>> devmm.profile.report()  # doctest: +NORMALIZE_WHITESPACE
devmm memory profile, by peak bytes
  calls   peak bytes   total bytes   allocations   live after   name
      2        4,000         8,000             4            0   step
      1          500           500             1          500   load
>>> devmm.profile.records()["step"].peak_bytes
4000

How it works: the outermost block of a thread (or asyncio task) wraps the resource it profiles
(``resource=``, or the current resource of ``device``, default cpu) in a new StatisticsAdaptor
and makes it the current resource of that device for the block, through the ``ContextVar`` of
:func:`devmm.using_memory_resource`: per thread and per task. (Allocations that named no device
keep going where they went; ``resource=r`` makes ``r`` its device's resource in the block.) The adaptor's figures are the block's. Each nested
block pushes a scope on that adaptor (``StatisticsAdaptor.push``) and pops it at its end, which
gives its own peak, totals and counts; an outer block's figures include its inner blocks'. So two threads profiling at once never count each other's allocations, and nested blocks
push and pop in order on one adaptor. A free on another thread still returns through the
allocating thread's adaptor (a buffer remembers its resource). Seen are the allocations that ask
devmm for the current resource (:func:`devmm.empty`, :class:`devmm.Buffer`, CuPy's
``use_devmm()``); ones made with an explicit ``resource=`` go to that resource, and asyncio
tasks started inside a block count toward it (they inherit its context; threads do not).
"""

from __future__ import annotations

import _thread  # not threading: its import costs start-up time, and a lock is all this needs
import sys
from _contextvars import ContextVar  # built in: contextvars.py only re-exports it

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Optional, TextIO, Union

from ._interchange import CPU_KEY
from ._shared import scoped
from .resource import get_current_device_resource as _current

__all__ = ["Profile", "Profiler", "Record", "clear", "profile", "profiler", "records", "report"]


class Record:
    """What the profile recorded for one name (immutable once returned)."""

    __slots__ = ("name", "calls", "peak_bytes", "total_bytes", "allocations", "live_bytes")

    def __init__(self, name: str, calls: int = 0, peak_bytes: int = 0, total_bytes: int = 0,
                 allocations: int = 0, live_bytes: int = 0) -> None:
        self.name = name
        self.calls = calls              # times the function or block ran
        self.peak_bytes = peak_bytes    # the most bytes allocated inside at once, over all calls
        self.total_bytes = total_bytes  # bytes allocated inside, summed over all calls
        self.allocations = allocations  # allocations made inside, summed
        self.live_bytes = live_bytes    # allocated inside and not freed when a call ended, summed

    # RMM's ProfilerRecords.MemoryRecord names (docs/from-rmm.md)
    num_calls = property(lambda self: self.calls, doc=":attr:`calls` (RMM's name).")
    memory_peak = property(lambda self: self.peak_bytes, doc=":attr:`peak_bytes` (RMM's name).")
    memory_total = property(lambda self: self.total_bytes, doc=":attr:`total_bytes` (RMM's).")

    def __repr__(self) -> str:
        return (f"Record({self.name!r}, calls={self.calls}, peak_bytes={self.peak_bytes}, "
                f"total_bytes={self.total_bytes}, allocations={self.allocations}, "
                f"live_bytes={self.live_bytes})")


_RECORDS: dict = {}
_RECORDS_LOCK = _thread.allocate_lock()


def _record(name: str, s) -> None:
    """Adds one call's figures (a :class:`devmm.Statistics`) to name's record."""
    with _RECORDS_LOCK:
        r = _RECORDS.get(name)
        if r is None:
            r = _RECORDS[name] = Record(name)
        r.calls += 1
        if s.peak_bytes > r.peak_bytes:
            r.peak_bytes = s.peak_bytes
        r.total_bytes += s.total_bytes
        r.allocations += s.total_count
        r.live_bytes += s.current_bytes


def records() -> dict:
    """A copy of the records: name -> :class:`Record`."""
    with _RECORDS_LOCK:
        return {n: Record(r.name, r.calls, r.peak_bytes, r.total_bytes, r.allocations,
                          r.live_bytes) for n, r in _RECORDS.items()}


def clear() -> None:
    """Forgets every record."""
    with _RECORDS_LOCK:
        _RECORDS.clear()


_ORDERS = ("peak_bytes", "total_bytes", "allocations", "calls", "live_bytes", "name")


def report(file: Optional[TextIO] = None, ordered_by: str = "peak_bytes") -> None:
    """Prints the records as a table, largest first by ``ordered_by`` (peak_bytes,
    total_bytes, allocations, calls, live_bytes or name)."""
    if ordered_by not in _ORDERS:
        raise ValueError(f"ordered_by must be one of {', '.join(_ORDERS)}, got {ordered_by!r}")
    rs = list(records().values())
    if ordered_by == "name":
        rs.sort(key=lambda r: r.name)
    else:
        rs.sort(key=lambda r: (-getattr(r, ordered_by), r.name))
    out = file if file is not None else sys.stdout
    out.write(f"devmm memory profile, by {ordered_by.replace('_', ' ')}\n")
    out.write(f"{'calls':>7}{'peak bytes':>13}{'total bytes':>14}{'allocations':>14}"
              f"{'live after':>13}   name\n")
    for r in rs:
        out.write(f"{r.calls:>7,}{r.peak_bytes:>13,}{r.total_bytes:>14,}{r.allocations:>14,}"
                  f"{r.live_bytes:>13,}   {r.name}\n")


# ----------------------------------------------------------------------------- scopes

class _Frame:
    """One statistics adaptor of one thread or task, with its nesting depth."""

    __slots__ = ("adaptor", "base", "scope", "depth")


class _State:
    """The profiling state of one thread or asyncio task."""

    __slots__ = ("owner", "frames", "entries")

    def __init__(self, owner: tuple) -> None:
        self.owner = owner
        self.frames: dict = {}   # handle of a profiled base resource or of our adaptor -> _Frame
        self.entries: list = []  # open `with` blocks: (frame, name, state token)


_STATE: ContextVar = ContextVar("devmm_profile", default=None)

_CPU = CPU_KEY  # (device type, id) of "cpu"


def _install(adaptor, base):
    """Makes adaptor the current resource of base's home device for this thread or task, and of
    device-less allocations only where those went to base: the profiled program allocates from
    the same resources as without the profile. Returns the ContextVar token."""
    cur = scoped.get()
    new = dict(cur)
    new[adaptor._homekey] = adaptor  # managed memory: its GPU's, as using_memory_resource's
    if None in cur:
        if getattr(cur[None], "_h", None) == base._h:
            new[None] = adaptor
    elif adaptor._devkey == _CPU:  # no scope: device-less allocations go to cpu
        new[None] = adaptor
    else:
        new[None] = _current("cpu")
    return scoped.set(new)


def _owner() -> tuple:
    task = None
    aio = sys.modules.get("asyncio")
    if aio is not None:
        try:
            task = aio.current_task()
        except RuntimeError:  # no running loop in this thread
            pass
    return (_thread.get_ident(), id(task) if task is not None else 0)


def _enter(resource, device) -> tuple:
    """Opens a block: returns (frame, state token or None)."""
    owner = _owner()
    st = _STATE.get()
    token = None
    if st is None or st.owner != owner:
        st = _State(owner)
        token = _STATE.set(st)
    base = resource if resource is not None else _current(device)
    h = getattr(base, "_h", None)
    if h is None:
        if token is not None:
            _STATE.reset(token)
        raise TypeError(f"profile: resource must be a MemoryResource, got "
                        f"{type(resource).__name__}")
    frame = st.frames.get(h)
    if frame is None:
        frame = _Frame()
        from .adaptors import StatisticsAdaptor  # on the first block: start-up time
        frame.adaptor = StatisticsAdaptor(base)
        frame.base = h
        frame.depth = 0
        frame.scope = _install(frame.adaptor, base)
        st.frames[h] = st.frames[frame.adaptor._h] = frame
    if frame.depth:  # a nested block: a scope of its own (the outermost has the whole adaptor)
        try:
            frame.adaptor.push()
        except BaseException:
            if token is not None:
                _STATE.reset(token)
            raise
    frame.depth += 1
    return frame, token


def _close(st: _State, frame: _Frame) -> None:
    if frame.depth == 0:
        scoped.reset(frame.scope)
        st.frames.pop(frame.base, None)
        st.frames.pop(frame.adaptor._h, None)


def _exit(name: str, frame: _Frame, token) -> None:
    st = _STATE.get()
    try:
        s = frame.adaptor.pop() if frame.depth > 1 else frame.adaptor.statistics
    finally:
        frame.depth -= 1
        _close(st, frame)
        if token is not None:
            _STATE.reset(token)
    _record(name, s)


class Profile:
    """A profiled block (``with``) or function (decorator); see :mod:`devmm.profile`.
    ``with`` gives the statistics adaptor that counts the block."""

    __slots__ = ("name", "resource", "device")

    def __init__(self, name: Optional[str] = None, resource=None,
                 device: Union[str, tuple, None] = None) -> None:
        self.name = name
        self.resource = resource
        self.device = device

    def __enter__(self):
        if self.name is None:
            f = sys._getframe(1)
            self.name = f"{f.f_code.co_filename}:{f.f_lineno}"
        frame, token = _enter(self.resource, self.device)
        _STATE.get().entries.append((frame, self.name, token))
        return frame.adaptor

    def __exit__(self, *exc: object) -> None:
        frame, name, token = _STATE.get().entries.pop()
        _exit(name, frame, token)

    def __call__(self, func: Callable) -> Callable:
        name = self.name or getattr(func, "__qualname__", None) or repr(func)
        resource, device = self.resource, self.device
        import functools  # on first use: it imports collections, which costs start-up time
        import inspect
        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def awrapper(*args, **kwargs):
                frame, token = _enter(resource, device)
                try:
                    return await func(*args, **kwargs)
                finally:
                    _exit(name, frame, token)
            return awrapper

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            frame, token = _enter(resource, device)
            try:
                return func(*args, **kwargs)
            finally:
                _exit(name, frame, token)
        return wrapper


def profile(func: Union[Callable, str, None] = None, /, name: Optional[str] = None, *,
            resource=None, device: Union[str, tuple, None] = None):
    """``@devmm.profile``, ``@devmm.profile(name=..., resource=..., device=...)`` or
    ``with devmm.profile("block", resource=...)``: records the function's or block's memory
    under name (default: the function's qualified name, or the block's file:line)."""
    if callable(func) and not isinstance(func, str):
        return Profile(name, resource, device)(func)
    if isinstance(func, str):
        if name is not None:
            raise TypeError("profile: the name is given twice")
        name = func
    elif func is not None:
        raise TypeError(f"profile: expected a function or a name, got {type(func).__name__}")
    return Profile(name, resource, device)


class Profiler:
    """What ``devmm.profile`` is: :func:`profile` when called (``@devmm.profile``, ``with
    devmm.profile("block")``), with this module's :func:`report`, :func:`records`,
    :func:`clear`, :class:`Profile` and :class:`Record` as attributes. devmm's ``__init__``
    imports this module and binds ``devmm.profile`` to :data:`profiler`, so the name stays
    callable however the module is imported (ADR 36); the module itself is a plain module.

    >>> import devmm
    >>> devmm.profile is profiler, callable(devmm.profile)
    (True, True)
    """

    __slots__ = ()
    Profile = Profile
    Record = Record
    report = staticmethod(report)
    records = staticmethod(records)
    clear = staticmethod(clear)
    profile = staticmethod(profile)

    def __call__(self, func: Union[Callable, str, None] = None, /, name: Optional[str] = None,
                 *, resource=None, device: Union[str, tuple, None] = None):
        return profile(func, name, resource=resource, device=device)

    def __repr__(self) -> str:
        return "<devmm.profile: @devmm.profile, with devmm.profile(name), .report()>"


profiler = Profiler()
"""``devmm.profile``."""

"""Memory timelines: live bytes over time, stacked by allocation, as a self-contained HTML page
(no network: inline CSS and JavaScript, opens from a file) or a static SVG.

From a memory log (the logging adaptor's CSV, or RMM's): ``python -m devmm timeline LOG.csv -o
timeline.html``, or :func:`from_log`. From a live tracking adaptor: :func:`snapshot`, which reads
its history (``TrackingAdaptor(..., history=N)``) and live allocations, with their Python stacks
(``python_stack=N``) and C backtraces.

>>> import devmm, os, tempfile
>>> from devmm.mrs.cpu import MallocMemoryResource
>>> tr = devmm.TrackingAdaptor(MallocMemoryResource(), python_stack=8, history=1000)
>>> a = devmm.empty(1000, "int8", resource=tr); b = devmm.empty(3000, "int8", resource=tr)
>>> a.buffer.free()
>>> snap = devmm.snapshot(tr)
>>> snap.peak_bytes, [x["bytes"] for x in snap.largest_at_peak()]
(4000, [3000, 1000])
>>> out = tempfile.mkdtemp()
>>> snap.save_html(os.path.join(out, "t.html")); snap.save_svg(os.path.join(out, "t.svg"))

How a large log stays usable (1,000,000 events): the exact total of live bytes is kept per time
bucket (``buckets``, the maximum within each, so no peak is lost) and drawn as one grey area;
only the ``detail`` allocations with the largest bytes x lifetime, plus every allocation live at
the peak, are drawn as bands of their own (fewer if their outlines would exceed ``budget``
points). Hovering a band shows its size, address, thread and stack; the page lists the largest
allocations live at the peak.

The aggregation is :mod:`devmm._timeline_aggregate`'s, the page and the SVG
:mod:`devmm._timeline_page`'s; this module holds the data (:class:`Trace`, :class:`Snapshot`),
its sources and the command line.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

from . import _lib
from ._pystack import stack_of
from ._timeline_aggregate import aggregate as _aggregate
from ._timeline_page import render_html, render_svg
from .errors import DevmmError
from .resource import format_device, get_current_device_resource

_C = _lib.CONSTANTS
_ALLOC, _FREE, _ALLOC_FAILED = (_C["DEVMM_LOG_ALLOCATE"], _C["DEVMM_LOG_FREE"],
                                _C["DEVMM_LOG_ALLOCATE_FAILURE"])


class Trace:
    """One device's allocations: a global order of events and the allocations they open and
    close. Times are ns on one clock; ``order`` lists events as ``i`` (allocation i starts) or
    ``~i`` (it ends)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.times: list = []      # per event, non-decreasing
        self.order: list = []      # per event: i or ~i
        self.nbytes: list = []     # per allocation
        self.ptr: list = []
        self.thread: list = []
        self.stack: list = []      # index into Snapshot.stacks, or -1
        self.before: set = set()   # allocations that began before the trace
        self.failures: list = []   # (time, bytes, thread) of refused allocations
        self.end_time = 0          # when the trace ends ("now" for a snapshot)
        self.note = ""             # what the page should say about the data
        self.has_history = True    # False: a snapshot of live allocations only

    def _event(self, t: int, code: int) -> None:
        times = self.times
        times.append(t if not times or t >= times[-1] else times[-1])
        self.order.append(code)

    def add_before(self, nbytes: int, ptr: int, thread: int, stack: int = -1) -> int:
        """An allocation made before the trace began; returns its index."""
        i = len(self.nbytes)
        self.nbytes.append(nbytes)
        self.ptr.append(ptr)
        self.thread.append(thread)
        self.stack.append(stack)
        self.before.add(i)
        return i

    def add(self, t: int, nbytes: int, ptr: int, thread: int, stack: int = -1) -> int:
        """Starts an allocation at time t; returns its index."""
        i = self.add_before(nbytes, ptr, thread, stack)
        self.before.discard(i)
        self._event(t, i)
        return i

    def end(self, t: int, i: int) -> None:
        """Ends allocation i at time t."""
        self._event(t, ~i)


class Snapshot:
    """Timelines of one or more devices, ready to be drawn (see :func:`snapshot`,
    :func:`from_log`)."""

    def __init__(self, traces: list, stacks: list, title: str, shared_clock: bool = False) -> None:
        self.traces = traces
        self.stacks = stacks   # each a list of text lines, innermost first
        self.title = title
        self.shared_clock = shared_clock  # one time axis for all devices (a snapshot's)
        self._agg: dict = {}

    # ------------------------------------------------------------------ figures
    def aggregate(self, detail: int = 1000, buckets: int = 2000, top: int = 20,
                  budget: int = 200_000) -> dict:
        """What the page and the SVG draw, as plain data (see the module's docstring)."""
        key = (detail, buckets, top, budget)
        if key not in self._agg:
            origin = None
            if self.shared_clock:
                firsts = [t.times[0] for t in self.traces if t.times]
                firsts += [t.failures[0][0] for t in self.traces if t.failures]
                origin = min(firsts, default=None)
            self._agg[key] = {"title": self.title, "stacks": self.stacks,
                              "devices": [_aggregate(t, detail, buckets, top, budget, origin)
                                          for t in self.traces]}
        return self._agg[key]

    @property
    def peak_bytes(self) -> int:
        """The highest total of live bytes, over all devices' own peaks (the first device's if
        only one)."""
        devices = self.aggregate()["devices"]
        peak = max((d["peak"]["bytes"] for d in devices), default=0)
        if any(not t.has_history for t in self.traces):
            import warnings  # on first use: start-up time
            warnings.warn(f"devmm.snapshot: no history recorded: {peak} bytes is the live total "
                          "now, not the peak (create the tracking adaptor with history=N)",
                          RuntimeWarning, stacklevel=2)
        return peak

    def largest_at_peak(self, device: int = 0) -> list:
        """The allocations live at device's peak, largest first, as dicts (bytes, ptr, thread,
        start_s, end_s (None: still live), stack)."""
        d = self.aggregate()["devices"][device]
        out = []
        for i in d["top"]:
            nbytes, ptr, thread, stack, t0, t1, _before = d["allocs"][i]
            out.append({"bytes": nbytes, "ptr": int(ptr, 16), "thread": thread,
                        "start_s": t0 / 1e6, "end_s": None if t1 < 0 else t1 / 1e6,
                        "stack": self.stacks[stack] if stack >= 0 else []})
        return out

    # ------------------------------------------------------------------ output
    def to_html(self, **aggregate_options) -> str:
        """The page as a string."""
        return render_html(self.aggregate(**aggregate_options))

    def save_html(self, path: str, **aggregate_options) -> None:
        """Writes the self-contained HTML page (opens from a file, no network)."""
        _write(path, self.to_html(**aggregate_options))

    def to_svg(self, **aggregate_options) -> str:
        """The static SVG as a string."""
        return render_svg(self.aggregate(**aggregate_options))

    def save_svg(self, path: str, **aggregate_options) -> None:
        """Writes a static SVG of the same timeline (for reports and CI artifacts)."""
        _write(path, self.to_svg(**aggregate_options))


def _write(path: str, text: str) -> None:
    """Writes a page by log_file's rules (ADR 42, one implementation in C: core/base/outfile.c):
    no link at the end of the path, none on the way unless root's or this user's and to a
    directory of theirs, no '..' after a link; only a regular file of this user's with one name,
    or a new one (0644: a page is for reading). A refusal is an OSError that says why."""
    fd = ctypes.c_int(-1)
    if _lib.ffi_open_page(os.fsencode(path), ctypes.byref(fd)):
        raise OSError(_lib.last_error().decode(errors="replace"))
    with os.fdopen(fd.value, "w", encoding="utf-8") as f:
        f.write(text)


# ----------------------------------------------------------------------------- sources

def from_log(path: str, device: str = "log") -> Snapshot:
    """A timeline of a memory log (the logging adaptor's CSV or RMM's), read and paired by C
    (``devmm_log_read``: a free belongs to the oldest open allocation of its address).
    ``device`` labels it (a log does not say which device it is of)."""
    plog = ctypes.POINTER(_lib.Log)()
    _lib.check(_lib.log_read(os.fsencode(path), ctypes.byref(plog)))
    try:
        log = plog.contents
        n = log.nevents
        raw = ctypes.string_at(log.events, n * ctypes.sizeof(_lib.LogEvent)) if n else b""
        threads = [log.threads[i] for i in range(log.nthreads)]
        odd = _odd_frees(log, "not drawn")
    finally:
        _lib.log_free(plog)
    cols = _columns(raw, n)
    tr = Trace(device)
    tt, pp, bb, peer, th, act = cols
    open_at: dict = {}   # event index of an allocation -> its allocation index
    t_first = tt[0] if n else 0
    early = 0            # frees timestamped before their allocation (drawn at it)
    for k in range(n):
        a = act[k]
        if a == _ALLOC:
            open_at[k] = tr.add(tt[k], bb[k], pp[k], threads[th[k]])
        elif a == _FREE:
            j = peer[k]
            if j >= 0:
                early += tt[k] < tt[j]
                tr.end(tt[k], open_at.pop(j))
            elif j == -2:  # its address was freed already: a double free, said in the note
                continue
            else:  # allocated before the log began
                tr.end(tt[k], tr.add_before(bb[k], pp[k], threads[th[k]]))
        elif a == _ALLOC_FAILED:
            tr.failures.append((tt[k], bb[k], threads[th[k]]))
    tr.note = "; ".join(filter(None, [_log_note(len(tr.before), early)] + odd))
    # the page ends a little after the last event, so what is still live shows as live
    last = tr.times[-1] if tr.times else t_first
    tr.end_time = last + (last - t_first) // 50 + 1000
    return Snapshot([tr], [], f"memory timeline of {os.path.basename(path)}")


def _odd_frees(log: _lib.Log, skipped: str) -> list:
    """What the reader found odd in a log's frees: double frees and frees of another size than
    their allocation's (test_a_double_free_in_a_log_is_said_as_one_not_as_memory_from_before);
    devmm-replay says the same (tools/replay/main.c)."""
    parts = []
    if log.double_frees:
        e = log.events[log.first_double_free]
        parts.append(f"1 free of {e.ptr:#x} that was freed already (line {log.double_free_line}; "
                     f"{skipped})" if log.double_frees == 1 else
                     f"{log.double_frees} frees of memory that was freed already (the first: "
                     f"{e.ptr:#x}, line {log.double_free_line}; {skipped})")
    if log.resized_frees:
        e = log.events[log.first_resized_free]
        what = (f"line {log.resized_free_line}: {e.bytes} bytes, allocated as "
                f"{log.events[e.peer].bytes}")
        parts.append(f"1 free with another size than its allocation ({what})"
                     if log.resized_frees == 1 else
                     f"{log.resized_frees} frees with another size than their allocations (the "
                     f"first: {what})")
    return parts


def _log_note(before: int, early: int) -> str:
    """What a log's page says about events it cannot draw as they are.

    >>> _log_note(1, 2)
    '1 free of memory allocated before the log began (drawn from its start, with the size the \
free gives); 2 frees are timestamped before their allocations (drawn at them)'
    """
    parts = []
    if before:
        parts.append(f"{before} free{'s' if before > 1 else ''} of memory allocated before the "
                     "log began (drawn from its start, with the size the free gives)")
    if early:
        parts.append(f"{early} free{'s are' if early > 1 else ' is'} timestamped before "
                     f"{'their allocations' if early > 1 else 'its allocation'} (drawn at "
                     f"{'them' if early > 1 else 'it'})")
    return "; ".join(parts)


def _columns(raw: bytes, n: int) -> tuple:
    """The log's events as columns: time, ptr, bytes, peer, thread, action."""
    if not n:
        return [], [], [], [], [], []
    if sys.byteorder == "little":
        u = memoryview(raw).cast("Q")
        q = memoryview(raw).cast("q")
        ta = u[5::6].tolist()
        return (u[0::6].tolist(), u[1::6].tolist(), u[2::6].tolist(), q[4::6].tolist(),
                [v & 0xFFFFFFFF for v in ta], [v >> 32 for v in ta])
    rows = (_lib.LogEvent * n).from_buffer_copy(raw)  # big-endian: field by field
    return tuple([getattr(r, f) for r in rows]
                 for f in ("time_ns", "ptr", "bytes", "peer", "thread", "action"))


def snapshot(*resources, title: Optional[str] = None) -> Snapshot:
    """A timeline of live tracking adaptors: each resource is one (or a stack containing one),
    one device panel each. With ``history`` the timeline covers the recorded events; allocations
    still live are drawn from when they were made; without history, only the live ones."""
    if not resources:
        resources = (get_current_device_resource(),)
    stacks: list = []
    stack_ids: dict = {}
    traces = []
    for r in resources:
        h = _find_tracking(r)
        traces.append(_trace_of(h, stacks, stack_ids))
    names = ", ".join(t.name for t in traces)
    return Snapshot(traces, stacks, title or f"memory timeline of {names}", shared_clock=True)


def _find_tracking(resource) -> int:
    h = getattr(resource, "_h", None)
    if h is None:
        raise TypeError(f"expected a MemoryResource, got {type(resource).__name__}")
    n, s = ctypes.c_size_t(), ctypes.c_size_t()
    while h:
        if _lib.tracking_outstanding(h, ctypes.byref(n), ctypes.byref(s)) == 0:
            return h
        h = _lib.resource_upstream(h)
    _lib.clear_error()
    raise LookupError(f"no tracking adaptor in '{resource.name}': snapshots read one "
                      f"(devmm.TrackingAdaptor(upstream, history=N, python_stack=N))")


_FOREACH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_lib.AllocationInfo), ctypes.c_void_p)


def _trace_of(h: int, stacks: list, stack_ids: dict) -> Trace:
    live = []

    def each(info, _user):
        i = info.contents
        live.append((i.time_ns, i.ptr or 0, i.bytes, i.thread_id, i.tag,
                     tuple(i.frames[k] for k in range(i.nframes))))
        return 0

    cb = _FOREACH(each)
    _lib.check(_lib.tracking_foreach(h, ctypes.cast(cb, ctypes.c_void_p), None))
    now = time.monotonic_ns()  # CLOCK_MONOTONIC, the clock of devmm's times
    events = []
    got, stored = ctypes.c_size_t(), ctypes.c_size_t()
    if _lib.tracking_history(h, None, 0, ctypes.byref(got), ctypes.byref(stored), None,
                             None) == 0:
        buf = (_lib.TrackingEvent * max(stored.value, 1))()
        _lib.check(_lib.tracking_history(h, buf, stored.value, ctypes.byref(got), None, None,
                                         None))
        events = [(e.time_ns, e.action, e.ptr or 0, e.bytes, e.thread_id, e.tag)
                  for e in buf[:got.value]]
        now = max(now, events[-1][0]) if events else now
    else:
        _lib.clear_error()
    text = ctypes.create_string_buffer(256)

    def stack_id(tag: int, frames: tuple) -> int:
        if not tag and not frames:
            return -1
        sid = stack_ids.get((tag, frames))
        if sid is None:
            lines = [f"{f}:{n} in {name}" for f, n, name in stack_of(tag)]
            for pc in frames:
                _lib.frame_describe(pc, text, len(text))
                lines.append(text.value.decode(errors="replace"))
            sid = stack_ids[(tag, frames)] = len(stacks)
            stacks.append(lines)
        return sid

    tr = Trace(f"{format_device(_lib.resource_device(h))}: {_lib.resource_name(h).decode()}")
    in_history = {(p, t) for t, act, p, *_ in events if act == _ALLOC}
    frames_of = {(p, t): fr for t, p, b, th, tag, fr in live}
    open_: dict = {}  # ptr -> allocation index
    # live allocations made before the history's window: from their own time
    for t, p, b, th, tag, fr in sorted(x for x in live if (x[1], x[0]) not in in_history):
        open_[p] = tr.add(t, b, p, th, stack_id(tag, fr))
    for t, act, p, b, th, tag in events:
        if act == _ALLOC:
            open_[p] = tr.add(t, b, p, th, stack_id(tag, frames_of.get((p, t), ())))
        elif p in open_:
            tr.end(t, open_.pop(p))
        else:  # allocated before the window, freed in it
            tr.end(t, tr.add_before(b, p, th, stack_id(tag, ())))
    tr.end_time = now
    if live and not any(x[0] for x in live):
        tr.note = ("no times recorded: create the tracking adaptor with history=N or "
                   "python_stack=N for a timeline; live allocations only, and the peak shown "
                   "is the live total now")
        tr.end_time = 1
        tr.has_history = False
    elif not events:
        tr.note = ("no history recorded (history=N): live allocations only, and the peak shown "
                   "is the live total now, not the adaptor's peak")
        tr.has_history = False
    return tr


# ----------------------------------------------------------------------------- command line

def add_parser(sub) -> None:
    """Adds ``timeline`` to an argparse subparsers object (``python -m devmm timeline``)."""
    p = sub.add_parser("timeline", help="draw a memory log as an HTML timeline (and SVG)",
                       description="Draws memory logs (the logging adaptor's CSV, or RMM's) as a "
                                   "self-contained HTML timeline: live bytes over time, stacked "
                                   "by allocation.")
    p.add_argument("logs", nargs="+", metavar="LOG.csv", help="memory log(s): one panel each")
    p.add_argument("-o", "--output", default="timeline.html", help="the HTML page to write")
    p.add_argument("--svg", help="also write a static SVG here")
    p.add_argument("--device", action="append", default=[],
                   help="a label for each log's panel, in order (default: the file name)")
    p.add_argument("--detail", type=int, default=1000,
                   help="allocations drawn as bands of their own (default 1000)")
    p.add_argument("--buckets", type=int, default=2000,
                   help="time buckets of the all-allocations envelope (default 2000)")
    p.set_defaults(run=_run)


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist yet: the same path, then
        return os.path.realpath(a) == os.path.realpath(b)


def _clash(args) -> str:
    """Why an output would overwrite a log read or the other output ("" if none; test_timeline_
    never_writes_over_its_input_or_one_output_over_the_other)."""
    outputs = [("-o", args.output, "the page")] + ([("--svg", args.svg, "the SVG")]
                                                     if args.svg else [])
    for opt, path, what in outputs:
        if any(_same_file(path, log) for log in args.logs):
            return f"{opt} {path} is one of the logs read: expected another file for {what}"
    if args.svg and _same_file(args.svg, args.output):
        return f"--svg {args.svg} is the -o file too: expected another file for the SVG"
    return ""


def _run(args) -> int:
    for name, value, least in (("--detail", args.detail, 0), ("--buckets", args.buckets, 1)):
        if value < least:
            print(f"devmm timeline: {name} {value}: expected {least} or more", file=sys.stderr)
            return 2
    if len(args.device) > len(args.logs):
        print(f"devmm timeline: {len(args.device)} --device labels for {len(args.logs)} logs",
              file=sys.stderr)
        return 2
    clash = _clash(args)
    if clash:
        print(f"devmm timeline: {clash}", file=sys.stderr)
        return 2
    try:
        snaps = []
        for k, path in enumerate(args.logs):
            label = args.device[k] if k < len(args.device) else os.path.basename(path)
            snaps.append(from_log(path, label))
    except DevmmError as e:
        print(f"devmm timeline: {e}", file=sys.stderr)
        return 1
    title = snaps[0].title if len(snaps) == 1 else f"memory timeline of {len(snaps)} logs"
    snap = Snapshot([s.traces[0] for s in snaps], [], title)
    opts = {"detail": args.detail, "buckets": args.buckets}
    try:
        snap.save_html(args.output, **opts)
        if args.svg:
            snap.save_svg(args.svg, **opts)
    except OSError as e:
        print(f"devmm timeline: cannot write: {e}", file=sys.stderr)
        return 1
    d = snap.aggregate(**opts)["devices"]
    def count(n: int, what: str) -> str:  # "1 event", "2 events"
        return f"{n} {what}{'' if n == 1 else 's'}"

    for dev in d:
        before = dev["before"]
        print(f"{dev['device']}: {count(dev['events'], 'event')}, "
              f"{count(dev['allocations'] - before, 'allocation')}, " +
              (f"{count(before, 'free')} of memory allocated before the log began, "
               if before else "") +
              f"peak {dev['peak']['bytes']} bytes at {dev['peak']['t_us'] / 1e6:.6f} s, "
              f"{len(dev['bands'])} drawn as bands")
        if dev["note"]:
            print(f"  note: {dev['note']}", file=sys.stderr)
    print(f"wrote {args.output}" + (f" and {args.svg}" if args.svg else ""))
    return 0

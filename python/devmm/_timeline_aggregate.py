"""The aggregation of a timeline: what the page and the SVG draw, computed from a
:class:`devmm.timeline.Trace` (the envelope of live bytes, the bands of the allocations drawn
on their own, the peak and what was live at it). See :mod:`devmm.timeline` for how a large log
stays usable.

>>> from devmm.timeline import Trace
>>> tr = Trace("cpu"); a = tr.add(0, 100, 0x10, 1); b = tr.add(1000, 50, 0x20, 1); tr.end(2000, a)
>>> d = aggregate(tr, detail=10, buckets=100, top=5, budget=1000)
>>> d["peak"], d["top"]
({'bytes': 150, 't_us': 1, 'count': 2}, [0, 1])
"""

from __future__ import annotations

import heapq

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

    from .timeline import Trace


def aggregate(tr: "Trace", detail: int, buckets: int, top: int, budget: int,
               origin: Optional[int] = None) -> dict:
    times, order, nbytes = tr.times, tr.order, tr.nbytes
    n = len(nbytes)
    t_begin = times[0] if times else 0
    t_end = max(tr.end_time, times[-1] if times else 0)
    if tr.failures:
        t_begin = min(t_begin, tr.failures[0][0]) if times else tr.failures[0][0]
        t_end = max(t_end, tr.failures[-1][0])
    if origin is not None and origin < t_begin:  # devices drawn on one time axis
        t_begin = origin
    span = max(t_end - t_begin, 1)
    exact = len(order) <= 2 * buckets  # few events: the envelope is the exact total
    nb = max(1, buckets)

    # every allocation's start and end event (-1: before the trace; len(order): still live)
    start_ev = [-1] * n
    end_ev = [len(order)] * n
    total = sum(nbytes[i] for i in tr.before)
    peak, peak_ev = total, -1
    # the envelope, as change points [t, live bytes from t on]: every event when exact, else the
    # maximum of each of nb time buckets (so that no peak is lost)
    env_t = [t_begin]
    env_v = [total]
    b_prev = 0
    for k, code in enumerate(order):
        carried = total
        if code >= 0:
            start_ev[code] = k
            total += nbytes[code]
            if total > peak:
                peak, peak_ev = total, k
        else:
            end_ev[~code] = k
            total -= nbytes[~code]
        t = times[k]
        if exact:  # the state after the last event at each time
            if t == env_t[-1]:
                env_v[-1] = total
            else:
                env_t.append(t)
                env_v.append(total)
            continue
        b = (t - t_begin) * nb // span
        if b >= nb:
            b = nb - 1
        if b != b_prev:  # a new bucket starts with what was live before this event
            env_t.append(t_begin + span * b // nb)
            env_v.append(max(carried, total))
            b_prev = b
        elif total > env_v[-1]:
            env_v[-1] = total

    def t_of(ev: int) -> int:
        if ev < 0:
            return t_begin
        return times[ev] if ev < len(times) else t_end

    live_at_peak = [i for i in range(n) if start_ev[i] <= peak_ev < end_ev[i]]
    live_at_peak.sort(key=lambda i: (-nbytes[i], start_ev[i]))
    top_ids = live_at_peak[:top]

    # the allocations drawn on their own: most bytes x lifetime, and all of the top at the peak
    def area(i: int) -> int:
        return nbytes[i] * max(t_of(end_ev[i]) - t_of(start_ev[i]), 1)

    want = max(0, detail)
    while True:
        chosen = set(heapq.nlargest(want, range(n), key=area)) if want < n else set(range(n))
        chosen.update(top_ids)
        bands, points = stack_bands(chosen, start_ev, end_ev, order, nbytes)
        if points <= budget or want == 0:
            break
        want = want * budget // (points * 2)  # at least halves
    # compact the drawn allocations: band k shows allocation ids[k]
    ids = sorted(chosen, key=lambda i: start_ev[i])
    index = {i: k for k, i in enumerate(ids)}

    def us(t: int) -> int:
        return (t - t_begin + 500) // 1000

    allocs = [[nbytes[i], f"0x{tr.ptr[i]:x}", tr.thread[i], tr.stack[i], us(t_of(start_ev[i])),
               -1 if end_ev[i] >= len(order) else us(t_of(end_ev[i])),
               1 if start_ev[i] < 0 else 0] for i in ids]
    out_bands = []
    for i in ids:
        y0, steps = bands[i]
        out_bands.append([index[i], y0, [v if j % 2 else us(t_of(v))
                                          for j, v in enumerate(steps)]])
    return {
        "device": tr.name,
        "span_us": us(t_end),
        "events": len(order) + len(tr.failures),
        "allocations": n,
        "before": len(tr.before),
        "peak": {"bytes": peak, "t_us": us(t_of(peak_ev)), "count": len(live_at_peak)},
        "bucket_us": 0 if exact else span / nb / 1000,
        "envelope": [v for t, x in zip(env_t, env_v) for v in (us(t), x)],
        "allocs": allocs,
        "bands": out_bands,
        "top": [index[i] for i in top_ids],
        "failures": [[us(t), b, th] for t, b, th in tr.failures[:1000]],
        "nfailures": len(tr.failures),
        "end_us": us(t_end),
        "note": tr.note,
    }


def stack_bands(chosen: set, start_ev: list, end_ev: list, order: list, nbytes: list):
    """Stacks the chosen allocations in the order they began: each band sits on the ones below
    it and drops when one of them ends. Returns {i: (y0, [event, y, event, y, ...])} and the
    number of points."""
    evs = []
    for i in chosen:
        evs.append((start_ev[i], 0, i))
        if end_ev[i] < len(order):
            evs.append((end_ev[i], 1, i))
    evs.sort()
    stack: list = []   # live chosen allocations, bottom first
    y: dict = {}
    out: dict = {}
    top = 0
    points = 0
    for ev, kind, i in evs:
        if kind == 0:
            y[i] = top
            out[i] = (top, [])
            stack.append(i)
            top += nbytes[i]
            points += 2
        else:
            pos = stack.index(i)
            drop = nbytes[i]
            for j in stack[pos + 1:]:
                y[j] -= drop
                out[j][1].extend((ev, y[j]))
            points += 2 * (len(stack) - pos - 1)
            del stack[pos]
            top -= drop
    return out, points

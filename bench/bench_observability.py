"""Observability benchmarks (#12): every figure a ratio to a baseline of the same run, or a size.

  python bench_observability.py profile    the profiler's cost per allocation: devmm.empty + del
                                           inside a devmm.profile block vs through a
                                           StatisticsAdaptor alone (target <= 1.5x); the cost of
                                           entering a profiled function; Python stacks in
                                           tracking, on and off
  python bench_observability.py timeline   a timeline of a 1,000,000-event memory log: time to
                                           build it, page size, and load time in headless
                                           Chromium (Debian's chromium)
"""

import os
import random
import sys
import tempfile
import time
import timeit


def best(stmt, globs, number, repeat=7):
    t = timeit.Timer(stmt, globals=globs).repeat(repeat=repeat, number=number)
    return min(t) / number * 1e9


def interleaved(cases, number, rounds=25):
    """The best ns per run of each (name, stmt, globals, setup context) case, measured in
    alternation so that a noisy machine slows all of them alike."""
    best_ns = {}
    for _ in range(rounds):
        for name, stmt, globs, ctx in cases:
            with ctx():
                t = timeit.Timer(stmt, globals=globs).timeit(number) / number * 1e9
            best_ns[name] = min(best_ns.get(name, t), t)
    return best_ns


def profile():
    import devmm
    from devmm.mrs.cpu import MallocMemoryResource
    base = MallocMemoryResource()
    devmm.set_current_device_resource(base)
    import contextlib
    g = {"devmm": devmm}
    n = 10000
    stmt = "t = devmm.empty((256,), 'float32'); del t"
    stats = devmm.StatisticsAdaptor(base)
    # the same Python path both ways: a scoped current resource that is a statistics adaptor
    ns = interleaved([
        ("stats", stmt, g, lambda: devmm.using_memory_resource(stats)),
        ("profile", stmt, g, lambda: devmm.profile("bench")),
        ("nested", stmt, g, lambda: _nested(devmm)),
        ("plain", stmt, g, contextlib.nullcontext),
    ], n)
    stats_ns, prof_ns, nested_ns = ns["stats"], ns["profile"], ns["nested"]
    ratio = prof_ns / stats_ns
    print(f"profiler, python {sys.version.split()[0]}: ns per devmm.empty((256,)) + del")
    print(f"  no adaptor (cpu.malloc)                            {ns['plain']:8.0f} ns")
    print(f"  statistics adaptor alone (using_memory_resource)   {stats_ns:8.0f} ns")
    print(f"  inside devmm.profile                               {prof_ns:8.0f} ns   "
          f"{ratio:5.2f}x (target <= 1.5x) {'MET' if ratio <= 1.5 else 'MISSED'}")
    print(f"  inside two nested devmm.profile blocks             {nested_ns:8.0f} ns   "
          f"{nested_ns / stats_ns:5.2f}x")

    def plain():
        return None

    @devmm.profile
    def profiled():
        return None

    g.update(plain=plain, profiled=profiled)
    calls = interleaved([("plain", "plain()", g, contextlib.nullcontext),
                         ("profiled", "profiled()", g, contextlib.nullcontext)], 5000)
    plain_ns, call_ns = calls["plain"], calls["profiled"]
    print(f"  a call of an empty profiled function               {call_ns:8.0f} ns   "
          f"(plain call {plain_ns:.0f} ns; a new statistics adaptor made current, read at the end)")
    # Python stacks in tracking: off (the default) vs on, through the same tracking adaptor kind
    off = devmm.TrackingAdaptor(base)
    on = devmm.TrackingAdaptor(base, python_stack=8)
    g.update(off=off, on=on)
    st = interleaved([
        ("off", "t = devmm.empty((256,), 'float32', resource=off); del t", g,
         contextlib.nullcontext),
        ("on", "t = devmm.empty((256,), 'float32', resource=on); del t", g,
         contextlib.nullcontext)], n)
    off_ns, on_ns = st["off"], st["on"]
    print("Python stacks in tracking: ns per devmm.empty((256,), resource=tracking) + del")
    print(f"  python_stack=0 (off)                               {off_ns:8.0f} ns")
    print(f"  python_stack=8                                     {on_ns:8.0f} ns   "
          f"{on_ns / off_ns:5.2f}x (the ctypes callback and the walk of 8 frames)")


class _nested:
    def __init__(self, devmm):
        self.a, self.b = devmm.profile("outer"), devmm.profile("inner")

    def __enter__(self):
        self.a.__enter__()
        self.b.__enter__()

    def __exit__(self, *exc):
        self.b.__exit__(*exc)
        self.a.__exit__(*exc)


# ----------------------------------------------------------------------------- timeline

def synthetic_log(path, events=1_000_000, threads=4, seed=12):
    """A memory log of `events` lines: 4 threads, sizes from 64 B to 16 MiB (log-uniform),
    mostly short lifetimes with some long-lived buffers, addresses reused as an allocator
    would (a free list per size)."""
    rnd = random.Random(seed)
    free_by_size: dict = {}
    next_addr = 0x7f0000000000
    live: list = []  # (addr, size, thread)
    t_us = 10 * 3600 * 1_000_000
    out = open(path, "w")
    out.write("Thread,Time,Action,Pointer,Size,Stream\n")
    n = 0
    while n < events:
        t_us += rnd.randint(1, 40)
        hh, rem = divmod(t_us, 3600_000_000)
        mm, rem = divmod(rem, 60_000_000)
        ss, us = divmod(rem, 1_000_000)
        stamp = f"{hh:02d}:{mm:02d}:{ss:02d}:{us:06d}"
        if live and (rnd.random() < 0.5 or len(live) > 3000):
            # free: mostly recent ones, sometimes an old one
            k = len(live) - 1 - min(len(live) - 1, int(rnd.expovariate(1 / 20)))
            if rnd.random() < 0.02:
                k = rnd.randrange(len(live))
            addr, size, th = live.pop(k)
            free_by_size.setdefault(size, []).append(addr)
            th = rnd.randrange(threads) if rnd.random() < 0.05 else th  # freed elsewhere
            out.write(f"{th + 1},{stamp},free,0x{addr:x},{size},(nil)\n")
        else:
            size = int(2 ** rnd.uniform(6, 24)) // 64 * 64 or 64
            th = rnd.randrange(threads)
            pool = free_by_size.get(size)
            if pool:
                addr = pool.pop()
            else:
                addr = next_addr
                next_addr += (size + 4095) // 4096 * 4096
            live.append((addr, size, th))
            out.write(f"{th + 1},{stamp},allocate,0x{addr:x},{size},(nil)\n")
        n += 1
    out.close()


def timeline():
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "tests", "browser"))
    from cdp import Browser, find_chromium

    from devmm.timeline import from_log
    d = tempfile.mkdtemp(prefix="devmm-bench-timeline-")
    log = os.path.join(d, "big.csv")
    t0 = time.perf_counter()
    synthetic_log(log)
    gen_s = time.perf_counter() - t0
    page = os.path.join(d, "timeline.html")
    t0 = time.perf_counter()
    snap = from_log(log, "cpu")
    read_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    snap.save_html(page)
    build_s = time.perf_counter() - t0
    agg = snap.aggregate()["devices"][0]
    size = os.path.getsize(page)
    log_size = os.path.getsize(log)
    print(f"timeline of a {agg['events']:,}-event log ({log_size / 2**20:.1f} MiB CSV, written in "
          f"{gen_s:.1f} s): {agg['allocations']:,} allocations, {len(agg['bands'])} drawn as "
          f"bands, envelope of {len(agg['envelope']) // 2} points")
    print(f"  read and pair (C: devmm_log_read, then columns) {read_s:6.2f} s")
    print(f"  aggregate + write the page (Python)              {build_s:6.2f} s")
    import resource
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB
    print(f"  peak memory of this Python process                {peak_rss:6.0f} MiB "
          f"(the log's columns and the trace)")
    print(f"  page size                                        {size / 2**20:6.2f} MiB "
          f"({size / log_size * 100:.1f}% of the log; target <= 10 MiB: "
          f"{'MET' if size <= 10 * 2**20 else 'MISSED'})")
    exe = find_chromium()
    if exe is None:
        print("  load time in Chromium: NOT MEASURED: chromium is not installed "
              "(tools/deps.sh installs it)")
    else:
        loads = []
        with Browser(exe) as b:
            for _ in range(3):
                t0 = time.perf_counter()
                ready = b.open(page)
                loads.append((time.perf_counter() - t0, ready))
            errors = b.console_errors()
        wall, ready = min(loads)
        print(f"  load time in headless Chromium, best of 3: navigation to drawn "
              f"{ready / 1000:5.2f} s (page's own clock), {wall:5.2f} s wall "
              f"(target <= 3 s: {'MET' if ready <= 3000 else 'MISSED'}); console errors: "
              f"{len(errors)}")
    for f in os.listdir(d):
        os.unlink(os.path.join(d, f))
    os.rmdir(d)


if __name__ == "__main__":
    {"profile": profile, "timeline": timeline}[sys.argv[1]]()

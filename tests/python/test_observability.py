"""Observability (#12): the profiler, Python stacks in tracking, memory timelines, replay and
out-of-memory errors that explain themselves."""

import asyncio
import gc
import io
import json
import os
import shutil
import subprocess
import sys
import threading

import pytest

import devmm
from devmm import _pystack
from devmm.mrs.cpu import MallocMemoryResource
from devmm.timeline import Snapshot, Trace, from_log

# ----------------------------------------------------------------------------- profile


@pytest.fixture(autouse=True)
def fresh_profile():
    devmm.profile.clear()
    yield
    devmm.profile.clear()


def test_profile_decorator_and_block():
    @devmm.profile
    def work(n):
        a = devmm.empty(n, "int8")
        b = devmm.empty(2 * n, "int8")
        del a, b
        return n

    assert work(100) == 100 and work(300) == 300
    with devmm.profile("block") as stats:
        keep = devmm.empty(64, "int8")
        assert isinstance(stats, devmm.StatisticsAdaptor) and stats.current_bytes == 64
    r = devmm.profile.records()
    w = r[work.__wrapped__.__qualname__]
    assert (w.calls, w.peak_bytes, w.total_bytes, w.allocations, w.live_bytes) == \
        (2, 900, 1200, 4, 0)
    b = r["block"]
    assert (b.calls, b.peak_bytes, b.total_bytes, b.allocations, b.live_bytes) == \
        (1, 64, 64, 1, 64)
    del keep
    # the block's adaptor was the current resource only inside it
    assert devmm.get_current_device_resource().name == "cpu.malloc"


def test_profile_nests_and_reports_by_peak():
    @devmm.profile(name="inner")
    def inner():
        return devmm.empty(1000, "int8")

    with devmm.profile("outer"):
        a = devmm.empty(5000, "int8")
        x = inner()
        del a
        y = inner()
        del x, y
    r = devmm.profile.records()
    assert (r["inner"].calls, r["inner"].peak_bytes, r["inner"].live_bytes) == (2, 1000, 2000)
    # the outer block includes its inner blocks: 5000 + 1000 live at once
    assert (r["outer"].peak_bytes, r["outer"].total_bytes, r["outer"].allocations) == \
        (6000, 7000, 3)
    out = io.StringIO()
    devmm.profile.report(file=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "devmm memory profile, by peak bytes"
    assert lines[2].split()[-1] == "outer" and lines[3].split()[-1] == "inner"
    out = io.StringIO()
    devmm.profile.report(file=out, ordered_by="calls")
    assert out.getvalue().splitlines()[2].split()[-1] == "inner"
    with pytest.raises(ValueError, match="ordered_by must be one of peak_bytes, total_bytes"):
        devmm.profile.report(ordered_by="bytes")


def test_profile_is_thread_aware():
    """Two threads profile at once: each block counts its own thread's allocations only."""
    barrier = threading.Barrier(2)
    errors = []

    def worker(name, n):
        try:
            with devmm.profile(name):
                keep = []
                for _ in range(50):
                    keep.append(devmm.empty(n, "int8"))
                    barrier.wait(timeout=30)  # interleave the two threads' allocations
                del keep
        except BaseException as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=worker, args=("a", 100)),
          threading.Thread(target=worker, args=("b", 1000))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    r = devmm.profile.records()
    assert (r["a"].peak_bytes, r["a"].total_bytes, r["a"].allocations) == (5000, 5000, 50)
    assert (r["b"].peak_bytes, r["b"].total_bytes, r["b"].allocations) == (50000, 50000, 50)


def test_profile_free_on_another_thread_returns_to_its_block():
    with devmm.profile("alloc") as stats:
        t = devmm.empty(4096, "int8")
    th = threading.Thread(target=lambda: t.buffer.free())
    th.start()
    th.join()
    assert stats.current_bytes == 0 and devmm.profile.records()["alloc"].live_bytes == 4096


def test_profile_async_tasks():
    @devmm.profile
    async def task(n):
        x = devmm.empty(n, "int8")
        await asyncio.sleep(0.01)  # the two tasks interleave on one thread
        del x

    async def main():
        await asyncio.gather(task(10), task(20))

    asyncio.run(main())
    r = devmm.profile.records()[task.__wrapped__.__qualname__]
    assert (r.calls, r.peak_bytes, r.total_bytes) == (2, 20, 30)


def test_profile_explicit_resource_and_device():
    counted = devmm.StatisticsAdaptor(MallocMemoryResource())
    with devmm.profile("mine", resource=counted):
        devmm.empty(128, "int8")  # goes to counted, through the block's adaptor
    assert counted.total_bytes == 128
    assert devmm.profile.records()["mine"].total_bytes == 128
    with devmm.profile(device="cpu"):
        devmm.empty(8, "int8")
    names = [n for n in devmm.profile.records() if n.startswith(__file__ + ":")]
    assert len(names) == 1  # an unnamed block is named by its file:line
    assert devmm.profile.records()[names[0]].total_bytes == 8


def test_profile_does_not_move_allocations(counting):
    """A profile block makes its adaptor the current resource of the profiled device only:
    allocations for other devices and device-less ones go where they went without it."""
    c, _ = counting
    pinned = devmm.CallbackMemoryResource(c.allocate, c.deallocate,
                                          device="cuda_host", name="pinned")
    outer = devmm.StatisticsAdaptor(MallocMemoryResource())
    with devmm.using_memory_resource(outer):
        with devmm.profile("pinned", resource=pinned) as stats:
            a = devmm.empty(10, "int8")                       # device-less: still outer's
            b = devmm.empty(20, "int8", device="cuda_host")   # the profiled device
        assert outer.total_bytes == 10 and stats.total_bytes == 20 and c.allocs == 1
        assert (a.device, b.device) == ("cpu", "cuda_host:0")
        with devmm.profile("outer's own"):                    # cpu's current is outer here
            devmm.empty(5, "int8")
        assert outer.total_bytes == 15
    assert devmm.profile.records()["outer's own"].total_bytes == 5
    del a, b


def test_profile_of_a_gpu_over_managed_memory_counts_its_allocations():
    # [device sim:0] resource = sim.managed: the profiled resource's memory is sim_managed:0's,
    # its block sim:0's, as using_memory_resource's is (docs/api.md, the registry)
    devmm.init("[devmm]\nplugins = cpu, sim\n[plugin sim]\ndevices = 1\njitter_us = 0\n"
               "[device sim:0]\nresource = sim.managed\n")
    with devmm.profile("managed", device="sim:0"):
        t = devmm.empty(64, "uint8", device="sim:0")
    assert t.device == "sim_managed:0"
    assert devmm.profile.records()["managed"].total_bytes == 64


def test_profile_records_a_block_that_raises():
    with pytest.raises(ZeroDivisionError):
        with devmm.profile("boom"):
            devmm.empty(10, "int8")
            1 / 0
    assert devmm.profile.records()["boom"].calls == 1
    assert devmm.get_current_device_resource().name == "cpu.malloc"


def test_profile_bad_arguments():
    with pytest.raises(TypeError, match="resource must be a MemoryResource, got int"):
        with devmm.profile("x", resource=3):
            pass
    with pytest.raises(TypeError, match="expected a function or a name, got int"):
        devmm.profile(3)
    with pytest.raises(TypeError, match="the name is given twice"):
        devmm.profile("a", name="b")
    with devmm.profile("after"):  # nothing was left half-open
        devmm.empty(1, "int8")
    assert devmm.profile.records()["after"].total_bytes == 1


def test_devmm_profile_is_callable_however_imported():
    # devmm.profile is the module's `profiler` (no module class swapping: ADR 36); importing the
    # module itself, however it is done, leaves the name callable
    import importlib
    mod = importlib.import_module("devmm.profile")
    import devmm.profile as p
    from devmm import profile
    assert devmm.profile is p is profile is mod.profiler and callable(devmm.profile)
    assert isinstance(devmm.profile("n"), mod.Profile)
    assert devmm.profile.Profile is mod.Profile and devmm.profile.Record is mod.Record
    assert devmm.profile.records is mod.records and devmm.profile.report is mod.report
    code = ("import devmm.profile, devmm; from devmm.profile import Record; "
            "print(callable(devmm.profile), devmm.profile.Record is Record)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["True", "True"]


# ----------------------------------------------------------------------------- Python stacks

def allocate_here(tr, n=64):
    return devmm.empty(n, "int8", resource=tr)


def test_python_stacks_in_lookup_and_report():
    tr = devmm.TrackingAdaptor(MallocMemoryResource(), python_stack=2)
    ts = []
    for _ in range(2):  # (a comprehension would be a frame of its own)
        ts.append(allocate_here(tr))
    t, u = ts
    info = tr.lookup(t.data_ptr)
    frames = info["python_stack"]
    assert len(frames) == 2  # the depth limit
    assert frames[0][0] == __file__ and frames[0][2] == "allocate_here"
    assert frames[1][2] == "test_python_stacks_in_lookup_and_report"
    assert info["time_ns"] > 0 and info["thread_id"] > 0
    report = tr.report()
    assert f"    {__file__}:{frames[0][1]} in allocate_here\n" in report
    # one site, one interned stack
    assert tr.lookup(u.data_ptr)["python_stack"] == frames
    assert len(set(map(tuple, _pystack._STACKS))) == len(_pystack._STACKS)
    off = devmm.TrackingAdaptor(MallocMemoryResource())
    v = allocate_here(off)
    assert off.lookup(v.data_ptr)["python_stack"] == [] and off.lookup(v.data_ptr)["time_ns"] == 0


def test_python_stacks_from_another_thread_and_raw_allocate():
    tr = devmm.TrackingAdaptor(MallocMemoryResource(), python_stack=3)
    out = []
    th = threading.Thread(target=lambda: out.append(allocate_here(tr)), name="w")
    th.start()
    th.join()
    assert tr.lookup(out[0].data_ptr)["python_stack"][0][2] == "allocate_here"
    p = tr.allocate(32)  # MemoryResource.allocate: devmm's own frames are skipped
    assert tr.lookup(p)["python_stack"][0][2] == \
        "test_python_stacks_from_another_thread_and_raw_allocate"
    tr.deallocate(p, 32)


def test_python_stack_hooks_live_as_long_as_the_c_adaptor():
    gc.collect()
    before = len(_pystack._LIVE)
    tr = devmm.TrackingAdaptor(MallocMemoryResource(), python_stack=4)
    t = allocate_here(tr)
    assert len(_pystack._LIVE) == before + 1
    del tr
    gc.collect()
    assert len(_pystack._LIVE) == before + 1  # the tensor keeps the C adaptor
    t.buffer.free()
    del t
    gc.collect()
    assert len(_pystack._LIVE) == before


def test_python_stack_bad_arguments():
    with pytest.raises(ValueError, match="python_stack and history must be >= 0, got -1"):
        devmm.TrackingAdaptor(MallocMemoryResource(), python_stack=-1)
    with pytest.raises(devmm.DevmmError, match="history of 8589934592 events: at most 2"):
        devmm.TrackingAdaptor(MallocMemoryResource(), history=1 << 33)


# ----------------------------------------------------------------------------- out of memory

def make_weights(tr):
    return devmm.empty(6000, "int8", resource=tr)


def test_out_of_memory_explains_itself():
    tr = devmm.TrackingAdaptor(MallocMemoryResource(), python_stack=4)
    stack = devmm.LimitingAdaptor(devmm.StatisticsAdaptor(tr), 10000)
    w = make_weights(stack)
    small = devmm.empty(1000, "int8", resource=stack)
    with pytest.raises(devmm.OutOfMemoryError) as ei:
        devmm.empty(5000, "int8", resource=stack)
    e = ei.value
    assert (e.device, e.stack, e.requested_bytes, e.alignment) == \
        ("cpu", "limiting(statistics(tracking(cpu.malloc)))", 5000, 64)  # a tensor's default
    assert (e.current_bytes, e.peak_bytes, e.counted_by) == \
        (7000, 7000, "statistics(tracking(cpu.malloc))")
    assert (e.free_bytes, e.total_bytes) == (3000, 10000)  # as the limiting adaptor sees it
    assert (e.live_count, e.live_bytes) == (2, 7000)
    ptr, nbytes, thread, where = e.largest[0]
    assert (ptr, nbytes) == (w.data_ptr, 6000) and thread > 0
    assert where.startswith(f"{__file__}:") and where.endswith(" in make_weights")
    assert e.largest[1][:2] == (small.data_ptr, 1000)
    assert "would exceed its limit of 10000 bytes" in e.reason
    msg = str(e)
    assert msg.startswith("out of memory: allocating 5000 bytes through 'limiting(statistics(")
    assert "\n  request: 4.88 KiB (5000 bytes) on cpu through limiting(" in msg
    assert "cpu.malloc))), alignment 64\n" in msg
    assert "\n  devmm on cpu: 6.84 KiB in use, peak 6.84 KiB (counted by statistics(" in msg
    assert "\n  device: 2.93 KiB free of 9.77 KiB" in msg
    assert f"\n    5.86 KiB at 0x{w.data_ptr:x}  thread " in msg and "in make_weights" in msg
    assert isinstance(e, MemoryError)


def test_out_of_memory_figures_are_none_when_unknown(counting):
    c, r = counting
    with pytest.raises(devmm.OutOfMemoryError) as ei:
        devmm.empty(1 << 62, "int8", resource=r)  # the Python resource raises MemoryError
    e = ei.value
    assert e.requested_bytes == 1 << 62 and e.stack == "counting"
    assert e.current_bytes is None and e.peak_bytes is None and e.counted_by is None
    assert e.free_bytes is None and e.largest == () and e.live_count is None
    assert "\n  devmm on cpu: not counted (no statistics adaptor in the stack)" in str(e)
    plain = devmm.OutOfMemoryError("out of host memory", "DEVMM_ENOMEM")
    assert plain.requested_bytes is None and plain.largest == ()


# ----------------------------------------------------------------------------- timelines

LOG = """Thread,Time,Action,Pointer,Size,Stream
1,10:00:00:000000,allocate,0x10,100,(nil)
2,10:00:00:000010,allocate,0x20,200,(nil)
1,10:00:00:000020,free,0x10,100,(nil)
2,10:00:00:000030,allocate,0x10,300,(nil)
1,10:00:00:000040,free,0x99,50,(nil)
2,10:00:00:000050,free,0x20,200,(nil)
1,10:00:00:000060,allocate failure,(nil),4000,(nil)
"""


def write_log(tmp_path, text=LOG):
    p = tmp_path / "log.csv"
    p.write_text(text)
    return str(p)


def test_timeline_of_a_log(tmp_path):
    snap = from_log(write_log(tmp_path), "cpu")
    d = snap.aggregate()["devices"][0]
    # 50 bytes allocated before the log began; live: 150, 350, 250, 550 (the peak), 500, 300
    assert d["peak"] == {"bytes": 550, "t_us": 30, "count": 3}
    assert [a[0] for a in (d["allocs"][i] for i in d["top"])] == [300, 200, 50]
    assert d["envelope"] == [0, 150, 10, 350, 20, 250, 30, 550, 40, 500, 50, 300]
    assert d["bucket_us"] == 0  # few events: exact
    assert d["events"] == 7 and d["allocations"] == 4 and d["before"] == 1
    assert d["failures"] == [[60, 4000, 1]]
    assert len(d["bands"]) == 4
    # the 300-byte allocation sits on the 200 one, and drops when it ends
    k = next(i for i, a in enumerate(d["allocs"]) if a[0] == 300)
    band = next(b for b in d["bands"] if b[0] == k)
    # on 50 + 200; at 40 us the 50 bytes from before the log go (down to 200), at 50 us the 200
    assert band[1] == 250 and band[2] == [40, 200, 50, 0]
    assert snap.peak_bytes == 550
    top = snap.largest_at_peak()
    assert top[0]["bytes"] == 300 and top[0]["ptr"] == 0x10 and top[0]["end_s"] is None


def test_timeline_of_a_large_log_is_aggregated(tmp_path):
    """Many events: the envelope is bucketed (its maximum per bucket keeps the exact peak) and
    only some allocations are bands, within the point budget."""
    tr = Trace("synthetic")
    live = []
    total = peak = 0
    for k in range(20000):
        if live and (k % 3 == 2):
            i, b = live.pop(k % len(live))
            tr.end(k * 1000, i)
            total -= b
        else:
            b = 100 + (k * 7919) % 5000
            live.append((tr.add(k * 1000, b, 0x1000 + k, k % 4), b))
            total += b
            peak = max(peak, total)
    tr.end_time = 20000 * 1000
    snap = Snapshot([tr], [], "big")
    d = snap.aggregate(detail=200, buckets=100, budget=5000)["devices"][0]
    assert d["peak"]["bytes"] == peak
    assert max(d["envelope"][1::2]) == peak
    assert len(d["envelope"]) <= 2 * 101
    assert d["bucket_us"] > 0
    points = sum(2 + len(b[2]) for b in d["bands"])
    assert len(d["bands"]) <= 200 + 20 and points <= 5000 * 2
    assert set(d["top"]) <= {b[0] for b in d["bands"]}  # the top at the peak is always drawn


def test_timeline_html_is_self_contained_and_escaped(tmp_path):
    snap = from_log(write_log(tmp_path), "cpu")
    snap.stacks.append(["</script><script>alert(1)</script> evil.py:1 in f"])
    snap.traces[0].stack[0] = 0
    html = snap.to_html()
    assert "</script><script>alert" not in html and "\\u003c/script\\u003e" in html
    assert "http://" not in html.replace('"http://www.w3.org/2000/svg"', "") and \
        "https://" not in html
    assert "<link" not in html and " src=" not in html
    import xml.etree.ElementTree as ET
    ET.fromstring(snap.to_svg())  # well-formed


def test_timeline_page_json_survives_markup_and_line_separators(tmp_path):
    """The page's data is JSON inside a <script> element: '<!--', '</script>', '&' and U+2028 /
    U+2029 in it (a stack's text) are \\uXXXX escapes, so the element's text is exactly the data's
    JSON (the browser's JSON.parse takes it; no markup ends or comments out the element)."""
    snap = from_log(write_log(tmp_path), "cpu")
    evil = "<!-- </script><script>alert(1)</script> a&b>c \u2028\u2029 evil.py:1 in f"
    snap.stacks.append([evil])
    snap.traces[0].stack[0] = len(snap.stacks) - 1
    data = snap.aggregate()
    page = snap.to_html()
    start = '<script id="devmm-data" type="application/json">'
    embedded = page[page.index(start) + len(start):]
    embedded = embedded[:embedded.index("</script>")]
    assert json.loads(embedded) == json.loads(json.dumps(data))
    assert evil in json.loads(embedded)["stacks"][-1]
    for raw in ("<", ">", "&", "\u2028", "\u2029"):
        assert raw not in embedded, raw


def test_one_log_file_for_every_sim_device(tmp_path):
    """[device sim:*] with one log_file: both devices' adaptors share the open file, so neither
    truncates the other's lines (one header, both devices' allocations), and the log reads back."""
    log = tmp_path / "sim.csv"
    ini = tmp_path / "sim.ini"
    ini.write_text("[devmm]\nplugins = cpu, sim\n[plugin sim]\ndevices = 2\n"
                   "[device sim:*]\nresource = sim.device\nadaptors = logging\n"
                   f"log_file = {log}\nlog_flush = true\n")
    devmm.init(str(ini))
    try:
        a = devmm.empty(1000, "uint8", device="sim:0")
        b = devmm.empty(2000, "uint8", device="sim:1")
        c = devmm.empty(3000, "uint8", device="sim:0")
        del a, b, c
    finally:
        devmm.init()
    text = log.read_text()
    assert text.count("Thread,Time,Action") == 1 and text.startswith("Thread,"), text
    assert text.count(",allocate,0x") == 3 and text.count(",free,0x") == 3, text
    for size in (1000, 2000, 3000):
        assert f",{size}," in text, (size, text)
    snap = from_log(str(log), "sim")
    assert sorted(snap.traces[0].nbytes) == [1000, 2000, 3000]

def test_snapshot_of_a_tracking_adaptor():
    tr = devmm.TrackingAdaptor(MallocMemoryResource(), python_stack=4, history=3)
    a = allocate_here(tr, 100)
    b = allocate_here(tr, 200)
    a.buffer.free()
    c = allocate_here(tr, 400)
    d = allocate_here(tr, 800)
    snap = devmm.snapshot(devmm.StatisticsAdaptor(tr))  # the tracking adaptor inside a stack
    agg = snap.aggregate()["devices"][0]
    assert agg["device"] == "cpu: tracking(cpu.malloc)"
    # the history kept the last 3 events (free a, alloc c, alloc d); b, made before, is live
    assert agg["allocations"] == 4 and agg["before"] == 1
    assert snap.peak_bytes == 1400
    top = snap.largest_at_peak()
    assert [x["bytes"] for x in top] == [800, 400, 200]
    assert top[0]["stack"][0].endswith(" in allocate_here")
    other = devmm.TrackingAdaptor(MallocMemoryResource(), history=10)
    x = allocate_here(other, 5)
    two = devmm.snapshot(tr, other).aggregate()["devices"]  # one panel per resource
    assert [d["peak"]["bytes"] for d in two] == [1400, 5]
    del b, c, d, x
    with pytest.raises(LookupError, match="no tracking adaptor in 'cpu.malloc'"):
        devmm.snapshot(MallocMemoryResource())
    plain = devmm.TrackingAdaptor(MallocMemoryResource())
    e = devmm.empty(10, "int8", resource=plain)
    assert "no times recorded" in devmm.snapshot(plain).aggregate()["devices"][0]["note"]
    del e


def test_timeline_command(tmp_path):
    log = write_log(tmp_path)
    out = tmp_path / "t.html"
    r = subprocess.run([sys.executable, "-m", "devmm", "timeline", log, log, "-o", str(out),
                        "--svg", str(tmp_path / "t.svg"), "--device", "cpu", "--device", "again"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == ("cpu: 7 events, 3 allocations, 1 free of memory "
                                        "allocated before the log began, peak 550 bytes at "
                                        "0.000030 s, 4 drawn as bands")
    assert out.exists() and (tmp_path / "t.svg").exists()
    bad = tmp_path / "bad.csv"
    bad.write_text("Thread,Time,Action,Pointer,Size,Stream\n1,10:00:00:000000,grab,0x1,1,(nil)\n")
    r = subprocess.run([sys.executable, "-m", "devmm", "timeline", str(bad), "-o",
                        str(tmp_path / "x.html")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert r.stderr.strip() == (f"devmm timeline: {bad}:2: Action 'grab' is unknown: expected "
                                "allocate, free, allocate failure or free failure")
    assert not (tmp_path / "x.html").exists()
    r = subprocess.run([sys.executable, "-m", "devmm", "timeline", log, "--detail", "-1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--detail -1: expected 0 or more" in r.stderr


def test_timeline_output_is_never_turned_against_its_user(tmp_path):
    """-o/--svg (save_html, save_svg) follow no link at the end of the path, write no file of
    another user's, never block on a FIFO: the same rules as log_file (ADR 42)."""
    snap = from_log(write_log(tmp_path), "cpu")
    secret = tmp_path / "secret"
    secret.write_text("secret\n")
    secret.chmod(0o600)
    link = tmp_path / "page.html"
    link.symlink_to(secret)
    with pytest.raises(OSError) as e:
        snap.save_html(str(link))
    assert str(e.value) == (f"refusing to write '{link}': it is a symbolic link, which devmm does "
                            "not follow: name the file itself")
    assert secret.read_text() == "secret\n"
    r = subprocess.run([sys.executable, "-m", "devmm", "timeline", write_log(tmp_path), "-o",
                        str(tmp_path / "ok.html"), "--svg", str(link)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert r.stderr.strip() == (f"devmm timeline: cannot write: refusing to write '{link}': it is "
                                "a symbolic link, which devmm does not follow: name the file "
                                "itself")
    assert secret.read_text() == "secret\n"
    fifo = tmp_path / "page.svg"
    os.mkfifo(fifo)
    with pytest.raises(OSError) as e:
        snap.save_svg(str(fifo))
    assert str(e.value) == (f"refusing to write '{fifo}': it is a FIFO: expected a regular file "
                            "of this user's, or a new name")
    with pytest.raises(OSError) as e:  # a log may go to /dev/null; a page is a file
        snap.save_svg("/dev/null")
    assert str(e.value) == ("refusing to write '/dev/null': it is a character device: expected a "
                            "regular file of this user's, or a new name")
    with pytest.raises(OSError) as e:
        snap.save_svg(str(tmp_path / "no-such-dir" / "page.svg"))
    assert str(e.value) == (f"cannot open '{tmp_path}/no-such-dir/page.svg' for writing: No such "
                            "file or directory")
    new = tmp_path / "new.svg"
    snap.save_svg(str(new))
    assert (new.stat().st_mode & 0o777) == 0o644 & ~_umask()
    snap.save_html(str(new))  # this user's file: rewritten whole
    assert new.read_text().startswith("<!DOCTYPE html>")
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs.html"
        theirs.write_text("planted\n")
        os.chown(theirs, 4242, 4242)
        with pytest.raises(OSError) as e:
            snap.save_html(str(theirs))
        assert str(e.value) == (f"refusing to write '{theirs}': it is owned by uid 4242, not by "
                                "this user (uid 0): expected a file of this user's, or a new name (created "
                                "with mode 0644)")
        assert theirs.read_text() == "planted\n"
        # uid 4242's directory on the way, with uid 4242's link in it to a directory of root's
        alice = tmp_path / "alice"
        alice.mkdir()
        os.chown(alice, 4242, 4242)
        (alice / "d").symlink_to(tmp_path)
        os.lchown(alice / "d", 4242, 4242)
        with pytest.raises(OSError) as e:
            snap.save_html(str(alice / "d" / "secret"))
        assert str(e.value) == (f"refusing to write '{alice}/d/secret': '{alice}/d' is a symbolic "
                                "link owned by uid 4242, not by root or this user (uid 0): "
                                "expected a path whose links are root's or this user's, to "
                                "directories of theirs")
        assert secret.read_text() == "secret\n"
        sticky = tmp_path / "sticky"  # like /tmp: the kernel may refuse first (EACCES)
        sticky.mkdir()
        sticky.chmod(0o1777)
        (sticky / "page.html").symlink_to(secret)
        os.lchown(sticky / "page.html", 4242, 4242)
        with pytest.raises(OSError) as e:
            snap.save_html(str(sticky / "page.html"))
        assert str(e.value) == (f"refusing to write '{sticky}/page.html': it is a symbolic link, "
                                "which devmm does not follow: name the file itself")
        assert secret.read_text() == "secret\n"
        (tmp_path / "mine").symlink_to(tmp_path)  # root's, to root's: followed
        snap.save_svg(str(tmp_path / "mine" / "via-link.svg"))
        assert (tmp_path / "via-link.svg").read_text().startswith("<svg")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ----------------------------------------------------------------------------- replay

REPLAY = shutil.which("devmm-replay")


def replay(*args):
    if REPLAY is None:
        pytest.fail("devmm-replay is not on PATH (meson's test environment puts build/tools "
                    "there)")
    r = subprocess.run([REPLAY, *args], capture_output=True, text=True, timeout=300)
    return r


def record_workload(path):
    """A known workload: allocations of 1..200 KiB, every third freed at once."""
    lg = devmm.LoggingAdaptor(MallocMemoryResource(), str(path))
    keep, live, peak = [], 0, 0
    for i in range(1, 201):
        t = devmm.empty(i * 1024, "int8", resource=lg)
        live += i * 1024
        peak = max(peak, live)
        if i % 3:
            keep.append(t)
        else:
            t.buffer.free()
            live -= i * 1024
    del keep
    lg.flush()
    del lg
    return peak


def test_replay_against_two_kinds(tmp_path):
    log = tmp_path / "w.csv"
    peak = record_workload(log)
    r = replay(str(log), "--resource", "cpu.malloc", "--resource", "cpu.mmap", "--serial",
               "--repeat", "2", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["events"], out["allocations"], out["frees"], out["threads"]) == (400, 200, 200, 1)
    assert out["never_freed"] == 0 and out["unmatched_frees"] == 0
    names = [s["name"] for s in out["stacks"]]
    assert names == ["cpu.malloc", "cpu.mmap(never)"] or names[0] == "cpu.malloc"
    for s in out["stacks"]:
        assert s["peak_bytes"] == peak and s["failures"] == 0 and s["wall_ms"] > 0
        assert s["footprint_method"] == "rss"
        # every page was touched, so the footprint covers the requested peak
        assert s["footprint_peak_bytes"] >= 0.9 * peak
    text = replay(str(log), "--resource", "cpu.malloc", "--resource", "cpu.mmap", "--repeat", "1")
    assert text.returncode == 0, text.stderr
    assert "400 events (200 allocations, 200 frees, 0 failed allocations) from 1 thread" in \
        text.stdout
    assert "fastest: " in text.stdout and "smallest footprint: " in text.stdout


def test_replay_threads_cross_frees_and_reused_pointers(tmp_path):
    # thread 2 frees what thread 1 allocated; 0xa0 comes back before its free is logged
    log = tmp_path / "mt.csv"
    log.write_text("Thread,Time,Action,Pointer,Size,Stream\n"
                   "1,10:00:00:000001,allocate,0xa0,64,(nil)\n"
                   "2,10:00:00:000003,allocate,0xa0,128,(nil)\n"
                   "2,10:00:00:000002,free,0xa0,64,(nil)\n"
                   "1,10:00:00:000004,free,0xa0,128,(nil)\n"
                   "3,10:00:00:000005,allocate,0xb0,4096,(nil)\n"
                   "1,10:00:00:000006,free,0xc0,8,(nil)\n"
                   "3,10:00:00:000007,allocate failure,(nil),1024,(nil)\n"
                   "3,10:00:00:000008,free failure,0xb0,4096,(nil)\n")
    r = replay(str(log), "--resource", "cpu.malloc", "--json", "--repeat", "5")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["threads"], out["replay_threads"]) == (3, 3)
    assert (out["unmatched_frees"], out["never_freed"], out["log_failures"]) == (1, 1, 1)
    s = out["stacks"][0]
    assert s["failures"] == 0 and s["failed_frees"] == 0
    assert 4096 <= s["peak_bytes"] <= 64 + 128 + 4096 + 1024
    serial = json.loads(replay(str(log), "--serial", "--json", "--footprint", "none").stdout)
    assert serial["replay_threads"] == 1
    # 64 and 128 are gone when 4096 comes; then the failed 1024 is tried (and freed)
    assert serial["stacks"][0]["peak_bytes"] == 4096 + 1024
    assert serial["stacks"][0]["footprint_peak_bytes"] is None


def test_replay_config_and_limits(tmp_path):
    log = tmp_path / "w.csv"
    record_workload(log)
    ini = tmp_path / "small.ini"
    ini.write_text("[device cpu]\nresource = cpu.malloc\nadaptors = limiting\nlimit = 1MiB\n")
    r = replay(str(log), "--config", str(ini), "--serial", "--json", "--footprint", "mem_info")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)["stacks"][0]
    assert s["name"] == "limiting(cpu.malloc)" and s["source"] == str(ini)
    assert s["failures"] > 0 and s["peak_bytes"] <= 1 << 20
    assert s["footprint_method"] == "mem_info" and s["footprint_peak_bytes"] is not None


def test_replay_bad_input(tmp_path):
    r = replay(str(tmp_path / "missing.csv"))
    assert r.returncode == 1 and "cannot open log" in r.stderr
    log = write_log(tmp_path)
    r = replay(log, "--resource", "cpu.nothing")
    assert r.returncode == 2
    assert "--resource cpu.nothing: unknown resource kind 'cpu.nothing'" in r.stderr
    r = replay(log, "--resource", "cpu.mmap:huge_pages")
    assert r.returncode == 2 and "'huge_pages' is not KEY=VALUE" in r.stderr
    r = replay(log, "--repeat", "0")
    assert r.returncode == 1 and "--repeat '0': expected an integer 1..1000" in r.stderr
    r = replay(log, "--footprint", "vibes")
    assert r.returncode == 1 and "expected rss, mem_info or none" in r.stderr
    r = replay(log, "--device", "gpu")
    assert r.returncode == 1 and "unknown device 'gpu'" in r.stderr
    r = replay(log, "--frobnicate")
    assert r.returncode == 1 and "unknown option" in r.stderr
    assert replay("--help").returncode == 0
    r = replay(log, "--config", str(tmp_path / "none.ini"))
    assert r.returncode == 2 and "--config" in r.stderr



def test_replay_names_the_argument_at_fault(tmp_path):
    log = write_log(tmp_path)
    r = replay()
    assert r.returncode == 1
    assert "devmm-replay: no LOG given: the memory log (CSV) to replay" in r.stderr
    # a device that does not exist is --device's fault, whatever the stack
    for extra in ([], ["--resource", "cpu.malloc"]):
        r = replay(log, "--device", "cpu:1", *extra)
        assert r.returncode == 2, r.stderr
        assert "devmm-replay: --device cpu:1: no such device" in r.stderr, r.stderr
        assert "(it has: cpu)" in r.stderr and "--resource" not in r.stderr, r.stderr
    # a kind of another device type is refused, not replayed on cpu:0 in silence
    ini = tmp_path / "sim.ini"
    ini.write_text("[devmm]\nplugins = cpu, sim\n")
    r = replay(log, "--config", str(ini), "--device", "sim:0", "--resource", "cpu.malloc")
    assert r.returncode == 2, r.stdout
    assert "--resource cpu.malloc: a kind of cpu devices, not of --device sim:0" in r.stderr, \
        r.stderr


def test_replay_measures_each_stack_alone(tmp_path):
    # a stack's figures do not depend on which stacks ran before it in the same command
    # (a stack replayed after another found the pages that one left resident: footprint 0 B)
    log = write_log(tmp_path)

    def footprints(*kinds):
        r = replay(log, *sum((["--resource", k] for k in kinds), []), "--repeat", "1", "--json")
        assert r.returncode == 0, r.stderr
        return [s["footprint_peak_bytes"] for s in json.loads(r.stdout)["stacks"]]

    alone = footprints("cpu.malloc")[0]
    assert alone > 0
    for after in (footprints("cpu.malloc", "cpu.malloc")[1],
                  footprints("cpu.aligned", "cpu.malloc")[1]):
        # (the process's own pages vary by ~2x between runs of so small a log)
        assert alone / 3 <= after <= alone * 3, (alone, after)


def test_replay_columns_fit_long_names(tmp_path):
    log = write_log(tmp_path)
    ini = tmp_path / "long.ini"
    ini.write_text("[device cpu]\nresource = cpu.malloc\n"
                   "adaptors = statistics, tracking, logging, limiting\nlimit = 1GiB\n"
                   f"log_file = {tmp_path / 'inner.csv'}\n")
    r = replay(log, "--config", str(ini), "--resource", "cpu.malloc", "--repeat", "1")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    head = next(i for i, s in enumerate(lines) if s.startswith("stack "))
    rows = lines[head:head + 3]
    # every row's "wall" column ends where the header's does
    end = rows[0].index("wall") + len("wall")
    assert all(row[end - 2:end] == "ms" for row in rows[1:]), "\n".join(rows)


def test_python_m_devmm_replay(tmp_path):
    log = write_log(tmp_path)
    r = subprocess.run([sys.executable, "-m", "devmm", "replay", log, "--resource",
                        "cpu.malloc", "--repeat", "1", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["stacks"][0]["name"] == "cpu.malloc"


def test_timeline_says_what_the_log_does_not(tmp_path):
    head = "Thread,Time,Action,Pointer,Size,Stream\n"
    # a lone free of memory allocated before the log began: said, not counted as an allocation
    lone = write_log(tmp_path, head + "1,10:00:00:000001,free,0xb0,100,(nil)\n")
    r = subprocess.run([sys.executable, "-m", "devmm", "timeline", lone, "-o",
                        str(tmp_path / "a.html")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "0 allocations, 1 free of memory allocated before the log began" in r.stdout, r.stdout
    assert r.stdout.startswith("log.csv: 1 event, "), r.stdout  # not "1 events"
    d = from_log(lone, "cpu").aggregate()["devices"][0]
    assert "allocated before the log began" in d["note"], d["note"]
    # a free timestamped before its allocation: said in the note and on stderr
    p = tmp_path / "rev.csv"
    p.write_text(head + "1,10:00:00:000005,allocate,0xa0,100,(nil)\n"
                 "1,10:00:00:000001,free,0xa0,100,(nil)\n")
    d = from_log(str(p), "cpu").aggregate()["devices"][0]
    assert "1 free is timestamped before its allocation" in d["note"], d["note"]
    # each bad option is named by its own message
    for opt, val, want in (("--detail", "-5", "--detail -5: expected 0 or more"),
                           ("--buckets", "0", "--buckets 0: expected 1 or more")):
        r = subprocess.run([sys.executable, "-m", "devmm", "timeline", lone, opt, val],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and want in r.stderr, r.stderr


def test_timeline_never_writes_over_its_input_or_one_output_over_the_other(tmp_path):
    log = write_log(tmp_path)
    r = subprocess.run([sys.executable, "-m", "devmm", "timeline", log, "-o", log],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == (f"devmm timeline: -o {log} is one of the logs read: expected "
                                "another file for the page"), r.stderr
    assert open(log).read() == LOG
    page = str(tmp_path / "p.html")
    r = subprocess.run([sys.executable, "-m", "devmm", "timeline", log, "-o", page, "--svg",
                        page], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == (f"devmm timeline: --svg {page} is the -o file too: expected "
                                "another file for the SVG"), r.stderr
    assert not os.path.exists(page)
    r = subprocess.run([sys.executable, "-m", "devmm", "timeline", log, "-o", page, "--svg",
                        log], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--svg" in r.stderr and "one of the logs" in r.stderr, r.stderr


HEAD = "Thread,Time,Action,Pointer,Size,Stream\n"
DOUBLE = (HEAD + "1,10:00:00:000001,allocate,0x1000,100,(nil)\n"
          "1,10:00:00:000002,free,0x1000,100,(nil)\n1,10:00:00:000003,free,0x1000,100,(nil)\n")
RESIZED = (HEAD + "1,10:00:00:000001,allocate,0x1000,100,(nil)\n"
           "1,10:00:00:000002,free,0x1000,50,(nil)\n")


def test_a_double_free_in_a_log_is_said_as_one_not_as_memory_from_before(tmp_path):
    log = write_log(tmp_path, DOUBLE)
    d = from_log(log, "cpu").aggregate()["devices"][0]
    assert d["note"] == "1 free of 0x1000 that was freed already (line 4; not drawn)", d["note"]
    assert d["before"] == 0 and d["peak"]["bytes"] == 100, d
    r = subprocess.run([sys.executable, "-m", "devmm", "timeline", log, "-o",
                        str(tmp_path / "a.html")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "before the log began" not in r.stdout + r.stderr, r.stdout + r.stderr
    assert "note: 1 free of 0x1000 that was freed already (line 4; not drawn)" in r.stderr
    r = replay(log, "--resource", "cpu.malloc", "--repeat", "1")
    assert r.returncode == 0, r.stderr
    assert "  1 free of 0x1000 that was freed already (line 4; skipped)\n" in r.stdout, r.stdout
    assert "before the log began" not in r.stdout, r.stdout
    r = replay(log, "--resource", "cpu.malloc", "--repeat", "1", "--json")
    doc = json.loads(r.stdout)
    assert doc["double_frees"] == 1 and doc["unmatched_frees"] == 0, doc


def test_a_free_of_another_size_than_its_allocation_is_noted(tmp_path):
    log = write_log(tmp_path, RESIZED)
    want = "1 free with another size than its allocation (line 3: 50 bytes, allocated as 100)"
    d = from_log(log, "cpu").aggregate()["devices"][0]
    assert d["note"] == want, d["note"]
    r = replay(log, "--resource", "cpu.malloc", "--repeat", "1")
    assert r.returncode == 0, r.stderr
    assert f"  {want}\n" in r.stdout, r.stdout
    doc = json.loads(replay(log, "--resource", "cpu.malloc", "--repeat", "1", "--json").stdout)
    assert doc["resized_frees"] == 1, doc


def test_replay_summary_counts_in_the_singular_too(tmp_path):
    log = tmp_path / "one.csv"
    log.write_text("Thread,Time,Action,Pointer,Size,Stream\n"
                   "1,10:00:00:000001,allocate,0x1000,100,(nil)\n"
                   "1,10:00:00:000002,free,0x1000,100,(nil)\n")
    r = replay(str(log), "--resource", "cpu.malloc", "--repeat", "1")
    assert r.returncode == 0, r.stderr
    assert "2 events (1 allocation, 1 free, 0 failed allocations) from 1 thread" in r.stdout, \
        r.stdout

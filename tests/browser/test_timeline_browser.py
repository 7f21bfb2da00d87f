"""The timeline page as a person uses it: opened in headless Chromium (Debian's chromium, driven
over the DevTools protocol), its drawing checked against the log, hovered, zoomed; no console
errors. Screenshots go to $DEVMM_ARTIFACTS (the build directory under meson) for CI."""

import json
import os
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cdp import Browser, find_chromium  # noqa: E402

import devmm  # noqa: E402
from devmm.mrs.cpu import MallocMemoryResource  # noqa: E402

CHROMIUM = find_chromium()
if CHROMIUM is None:
    if os.environ.get("DEVMM_REQUIRE_BROWSER") == "1":
        raise RuntimeError("chromium is required here (tools/deps.sh installs it) but was not "
                           "found")
    pytest.skip("chromium is not installed (tools/deps.sh installs Debian's chromium)",
                allow_module_level=True)

# A log written by hand: 500 bytes allocated before the log began (freed on line 4), a reused
# address (0x1000), two threads, one refused allocation, two allocations never freed.
LOG = """Thread,Time,Action,Pointer,Size,Stream
11,10:00:00:000100,allocate,0x1000,1000,(nil)
22,10:00:00:000200,allocate,0x2000,4000,(nil)
11,10:00:00:000300,free,0x9000,500,(nil)
22,10:00:00:000400,allocate,0x3000,2000,(nil)
11,10:00:00:000500,free,0x1000,1000,(nil)
22,10:00:00:000600,allocate,0x1000,3000,(nil)
11,10:00:00:000700,allocate failure,(nil),100000,(nil)
22,10:00:00:000800,free,0x2000,4000,(nil)
11,10:00:00:000900,free,0x1000,3000,(nil)
22,10:00:00:001000,allocate,0x4000,700,(nil)
"""
# live bytes: 500+1000, +4000, -500, +2000, -1000, +3000 = 9000 (the peak, 500 us in), ...
PEAK = 9000
PEAK_US = 500
AT_PEAK = [4000, 3000, 2000]
DRAWN = {("0x9000", 500), ("0x1000", 1000), ("0x2000", 4000), ("0x3000", 2000),
         ("0x1000", 3000), ("0x4000", 700)}


def artifact(tmp_path, name):
    d = os.environ.get("DEVMM_ARTIFACTS") or str(tmp_path)
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, name)


@pytest.fixture
def browser():
    with Browser(CHROMIUM) as b:
        yield b


def center(b, selector):
    r = b.eval(f"(() => {{ const r = document.querySelector({selector!r})"
               ".getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2, "
               "r.width, r.height]; })()")
    return r


def test_log_timeline_draws_the_log(tmp_path, browser):
    log = tmp_path / "run.csv"
    log.write_text(LOG)
    page = tmp_path / "timeline.html"
    svg = tmp_path / "timeline.svg"
    r = subprocess.run([sys.executable, "-m", "devmm", "timeline", str(log), "-o", str(page),
                        "--svg", str(svg), "--device", "cpu"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"peak {PEAK} bytes" in r.stdout
    load_ms = browser.open(str(page))
    assert load_ms > 0
    # every allocation of the log is a band, with its address and size
    drawn = browser.eval("[...document.querySelectorAll('path.alloc')].map(p => "
                         "[p.dataset.ptr, +p.dataset.bytes])")
    assert {tuple(x) for x in drawn} == DRAWN and len(drawn) == len(DRAWN)
    summary = browser.eval("Object.assign({}, document.querySelector('p.summary').dataset)")
    assert summary == {"peakBytes": str(PEAK), "events": "10", "allocations": "6",
                       "drawn": "6"}
    # band thickness is proportional to bytes, all on one scale: a band's outline goes along
    # its bottom edge and back along its top, so its first and last points are one above the
    # other at its start
    boxes = browser.eval("[...document.querySelectorAll('path.alloc')].map(p => { "
                         "const v = p.getAttribute('d').match(/-?[0-9.]+/g).map(Number); "
                         "return [+p.dataset.bytes, v[1] - v[v.length - 1], v[0] - v[v.length - 2],"
                         " p.getBBox().width]; })")
    scale = boxes[0][1] / boxes[0][0]
    for nbytes, thickness, dx, width in boxes:
        assert abs(thickness - nbytes * scale) < 0.2 and dx == 0, boxes
        assert width > 5, boxes
    # the list of the largest live allocations at the peak
    rows = browser.eval("[...document.querySelectorAll('table.peak tr[data-bytes]')]"
                        ".map(r => +r.dataset.bytes)")
    assert rows == AT_PEAK
    heading = browser.eval("document.querySelector('.peak-list h2').textContent")
    assert f"at {PEAK_US / 1e6:.6f} s" in heading
    assert browser.eval("document.querySelectorAll('path.failure').length") == 1
    # hovering a band shows what it is; the page made no error
    x, y, _, _ = center(browser, 'path.alloc[data-ptr="0x2000"]')
    browser.mouse("mouseMoved", x, y)
    tip = browser.eval("(() => { const t = document.getElementById('tooltip'); "
                       "return [t.hidden, t.textContent]; })()")
    assert tip[0] is False and "3.91 KiB (4000 bytes)" in tip[1] and "address 0x2000" in tip[1]
    assert "thread 22" in tip[1] and "stack: not recorded" in tip[1]
    browser.screenshot(artifact(tmp_path, "timeline-log.png"))
    assert browser.console_errors() == []
    # the static SVG of the same timeline is well formed and has the same bands
    import xml.etree.ElementTree as ET
    root = ET.parse(svg).getroot()
    paths = root.findall(".//{http://www.w3.org/2000/svg}path[@class='alloc']")
    assert len(paths) == len(DRAWN)


def allocate_weights():
    return devmm.empty(3 << 20, "int8", resource=TRACK)


def allocate_activations():
    return devmm.empty(1 << 20, "int8", resource=TRACK)


TRACK = None


def test_snapshot_hover_shows_the_stack_and_zoom_works(tmp_path, browser):
    global TRACK
    TRACK = devmm.TrackingAdaptor(MallocMemoryResource(), python_stack=6, history=1000)
    weights = allocate_weights()
    time.sleep(0.05)
    acts = [allocate_activations() for _ in range(3)]
    acts[1].buffer.free()
    time.sleep(0.05)
    late = allocate_activations()
    page = tmp_path / "snapshot.html"
    devmm.snapshot(TRACK).save_html(str(page))
    browser.open(str(page))
    ptr = f"0x{weights.data_ptr:x}"
    sel = f'path.alloc[data-ptr="{ptr}"]'
    x, y, w, h = center(browser, sel)
    assert w > 100 and h > 20  # the biggest band: 3 MiB of a 6 MiB peak
    browser.mouse("mouseMoved", x, y)
    hidden, text = browser.eval("(() => { const t = document.getElementById('tooltip'); "
                                "return [t.hidden, t.textContent]; })()")
    assert not hidden
    assert "3 MiB (3145728 bytes)" in text and f"address {ptr}" in text
    assert "in allocate_weights" in text and "test_timeline_browser.py" in text
    assert "still live at the end" in text
    browser.screenshot(artifact(tmp_path, "timeline-snapshot.png"))
    # drag over the first part of the time axis: the allocation made last leaves the view
    late_sel = f'path.alloc[data-ptr="0x{late.data_ptr:x}"]'
    assert browser.eval(f"document.querySelector({late_sel!r}).getAttribute('d')") != ""
    box = browser.eval("(() => { const r = document.querySelector('svg.timeline')"
                       ".getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; })()")
    x0, y0 = box[0] + 80, box[1] + box[3] / 2
    browser.mouse("mousePressed", x0, y0)
    browser.mouse("mouseMoved", x0 + 60, y0)
    browser.mouse("mouseReleased", x0 + 60, y0)
    assert browser.eval(f"document.querySelector({late_sel!r}).getAttribute('d')") == ""
    # the wheel zooms back out around the pointer; reset shows everything again
    browser.mouse("mouseWheel", x0, y0, deltaX=0, deltaY=120)
    browser.eval("document.getElementById('reset').click()")
    assert browser.eval(f"document.querySelector({late_sel!r}).getAttribute('d')") != ""
    assert browser.console_errors() == []
    del weights, acts, late


def test_markup_in_the_data_stays_text(tmp_path, browser):
    """A stack holding '<!--', '</script>', '&' and U+2028 (text of the program's, or of a log's)
    neither blanks the page nor ends its data early: the page draws, and its data is the text."""
    from devmm.timeline import from_log
    log = tmp_path / "run.csv"
    log.write_text(LOG)
    snap = from_log(str(log), "cpu")
    evil = "<!-- </script><script>window.pwned = 1</script> a&b \u2028\u2029 evil.py:1 in f"
    snap.stacks.append([evil])
    snap.traces[0].stack[0] = len(snap.stacks) - 1
    page = tmp_path / "evil.html"
    snap.save_html(str(page))
    browser.open(str(page))
    assert browser.eval("DATA.stacks.some(s => s.includes(%s))" % json.dumps(evil)) is True
    assert browser.eval("typeof window.pwned") == "undefined"
    assert browser.eval("document.querySelectorAll('path.alloc').length") == len(DRAWN)
    assert browser.console_errors() == []

def test_console_errors_are_seen(tmp_path, browser):
    """The check above can fail: a page that logs an error is caught."""
    page = tmp_path / "bad.html"
    page.write_text("<html><body><script>console.error('boom'); document.body.dataset.ready="
                    "'1'; window.devmmReady = 1;</script></body></html>")
    browser.open(str(page))
    assert browser.console_errors() == ["console.error: boom"]


def test_axis_ticks_share_one_unit_and_precision(tmp_path, browser):
    # ticks mixed "0.00 s", "0.000200 s" and "1.00e-7 s"; a header-only log drew "000000001 B"
    for name, text in (("run.csv", LOG), ("empty.csv", LOG.splitlines()[0] + "\n")):
        log = tmp_path / name
        log.write_text(text)
        page = tmp_path / (name + ".html")
        r = subprocess.run([sys.executable, "-m", "devmm", "timeline", str(log), "-o", str(page)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        browser.open(str(page))
        labels = browser.eval("[...document.querySelectorAll('g.axis text')].map(t => "
                              "t.textContent)")
        timed = [x for x in labels if x.split(" ")[-1] in ("s", "ms", "us")]
        sizes = [x for x in labels if x not in timed]
        for group in (timed, sizes):
            assert len(group) >= 2, labels
            assert len({x.split(" ")[1] for x in group}) == 1, labels
            assert len({len(x.split(" ")[0].partition(".")[2]) for x in group}) == 1, labels
        if name == "empty.csv":
            assert sizes == ["0 B", "1 B"], labels
        assert browser.console_errors() == []

"""The timeline's HTML page (inline CSS and JavaScript, no network) and static SVG, drawn from
:meth:`devmm.timeline.Snapshot.aggregate`'s data."""

from __future__ import annotations

import html
import json
import math

_CSS = """
body { font: 13px/1.4 system-ui, sans-serif; margin: 16px 24px; color: #222; }
h1 { font-size: 18px; margin: 0 0 4px; }
h2 { font-size: 15px; margin: 18px 0 4px; }
.summary, .note, .help { color: #555; margin: 2px 0; }
.note { color: #a15c00; }
svg.timeline { display: block; width: 100%; height: 340px; background: #fff;
  border: 1px solid #ddd; user-select: none; cursor: crosshair; }
path.envelope { fill: #d9d9d9; stroke: #9a9a9a; stroke-width: 0.5; }
path.alloc { stroke: rgba(0,0,0,0.35); stroke-width: 0.5; }
path.alloc:hover, path.alloc.hl { stroke: #000; stroke-width: 2; }
.axis text { font-size: 11px; fill: #444; }
.axis line { stroke: #bbb; }
line.peak { stroke: #c00; stroke-dasharray: 4 3; }
rect.selection { fill: rgba(30,110,255,0.15); stroke: rgba(30,110,255,0.6); }
path.failure { fill: #d00; }
#tooltip { position: fixed; pointer-events: none; background: #fffff2; border: 1px solid #999;
  padding: 6px 8px; font: 12px/1.35 ui-monospace, monospace; white-space: pre; z-index: 10;
  box-shadow: 2px 2px 6px rgba(0,0,0,0.2); max-width: 90vw; overflow: hidden; }
table.peak { border-collapse: collapse; margin-top: 4px; }
table.peak td, table.peak th { border-bottom: 1px solid #eee; padding: 2px 10px 2px 0;
  text-align: left; font-variant-numeric: tabular-nums; }
table.peak tr:hover td { background: #f3f7ff; }
button { font: inherit; }
"""

_JS = r"""
"use strict";
const DATA = JSON.parse(document.getElementById("devmm-data").textContent);
const NS = "http://www.w3.org/2000/svg";
const M = {l: 78, r: 16, t: 12, b: 28};
const UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
function human(b) {
  let i = 0;
  while (b >= 1024 && i < UNITS.length - 1) { b /= 1024; i++; }
  return i ? +b.toFixed(2) + " " + UNITS[i] : b + " B";
}
function secs(us) { return (us / 1e6).toFixed(us < 1e7 ? 6 : 3) + " s"; }
function el(tag, attrs, parent, ns) {
  const e = ns ? document.createElementNS(NS, tag) : document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(e);
  return e;
}
function color(k, stack) {
  const h = ((stack >= 0 ? stack * 137.508 : k * 61.8) % 360).toFixed(0);
  return "hsl(" + h + ",55%,62%)";
}
function decimals(step) {  // digits after the point that tell ticks `step` apart
  let d = 0;
  while (d < 9 && Math.abs(step * 10 ** d - Math.round(step * 10 ** d)) > 1e-6 * 10 ** d) d++;
  return d;
}
function sizeTicks(yMax) {  // [bytes, label]: one unit, one precision, whole bytes at least
  const ui = yMax >= 1 ? Math.max(0, Math.min(UNITS.length - 1,
                                              Math.floor(Math.log(yMax) / Math.log(1024)))) : 0;
  const unit = 1024 ** ui;
  let step = niceStep(yMax / unit, 5);
  if (ui === 0) step = Math.max(1, step);
  const d = decimals(step), out = [];
  for (let k = 0; k * step * unit <= yMax * (1 + 1e-9) || k < 2; k++)
    out.push([k * step * unit, (k * step).toFixed(d) + " " + UNITS[ui]]);
  return out;
}
function timeTicks(t0, t1) {  // [us, label]: one unit (s, ms, us), one precision
  const step = niceStep(t1 - t0, 8);
  const [scale, name] = step >= 1e5 ? [1e6, "s"] : step >= 100 ? [1e3, "ms"] : [1, "us"];
  const d = decimals(step / scale), out = [];
  for (let k = Math.ceil(t0 / step - 1e-9); k * step <= t1 * (1 + 1e-9); k++)
    out.push([k * step, (k * step / scale).toFixed(d) + " " + name]);
  return out;
}
function niceStep(range, n) {
  const raw = range / n, p = Math.pow(10, Math.floor(Math.log10(raw))), f = raw / p;
  return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}
const span = Math.max(1, ...DATA.devices.map(d => d.end_us));
const view = {t0: 0, t1: span};
const tip = document.getElementById("tooltip");
const panels = [];

function showTip(ev, lines) {
  tip.textContent = lines.join("\n");
  tip.hidden = false;
  const x = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 4);
  const y = Math.min(ev.clientY + 14, window.innerHeight - tip.offsetHeight - 4);
  tip.style.left = Math.max(0, x) + "px";
  tip.style.top = Math.max(0, y) + "px";
}
function hideTip() { tip.hidden = true; }

function allocLines(d, k) {
  const a = d.allocs[k], lines = [human(a[0]) + " (" + a[0] + " bytes)", "address " + a[1],
    "thread " + a[2]];
  const born = a[6] ? "before the trace began" : "at " + secs(a[4]);
  lines.push("allocated " + born + (a[5] < 0 ? ", still live at the end"
    : ", freed at " + secs(a[5]) + " (lived " + secs(a[5] - a[4]) + ")"));
  const st = a[3] >= 0 ? DATA.stacks[a[3]] : null;
  if (st && st.length) { lines.push("stack (innermost first):"); for (const s of st) lines.push("  " + s); }
  else lines.push("stack: not recorded");
  return lines;
}

function makePanel(d, di) {
  const box = el("section", {class: "panel", "data-device": d.device}, document.getElementById("panels"));
  el("h2", {}, box).textContent = d.device;
  const drawn = d.bands.length;
  const sum = el("p", {class: "summary", "data-peak-bytes": d.peak.bytes, "data-events": d.events,
    "data-allocations": d.allocations, "data-drawn": drawn}, box);
  sum.textContent = d.events + " events, " + d.allocations + " allocations; peak " +
    human(d.peak.bytes) + " at " + secs(d.peak.t_us) + " with " + d.peak.count +
    " live; " + drawn + " drawn as bands, the grey area is all live bytes" +
    (d.bucket_us ? " (its maximum per " + secs(d.bucket_us) + ")" : "") +
    (d.nfailures ? "; " + d.nfailures + " failed allocations (red marks)" : "");
  if (d.note) el("p", {class: "note"}, box).textContent = d.note;
  const svg = el("svg", {class: "timeline", "data-device": d.device}, box, true);
  const p = {d, svg, di, yMax: Math.max(1, d.peak.bytes) * 1.05};
  p.env = el("path", {class: "envelope"}, svg, true);
  p.gb = el("g", {class: "bands"}, svg, true);
  p.paths = d.bands.map(b => {
    const a = d.allocs[b[0]];
    return el("path", {class: "alloc", "data-index": b[0], "data-bytes": a[0], "data-ptr": a[1],
      "data-thread": a[2], fill: color(b[0], a[3])}, p.gb, true);
  });
  p.peak = el("line", {class: "peak"}, svg, true);
  p.gf = el("g", {class: "failures"}, svg, true);
  p.ax = el("g", {class: "axis"}, svg, true);
  p.sel = el("rect", {class: "selection", visibility: "hidden"}, svg, true);
  svg.addEventListener("mousemove", ev => onMove(p, ev));
  svg.addEventListener("mouseleave", hideTip);
  svg.addEventListener("mousedown", ev => { p.drag = localX(p, ev); });
  svg.addEventListener("mouseup", ev => onUp(p, ev));
  svg.addEventListener("wheel", ev => onWheel(p, ev), {passive: false});
  svg.addEventListener("dblclick", () => { view.t0 = 0; view.t1 = span; renderAll(); });
  panels.push(p);
  return p;
}

function localX(p, ev) { return ev.clientX - p.svg.getBoundingClientRect().left; }
function geom(p) {
  const w = p.svg.clientWidth || 900, h = p.svg.clientHeight || 340;
  const pw = Math.max(10, w - M.l - M.r), ph = Math.max(10, h - M.t - M.b);
  const sx = pw / Math.max(1e-9, view.t1 - view.t0);
  return {w, h, pw, ph, X: t => M.l + (Math.min(Math.max(t, view.t0), view.t1) - view.t0) * sx,
    Y: b => M.t + ph - b * ph / p.yMax, T: x => view.t0 + (x - M.l) / sx};
}

function render(p) {
  const d = p.d, g = geom(p), X = g.X, Y = g.Y;
  // the grey envelope: all live bytes, as steps [t, bytes, t, bytes, ...]
  const env = d.envelope;
  let e = "M" + X(env[0]).toFixed(1) + "," + Y(0).toFixed(1);
  for (let i = 0; i < env.length; i += 2) {
    const t1 = i + 2 < env.length ? env[i + 2] : d.end_us;
    if (t1 < view.t0 || env[i] > view.t1) continue;
    e += "L" + X(env[i]).toFixed(1) + "," + Y(env[i + 1]).toFixed(1) + "L" +
      X(t1).toFixed(1) + "," + Y(env[i + 1]).toFixed(1);
  }
  p.env.setAttribute("d", e + "L" + X(d.end_us).toFixed(1) + "," + Y(0).toFixed(1) + "Z");
  // the bands
  d.bands.forEach((b, j) => {
    const a = d.allocs[b[0]], t0 = a[4], t1 = a[5] < 0 ? d.end_us : a[5];
    const path = p.paths[j];
    if (t1 < view.t0 || t0 > view.t1) { path.setAttribute("d", ""); return; }
    const st = b[2], xs = [t0], ys = [b[1]];
    for (let i = 0; i < st.length; i += 2) { xs.push(st[i], st[i]); ys.push(ys[ys.length - 1], st[i + 1]); }
    xs.push(t1); ys.push(ys[ys.length - 1]);
    let s = "M";
    for (let i = 0; i < xs.length; i++) s += X(xs[i]).toFixed(1) + "," + Y(ys[i]).toFixed(1) + "L";
    for (let i = xs.length - 1; i >= 0; i--)
      s += X(xs[i]).toFixed(1) + "," + Y(ys[i] + a[0]).toFixed(1) + (i ? "L" : "Z");
    path.setAttribute("d", s);
  });
  // peak line, failures, axes
  const xp = X(d.peak.t_us), inView = d.peak.t_us >= view.t0 && d.peak.t_us <= view.t1;
  for (const [k, v] of [["x1", xp], ["x2", xp], ["y1", M.t], ["y2", M.t + g.ph]]) p.peak.setAttribute(k, v);
  p.peak.setAttribute("visibility", inView ? "visible" : "hidden");
  p.gf.textContent = "";
  for (const f of d.failures) {
    if (f[0] < view.t0 || f[0] > view.t1) continue;
    const x = X(f[0]), y = M.t + g.ph;
    el("path", {class: "failure", d: "M" + x + "," + (y - 7) + "l-4,7h8z", "data-bytes": f[1],
      "data-thread": f[2]}, p.gf, true);
  }
  p.ax.textContent = "";
  for (const [v, label] of sizeTicks(p.yMax)) {
    const y = Y(v);
    el("line", {x1: M.l - 4, x2: M.l + g.pw, y1: y, y2: y}, p.ax, true);
    el("text", {x: M.l - 6, y: y + 4, "text-anchor": "end"}, p.ax, true).textContent = label;
  }
  for (const [t, label] of timeTicks(view.t0, view.t1)) {
    const x = X(t);
    el("line", {x1: x, x2: x, y1: M.t + g.ph, y2: M.t + g.ph + 4}, p.ax, true);
    el("text", {x: x, y: M.t + g.ph + 17, "text-anchor": "middle"}, p.ax, true).textContent =
      label;
  }
}
function renderAll() { panels.forEach(render); }

function onMove(p, ev) {
  const g = geom(p), x = localX(p, ev);
  if (p.drag != null) {
    const a = Math.min(p.drag, x), b = Math.max(p.drag, x);
    for (const [k, v] of [["x", a], ["y", M.t], ["width", b - a], ["height", g.ph]]) p.sel.setAttribute(k, v);
    p.sel.setAttribute("visibility", "visible");
  }
  const t = ev.target;
  if (t.classList && t.classList.contains("alloc")) {
    showTip(ev, allocLines(p.d, +t.dataset.index));
  } else if (t.classList && t.classList.contains("failure")) {
    showTip(ev, ["failed allocation of " + human(+t.dataset.bytes), "thread " + t.dataset.thread]);
  } else if (x >= M.l && x <= M.l + g.pw) {
    const tt = g.T(x), env = p.d.envelope;
    let lo = 0, hi = env.length / 2 - 1;  // the last change point at or before tt
    while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (env[2 * mid] <= tt) lo = mid; else hi = mid - 1; }
    showTip(ev, ["at " + secs(tt), (p.d.bucket_us ? "live: up to " : "live: ") +
      human(env[2 * lo + 1]) + " (all allocations)"]);
  } else hideTip();
}
function onUp(p, ev) {
  const x = localX(p, ev), g = geom(p);
  if (p.drag != null && Math.abs(x - p.drag) > 3) {
    const a = g.T(Math.min(p.drag, x)), b = g.T(Math.max(p.drag, x));
    view.t0 = Math.max(0, a); view.t1 = Math.min(span, Math.max(b, a + 1));
    renderAll();
  }
  p.drag = null;
  p.sel.setAttribute("visibility", "hidden");
}
function onWheel(p, ev) {
  ev.preventDefault();
  const g = geom(p), t = g.T(localX(p, ev)), f = ev.deltaY > 0 ? 1.25 : 0.8;
  view.t0 = Math.max(0, t - (t - view.t0) * f);
  view.t1 = Math.min(span, Math.max(view.t0 + 1, t + (view.t1 - t) * f));
  renderAll();
}

function peakTable(p) {
  const d = p.d, box = el("section", {class: "peak-list", "data-device": d.device}, document.getElementById("lists"));
  el("h2", {}, box).textContent = "Largest live allocations at the peak: " + d.device + " (" +
    human(d.peak.bytes) + " at " + secs(d.peak.t_us) + ")";
  const tab = el("table", {class: "peak"}, box), head = el("tr", {}, tab);
  for (const h of ["#", "size", "address", "thread", "allocated", "freed", "where"])
    el("th", {}, head).textContent = h;
  d.top.forEach((k, r) => {
    const a = d.allocs[k], tr = el("tr", {"data-index": k, "data-bytes": a[0]}, tab);
    const st = a[3] >= 0 ? DATA.stacks[a[3]] : [];
    for (const v of [r + 1, human(a[0]), a[1], a[2], secs(a[4]), a[5] < 0 ? "live" : secs(a[5]),
      st.length ? st[0] : "-"]) el("td", {}, tr).textContent = v;
    const j = d.bands.findIndex(b => b[0] === k);
    tr.addEventListener("mouseenter", () => p.paths[j] && p.paths[j].classList.add("hl"));
    tr.addEventListener("mouseleave", () => p.paths[j] && p.paths[j].classList.remove("hl"));
  });
}

document.getElementById("reset").addEventListener("click", () => { view.t0 = 0; view.t1 = span; renderAll(); });
DATA.devices.forEach(makePanel);
panels.forEach(peakTable);
renderAll();
window.addEventListener("resize", renderAll);
document.body.dataset.ready = "1";
window.devmmReady = performance.now();
"""


# Characters that mean something to the HTML parser inside <script> ("</script>", "<!--"), and
# the line separators older JavaScript refused in strings: written as JSON's \\uXXXX escapes, so
# the element's text is still exactly the data's JSON (tests/python/test_observability.py).
_SCRIPT_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
                              "\u2028": "\\u2028", "\u2029": "\\u2029"})


def _json(data: dict) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=True).translate(_SCRIPT_SAFE)


def render_html(data: dict) -> str:
    title = html.escape(data["title"])
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{title}</title><style>{_CSS}</style></head>\n<body>\n"
        f"<h1>{title}</h1>\n<p class=\"help\">Live bytes over time, stacked by allocation. "
        "Hover a band for its size, address, thread and stack; drag to zoom in on a time "
        "range, wheel to zoom, double-click or <button id=\"reset\">reset</button> to see "
        "everything.</p>\n<div id=\"panels\"></div>\n<div id=\"lists\"></div>\n"
        "<div id=\"tooltip\" hidden></div>\n"
        f"<script id=\"devmm-data\" type=\"application/json\">{_json(data)}</script>\n"
        f"<script>{_JS}</script>\n</body></html>\n")


# ----------------------------------------------------------------------------- static SVG

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def _human(b: float) -> str:
    i = 0
    while b >= 1024 and i < len(_UNITS) - 1:
        b /= 1024
        i += 1
    return f"{b:.2f} {_UNITS[i]}" if i else f"{int(b)} B"


def _decimals(step: float) -> int:
    """Digits after the point that tell ticks ``step`` apart (0.25: 2, 0.5: 1, 20: 0)."""
    d = 0
    while d < 9 and abs(step * 10 ** d - round(step * 10 ** d)) > 1e-6 * 10 ** d:
        d += 1
    return d


def _size_ticks(ymax: float) -> list:
    """The size axis: (bytes, label) in one unit with one precision, whole bytes at least
    (test_timeline_ticks_share_one_unit_and_one_precision, ..._header_only_log_...)."""
    unit_i = max(0, min(len(_UNITS) - 1, int(math.log(ymax, 1024)) if ymax >= 1 else 0))
    unit = 1024 ** unit_i
    step = _nice(ymax / unit, 5)
    if unit_i == 0:
        step = max(1.0, step)
    d = _decimals(step)
    out, k = [], 0
    while k * step * unit <= ymax * (1 + 1e-9) or k < 2:
        out.append((k * step * unit, f"{k * step:.{d}f} {_UNITS[unit_i]}"))
        k += 1
    return out


def _time_ticks(span_us: float) -> list:
    """The time axis: (microseconds, label) in one unit (s, ms or us) with one precision."""
    step = _nice(span_us, 8)
    scale, name = (1e6, "s") if step >= 1e5 else (1e3, "ms") if step >= 100 else (1.0, "us")
    d = _decimals(step / scale)
    out, k = [], 0
    while k * step <= span_us * (1 + 1e-9):
        out.append((k * step, f"{k * step / scale:.{d}f} {name}"))
        k += 1
    return out


def _nice(rng: float, n: int) -> float:
    raw = rng / n
    p = 10 ** math.floor(math.log10(raw))
    f = raw / p
    return (1 if f < 1.5 else 2 if f < 3.5 else 5 if f < 7.5 else 10) * p


def render_svg(data: dict, width: int = 1000, height: int = 300) -> str:
    """A static picture of each device: the grey envelope, the bands, the peak and the largest
    allocations live at it (no script)."""
    e = html.escape
    ml, mr, mt, mb = 78, 16, 34, 28  # margins in pixels: not a C constant
    out = []
    y_off = 30
    for d in data["devices"]:
        ntop = min(5, len(d["top"]))
        ph = height - mt - mb
        pw = width - ml - mr
        span = max(1, d["end_us"])
        ymax = max(1, d["peak"]["bytes"]) * 1.05

        def X(t: float) -> str:
            return f"{ml + t * pw / span:.1f}"

        def Y(b: float, off: int = y_off) -> str:
            return f"{off + mt + ph - b * ph / ymax:.1f}"

        out.append(f'<g class="device" data-device="{e(d["device"])}">')
        out.append(f'<text x="{ml}" y="{y_off + 20}" class="h">{e(d["device"])}: peak '
                   f'{_human(d["peak"]["bytes"])} at {d["peak"]["t_us"] / 1e6:.6f} s, '
                   f'{d["allocations"]} allocations, {len(d["bands"])} drawn as bands</text>')
        env = d["envelope"]
        pts = [f"M{X(env[0])},{Y(0)}"]
        for i in range(0, len(env), 2):
            t1 = env[i + 2] if i + 2 < len(env) else d["end_us"]
            pts.append(f"L{X(env[i])},{Y(env[i + 1])}L{X(t1)},{Y(env[i + 1])}")
        pts.append(f"L{X(d['end_us'])},{Y(0)}Z")
        out.append(f'<path class="envelope" d="{"".join(pts)}"/>')
        for k, y0, steps in d["bands"]:
            a = d["allocs"][k]
            t0, t1 = a[4], (d["end_us"] if a[5] < 0 else a[5])
            xs, ys = [t0], [y0]
            for j in range(0, len(steps), 2):
                xs += [steps[j], steps[j]]
                ys += [ys[-1], steps[j + 1]]
            xs.append(t1)
            ys.append(ys[-1])
            path = "M" + "L".join(f"{X(x)},{Y(y)}" for x, y in zip(xs, ys))
            path += "L" + "L".join(f"{X(x)},{Y(y + a[0])}" for x, y in
                                   zip(reversed(xs), reversed(ys))) + "Z"
            hue = int((a[3] * 137.508 if a[3] >= 0 else k * 61.8) % 360)
            out.append(f'<path class="alloc" fill="hsl({hue},55%,62%)" d="{path}">'
                       f'<title>{_human(a[0])} at {a[1]}, thread {a[2]}</title></path>')
        xp = X(d["peak"]["t_us"])
        out.append(f'<line class="peak" x1="{xp}" x2="{xp}" y1="{y_off + mt}" '
                   f'y2="{y_off + mt + ph}"/>')
        for v, label in _size_ticks(ymax):
            out.append(f'<text class="ax" x="{ml - 6}" y="{float(Y(v)) + 4:.1f}" '
                       f'text-anchor="end">{label}</text>')
        for t, label in _time_ticks(span):
            out.append(f'<text class="ax" x="{X(t)}" y="{y_off + mt + ph + 17}" '
                       f'text-anchor="middle">{label}</text>')
        out.append(f'<line class="axis" x1="{ml}" x2="{ml + pw}" y1="{Y(0)}" y2="{Y(0)}"/>')
        ty = y_off + height + 4
        for r, k in enumerate(d["top"][:ntop]):
            a = d["allocs"][k]
            st = data["stacks"][a[3]][0] if a[3] >= 0 and data["stacks"][a[3]] else ""
            out.append(f'<text class="top" x="{ml}" y="{ty + 14 * r}">#{r + 1} {_human(a[0])} at '
                       f'{a[1]}, thread {a[2]} {e(st)}</text>')
        out.append("</g>")
        y_off += height + 14 * ntop + 24
    total_h = y_off + 10
    style = ("text{font:12px sans-serif;fill:#333}.h{font-weight:bold}.envelope{fill:#d9d9d9;"
             "stroke:#9a9a9a;stroke-width:.5}.alloc{stroke:rgba(0,0,0,.35);stroke-width:.5}"
             ".peak{stroke:#c00;stroke-dasharray:4 3}.axis{stroke:#888}.ax{font-size:11px}")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{total_h}" '
            f'viewBox="0 0 {width} {total_h}"><style>{style}</style>'
            f'<rect width="100%" height="100%" fill="#fff"/>'
            f'<text x="{ml}" y="20" class="h">{e(data["title"])}</text>{"".join(out)}</svg>\n')

"""A small Chrome DevTools Protocol client over ``--remote-debugging-pipe`` (standard library
only): drives Debian's headless ``chromium`` for the timeline's browser test and benchmark.

The browser reads commands from its fd 3 and writes replies and events to its fd 4, each a JSON
object ended by a NUL byte. No port, no network, no third-party driver.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time


def find_chromium() -> str | None:
    """$DEVMM_CHROMIUM, else chromium on PATH (Debian's package), else None."""
    return os.environ.get("DEVMM_CHROMIUM") or shutil.which("chromium") or \
        shutil.which("chromium-browser")


class Browser:
    """One headless browser with one page (a flattened session on a new target)."""

    def __init__(self, exe: str, width: int = 1200, height: int = 900, timeout: float = 60):
        self.timeout = timeout
        self.dir = tempfile.mkdtemp(prefix="devmm-chromium-")
        to_browser_r, self._w = os.pipe()
        self._r, from_browser_w = os.pipe()
        # bash puts our pipe ends on the browser's fds 3 and 4 (dash takes single digits only)
        cmd = ["bash", "-c", f'exec "$0" "$@" 3<&{to_browser_r} 4>&{from_browser_w}', exe,
               "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--remote-debugging-pipe", "--no-first-run", "--no-default-browser-check",
               "--disable-extensions", "--disable-background-networking",
               f"--user-data-dir={self.dir}/profile", f"--window-size={width},{height}",
               "about:blank"]
        self.log = open(os.path.join(self.dir, "stderr.txt"), "wb")
        self.proc = subprocess.Popen(cmd, pass_fds=(to_browser_r, from_browser_w),
                                     stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buf = b""
        self._id = 0
        self.events: list = []
        self.session = None
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget",
                                 {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(domain + ".enable")
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})

    # ------------------------------------------------------------------ protocol
    def _message(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("chromium did not answer in time; its stderr:\n" +
                                   self.stderr())
            ready, _, _ = select.select([self._r], [], [], left)
            if ready:
                chunk = os.read(self._r, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium exited; its stderr:\n" + self.stderr())
                self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, params: dict | None = None) -> dict:
        """Sends a command and returns its result (events met meanwhile go to .events)."""
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if self.session:
            msg["sessionId"] = self.session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._message(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def stderr(self) -> str:
        self.log.flush()
        with open(os.path.join(self.dir, "stderr.txt"), "rb") as f:
            return f.read()[-4000:].decode(errors="replace")

    # ------------------------------------------------------------------ helpers
    def open(self, path: str) -> float:
        """Loads a local file and waits until the page says it is drawn (body[data-ready]);
        returns the page's own time to ready in ms (performance.now() at the end of its
        first drawing, counted from navigation start)."""
        self.call("Page.navigate", {"url": "file://" + os.path.abspath(path)})
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            ready = self.eval("document.body && document.body.dataset.ready === '1' ? "
                              "window.devmmReady : null")
            if ready is not None:
                return float(ready)
            time.sleep(0.05)
        raise TimeoutError(f"{path} never became ready; console: {self.console_errors()}")

    def eval(self, expression: str):
        """The value of a JavaScript expression (JSON-serialisable)."""
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def mouse(self, kind: str, x: float, y: float, **extra) -> None:
        """A real mouse event at (x, y) in CSS pixels: mouseMoved, mousePressed, mouseReleased,
        mouseWheel."""
        params = {"type": kind, "x": x, "y": y, "button": "none", "clickCount": 0}
        if kind in ("mousePressed", "mouseReleased"):
            params.update(button="left", clickCount=1)
        params.update(extra)
        self.call("Input.dispatchMouseEvent", params)

    def console_errors(self) -> list:
        """Console errors, warnings and uncaught exceptions seen so far, as text."""
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning",
                                                                      "assert"):
                out.append(f"console.{p['type']}: " +
                           " ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
            elif m == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                out.append("exception: " + d.get("exception", {}).get("description",
                                                                       d.get("text", "")))
            elif m == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
                out.append(f"log {p['entry']['level']}: {p['entry']['text']}")
        return out

    def screenshot(self, path: str) -> None:
        """Saves a PNG of the whole page."""
        h = self.eval("Math.ceil(document.documentElement.scrollHeight)")
        w = self.eval("Math.ceil(document.documentElement.scrollWidth)")
        data = self.call("Page.captureScreenshot",
                         {"format": "png", "captureBeyondViewport": True,
                          "clip": {"x": 0, "y": 0, "width": w, "height": h, "scale": 1}})["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.session = None
            self.call("Browser.close")
        except Exception:
            pass
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._w)
        os.close(self._r)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

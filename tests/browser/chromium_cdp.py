"""Headless Chromium driven over the DevTools protocol on a pipe, with the standard library only.

`--remote-debugging-pipe` makes Chromium read protocol commands from fd 3 and write replies and
events to fd 4, NUL-separated JSON: no port, no websocket, nothing else to install. Used by the
browser tests and by benchmarks/bench_html.py; Playwright is not available in CI.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

#: Executables tried in order after $INFERSCOPE_CHROMIUM (Debian's package installs `chromium`).
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless_shell")
FLAGS = (
    "--headless",
    "--no-sandbox",  # root in CI containers
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--mute-audio",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)


def find_chromium() -> str | None:
    """The Chromium executable to use, or None: $INFERSCOPE_CHROMIUM, else the first of CANDIDATES on PATH."""
    forced = os.environ.get("INFERSCOPE_CHROMIUM")
    if forced:
        return forced if os.access(forced, os.X_OK) else None
    return next((p for p in map(shutil.which, CANDIDATES) if p), None)


_EXEC_ON_FDS_3_4 = """
import fcntl, os, sys
r, w = (fcntl.fcntl(int(fd), fcntl.F_DUPFD, 10) for fd in sys.argv[1:3])  # out of the way of 3 and 4 first
os.dup2(r, 3)
os.dup2(w, 4)
os.execvp(sys.argv[3], sys.argv[3:])
"""


class BrowserError(RuntimeError):
    """Chromium did not start, or stopped answering."""


class Browser:
    """One headless Chromium process; `open(url)` gives a `Page` in it."""

    def __init__(self, executable: str, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self._profile = tempfile.TemporaryDirectory(prefix="inferscope-chromium-")
        cmd_r, self._cmd_w = os.pipe()
        self._resp_r, resp_w = os.pipe()
        self._log = open(Path(self._profile.name) / "stderr.log", "w+b")  # noqa: SIM115 - closed in close()
        args = [executable, *FLAGS, f"--user-data-dir={self._profile.name}", "about:blank"]
        # A small Python moves our pipe ends to the fds 3 and 4 that Chromium expects, then execs it
        # (no preexec_fn, which is unsafe with threads; sh's redirections take single-digit fds only).
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _EXEC_ON_FDS_3_4, str(cmd_r), str(resp_w), *args],
            pass_fds=(cmd_r, resp_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        os.close(cmd_r)
        os.close(resp_w)
        self._buf = b""
        self._next_id = 0
        self.events: dict[str | None, list[dict[str, Any]]] = {}
        try:
            self.version = self.send("Browser.getVersion")["product"]
        except BrowserError:
            self.close()
            raise

    def stderr_tail(self, n: int = 1500) -> str:
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-n:]

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        """Send one command and wait for its reply; events that arrive meanwhile are queued per session."""
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            msg["sessionId"] = session
        try:
            os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        except OSError as e:
            raise BrowserError(f"Chromium is gone ({e}); its log ends:\n{self.stderr_tail()}") from e
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return dict(reply.get("result", {}))

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._resp_r], [], [], left)[0]:
                raise BrowserError(
                    f"no answer from Chromium in {self.timeout:.0f} s; its log ends:\n{self.stderr_tail()}"
                )
            chunk = os.read(self._resp_r, 1 << 20)
            if not chunk:
                raise BrowserError(f"Chromium closed the pipe; its log ends:\n{self.stderr_tail()}")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        msg = json.loads(raw)
        if "method" in msg:
            self.events.setdefault(msg.get("sessionId"), []).append(msg)
        return dict(msg)

    def pump(self, seconds: float) -> None:
        """Read events for a while (they are queued per session)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if b"\0" in self._buf or select.select([self._resp_r], [], [], max(0.0, deadline - time.monotonic()))[0]:
                try:
                    self._read(deadline + 1)
                except BrowserError:
                    return

    def open(self, url: str, width: int = 1400, height: int = 1000) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session, target)
        for domain in ("Runtime", "Log", "Page", "Network"):
            self.send(f"{domain}.enable", session=session)
        self.send("Page.bringToFront", session=session)  # a background tab gets no animation frames
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=session,
        )
        page.navigate(url)
        return page

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("Browser.close")
                self.proc.wait(timeout=10)
            except (BrowserError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for fd in (self._cmd_w, self._resp_r):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._log.close()
        self._profile.cleanup()


class Page:
    """A tab: evaluate script, send input, take screenshots, and see its console errors and requests."""

    def __init__(self, browser: Browser, session: str, target: str) -> None:
        self.browser, self.session, self.target = browser, session, target

    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.browser.send(method, params, self.session)

    def navigate(self, url: str) -> None:
        self.send("Page.navigate", {"url": url})
        self.wait_for("document.readyState === 'complete'")

    def evaluate(self, expression: str) -> Any:
        reply = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in reply:
            raise BrowserError(f"{expression!r} raised: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"timed out after {timeout:.0f} s waiting for {expression}")
            time.sleep(0.02)

    @property
    def events(self) -> list[dict[str, Any]]:
        return self.browser.events.get(self.session, [])

    def console_errors(self) -> list[str]:
        """Uncaught exceptions, console.error/assert calls and error log entries (CSP violations included)."""
        self.browser.pump(0.05)
        out = []
        for e in self.events:
            m, p = e["method"], e.get("params", {})
            if m == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append(f"exception: {d.get('exception', {}).get('description') or d.get('text')}")
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(
                    "console."
                    + p["type"]
                    + ": "
                    + " ".join(str(a.get("value", a.get("description"))) for a in p.get("args", []))
                )
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")
        return out

    def requests(self) -> list[str]:
        """URLs the page asked for over the network domain (its own file included)."""
        self.browser.pump(0.05)
        return [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]

    def mouse(self, kind: str, x: float, y: float, **extra: Any) -> None:
        self.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, **extra})

    def click(self, x: float, y: float) -> None:
        self.mouse("mouseMoved", x, y)
        self.mouse("mousePressed", x, y, button="left", clickCount=1)
        self.mouse("mouseReleased", x, y, button="left", clickCount=1)

    def wheel(self, x: float, y: float, delta_y: float) -> None:
        self.mouse("mouseWheel", x, y, deltaX=0, deltaY=delta_y)

    def key(self, key: str) -> None:
        for kind in ("keyDown", "keyUp"):
            self.send("Input.dispatchKeyEvent", {"type": kind, "key": key, "text": key if kind == "keyDown" else ""})

    def screenshot(self, clip: dict[str, float] | None = None) -> bytes:
        # optimizeForSpeed: Chromium then filters every row with "Up", which png_pixels decodes at numpy speed.
        params: dict[str, Any] = {"format": "png", "optimizeForSpeed": True}
        if clip is not None:
            params["clip"] = {"scale": 1, **clip}
        return base64.b64decode(self.send("Page.captureScreenshot", params)["data"])

    def close(self) -> None:
        self.browser.send("Target.closeTarget", {"targetId": self.target})


def png_pixels(data: bytes) -> np.ndarray:
    """An 8-bit, non-interlaced RGB(A) PNG as a (height, width, channels) uint8 array."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, header = 8, [], b""
    while pos < len(data):
        n = int.from_bytes(data[pos : pos + 4], "big")
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + n
    w, h = int.from_bytes(header[0:4], "big"), int.from_bytes(header[4:8], "big")
    depth, color, interlace = header[8], header[9], header[12]
    if depth != 8 or color not in (2, 6) or interlace:
        raise ValueError(f"unsupported PNG: depth {depth}, colour type {color}, interlace {interlace}")
    ch = 3 if color == 2 else 4
    raw = np.frombuffer(zlib.decompress(b"".join(idat)), np.uint8).reshape(h, 1 + w * ch)
    out = np.zeros((h, w * ch), np.int32)
    prev = np.zeros(w * ch, np.int32)
    for y in range(h):
        f, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        if f == 0:
            row = line
        elif f == 2:
            row = (line + prev) & 255
        elif f == 1:  # each byte adds the byte one pixel to its left: a running sum per channel
            row = (np.cumsum(line.reshape(w, ch), axis=0) & 255).reshape(-1)
        else:
            row = line.copy()
            for i in range(w * ch):
                left = row[i - ch] if i >= ch else 0
                up, ul = prev[i], (prev[i - ch] if i >= ch else 0)
                if f == 3:
                    row[i] = (row[i] + ((left + up) >> 1)) & 255
                else:  # Paeth
                    p = left + up - ul
                    pa, pb, pc = abs(p - left), abs(p - up), abs(p - ul)
                    pred = left if pa <= pb and pa <= pc else (up if pb <= pc else ul)
                    row[i] = (row[i] + pred) & 255
        out[y], prev = row, row
    return out.astype(np.uint8).reshape(h, w, ch)

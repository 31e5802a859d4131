"""A headless Chromium driven over the Chrome DevTools Protocol (one page, one socket).

Enough to open pages, click, read the DOM and take screenshots: the browser tests of
the dashboard use it. Chromium is Debian's ``chromium`` package (``.ci/run`` installs it).
"""
from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from typing import Any, Dict, List, Optional

import websocket

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> Optional[str]:
    explicit = os.environ.get("CHROMIUM")
    if explicit:
        return explicit
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """One headless Chromium process with one page."""

    def __init__(self, binary: str, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="echomq-chromium-")
        self.proc = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions",
             "--remote-debugging-port=0", "--remote-allow-origins=*", f"--user-data-dir={self.profile}",
             "--window-size=1100,800", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        port = self._wait_port()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as resp:
            targets = json.load(resp)
        page = next(t for t in targets if t.get("type") == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=timeout,
                                              suppress_origin=True)
        self._ids = itertools.count(1)
        self.events: List[Dict[str, Any]] = []
        self.send("Page.enable")
        self.send("Runtime.enable")

    def _wait_port(self) -> int:
        path = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode("utf-8", "replace") if self.proc.stderr else ""
                raise RuntimeError(f"chromium exited with {self.proc.returncode}: {err[-2000:]}")
            try:
                with open(path) as fh:
                    first = fh.readline().strip()
                if first:
                    return int(first)
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"chromium did not open its DevTools port within {self.timeout} s")

    def close(self) -> None:
        try:
            self.ws.close()
        except Exception:
            pass
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        shutil.rmtree(self.profile, ignore_errors=True)

    # -- protocol -------------------------------------------------------------------------
    def send(self, method: str, **params: Any) -> Dict[str, Any]:
        msg_id = next(self._ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method} failed: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)
        raise TimeoutError(f"no answer to {method} within {self.timeout} s")

    def wait_event(self, method: str, since: int = 0) -> Dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while True:
            for ev in self.events[since:]:
                if ev.get("method") == method:
                    return ev
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {method} within {self.timeout} s")
            self.ws.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                msg = json.loads(self.ws.recv())
            finally:
                self.ws.settimeout(self.timeout)
            if "method" in msg:
                self.events.append(msg)

    # -- page ---------------------------------------------------------------------------
    def goto(self, url: str) -> None:
        mark = len(self.events)
        self.send("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired", mark)

    def js(self, expression: str) -> Any:
        res = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"script failed: {res['exceptionDetails'].get('text')} in {expression!r}")
        return res.get("result", {}).get("value")

    def click(self, selector: str) -> None:
        """Click the element and wait for the page it leads to."""
        mark = len(self.events)
        found = self.js(f"(function(){{var e=document.querySelector({json.dumps(selector)});"
                        f"if(!e)return false;e.click();return true;}})()")
        if not found:
            raise AssertionError(f"no element matches {selector!r} on {self.url()}")
        self.wait_event("Page.loadEventFired", mark)

    def text(self, selector: str) -> str:
        value = self.js(f"(function(){{var e=document.querySelector({json.dumps(selector)});"
                        f"return e?e.textContent:null;}})()")
        if value is None:
            raise AssertionError(f"no element matches {selector!r} on {self.url()}")
        return value

    def url(self) -> str:
        return self.js("location.href")

    def screenshot(self, path: str, width: int = 1000) -> None:
        height = int(self.js("Math.min(document.documentElement.scrollHeight, 1400)") or 600)
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=False)
        try:
            shot = self.send("Page.captureScreenshot", format="png")
        finally:
            self.send("Emulation.clearDeviceMetricsOverride")
        with open(path, "wb") as fh:
            fh.write(base64.b64decode(shot["data"]))

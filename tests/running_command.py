"""A command run by a test in a subprocess, its output collected line by line as it
runs: the end-to-end tests of the command line and the framework tests share it."""
from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
from typing import Any, Dict, List, Optional, Tuple


#: the checkout, put on the ``PYTHONPATH`` of :func:`run_python`
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(code: str, timeout: float = 60) -> str:
    """Run ``code`` in a fresh interpreter (the checkout importable) and return what it
    printed; a failure shows its stderr."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr
    return out.stdout


class RunningCommand:
    """``argv`` started in ``cwd`` with ``env`` (the whole environment), stdout and stderr
    merged and read on a thread; ``saw``, ``output`` and ``exited`` look at what it printed
    so far, ``stop`` and ``finish`` end it."""

    #: lines of output an error message shows
    SHOWN = 80

    def __init__(self, argv: List[str], cwd: str, env: Dict[str, str]) -> None:
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: List[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def output(self) -> str:
        return "\n".join(self.lines[-self.SHOWN:])

    def exited(self) -> Optional[str]:
        """Why waiting on this command is pointless: it has exited (else None)."""
        code = self.proc.poll()
        return None if code is None else f"the command exited ({code})"

    def saw(self, text: str) -> bool:
        return any(text in line for line in list(self.lines))

    def gunicorn_port(self) -> Optional[int]:
        """The port a gunicorn started with ``BIND=127.0.0.1:0`` said it listens on (None
        until it has said so)."""
        for line in list(self.lines):
            m = re.search(r"Listening at: http://127\.0\.0\.1:(\d+)", line)
            if m:
                return int(m.group(1))
        return None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Send ``sig`` (unless it has exited) and wait for the exit; its status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self._wait(timeout, f"exit within {timeout} s of {sig!r}")

    def finish(self, timeout: float = 60.0) -> int:
        """Wait for it to end by itself; its status."""
        return self._wait(timeout, f"finish within {timeout} s")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def _wait(self, timeout: float, what: str) -> int:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the command did not {what}:\n{self.output()}") from None
        self._reader.join(5)
        return code


def http_json(port: int, method: str, path: str, body: Any = None) -> Tuple[int, bytes]:
    """One request to ``127.0.0.1:port``, with ``body`` as JSON; ``(status, body)``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers={"Content-Type": "application/json"})
        res = conn.getresponse()
        return res.status, res.read()
    finally:
        conn.close()

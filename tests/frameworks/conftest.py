"""Helpers of the framework integration tests: a subprocess runner for the example
projects' commands."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from typing import Dict, List, Optional

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Command:
    """A running command (a framework's worker command) with its output collected."""

    def __init__(self, argv: List[str], cwd: str, env: Dict[str, str]) -> None:
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, cwd, full_env.get("PYTHONPATH", "")) if p)
        full_env.update(env)
        self.proc = subprocess.Popen(argv, cwd=cwd, env=full_env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: List[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def output(self) -> str:
        return "\n".join(self.lines[-80:])

    def exited(self) -> Optional[str]:
        code = self.proc.poll()
        return None if code is None else f"the command exited ({code})"

    def saw(self, text: str) -> bool:
        return any(text in line for line in list(self.lines))

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise AssertionError(f"the command did not exit within {timeout} s of {sig!r}:\n{self.output()}")

    def finish(self, timeout: float = 60.0) -> int:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"the command did not finish within {timeout} s:\n{self.output()}")
        self._reader.join(5)
        return code


@pytest.fixture
def command():
    """Start commands with ``command(argv, cwd, env)``; any still running is killed at the end."""
    started: List[Command] = []

    def start(argv: List[str], cwd: str, env: Dict[str, str]) -> Command:
        c = Command(argv, cwd, env)
        started.append(c)
        return c

    yield start
    for c in started:
        if c.proc.poll() is None:
            c.proc.kill()
            c.proc.wait(10)

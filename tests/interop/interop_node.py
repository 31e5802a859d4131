"""Running the real Node ``bullmq`` (pinned in ``tests/package.json``) beside our code.

The ``node`` fixture (``conftest.py``) is a :class:`NodeTool` bound to the test's Redis,
prefix and queue name. It runs
``tests/interop/node/bullmq_tool.js`` either once (``node.run("add", name=..., data=...)``
returns the parsed result) or as a long-running process (``node.spawn("worker", ...)``
returns a :class:`NodeProcess` whose JSON lines are collected by a reader thread and can be
awaited with a deadline via ``wait_for``).

Nothing here skips: a missing Node installation is a test failure that says how to fix it.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS_DIR = os.path.dirname(HERE)
TOOL = os.path.join(HERE, "node", "bullmq_tool.js")
PY_WORKER = os.path.join(HERE, "py_worker.py")
#: The Node bullmq the tools load: ``bullmq`` (the pinned 6.7.0), or another install under
#: node_modules named by ``$ECHOMQ_NODE_BULLMQ`` (``bullmq-newest``: the newest 6.7.x).
NODE_BULLMQ = os.environ.get("ECHOMQ_NODE_BULLMQ") or "bullmq"
BULLMQ_DIR = os.path.join(TESTS_DIR, "node_modules", NODE_BULLMQ)

#: Upper bound for a one-shot tool run (start-up is ~0.2 s; this only catches hangs).
ONE_SHOT_TIMEOUT = 30.0


class NodeToolError(AssertionError):
    """A one-shot command answered ``{"ok": false}``; ``name`` is the Node error class."""

    def __init__(self, cmd: str, line: Dict[str, Any]) -> None:
        self.name = line.get("name")
        self.message = line.get("error")
        super().__init__(f"node bullmq command {cmd!r} failed: {self.name}: {self.message}")


def _node_binary() -> str:
    binary = shutil.which("node")
    if not binary:
        pytest.fail("no `node` on PATH: install Node.js >= 18, then run `make test` "
                    "(npm ci in tests/)", pytrace=False)
    if not os.path.isdir(BULLMQ_DIR):
        pytest.fail(f"Node bullmq is not installed in {os.path.relpath(BULLMQ_DIR)}: "
                    "run `make test` (npm ci in tests/)", pytrace=False)
    return binary


class NodeProcess:
    """A long-running ``bullmq_tool.js`` (``worker`` or ``events``) owned by one test.

    A daemon thread reads stdout and appends each parsed JSON line to ``lines``; the test
    reads ``lines`` or waits on them with :meth:`wait_for`. stdin stays open: writing
    ``stop`` makes the tool close its Worker/QueueEvents and exit; closing stdin does too.
    """

    def __init__(self, argv: List[str], cmd: Dict[str, Any]) -> None:
        self.cmd = cmd
        self.lines: List[Dict[str, Any]] = []
        self.raw_errors: List[str] = []
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, bufsize=1,
        )
        self._reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._reader.start()
        self._err_reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._err_reader.start()

    # -- reader threads ------------------------------------------------------------------
    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            raw = raw.strip()
            if not raw:
                continue
            try:
                line = json.loads(raw)
            except ValueError:
                line = {"event": "unparsed", "text": raw}
            with self._lock:
                self.lines.append(line)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            with self._lock:
                self.raw_errors.append(raw.rstrip())

    # -- queries -------------------------------------------------------------------------
    def snapshot(self) -> List[Dict[str, Any]]:
        """A copy of the lines received so far."""
        with self._lock:
            return list(self.lines)

    def events(self, name: str) -> List[Dict[str, Any]]:
        """Lines whose ``event`` is ``name``, in arrival order."""
        return [line for line in self.snapshot() if line.get("event") == name]

    def describe(self, last: int = 25) -> str:
        """The last lines and stderr, for assertion messages."""
        lines = self.snapshot()[-last:]
        body = "\n".join(json.dumps(_shorten(line))[:400] for line in lines)
        with self._lock:
            err = "\n".join(self.raw_errors[-10:])
        return (f"node {self.cmd.get('cmd')} (exit={self.proc.poll()}), last lines:\n{body}"
                + (f"\nstderr:\n{err}" if err else ""))

    def wait_for(self, predicate: Callable[[Dict[str, Any]], bool], timeout: float = 10.0,
                 what: str = "a matching line", start: int = 0) -> Dict[str, Any]:
        """Poll until a line (from index ``start`` on) satisfies ``predicate``; return it.

        Fails the test with the recent output when ``timeout`` seconds pass or the process
        exits without such a line.
        """
        deadline = time.monotonic() + timeout
        while True:
            for line in self.snapshot()[start:]:
                if predicate(line):
                    return line
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}; "
                                     + self.describe())
            if self.proc.poll() is not None and not self._reader.is_alive():
                for line in self.snapshot()[start:]:
                    if predicate(line):
                        return line
                raise AssertionError(f"node exited before {what}; " + self.describe())
            time.sleep(0.01)

    def wait_event(self, name: str, timeout: float = 10.0, start: int = 0,
                   **match: Any) -> Dict[str, Any]:
        """Wait for a line with ``event == name`` whose top-level fields equal ``match``."""
        def pred(line: Dict[str, Any]) -> bool:
            return line.get("event") == name and all(line.get(k) == v for k, v in match.items())
        desc = f"event {name!r}" + (f" with {match}" if match else "")
        return self.wait_for(pred, timeout=timeout, what=desc, start=start)

    def wait_ready(self, timeout: float = 15.0) -> Dict[str, Any]:
        return self.wait_event("ready", timeout=timeout)

    def mark(self) -> int:
        """Index of the next line, to wait only for lines that arrive after this point."""
        with self._lock:
            return len(self.lines)

    # -- control -------------------------------------------------------------------------
    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def stop(self, timeout: float = 15.0) -> int:
        """Ask the tool to close cleanly; kill it if it does not exit in time.

        Returns the exit code."""
        if self.proc.poll() is None:
            try:
                self.send("stop")
            except (BrokenPipeError, OSError, ValueError):
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._reader.join(5)
        for stream in (self.proc.stdin,):
            try:
                if stream:
                    stream.close()
            except OSError:
                pass
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


def _shorten(line: Dict[str, Any]) -> Dict[str, Any]:
    out = dict(line)
    out.pop("stack", None)
    return out


class NodeTool:
    """Runs ``bullmq_tool.js`` against the test's Redis, prefix and queue."""

    def __init__(self, redis_url: str, prefix: str, queue: str) -> None:
        self.binary = _node_binary()
        self.redis_url = redis_url
        self.prefix = prefix
        self.queue = queue
        self.processes: List[NodeProcess] = []

    def command(self, cmd: str, queue: Optional[str] = None, **fields: Any) -> Dict[str, Any]:
        full = {"redis": self.redis_url, "prefix": self.prefix, "queue": queue or self.queue,
                "cmd": cmd}
        full.update(fields)
        return full

    def run_line(self, cmd: str, **fields: Any) -> Dict[str, Any]:
        """Run a one-shot command; return its JSON line as is (``ok`` true or false)."""
        full = self.command(cmd, **fields)
        # The command goes on stdin: large payloads do not fit in an argument list.
        proc = subprocess.run([self.binary, TOOL], capture_output=True, text=True,
                              timeout=ONE_SHOT_TIMEOUT, input=json.dumps(full) + "\n")
        # split on "\n" only: JSON text may hold U+2028, which splitlines() breaks on
        lines = [ln for ln in proc.stdout.split("\n") if ln.strip()]
        if not lines:
            raise AssertionError(f"node bullmq command {cmd!r} printed nothing "
                                 f"(exit {proc.returncode}); stderr:\n{proc.stderr[-3000:]}")
        return json.loads(lines[-1])

    def run(self, cmd: str, **fields: Any) -> Any:
        """Run a one-shot command and return its ``result``; raise NodeToolError if it failed."""
        line = self.run_line(cmd, **fields)
        if not line.get("ok"):
            raise NodeToolError(cmd, line)
        return line["result"]

    def batch(self, *steps: Dict[str, Any]) -> List[Any]:
        """Run several one-shot steps in one Node process; each step must succeed.

        ``steps`` are dicts with a ``cmd`` key and its fields; returns their results.
        """
        results = self.run("batch", steps=list(steps))
        out = []
        for step, res in zip(steps, results):
            if not res.get("ok"):
                raise NodeToolError(step.get("cmd", "?"), res)
            out.append(res["result"])
        return out

    def spawn(self, cmd: str, **fields: Any) -> NodeProcess:
        """Start a long-running command (``worker`` / ``events``); stopped at test teardown."""
        full = self.command(cmd, **fields)
        proc = NodeProcess([self.binary, TOOL, json.dumps(full)], full)
        self.processes.append(proc)
        return proc

    def worker(self, ready: bool = True, **fields: Any) -> NodeProcess:
        """Start a Node Worker (see the tool's header for fields); wait for ``ready``."""
        proc = self.spawn("worker", **fields)
        if ready:
            proc.wait_ready()
        return proc

    def events(self, ready: bool = True, **fields: Any) -> NodeProcess:
        """Start a Node QueueEvents; once ``ready``, every later event is reported."""
        proc = self.spawn("events", **fields)
        if ready:
            proc.wait_ready()
        return proc

    def python_worker(self, ready: bool = True, **fields: Any) -> NodeProcess:
        """Start OUR Worker in a gevent-patched subprocess (``py_worker.py``), streamed the
        same way as a Node worker; wait for ``ready``."""
        full = self.command("worker", **fields)
        proc = NodeProcess([sys.executable, PY_WORKER, json.dumps(full)], full)
        self.processes.append(proc)
        if ready:
            proc.wait_ready()
        return proc

    def close(self) -> None:
        for proc in self.processes:
            try:
                proc.stop(timeout=10)
            except Exception:  # pragma: no cover - teardown must reach every process
                proc.kill()

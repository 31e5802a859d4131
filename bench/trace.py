"""``python -m bench.run --trace``: the exact Redis command sequence per job of each worker.

For each implementation: N no-op jobs are pre-loaded into a paused queue, the worker
(concurrency 1) starts and idles, a MONITOR connection starts recording, the queue is
resumed, and recording stops when all jobs are completed. Commands from connections that
existed before the worker started (the harness, the monitor) are dropped. The result is a
Markdown section per implementation: top-level commands per job, commands run inside Lua
per job, and the literal sequence of one steady-state job.
"""
from __future__ import annotations

import collections
import re
import socket
import tempfile
import threading
import time
from typing import List, Optional, Tuple

from .harness import PREFIX, Bench
from .impls import Impl
from echomq_gevent.protocol.keys import QueueKeys

LINE = re.compile(r'^\+(\d+\.\d+) \[(\d+) ([^\]]+)\] (.*)$')
ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')

#: scripts a no-op worker run calls, told apart by their key count
SCRIPT_BY_NUMKEYS = {"11": "moveToActive-11", "14": "moveToFinished-14", "9": "moveStalledJobsToWait-9",
                     "1": "extendLocks-1", "2": "extendLock-2"}

Entry = Tuple[float, str, List[str]]  # (time, source "host:port" or "lua", [command, args...])


class Monitor:
    """A raw MONITOR connection read by a background thread until :meth:`stop`."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.sendall(b"MONITOR\r\n")
        self.sock.settimeout(0.2)
        self.entries: List[Entry] = []
        self._stop = threading.Event()
        self._buf = b""
        self._thread = threading.Thread(target=self._read, name="bench-monitor", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                chunk = self.sock.recv(1 << 16)
            except socket.timeout:
                continue
            except OSError:
                return
            if not chunk:
                return
            self._buf += chunk
            *lines, self._buf = self._buf.split(b"\r\n")
            for raw in lines:
                m = LINE.match(raw.decode("utf-8", "replace"))
                if m:
                    args = [a.encode("latin-1", "replace").decode("unicode_escape", "replace")
                            for a in ARG.findall(m.group(4))]
                    self.entries.append((float(m.group(1)), m.group(3), args))

    def stop(self) -> List[Entry]:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()
        return self.entries


def _label(args: List[str]) -> str:
    cmd = args[0].upper()
    if cmd in ("EVALSHA", "EVAL") and len(args) > 2:
        return f"{cmd} {SCRIPT_BY_NUMKEYS.get(args[2], args[2] + ' keys')}"
    return cmd


def _short(args: List[str], width: int = 110) -> str:
    parts = []
    for a in args:
        if len(a) > 40:
            a = a[:37] + "..."
        parts.append(a)
    text = " ".join(parts)
    return text if len(text) <= width else text[:width - 3] + "..."


def trace_one(bench: Bench, impl: Impl, n: int = 20) -> str:
    """Record one implementation's worker over ``n`` jobs; return its Markdown section."""
    assert bench.client is not None
    bench.flush()
    queue = bench.new_queue()
    keys = QueueKeys(queue, PREFIX)
    bench.preload(queue, n, paused=True)
    before = {c["addr"] for c in bench.client.client_list()}
    report = tempfile.NamedTemporaryFile(prefix="echomq-trace-", suffix=".json", delete=False)
    report.close()
    cfg = {"url": bench.url, "queue": queue, "prefix": PREFIX, "concurrency": 1, "mode": "noop",
           "sleep_ms": 0, "report": report.name}
    proc = bench.start_driver(impl.worker_cmd(), cfg)
    mon: Optional[Monitor] = None
    try:
        bench.wait_blocked_client(15, proc)
        port = int(bench.url.rsplit(":", 1)[1].split("/")[0])
        mon = Monitor("127.0.0.1", port)
        time.sleep(0.1)
        bench.resume(keys)
        bench.wait_finished(keys, n, 120, proc)
        time.sleep(0.05)
        entries = mon.stop()
        mon = None
        bench.stop_driver(proc, report.name)
    finally:
        if mon is not None:
            mon.stop()
        bench.reap(proc)
    mine = [e for e in entries if e[1] == "lua" or e[1] not in before]
    # inner (lua) lines belong to the script call next to them; pair each with its call
    top: List[Tuple[Entry, List[Entry]]] = []
    pending_inner: List[Entry] = []
    inner_first = _inner_comes_first(mine)
    for e in mine:
        if e[1] == "lua":
            if inner_first:
                pending_inner.append(e)
            elif top:
                top[-1][1].append(e)
            continue
        if inner_first and e[2] and e[2][0].upper() in ("EVALSHA", "EVAL"):
            top.append((e, pending_inner))
            pending_inner = []
        else:
            top.append((e, []))
    top_counts = collections.Counter(_label(e[2]) for e, _ in top)
    inner_counts = collections.Counter(e[2][0].upper() for _, inner in top for e in inner)
    lines = [f"## {impl.label}", "",
             f"{n} no-op jobs, concurrency 1: {len(top) / n:.2f} top-level commands and "
             f"{sum(inner_counts.values()) / n:.2f} commands inside Lua per job.", "",
             "| top-level command | per job |", "| --- | --- |"]
    for name, cnt in top_counts.most_common():
        lines.append(f"| {name} | {cnt / n:.2f} |")
    lines += ["", "| inside Lua | per job |", "| --- | --- |"]
    for name, cnt in inner_counts.most_common():
        lines.append(f"| {name} | {cnt / n:.2f} |")
    finishes = [i for i, (e, _) in enumerate(top) if _label(e[2]).endswith("moveToFinished-14")]
    if len(finishes) >= 6:
        a, b = finishes[4], finishes[5]
        lines += ["", "One steady-state job (from one moveToFinished to the next, inclusive of the first):",
                  "", "```"]
        for e, inner in top[a:b]:
            lines.append(_short(e[2]))
            for i in inner:
                lines.append("    lua: " + _short(i[2], 100))
        lines.append("```")
    return "\n".join(lines) + "\n"


def _inner_comes_first(entries: List[Entry]) -> bool:
    """Whether this Redis prints a script's inner commands before the EVALSHA line."""
    for i, e in enumerate(entries):
        if e[1] == "lua":
            return not (i > 0 and entries[i - 1][1] != "lua"
                        and entries[i - 1][2][0].upper() in ("EVALSHA", "EVAL"))
    return False


def trace_all(bench: Bench, impls: List[Impl]) -> str:
    parts = ["# Redis commands per job, by implementation", "",
             f"Recorded with MONITOR on Redis {bench.redis_version}. Script calls are named by "
             "their key count (the worker scripts of a no-op run).", ""]
    for impl in impls:
        bench.log(f"tracing {impl.key}")
        parts.append(trace_one(bench, impl))
    return "\n".join(parts)

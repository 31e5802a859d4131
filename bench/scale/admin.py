"""The admin side of the scale section: the **admin** calls on a queue of N jobs (timed by
the driver, with the longest Redis command during each from ``SLOWLOG``) and our
**dashboard** on a queue of N waiting jobs (real HTTP GETs), beside each implementation's
client calls for a bull-board-like job list."""
from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..harness import PREFIX, Bench, BenchError, percentile
from ..impls import DRIVERS, Impl, ours_python
from .tools import Filler, admin_cmd
from echomq_gevent.protocol.keys import QueueKeys

#: SLOWLOG threshold during an admin call (µs): every command that took 1 ms or more
SLOWLOG_US = 1000
#: the target of issue 30: no command of ours longer than this during an admin call
LONGEST_TARGET_MS = 50.0


# -- admin -----------------------------------------------------------------------------------
def _slowlog_max(bench: Bench) -> Dict[str, Any]:
    """The longest command in SLOWLOG since the reset: ms, what it was, how many over 50 ms."""
    assert bench.client is not None
    entries = bench.client.slowlog_get(100000)
    mine = [e for e in entries if not str(e.get("command", "")).lower().startswith(("slowlog", "config"))]
    if not mine:
        return {"longest_ms": 0.0, "longest_cmd": "", "over_target": 0, "slow_cmds": 0}
    top = max(mine, key=lambda e: e["duration"])
    return {"longest_ms": top["duration"] / 1000.0, "longest_cmd": _script_name(top.get("command", b"")),
            "over_target": sum(1 for e in mine if e["duration"] / 1000.0 > LONGEST_TARGET_MS),
            "slow_cmds": len(mine)}


def _script_name(cmd: Any) -> str:
    """What a SLOWLOG command was: our script's name for an EVALSHA of ours, the first line
    of the script's comment for Node's EVAL, else the command itself (shortened)."""
    text = cmd.decode("utf-8", "replace") if isinstance(cmd, bytes) else str(cmd)
    parts = text.split(" ", 2)
    if parts[0].lower() == "evalsha" and len(parts) > 1:
        from echomq_gevent.protocol.library import library

        names = {sha: name for name, sha in library().shas.items()}
        if parts[1] in names:
            return f"EVALSHA {names[parts[1]]}"
    if parts[0].lower() == "eval" and len(parts) > 1:
        body = text[5:]
        for line in body.splitlines()[1:4]:
            line = line.strip()
            if line:
                return f"EVAL (Node: {line[:60]})"
    return text[:80]


def measure_admin(bench: Bench, filler: Filler, impl: Impl, n: int) -> List[Dict[str, Any]]:
    """Every admin operation of the module docstring on ``n`` jobs; one row each."""
    assert bench.client is not None
    client = bench.client
    queue = "scaleadmin"
    keys = QueueKeys(queue, PREFIX)
    client.config_set("slowlog-max-len", 100000)
    page = min(100, n)
    plan = [  # (label, fill state or None to keep the last fill, request)
        ("get_job_counts", "completed", {"op": "get_job_counts"}),
        ("get_jobs page 1", None, {"op": "get_jobs", "start": 0, "end": page - 1}),
        ("get_jobs middle page", None, {"op": "get_jobs", "start": n // 2, "end": n // 2 + page - 1}),
        ("get_jobs last page", None, {"op": "get_jobs", "start": n - page, "end": n - 1}),
        ("clean completed", None, {"op": "clean"}),
        ("retry_jobs failed", "failed", {"op": "retry_jobs"}),
        ("drain wait", "wait", {"op": "drain"}),
        ("obliterate", "wait", {"op": "obliterate"}),
    ]
    rows: List[Dict[str, Any]] = []
    bench.flush()
    proc = bench.start_driver(admin_cmd(impl), {"url": bench.url, "queue": queue, "prefix": PREFIX}, stdin=True)
    try:
        assert proc.stdin is not None
        for label, state, req in plan:
            if state is not None:
                client.flushall()
                filler.fill(keys, state, n)
            calls0 = client.info("commandstats")
            client.config_set("slowlog-log-slower-than", SLOWLOG_US)
            client.slowlog_reset()
            proc.stdin.write(json.dumps(req) + "\n")
            proc.stdin.flush()
            answer = json.loads(bench.read_line(proc, 1800))
            client.config_set("slowlog-log-slower-than", 10000)
            slow = _slowlog_max(bench)
            calls1 = client.info("commandstats")
            scripts = sum(int(v["calls"]) - int(calls0.get(k, {}).get("calls", 0)) for k, v in calls1.items()
                          if k in ("cmdstat_evalsha", "cmdstat_eval"))
            left = client.llen(keys.wait) + client.zcard(keys.completed) + client.zcard(keys.failed)
            rows.append({"impl": impl.key, "op": label, "n": n, "ms": float(answer["ms"]),
                         "script_calls": scripts, "jobs_left": left, **slow})
            bench.log(f"  admin {label:<22} {impl.key:<5} {answer['ms']:9.1f} ms, {scripts} script calls, "
                      f"longest command {slow['longest_ms']:.1f} ms")
    finally:
        Bench.reap(proc)
    return rows


# -- dashboard -------------------------------------------------------------------------------
def _get_ms(port: int, path: str, bodies: Optional[List[bytes]] = None) -> Tuple[float, int, int]:
    """One real HTTP GET of ``path``: (ms to the whole body, status, body bytes); the body
    is appended to ``bodies`` when given."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        t0 = time.perf_counter()
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
        if bodies is not None:
            bodies.append(body)
        return (time.perf_counter() - t0) * 1000.0, resp.status, len(body)
    finally:
        conn.close()


def measure_dashboard(bench: Bench, filler: Filler, impls: List[Impl], n: int, repeats: int,
                      log: Callable[[str], None]) -> List[Dict[str, Any]]:
    """Our dashboard on a queue of ``n`` waiting jobs, served by gevent's WSGI server in its
    own process (``scale_dashboard_ours.py``) and timed by real HTTP GETs: the job list as the
    server's first request, the queues page's first request (it starts the discovery of the
    queues, a SCAN of every key, and answers at the latest 0.2 s later), the time until a
    queues page lists the queue (GETs every 50 ms), then ``repeats`` GETs of the queues page, the job list's first page and its
    last page, and of the queues page once its list is stale (rediscovered behind it). A reference for each implementation: what a
    bull-board-like job list reads with its client (the first 50 waiting jobs and the counts,
    ``scale_admin_*`` op ``dash``), ``repeats`` times."""
    from urllib.parse import quote

    assert bench.client is not None
    bench.flush()
    queue = "dash"
    keys = QueueKeys(queue, PREFIX)
    filler.fill(keys, "wait", n)
    rows: List[Dict[str, Any]] = []
    if any(i.key == "ours" for i in impls):
        every_s = 2.0  # the dashboard's discover_every_s (10 by default): the list goes stale within the case
        proc = bench.start_driver([ours_python(), os.path.join(DRIVERS, "scale_dashboard_ours.py")],
                                  {"url": bench.url, "prefix": PREFIX, "discover_every_s": every_s})
        try:
            port = int(bench.read_line(proc, 30))
            last = max(1, -(-n // 20))  # the dashboard's default page size
            name = quote(queue)
            first = f"/queue?name={name}&state=waiting"
            plan = [("job list, first page: the server's first request", first, 1),
                    ("queues page: first request, starts the discovery (SCAN of every key)", "/", 1),
                    ("queues page (queues known)", "/", repeats),
                    ("job list, first page (waiting)", first, repeats),
                    (f"job list, last page ({last:,})", f"/queue?name={name}&state=waiting&page={last}", repeats),
                    ("queues page, list stale (rediscovered behind it)", "/", repeats)]
            shown = time.monotonic()
            for label, path, times in plan:
                if "stale" in label:
                    time.sleep(max(0.0, shown + every_s + 0.1 - time.monotonic()))
                took: List[float] = []
                for _ in range(times):
                    ms, status, size = _get_ms(port, path)
                    if status != 200:
                        raise BenchError(f"dashboard GET {path}: HTTP {status}")
                    took.append(ms)
                took.sort()
                rows.append({"impl": "ours", "what": label, "path": path, "n": n, "gets": times,
                             "p50_ms": percentile(took, 50), "max_ms": took[-1], "bytes": size})
                log(f"  dashboard {label:<70} p50 {rows[-1]['p50_ms']:8.1f} ms, max {took[-1]:8.1f} ms")
                if label.startswith("queues page: first"):
                    # until a queues page lists the queue: the first discovery's whole time
                    t0 = time.monotonic() - took[0] / 1000.0
                    gets = 1
                    while True:
                        bodies: List[bytes] = []
                        _get_ms(port, "/", bodies)
                        if b'data-queue="' + queue.encode() + b'"' in bodies[0]:
                            break
                        if time.monotonic() - t0 > 600:
                            raise BenchError("dashboard: the queues page never listed the queue")
                        gets += 1
                        time.sleep(0.05)
                    whole = (time.monotonic() - t0) * 1000.0
                    rows.append({"impl": "ours", "what": "first discovery: until the queues page lists the queue",
                                 "path": "/", "n": n, "gets": gets, "p50_ms": whole, "max_ms": whole, "bytes": 0,
                                 "discovery": True})
                    log(f"  dashboard first discovery: the queue listed after {whole:8.1f} ms ({gets} GETs)")
                    shown = time.monotonic()
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    pass
            Bench.reap(proc)
    for impl in impls:
        admin = bench.start_driver(admin_cmd(impl), {"url": bench.url, "queue": queue, "prefix": PREFIX}, stdin=True)
        try:
            assert admin.stdin is not None
            took = []
            for _ in range(repeats):
                admin.stdin.write(json.dumps({"op": "dash"}) + "\n")
                admin.stdin.flush()
                took.append(float(json.loads(bench.read_line(admin, 300))["ms"]))
        finally:
            Bench.reap(admin)
        took.sort()
        rows.append({"impl": impl.key, "what": "client calls: 50 waiting jobs + job counts", "path": "", "n": n,
                     "gets": repeats, "p50_ms": percentile(took, 50), "max_ms": took[-1], "bytes": 0})
        log(f"  dashboard {impl.key:<5} client calls p50 {rows[-1]['p50_ms']:8.1f} ms, max {took[-1]:8.1f} ms")
    return rows

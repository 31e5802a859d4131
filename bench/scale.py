"""The scale section of the bench (``python -m bench.run --only scale``): how the cost of our
worker and of BullMQ (Node) 6.7.0 grows with the work, side by side in one run.

Cases (issue 30; each for every implementation asked, one round each, same Redis; pick them
with ``--scale-cases``):

- **backlog**: N waiting no-op jobs (default 1e3, 1e5, 1e6) at concurrency 100 through
  :meth:`bench.harness.Bench.run_worker` with the queue filled by ``scale_fill.lua``
  (straight into Redis, in the shape an add leaves; not timed) instead of Node's
  ``addBulk``: jobs/s, worker and Redis CPU per job, and Redis memory per waiting job
  (``used_memory`` delta over the fill / N; the same for every worker, it is what lands).
- **admin**: on a queue of N jobs (default 1e5): ``get_job_counts``, three ``get_jobs``
  pages of 100 (head, middle, tail of the completed set), ``clean`` of every completed job,
  ``retry_jobs`` of every failed job, ``drain`` and ``obliterate`` of N waiting jobs, each
  timed by the driver (``scale_admin_*``), with the longest Redis command during it read from
  ``SLOWLOG`` (every command of 1 ms or more is logged).
- **delayed**: N delayed jobs (default 1e5) due over S seconds (default 60) and an idle
  worker at concurrency 100 that records when each starts: lateness p50/p99/max of the
  start against the due time written in the job.
- **idle queues**: one worker process on Q queues (default 200) with nothing to do:
  connections to Redis (``CLIENT LIST``), the process's CPU over 10 s, its RSS, and pick-up
  latency of jobs added one at a time to one of the queues; ours twice, with a marker wait
  per queue and with one shared wait (``marker_wait: shared``, the row ``ours shared wait``).
- **busy queues** (only when asked: ``--scale-cases busy``): one worker process on 20 queues
  of 5,000 waiting no-op jobs each, all resumed at once: jobs/s, CPU per job and connections
  while busy; ours with each worker's own client, one shared client, and the shared wait.
- **prioritized**: N waiting no-op jobs (default 1e5) over P priorities (default 1,000),
  filled in the shape ``addPrioritizedJob`` leaves (ZSET score priority·2^32 + ``pc``), at
  concurrency 100: jobs/s, CPU per job, and the start order the worker records (jobs started
  behind a job of a higher priority number by more than the 100 in flight).
- **schedulers**: an idle worker at concurrency 100, then N job schedulers (default 1e4; half
  ``every``, half cron, the cron runs spread evenly over the window's seconds: 83 a second,
  fewer than the concurrency) upserted with each implementation's API, over a window (default
  60 s): lateness of each run against its scheduled time (the ``millis`` of its id), the
  worker's and Redis's CPU. Then a **burst**: 1,250 cron schedulers over 10 s, 125 runs due
  in the same millisecond each second, more than the concurrency: apart for the runs that
  found a free slot and those that waited for one.
- **payloads**: no-op jobs carrying 100 KB (default 2,000 jobs) and 1 MB (300) of data at
  concurrency 100: jobs/s and the worker's peak RSS.
- **dashboard** (ours; a client-call reference for both): our dashboard on a queue of N
  waiting jobs (default 1e6), served in its own process, timed by real HTTP GETs of the
  queues page and the job list's first and last pages.

Writes ``scale.md`` and ``scale.json`` into ``--out``; a full run appends one row to
``history.md``.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from .harness import PREFIX, Bench, BenchError, ProcWatch, percentile
from .impls import DRIVERS, Impl, node_binary, node_producer_cmd, ours_python
from echomq_gevent.protocol.keys import QueueKeys

HERE = os.path.dirname(os.path.abspath(__file__))
FILL_CHUNK = 5000
#: SLOWLOG threshold during an admin call (µs): every command that took 1 ms or more
SLOWLOG_US = 1000
#: backlogs of at most this many jobs (seconds long) run in alternated rounds (``rounds``)
SHORT_BACKLOG = 100000
#: the target of issue 30: no command of ours longer than this during an admin call
LONGEST_TARGET_MS = 50.0


def sizes(quick: bool, backlogs: Optional[List[int]] = None, admin_n: Optional[int] = None) -> Dict[str, Any]:
    """The case sizes: tiny with ``quick`` (the smoke test), else issue 30's."""
    if quick:
        return {"backlogs": backlogs or [200, 1000], "admin_n": admin_n or 2000, "delayed_n": 300,
                "delayed_span_s": 2.0, "queues": 20, "idle_s": 1.0, "probes": 5,
                "prioritized_n": 2000, "priorities": 1000, "schedulers_n": 100, "schedulers_window_s": 3.0,
                "burst_n": 250, "burst_window_s": 2.0, "rounds": 1,
                "payloads": [[50, 100 * 1024], [20, 1024 * 1024]], "dashboard_n": 5000, "dashboard_gets": 3,
                "busy_queues": 4, "busy_n": 500}
    return {"backlogs": backlogs or [1000, 100000, 1000000], "admin_n": admin_n or 100000,
            "delayed_n": 100000, "delayed_span_s": 60.0, "queues": 200, "idle_s": 10.0, "probes": 50,
            "prioritized_n": 100000, "priorities": 1000, "schedulers_n": 10000, "schedulers_window_s": 60.0,
            "burst_n": 1250, "burst_window_s": 10.0, "rounds": 3,
            "payloads": [[2000, 100 * 1024], [300, 1024 * 1024]], "dashboard_n": 1000000, "dashboard_gets": 5,
            "busy_queues": 20, "busy_n": 5000}


# -- the fill --------------------------------------------------------------------------------
class Filler:
    """Loads ``scale_fill.lua`` once and writes N jobs into one state, in chunks."""

    def __init__(self, bench: Bench) -> None:
        assert bench.client is not None
        self.client = bench.client
        with open(os.path.join(HERE, "scale_fill.lua"), encoding="utf-8") as fh:
            self.sha = self.client.script_load(fh.read())

    def fill(self, keys: QueueKeys, state: str, n: int, ts: Optional[int] = None,
             due0: float = 0.0, step_ms: float = 0.0, pad: int = 0, priorities: int = 0) -> None:
        """``n`` jobs into ``state``; ``pad`` bytes of padding in each job's data;
        ``priorities`` (state ``prioritized``): how many priorities the jobs spread over."""
        ts = int(time.time() * 1000) - 1000 if ts is None else ts
        target = {"wait": keys.wait, "completed": keys.completed, "failed": keys.failed,
                  "delayed": keys.delayed, "prioritized": keys.prioritized}[state]
        if state == "prioritized":
            due0 = float(priorities)
        # a chunk of padded jobs is one script call: keep each call's writes near 50 MB
        chunk = max(1, min(FILL_CHUNK, (50 << 20) // max(pad, 1)))
        pipe = self.client.pipeline(transaction=False)
        for start in range(0, n, chunk):
            count = min(chunk, n - start)
            pipe.evalsha(self.sha, 4, target, keys.id, keys.marker, keys.pc, keys.base, start + 1, count, state, ts,
                         due0 + start * step_ms, step_ms, pad)
            if len(pipe) >= 8 or pad:
                pipe.execute()
        pipe.execute()

    def used_memory(self) -> int:
        return int(self.client.info("memory")["used_memory"])


# -- backlog ---------------------------------------------------------------------------------
def measure_backlog(bench: Bench, filler: Filler, impl: Impl, n: int, concurrency: int = 100) -> Dict[str, Any]:
    mem: Dict[str, int] = {}

    def fill(queue: str, keys: QueueKeys) -> None:
        assert bench.client is not None
        bench.client.hset(keys.meta, "paused", 1)
        before = filler.used_memory()
        filler.fill(keys, "wait", n)
        mem["bytes"] = filler.used_memory() - before

    row = bench.run_worker(impl, n, concurrency, "noop", fill=fill, timeout=1800)
    if row["completed"] != n or row["failed"]:
        raise BenchError(f"{impl.key} backlog {n}: {row['completed']} completed, {row['failed']} failed")
    row["memory_per_waiting_job_b"] = mem["bytes"] / n
    row["commands"] = dict(sorted(row["commands"].items(), key=lambda kv: -kv[1])[:12])
    return row


# -- admin -----------------------------------------------------------------------------------
def _admin_cmd(impl: Impl) -> List[str]:
    if impl.key == "node":
        return [node_binary(), os.path.join(DRIVERS, "scale_admin_node.js")]
    return [ours_python(), os.path.join(DRIVERS, "scale_admin_ours.py")]


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
    proc = bench.start_driver(_admin_cmd(impl), {"url": bench.url, "queue": queue, "prefix": PREFIX}, stdin=True)
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


def _reporting_worker(bench: Bench, queue: str, mode: str, concurrency: int, **more: Any) -> Dict[str, Any]:
    """The configuration of a worker driver in ``mode`` that writes its report (latencies
    and the like) into a fresh temporary file, ``cfg["report"]``, which the caller removes."""
    import tempfile

    fd, path = tempfile.mkstemp(prefix="echomq-bench-", suffix=".json")
    os.close(fd)
    return {"url": bench.url, "queue": queue, "prefix": PREFIX, "concurrency": concurrency, "mode": mode,
            "sleep_ms": 0, "report": path, **more}


# -- delayed ---------------------------------------------------------------------------------
def measure_delayed(bench: Bench, filler: Filler, impl: Impl, n: int, span_s: float,
                    concurrency: int = 100) -> Dict[str, Any]:
    bench.flush()
    queue = bench.new_queue()
    keys = QueueKeys(queue, PREFIX)
    cfg = _reporting_worker(bench, queue, "latency", concurrency)
    proc = bench.start_driver(impl.worker_cmd(), cfg)
    try:
        bench.wait_blocked_client(15, proc)
        now = time.time() * 1000.0
        # the first job is due once the fill is surely over (about 5 µs a job here)
        due0 = now + 1000.0 + n * 0.02
        filler.fill(keys, "delayed", n, ts=int(now), due0=due0, step_ms=span_s * 1000.0 / n)
        done, failed, _ = bench.wait_finished(keys, n, span_s + 600, proc)
        rep = bench.stop_driver(proc, cfg["report"])
    finally:
        Bench.reap(proc)
        os.unlink(cfg["report"])
    late = sorted(float(x) for x in rep.get("latencies_ms", []))
    return {"impl": impl.key, "n": n, "span_s": span_s, "completed": done, "failed": failed,
            "samples": len(late), "p50_ms": percentile(late, 50), "p99_ms": percentile(late, 99),
            "max_ms": late[-1] if late else float("nan")}


# -- idle queues -----------------------------------------------------------------------------
def measure_idle(bench: Bench, impl: Impl, queues: int, idle_s: float, probes: int,
                 shared_wait: bool = False) -> Dict[str, Any]:
    """Q idle queues in one worker process: connections, CPU, RSS, and the pick-up of a
    job added every 50 ms to one of them. ``shared_wait`` (ours only): the workers wait in
    one ``BZPOPMIN`` (``marker_wait: shared``); the row's ``impl`` says so."""
    assert bench.client is not None
    bench.flush()
    base = bench.new_queue()
    names = [f"{base}-{i}" for i in range(queues)]
    more: Dict[str, Any] = {"marker_wait": "shared"} if shared_wait else {}
    cfg = _reporting_worker(bench, names[0], "latency", 1, queues=names, **more)
    proc = bench.start_driver(impl.worker_cmd(), cfg, ready_timeout=120)
    feeder: Optional[subprocess.Popen] = None
    try:
        # settled: every queue's worker blocked on its marker, or the one shared wait (or 10 s)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            blocked = sum(1 for c in bench.client.client_list() if "b" in c.get("flags", ""))
            if blocked >= (1 if shared_wait else queues):
                break
            time.sleep(0.1)
        time.sleep(1.0)
        watch = ProcWatch(proc.pid)
        own_id = bench.client.client_id()
        conns = sum(1 for c in bench.client.client_list() if int(c["id"]) != own_id)
        cpu0, redis0 = watch.cpu_s(), _redis_cpu(bench)
        time.sleep(idle_s)
        cpu1, redis1 = watch.cpu_s(), _redis_cpu(bench)
        import psutil

        rss = psutil.Process(proc.pid).memory_info().rss / (1024.0 * 1024.0)
        target = names[len(names) // 2]
        fcfg = {"url": bench.url, "queue": target, "prefix": PREFIX, "mode": "feed", "n": probes,
                "interval_ms": 50}
        feeder = bench.start_driver(node_producer_cmd(), fcfg, stdin=True)
        assert feeder.stdin is not None
        feeder.stdin.write("GO\n")
        feeder.stdin.flush()
        bench.wait_finished(QueueKeys(target, PREFIX), probes, 120, proc)
        feeder.wait(60)
        rep = bench.stop_driver(proc, cfg["report"], timeout=120)
    finally:
        Bench.reap(proc)
        Bench.reap(feeder)
        os.unlink(cfg["report"])
    lat = sorted(float(x) for x in rep.get("latencies_ms", []))
    return {"impl": impl.key + (" shared wait" if shared_wait else ""), "queues": queues, "connections": conns,
            "idle_cpu_pct": (cpu1 - cpu0) * 100.0 / idle_s, "redis_idle_cpu_pct": (redis1 - redis0) * 100.0 / idle_s,
            "rss_mb": rss, "idle_s": idle_s, "probes": len(lat),
            "p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99)}


# -- many busy queues ------------------------------------------------------------------------
#: the ways ours runs the busy queues: each worker its own client (as before they shared
#: one), one client for all (the command's default), and one client with the shared wait
BUSY_VARIANTS = {"own clients": {"own_clients": True}, "shared client": {},
                 "shared client + wait": {"marker_wait": "shared"}}


def measure_busy(bench: Bench, filler: Filler, impl: Impl, queues: int, n: int, concurrency: int = 10,
                 variant: str = "") -> Dict[str, Any]:
    """Q queues in one worker process, each with N waiting no-op jobs, all resumed at once:
    jobs/s over all of them, worker and Redis CPU per job, and the process's connections
    while busy. ``variant`` (ours): a key of :data:`BUSY_VARIANTS`."""
    assert bench.client is not None
    bench.flush()
    base = bench.new_queue()
    names = [f"{base}-{i}" for i in range(queues)]
    keys = [QueueKeys(name, PREFIX) for name in names]
    for k in keys:
        bench.client.hset(k.meta, "paused", 1)
        filler.fill(k, "wait", n)
    cfg = _reporting_worker(bench, names[0], "noop", concurrency, queues=names, **BUSY_VARIANTS.get(variant, {}))
    proc = bench.start_driver(impl.worker_cmd(), cfg, ready_timeout=120)
    try:
        end = time.monotonic() + 15
        while time.monotonic() < end:  # settled: blocked on the markers (or the one shared wait)
            blocked = sum(1 for c in bench.client.client_list() if "b" in c.get("flags", ""))
            if blocked >= (1 if variant == "shared client + wait" else queues):
                break
            time.sleep(0.1)
        time.sleep(0.5)
        watch = ProcWatch(proc.pid)
        own_id = bench.client.client_id()
        cpu0, redis0 = watch.cpu_s(), _redis_cpu(bench)
        t0 = time.monotonic()
        for k in keys:
            bench.resume(k)
        conns = 0
        for k in keys:
            bench.wait_finished(k, n, 600, proc)
            if not conns:  # while the others still run
                conns = sum(1 for c in bench.client.client_list() if int(c["id"]) != own_id)
        elapsed = time.monotonic() - t0
        cpu1, redis1 = watch.cpu_s(), _redis_cpu(bench)
        bench.stop_driver(proc, cfg["report"], timeout=120)
    finally:
        Bench.reap(proc)
        os.unlink(cfg["report"])
    total = queues * n
    return {"impl": impl.key + (f" {variant}" if variant else ""), "queues": queues, "n": n,
            "concurrency": concurrency, "jobs_per_s": total / elapsed, "busy_connections": conns,
            "worker_cpu_us_per_job": (cpu1 - cpu0) * 1e6 / total, "redis_cpu_us_per_job": (redis1 - redis0) * 1e6 / total}


def _redis_cpu(bench: Bench) -> float:
    assert bench.client is not None
    cpu = bench.client.info("cpu")
    return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])


# -- prioritized -----------------------------------------------------------------------------
def out_of_order(order: List[int], window: int) -> Tuple[int, int]:
    """How far a start order is from the priority order, allowing for ``window`` jobs in
    flight: (starts of a job whose priority number is strictly lower than that of a job
    started more than ``window`` starts before it, the same with no window at all)."""
    late = strict = 0
    top = 0  # the highest priority number started more than ``window`` starts ago
    seen = 0  # the same, with no window
    for i, p in enumerate(order):
        if i > window:
            top = max(top, order[i - window - 1])
        if p < top:
            late += 1
        if p < seen:
            strict += 1
        seen = max(seen, p)
    return late, strict


def measure_prioritized(bench: Bench, filler: Filler, impl: Impl, n: int, priorities: int,
                        concurrency: int = 100) -> Dict[str, Any]:
    """N waiting no-op jobs spread over ``priorities`` priorities (in no id order), at
    ``concurrency``: jobs/s and CPU per job as the backlog, and the start order: the driver
    records each job's priority as it starts (mode ``order``)."""
    def fill(queue: str, keys: QueueKeys) -> None:
        assert bench.client is not None
        bench.client.hset(keys.meta, "paused", 1)
        filler.fill(keys, "prioritized", n, priorities=priorities)

    row = bench.run_worker(impl, n, concurrency, "order", fill=fill, timeout=1800)
    order = [int(p) for p in row.pop("order", [])]
    if row["completed"] != n or row["failed"] or len(order) != n:
        raise BenchError(f"{impl.key} prioritized {n}: {row['completed']} completed, {row['failed']} failed, "
                         f"{len(order)} starts recorded")
    row["out_of_order"], row["inversions"] = out_of_order(order, concurrency)
    row["priorities"] = priorities
    row["window"] = concurrency
    row["commands"] = dict(sorted(row["commands"].items(), key=lambda kv: -kv[1])[:12])
    return row


# -- payloads --------------------------------------------------------------------------------
def measure_payload(bench: Bench, filler: Filler, impl: Impl, n: int, pad: int,
                    concurrency: int = 100) -> Dict[str, Any]:
    """N waiting no-op jobs whose data carries ``pad`` bytes, at ``concurrency``: jobs/s and
    the worker's peak RSS."""
    def fill(queue: str, keys: QueueKeys) -> None:
        assert bench.client is not None
        bench.client.hset(keys.meta, "paused", 1)
        filler.fill(keys, "wait", n, pad=pad)

    row = bench.run_worker(impl, n, concurrency, "noop", fill=fill, timeout=1800)
    if row["completed"] != n or row["failed"]:
        raise BenchError(f"{impl.key} payload {pad} B × {n}: {row['completed']} completed, {row['failed']} failed")
    row["payload_b"] = pad
    row["commands"] = dict(sorted(row["commands"].items(), key=lambda kv: -kv[1])[:12])
    return row


# -- job schedulers --------------------------------------------------------------------------
def scheduler_specs(n: int, t0: int, window_ms: int, every: bool = True) -> List[List[Any]]:
    """``n`` job schedulers ([id, repeat options, template]) whose runs fall in the
    ``window_ms`` after ``t0`` (epoch ms, a whole second): half ``every`` (every window/2,
    first runs spread over the first half by ``startDate``, so each runs twice: its first run
    and the next one the worker creates), half cron pinned to a second and a minute of the
    local clock (``S M * * * *``), spread evenly over the window's seconds: each runs once in
    a window of up to an hour. With ``every`` off, all ``n`` are cron (the burst case)."""
    every_n = n // 2 if every else 0
    cron_n = n - every_n
    every_ms = max(window_ms // 2, 1000)
    specs: List[List[Any]] = []
    for i in range(every_n):
        specs.append([f"e{i}", {"every": every_ms, "startDate": t0 + (i * every_ms) // every_n},
                      {"name": "e", "data": {"k": "every"}}])
    for j in range(cron_n):
        at = time.localtime((t0 + (j * window_ms) // cron_n) // 1000)
        specs.append([f"c{j}", {"pattern": f"{at.tm_sec} {at.tm_min} * * * *"},
                      {"name": "c", "data": {"k": "cron"}}])
    return specs


def slot_split(runs: List[Tuple[str, float, float]], concurrency: int) -> Tuple[List[float], List[float]]:
    """The lateness of runs (``(kind, due ms, late ms)``) that found a free slot, and of those
    that waited for one: of the runs due at the same millisecond, the first ``concurrency``
    to start could start at once on an idle worker; the others had to wait for one of them to
    finish, however fast the scheduler."""
    by_due: Dict[float, List[float]] = {}
    for _, due, late in runs:
        by_due.setdefault(due, []).append(late)
    slot: List[float] = []
    waited: List[float] = []
    for lates in by_due.values():
        lates.sort()
        slot.extend(lates[:concurrency])
        waited.extend(lates[concurrency:])
    return sorted(slot), sorted(waited)


def measure_schedulers(bench: Bench, impl: Impl, n: int, window_s: float,
                       concurrency: int = 100, case: str = "spread") -> Dict[str, Any]:
    """An idle worker at ``concurrency``, then ``n`` job schedulers upserted with ``impl``'s
    own API (``scale_admin_*``, op ``schedulers``), whose runs fall in a window that starts
    once the upserts are surely over: lateness of each run's start against its scheduled
    time (the ``millis`` of its id), per kind, and the worker's and Redis's CPU over the
    window. The worker starts first, so the first runs do not meet a worker that is still
    starting (its imports, its first collections, its scripts' loading). ``case``:
    ``spread`` (:func:`scheduler_specs`, half every, half cron) or ``burst`` (all cron,
    the runs of each second due in the same millisecond)."""
    import psutil

    assert bench.client is not None
    bench.flush()
    queue = bench.new_queue()
    keys = QueueKeys(queue, PREFIX)
    window_ms = int(window_s * 1000)
    cfg = _reporting_worker(bench, queue, "sched", concurrency)
    proc = bench.start_driver(impl.worker_cmd(), cfg)
    try:
        bench.wait_blocked_client(15, proc)
        ready_ms = time.time() * 1000.0
        admin = bench.start_driver(_admin_cmd(impl), {"url": bench.url, "queue": queue, "prefix": PREFIX},
                                   stdin=True)
        try:
            assert admin.stdin is not None
            # the upserts (under 1 ms each) end before the first run, due at a whole second
            t0 = (int(time.time() * 1000) + 1500 + n) // 1000 * 1000 + 1000
            specs = scheduler_specs(n, t0, window_ms, every=case != "burst")
            admin.stdin.write(json.dumps({"op": "schedulers", "specs": specs}) + "\n")
            admin.stdin.flush()
            upsert_ms = float(json.loads(bench.read_line(admin, 600))["ms"])
        finally:
            Bench.reap(admin)
        made = bench.client.zcard(keys.repeat)
        watch = ProcWatch(proc.pid)
        cpu0, redis0, w0 = watch.cpu_s(), _redis_cpu(bench), time.monotonic()
        end = t0 + window_ms + 1500
        while time.time() * 1000.0 < end:
            if proc.poll() is not None:
                raise BenchError(f"worker exited with {proc.returncode}: {bench.stderr_tail(proc)}")
            time.sleep(0.2)
        cpu1, redis1, w1 = watch.cpu_s(), _redis_cpu(bench), time.monotonic()
        rss = psutil.Process(proc.pid).memory_info().rss / (1024.0 * 1024.0)
        rep = bench.stop_driver(proc, cfg["report"])
    finally:
        Bench.reap(proc)
        os.unlink(cfg["report"])
    runs = [(tag[0], float(tag[1]), float(late)) for tag, late in zip(rep.get("tags", []), rep.get("latencies_ms", []))]
    # a run due before the worker was ready (none is expected: it starts before the upserts)
    # would have waited for it to start, which is not the scheduler's doing
    early = sum(1 for _, due, _ in runs if due < ready_ms)
    timed = [(k, late) for k, due, late in runs if due >= ready_ms]
    row: Dict[str, Any] = {"impl": impl.key, "case": case, "n": n, "schedulers_made": made,
                           "upsert_s": upsert_ms / 1000.0,
                           "window_s": window_s, "runs": len(runs), "runs_before_ready": early,
                           "worker_cpu_pct": (cpu1 - cpu0) * 100.0 / (w1 - w0),
                           "redis_cpu_pct": (redis1 - redis0) * 100.0 / (w1 - w0),
                           "worker_cpu_us_per_run": (cpu1 - cpu0) * 1e6 / max(len(runs), 1), "rss_mb": rss}
    slot, waited = slot_split([r for r in runs if r[1] >= ready_ms], concurrency)
    for name, late in (("slot", slot), ("waited", waited)):
        row[f"{name}_runs"] = len(late)
        row[f"{name}_p99_ms"] = percentile(late, 99) if late else float("nan")
    for kind in ("all", "every", "cron"):
        late = sorted(x for k, x in timed if kind in ("all", k))
        row[f"{kind}_runs"] = len(late)
        row[f"{kind}_p50_ms"] = percentile(late, 50)
        row[f"{kind}_p99_ms"] = percentile(late, 99)
        row[f"{kind}_max_ms"] = late[-1] if late else float("nan")
    return row


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
        admin = bench.start_driver(_admin_cmd(impl), {"url": bench.url, "queue": queue, "prefix": PREFIX}, stdin=True)
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


def median_rounds(rows: List[Dict[str, Any]], key: Callable[[Dict[str, Any]], Any]) -> List[Dict[str, Any]]:
    """One row per ``key`` out of several rounds of a throughput case: the row of the round
    with the median jobs/s (the lower of the two middle ones for an even count), with every
    round's jobs/s in run order under ``rounds_jobs_per_s``. Keeps the order in which the
    keys first appear."""
    groups: Dict[Any, List[Dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(key(row), []).append(row)
    out: List[Dict[str, Any]] = []
    for group in groups.values():
        ranked = sorted(group, key=lambda r: r["jobs_per_s"])
        row = dict(ranked[(len(ranked) - 1) // 2])
        row["rounds_jobs_per_s"] = [r["jobs_per_s"] for r in group]
        out.append(row)
    return out


# -- the whole section -----------------------------------------------------------------------
def run_scale(bench: Bench, impls: List[Impl], size: Dict[str, Any], log: Callable[[str], None],
              failures: List[str], groups: Optional[List[str]] = None,
              timings: Optional[Dict[str, float]] = None) -> Dict[str, Any]:
    """Every case of the section for every implementation (ours and node only); returns
    ``{"backlog": [...], "admin": [...], "delayed": [...], "idle": [...]}`` with the
    1-minute load average before each row (``load1``). A case that fails is named in
    ``failures`` and left out."""
    impls = [i for i in impls if i.key in ("ours", "node")]
    filler = Filler(bench)
    out: Dict[str, List[Dict[str, Any]]] = {"backlog": [], "admin": [], "delayed": [], "idle": [],
                                            "prioritized": [], "schedulers": [], "payloads": [], "dashboard": [],
                                            "busy": []}
    groups = groups or list(out)
    unknown = sorted(set(groups) - set(out))
    if unknown:
        raise BenchError(f"unknown scale case {', '.join(unknown)}: pick from {', '.join(out)}")

    spent: Dict[str, float] = {} if timings is None else timings  # seconds per case, for the run's total

    def attempt(group: str, label: str, fn: Callable[[], Any],
                say: Optional[Callable[[Dict[str, Any]], str]] = None) -> None:
        """Run one case into ``out[group]``; ``say`` words the log line of each row."""
        load = round(os.getloadavg()[0], 2)
        t0 = time.monotonic()
        try:
            res = fn()
        except Exception as exc:  # one failed case must not lose the others
            failures.append(f"scale {group} {label}: {exc}")
            log(f"bench: FAILED scale {group} {label}: {exc}")
            return
        finally:
            spent[group] = round(spent.get(group, 0.0) + time.monotonic() - t0, 1)
        for row in res if isinstance(res, list) else [res]:
            row["load1"] = load
            out[group].append(row)
            if say is not None:
                log("  " + say(row))

    rounds = size.get("rounds", 1)
    if "backlog" in groups:
        for n in size["backlogs"]:
            # the short backlogs (seconds) in alternated rounds, the median round of each side
            # counting; a 1e6 backlog runs for most of a minute, one round
            for rnd in range(rounds if n <= SHORT_BACKLOG else 1):
                for impl in impls:
                    attempt("backlog", f"{n} {impl.key} round {rnd + 1}",
                            lambda impl=impl, n=n: measure_backlog(bench, filler, impl, n),
                            lambda r: f"backlog {r['n']:>8} {r['impl']:<5} {r['jobs_per_s']:9,.0f} jobs/s, worker "
                                      f"{r['worker_cpu_us_per_job']:.0f} µs/job, Redis "
                                      f"{r['redis_cpu_us_per_job']:.0f} µs/job, {r['memory_per_waiting_job_b']:.0f} "
                                      "B/job")
        out["backlog"] = median_rounds(out["backlog"], lambda r: (r["impl"], r["n"]))
    if "admin" in groups:
        for impl in impls:
            attempt("admin", impl.key, lambda impl=impl: measure_admin(bench, filler, impl, size["admin_n"]))
    if "delayed" in groups:
        for impl in impls:
            attempt("delayed", impl.key,
                    lambda impl=impl: measure_delayed(bench, filler, impl, size["delayed_n"], size["delayed_span_s"]),
                    lambda r: f"delayed {r['impl']:<5} late p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, "
                              f"max {r['max_ms']:.1f} ms")
    if "idle" in groups:
        for impl in impls:
            attempt("idle", impl.key,
                    lambda impl=impl: measure_idle(bench, impl, size["queues"], size["idle_s"], size["probes"]),
                    lambda r: f"idle {r['queues']} queues {r['impl']:<5} {r['connections']} connections, "
                              f"{r['idle_cpu_pct']:.2f} % CPU, RSS {r['rss_mb']:.0f} MB, pick-up p99 "
                              f"{r['p99_ms']:.1f} ms")
            if impl.key == "ours":  # and with marker_wait: shared, beside it
                attempt("idle", "ours shared wait",
                        lambda impl=impl: measure_idle(bench, impl, size["queues"], size["idle_s"], size["probes"],
                                                       shared_wait=True),
                        lambda r: f"idle {r['queues']} queues {r['impl']} {r['connections']} connections, "
                                  f"{r['idle_cpu_pct']:.2f} % CPU, RSS {r['rss_mb']:.0f} MB, pick-up p99 "
                                  f"{r['p99_ms']:.1f} ms")
    if "busy" in groups:
        for impl in impls:
            for variant in (BUSY_VARIANTS if impl.key == "ours" else [""]):
                attempt("busy", f"{impl.key} {variant}".strip(),
                        lambda impl=impl, variant=variant: measure_busy(
                            bench, filler, impl, size["busy_queues"], size["busy_n"], variant=variant),
                        lambda r: f"busy {r['queues']} queues × {r['n']:,} {r['impl']:<26} {r['jobs_per_s']:9,.0f} "
                                  f"jobs/s, worker {r['worker_cpu_us_per_job']:.0f} µs/job, Redis "
                                  f"{r['redis_cpu_us_per_job']:.0f} µs/job, {r['busy_connections']} connections")
    if "prioritized" in groups:
        for rnd in range(rounds):  # alternated rounds: the median round of each counts
            for impl in impls:
                attempt("prioritized", f"{impl.key} round {rnd + 1}", lambda impl=impl: measure_prioritized(
                    bench, filler, impl, size["prioritized_n"], size["priorities"]),
                    lambda r: f"prioritized {r['n']} over {r['priorities']} {r['impl']:<5} {r['jobs_per_s']:9,.0f} "
                              f"jobs/s, {r['out_of_order']} out of order beyond {r['window']} in flight "
                              f"({r['inversions']} at all)")
        out["prioritized"] = median_rounds(out["prioritized"], lambda r: r["impl"])
    if "schedulers" in groups:
        for impl in impls:
            attempt("schedulers", impl.key, lambda impl=impl: measure_schedulers(
                bench, impl, size["schedulers_n"], size["schedulers_window_s"]),
                lambda r: f"schedulers {r['n']} {r['impl']:<5} {r['all_runs']} runs, late p50 "
                          f"{r['all_p50_ms']:.1f} ms, p99 {r['all_p99_ms']:.1f} ms (every {r['every_p99_ms']:.1f}, "
                          f"cron {r['cron_p99_ms']:.1f}), worker {r['worker_cpu_pct']:.1f} % CPU")
        for impl in impls:
            attempt("schedulers", f"burst {impl.key}", lambda impl=impl: measure_schedulers(
                bench, impl, size["burst_n"], size["burst_window_s"], case="burst"),
                lambda r: f"schedulers burst {r['n']} {r['impl']:<5} {r['all_runs']} runs, late p50 "
                          f"{r['all_p50_ms']:.1f} ms, p99 {r['all_p99_ms']:.1f} ms (found a free slot "
                          f"{r['slot_p99_ms']:.1f}, waited for one {r['waited_p99_ms']:.1f})")
    if "payloads" in groups:
        for rnd in range(rounds):
            for n, pad in size["payloads"]:
                for impl in impls:
                    attempt("payloads", f"{pad} B {impl.key} round {rnd + 1}",
                            lambda impl=impl, n=n, pad=pad: measure_payload(bench, filler, impl, n, pad),
                            lambda r, n=n, pad=pad: f"payload {pad // 1024:>5} KB × {n} {r['impl']:<5} "
                                                    f"{r['jobs_per_s']:9,.0f} jobs/s, peak RSS "
                                                    f"{r['peak_rss_mb']:.0f} MB")
        out["payloads"] = median_rounds(out["payloads"], lambda r: (r["impl"], r["n"], r["payload_b"]))
    if "dashboard" in groups:
        attempt("dashboard", "pages", lambda: measure_dashboard(
            bench, filler, impls, size["dashboard_n"], size["dashboard_gets"], log))
    return out


_ROUNDS_NOTE = ("The implementations take turns, round by round; each row is the round with the median "
                "jobs/s, and the last column gives every round's.")


def _rounds(row: Dict[str, Any]) -> str:
    return ", ".join(_f(x) for x in row.get("rounds_jobs_per_s") or [row["jobs_per_s"]])


def _f(v: Any, nd: int = 0) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "–"
    return f"{v:,.{nd}f}"


def markdown(res: Dict[str, Any], meta: Dict[str, Any]) -> str:
    """``scale.md``: one table per case, ours beside Node."""
    lines = [
        "# Scale: how the cost grows (ours and BullMQ Node 6.7.0, same run)", "",
        f"{meta['date']} · commit {meta['commit']} · {meta['machine']} · {meta['cpu']} · "
        f"Redis {meta['redis']} · Python {meta['python']} · Node {meta['node']} · "
        f"load average (1 min) {meta.get('load1_min', '?')}–{meta.get('load1_max', '?')}"
        + (" · **quick run (tiny sizes)**" if meta.get("quick") else ""),
        "", "One round per row, except where a case says it ran rounds. How to run it and what each case "
        "does: `docs/performance.md`, `bench/scale.py`.", "",
    ]
    if res["backlog"]:
        node = {r["n"]: r for r in res["backlog"] if r["impl"] == "node"}
        lines += ["## Backlog: N waiting no-op jobs, concurrency 100", "",
                  f"Backlogs of up to {SHORT_BACKLOG:,} jobs last seconds, so they run in rounds. " + _ROUNDS_NOTE,
                  "",
                  "| waiting jobs | impl | jobs/s | × Node | worker CPU µs/job | Redis CPU µs/job | "
                  "Redis cmds/job | Redis memory B/waiting job | load | jobs/s of each round |", "|" + "---|" * 10]
        for r in res["backlog"]:
            ratio = r["jobs_per_s"] / node[r["n"]]["jobs_per_s"] if r["impl"] == "ours" and r["n"] in node else None
            lines.append(f"| {r['n']:,} | {r['impl']} | {_f(r['jobs_per_s'])} | {_f(ratio, 2)} | "
                         f"{_f(r['worker_cpu_us_per_job'])} | {_f(r['redis_cpu_us_per_job'])} | "
                         f"{_f(r['redis_cmds_per_job'], 1)} | {_f(r['memory_per_waiting_job_b'])} | {r['load1']} | "
                         f"{_rounds(r)} |")
        lines.append("")
    if res["admin"]:
        n = res["admin"][0]["n"]
        lines += [f"## Admin calls on {n:,} jobs", "",
                  f"Longest command: the slowest Redis command during the call (`SLOWLOG`, all of 1 ms "
                  f"or more); the target is {LONGEST_TARGET_MS:g} ms.", "",
                  "| call | impl | time ms | script calls | longest command ms | commands over 50 ms | "
                  "the longest command |", "|" + "---|" * 7]
        for r in res["admin"]:
            lines.append(f"| {r['op']} | {r['impl']} | {_f(r['ms'], 1)} | {r['script_calls']} | "
                         f"{_f(r['longest_ms'], 1)} | {r['over_target']} | `{r['longest_cmd'][:60]}` |")
        lines.append("")
    if res["delayed"]:
        r0 = res["delayed"][0]
        lines += [f"## {r0['n']:,} delayed jobs due over {r0['span_s']:g} s, concurrency 100", "",
                  "Lateness: the processor's start minus the due time in the job.", "",
                  "| impl | jobs | p50 ms | p99 ms | max ms | load |", "|" + "---|" * 6]
        for r in res["delayed"]:
            lines.append(f"| {r['impl']} | {r['samples']:,} | {_f(r['p50_ms'], 1)} | {_f(r['p99_ms'], 1)} | "
                         f"{_f(r['max_ms'], 1)} | {r['load1']} |")
        lines.append("")
    if res["idle"]:
        r0 = res["idle"][0]
        lines += [f"## {r0['queues']} idle queues in one worker process (concurrency 1 each)", "",
                  f"CPU over {r0['idle_s']:g} s with nothing to do; pick-up: a job added every 50 ms to one "
                  "queue, enqueue to processor start.", "",
                  "| impl | connections | worker CPU % of a core | Redis CPU % | RSS MB | pick-up p50 ms | "
                  "pick-up p99 ms | load |", "|" + "---|" * 8]
        for r in res["idle"]:
            lines.append(f"| {r['impl']} | {r['connections']} | {_f(r['idle_cpu_pct'], 2)} | "
                         f"{_f(r['redis_idle_cpu_pct'], 2)} | {_f(r['rss_mb'])} | {_f(r['p50_ms'], 2)} | "
                         f"{_f(r['p99_ms'], 2)} | {r['load1']} |")
        lines.append("")
    if res.get("busy"):
        r0 = res["busy"][0]
        lines += [f"## {r0['queues']} busy queues in one worker process (concurrency {r0['concurrency']} each)", "",
                  f"{r0['n']:,} waiting no-op jobs a queue, every queue resumed at once; connections counted while "
                  "the queues run. Ours three ways: each worker its own client, one client for all (the "
                  "command's default), and one client with `marker_wait: shared`.", "",
                  "| impl | jobs/s | worker µs/job | Redis µs/job | connections | load |", "|" + "---|" * 6]
        for r in res["busy"]:
            lines.append(f"| {r['impl']} | {r['jobs_per_s']:,.0f} | {_f(r['worker_cpu_us_per_job'])} | "
                         f"{_f(r['redis_cpu_us_per_job'])} | {r['busy_connections']} | {r['load1']} |")
        lines.append("")
    lines += _markdown_more(res)
    if meta.get("case_seconds"):
        spent = meta["case_seconds"]
        lines += ["Time per case (s): " + ", ".join(f"{k} {v:,.0f}" for k, v in spent.items())
                  + f"; {sum(spent.values()):,.0f} in all.", ""]
    if meta.get("failures"):
        lines += ["Failed: " + "; ".join(meta["failures"]), ""]
    return "\n".join(lines)


def _ratio(rows: List[Dict[str, Any]], r: Dict[str, Any], key: Callable[[Dict[str, Any]], Any]) -> Optional[float]:
    """Ours against Node's row of the same ``key`` (jobs/s), or None."""
    if r["impl"] != "ours":
        return None
    node = [x for x in rows if x["impl"] == "node" and key(x) == key(r)]
    return r["jobs_per_s"] / node[0]["jobs_per_s"] if node else None


def _markdown_more(res: Dict[str, Any]) -> List[str]:
    """The tables of the prioritized, schedulers, payloads and dashboard cases."""
    lines: List[str] = []
    if res.get("prioritized"):
        r0 = res["prioritized"][0]
        lines += [f"## {r0['n']:,} prioritized jobs over {r0['priorities']:,} priorities, concurrency 100", "",
                  "Out of order: starts of a job whose priority number is lower than that of a job started "
                  f"more than {r0['window']} starts (the jobs in flight) before it; inversions: the same with "
                  "no allowance. " + _ROUNDS_NOTE, "",
                  "| impl | jobs/s | × Node | worker CPU µs/job | Redis CPU µs/job | Redis cmds/job | "
                  "out of order | inversions | load | jobs/s of each round |", "|" + "---|" * 10]
        for r in res["prioritized"]:
            lines.append(f"| {r['impl']} | {_f(r['jobs_per_s'])} | "
                         f"{_f(_ratio(res['prioritized'], r, lambda x: x['n']), 2)} | "
                         f"{_f(r['worker_cpu_us_per_job'])} | {_f(r['redis_cpu_us_per_job'])} | "
                         f"{_f(r['redis_cmds_per_job'], 1)} | {r['out_of_order']} | {r['inversions']} | {r['load1']} | "
                         f"{_rounds(r)} |")
        lines.append("")
    spread = [r for r in res.get("schedulers", []) if r.get("case", "spread") == "spread"]
    bursts = [r for r in res.get("schedulers", []) if r.get("case") == "burst"]
    if spread or bursts:
        r0 = (spread or bursts)[0]
        lines += ["## Job schedulers, concurrency 100", ""]
        if spread:
            lines += [f"**Spread** ({spread[0]['n']:,} schedulers): an idle worker, then the schedulers "
                      f"upserted with each implementation's API, half `every`, half cron; runs over "
                      f"{spread[0]['window_s']:g} s. Every `every` scheduler runs twice (the second run is the "
                      "one the worker creates), every cron one once (`S M * * * *`, spread evenly over the "
                      "window's seconds: the runs of one second fall due in the same millisecond, fewer than "
                      "the concurrency).", ""]
        if bursts:
            lines += [f"**Burst** ({bursts[0]['n']:,} cron schedulers over {bursts[0]['window_s']:g} s): more runs "
                      "due in the same millisecond each second than the concurrency; of those, the first 100 to "
                      "start found a free slot, the others waited for one of them to finish (\"slot p99\" and "
                      "\"waited\").", ""]
        lines += ["Lateness: the processor's start minus the run's scheduled time (its id). CPU: the worker's "
                  "and Redis's over the window.", "",
                  "| case | impl | schedulers | upsert s | runs | late p50 ms | p99 ms | max ms | every p99 ms | "
                  "cron p99 ms | slot p99 ms | waited: runs, p99 ms | "
                  "worker CPU % | worker µs/run | Redis CPU % | RSS MB | load |", "|" + "---|" * 17]
        for r in spread + bursts:
            lines.append(f"| {r.get('case', 'spread')} | {r['impl']} | {r['n']:,} | {_f(r['upsert_s'], 1)} | "
                         f"{r['all_runs']:,} | {_f(r['all_p50_ms'], 1)} | "
                         f"{_f(r['all_p99_ms'], 1)} | {_f(r['all_max_ms'], 1)} | {_f(r['every_p99_ms'], 1)} | "
                         f"{_f(r['cron_p99_ms'], 1)} | {_f(r.get('slot_p99_ms'), 1)} | "
                         f"{r.get('waited_runs', 0):,}, {_f(r.get('waited_p99_ms'), 1)} | {_f(r['worker_cpu_pct'], 1)} | "
                         f"{_f(r['worker_cpu_us_per_run'])} | {_f(r['redis_cpu_pct'], 1)} | {_f(r['rss_mb'])} | "
                         f"{r['load1']} |")
        lines.append("")
    if res.get("payloads"):
        lines += ["## Large payloads: N waiting no-op jobs, concurrency 100", "", _ROUNDS_NOTE, "",
                  "| payload | jobs | impl | jobs/s | × Node | MB/s | worker CPU µs/job | Redis CPU µs/job | "
                  "worker peak RSS MB | load | jobs/s of each round |", "|" + "---|" * 11]
        for r in res["payloads"]:
            ratio = _ratio(res["payloads"], r, lambda x: (x["n"], x["payload_b"]))
            lines.append(f"| {r['payload_b'] // 1024:,} KB | {r['n']:,} | {r['impl']} | {_f(r['jobs_per_s'])} | "
                         f"{_f(ratio, 2)} | {_f(r['jobs_per_s'] * r['payload_b'] / 1048576.0)} | "
                         f"{_f(r['worker_cpu_us_per_job'])} | {_f(r['redis_cpu_us_per_job'])} | "
                         f"{_f(r['peak_rss_mb'])} | {r['load1']} | {_rounds(r)} |")
        lines.append("")
    if res.get("dashboard"):
        r0 = res["dashboard"][0]
        lines += [f"## Dashboard on a queue of {r0['n']:,} waiting jobs", "",
                  "Ours: real HTTP GETs to the dashboard served by gevent's WSGI server in its own process "
                  "(queues found by discovery, as `echomq-gevent dashboard` does): only the queues page "
                  "needs the list, it waits for the first discovery at most 0.2 s (then says it is looking and "
                  "reloads itself), a stale list (here after 2 s, "
                  "10 s by default) is served while a discovery refreshes it behind. Client calls: what a bull-board-like job list "
                  "reads with each implementation's queue API. Target: a page in under 300 ms.", "",
                  "| what | impl | times | p50 ms | max ms | load |", "|" + "---|" * 6]
        for r in res["dashboard"]:
            lines.append(f"| {r['what']} | {r['impl']} | {r['gets']} | {_f(r['p50_ms'], 1)} | "
                         f"{_f(r['max_ms'], 1)} | {r['load1']} |")
        lines.append("")
    missing = [k for k in ("prioritized", "schedulers", "payloads", "dashboard") if not res.get(k)]
    if missing:
        lines += ["Not in this run: " + ", ".join(missing) + ".", ""]
    return lines


def history_row(res: Dict[str, Any], meta: Dict[str, Any]) -> str:
    """Rows for ``history.md``'s ratio table, one per case present: the largest backlog's
    ratio to Node with the longest admin command of ours; the prioritized and payload
    throughput ratios; the schedulers' lateness p99 (× Node: Node's over ours); the
    dashboard's slowest page (no ratio: Node has no dashboard)."""
    machine = f"{meta['machine']}, {meta['cpu']}"
    head = (f"| {meta['date']} | {meta['commit']} | {machine} | {meta['redis']} | 1 | "
            f"{meta.get('load1_min', '?')}–{meta.get('load1_max', '?')} | ")
    rows: List[str] = []

    def add(what: str, ratio: Optional[float]) -> None:
        rows.append(f"{head}{what} | {_f(ratio, 2) if ratio else '–'} |\n")

    if res.get("backlog"):
        big = max(r["n"] for r in res["backlog"])
        by = {r["impl"]: r for r in res["backlog"] if r["n"] == big}
        ratio = (by["ours"]["jobs_per_s"] / by["node"]["jobs_per_s"]) if "ours" in by and "node" in by else None
        longest = max((r["longest_ms"] for r in res["admin"] if r["impl"] == "ours"), default=None)
        add(f"scale: backlog {big:,} jobs/s" + (f" ({by['ours']['jobs_per_s']:,.0f} against "
                                                f"{by['node']['jobs_per_s']:,.0f})" if ratio else "")
            + (f"; longest admin command of ours {longest:.1f} ms" if longest is not None else ""), ratio)
    by = {r["impl"]: r for r in res.get("prioritized", [])}
    if "ours" in by and "node" in by:
        o, nd = by["ours"], by["node"]
        add(f"scale: {o['n']:,} prioritized jobs over {o['priorities']:,} priorities, jobs/s "
            f"({o['jobs_per_s']:,.0f} against {nd['jobs_per_s']:,.0f}; out of order beyond the "
            f"{o['window']} in flight {o['out_of_order']} against {nd['out_of_order']})",
            o["jobs_per_s"] / nd["jobs_per_s"])
    by = {r["impl"]: r for r in res.get("schedulers", []) if r.get("case", "spread") == "spread"}
    burst = {r["impl"]: r for r in res.get("schedulers", []) if r.get("case") == "burst"}
    if "ours" in by and "node" in by:
        o, nd = by["ours"], by["node"]
        waited = ""
        if "ours" in burst and "node" in burst:
            waited = (f"; a burst beyond the concurrency, the runs that waited for a slot "
                      f"{burst['ours']['waited_p99_ms']:.1f} against {burst['node']['waited_p99_ms']:.1f}")
        add(f"scale: {o['n']:,} job schedulers, run lateness p99 ms, Node's ÷ ours ({o['all_p99_ms']:.1f} against "
            f"{nd['all_p99_ms']:.1f}; every {o['every_p99_ms']:.1f} against {nd['every_p99_ms']:.1f}, cron "
            f"{o['cron_p99_ms']:.1f} against {nd['cron_p99_ms']:.1f}{waited}; "
            f"worker CPU {o['worker_cpu_pct']:.1f} "
            f"against {nd['worker_cpu_pct']:.1f} %)", nd["all_p99_ms"] / max(o["all_p99_ms"], 1e-9))
    for r in res.get("payloads", []):
        if r["impl"] != "ours":
            continue
        nd = next((x for x in res["payloads"] if x["impl"] == "node" and x["n"] == r["n"]
                   and x["payload_b"] == r["payload_b"]), None)
        if nd is not None:
            add(f"scale: {r['payload_b'] // 1024:,} KB payloads × {r['n']:,} jobs/s ({r['jobs_per_s']:,.0f} against "
                f"{nd['jobs_per_s']:,.0f}; worker peak RSS {r['peak_rss_mb']:.0f} against {nd['peak_rss_mb']:.0f} MB)",
                r["jobs_per_s"] / nd["jobs_per_s"])
    pages = [r for r in res.get("dashboard", []) if r["impl"] == "ours" and r["path"]]
    if pages:
        first = [r for r in pages if r.get("discovery")]
        rest = [r for r in pages if not r.get("discovery")]
        add(f"scale: dashboard on {pages[0]['n']:,} jobs, page max {max(r['max_ms'] for r in rest):.0f} ms"
            + (f" (the first discovery of the queues {first[0]['max_ms']:,.0f} ms)" if first else ""), None)
    return "".join(rows)

"""The lateness cases of the scale section: how late a job due at a time starts on an idle
worker at concurrency 100: N **delayed** jobs due over a span, and the runs of N **job
schedulers** (spread, then a burst beyond the concurrency)."""
from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, List, Tuple

from ..harness import PREFIX, Bench, BenchError, ProcWatch, percentile
from ..impls import Impl
from .tools import Filler, admin_cmd, redis_cpu, reporting_worker
from echomq_gevent.protocol.keys import QueueKeys


# -- delayed ---------------------------------------------------------------------------------
def measure_delayed(bench: Bench, filler: Filler, impl: Impl, n: int, span_s: float,
                    concurrency: int = 100) -> Dict[str, Any]:
    bench.flush()
    queue = bench.new_queue()
    keys = QueueKeys(queue, PREFIX)
    cfg = reporting_worker(bench, queue, "latency", concurrency)
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
    cfg = reporting_worker(bench, queue, "sched", concurrency)
    proc = bench.start_driver(impl.worker_cmd(), cfg)
    try:
        bench.wait_blocked_client(15, proc)
        ready_ms = time.time() * 1000.0
        admin = bench.start_driver(admin_cmd(impl), {"url": bench.url, "queue": queue, "prefix": PREFIX},
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
        cpu0, redis0, w0 = watch.cpu_s(), redis_cpu(bench), time.monotonic()
        end = t0 + window_ms + 1500
        while time.time() * 1000.0 < end:
            if proc.poll() is not None:
                raise BenchError(f"worker exited with {proc.returncode}: {bench.stderr_tail(proc)}")
            time.sleep(0.2)
        cpu1, redis1, w1 = watch.cpu_s(), redis_cpu(bench), time.monotonic()
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

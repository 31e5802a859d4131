"""The many-queues cases of the scale section: one worker process on Q queues, **idle**
(connections, CPU, RSS, pick-up latency) and **busy** (jobs/s and CPU per job over all of
them, connections while busy), ours with its ways of sharing clients and the marker wait."""
from __future__ import annotations

import os
import subprocess
import time
from typing import Any, Dict, Optional

from ..harness import PREFIX, Bench, ProcWatch, percentile
from ..impls import Impl, node_producer_cmd
from .tools import Filler, redis_cpu, reporting_worker
from echomq_gevent.protocol.keys import QueueKeys


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
    cfg = reporting_worker(bench, names[0], "latency", 1, queues=names, **more)
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
        cpu0, redis0 = watch.cpu_s(), redis_cpu(bench)
        time.sleep(idle_s)
        cpu1, redis1 = watch.cpu_s(), redis_cpu(bench)
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
    cfg = reporting_worker(bench, names[0], "noop", concurrency, queues=names, **BUSY_VARIANTS.get(variant, {}))
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
        cpu0, redis0 = watch.cpu_s(), redis_cpu(bench)
        t0 = time.monotonic()
        for k in keys:
            bench.resume(k)
        conns = 0
        for k in keys:
            bench.wait_finished(k, n, 600, proc)
            if not conns:  # while the others still run
                conns = sum(1 for c in bench.client.client_list() if int(c["id"]) != own_id)
        elapsed = time.monotonic() - t0
        cpu1, redis1 = watch.cpu_s(), redis_cpu(bench)
        bench.stop_driver(proc, cfg["report"], timeout=120)
    finally:
        Bench.reap(proc)
        os.unlink(cfg["report"])
    total = queues * n
    return {"impl": impl.key + (f" {variant}" if variant else ""), "queues": queues, "n": n,
            "concurrency": concurrency, "jobs_per_s": total / elapsed, "busy_connections": conns,
            "worker_cpu_us_per_job": (cpu1 - cpu0) * 1e6 / total, "redis_cpu_us_per_job": (redis1 - redis0) * 1e6 / total}

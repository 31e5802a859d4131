"""The soak: a worker process runs ``ECHOMQ_SOAK_JOBS`` no-op jobs (``make soak``: 1,000,000)
fed by a producer that keeps a bounded backlog; its RSS and throughput are sampled every
second. Every job ends (completed, none failed, nothing left in wait or active) and RSS stays
flat. Writes ``soak.json`` and ``soak.png`` (RSS and jobs/s over time) to
``ECHOMQ_SOAK_OUT`` (default ``bench/results``)."""
from __future__ import annotations

import json
import os
import platform
import threading
import time
from typing import Any, Dict, List

import pytest
import redis

from echomq_gevent import Queue
from echomq_gevent.protocol.keys import QueueKeys

from redis_server import RedisServer

pytestmark = pytest.mark.soak

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BACKLOG = 20000   # the producer keeps at most this many jobs waiting
BATCH = 1000


def _machine() -> Dict[str, Any]:
    import psutil

    info = {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            models = [line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")]
        info["cpu"] = models[0] if models else "?"
    except OSError:
        info["cpu"] = "?"
    info["load_before"] = list(os.getloadavg())
    info["memory_gb"] = round(psutil.virtual_memory().total / 2 ** 30, 1)
    return info


def _plot(samples: List[Dict[str, float]], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s["t"] for s in samples]
    fig, (ax1, ax2) = plt.subplots(2, 1, sharex=True, figsize=(8, 5))
    ax1.plot(t, [s["rss_mb"] for s in samples], color="tab:blue")
    ax1.set_ylabel("worker RSS (MB)")
    ax1.set_ylim(bottom=0)
    ax2.plot(t, [s["jobs_per_s"] for s in samples], color="tab:green")
    ax2.set_ylabel("jobs/s")
    ax2.set_xlabel("seconds")
    ax2.set_ylim(bottom=0)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def test_soak(tmp_path, workers, prefix, qname):
    import psutil

    total = int(os.environ.get("ECHOMQ_SOAK_JOBS", "0"))
    if total <= 0:
        pytest.skip("set ECHOMQ_SOAK_JOBS (make soak)")
    out_dir = os.environ.get("ECHOMQ_SOAK_OUT", os.path.join(REPO, "bench", "results"))
    os.makedirs(out_dir, exist_ok=True)
    machine = _machine()
    server = RedisServer().start()
    r = redis.Redis.from_url(server.url, decode_responses=True)
    keys = QueueKeys(qname, prefix)
    machine["redis"] = r.info("server")["redis_version"]
    concurrency = int(os.environ.get("ECHOMQ_SOAK_CONCURRENCY", "100"))
    stop = threading.Event()
    added = [0]

    def produce() -> None:
        q = Queue(qname, connection=server.url, prefix=prefix)
        try:
            while added[0] < total and not stop.is_set():
                if r.llen(keys.wait) > BACKLOG:
                    time.sleep(0.05)
                    continue
                n = min(BATCH, total - added[0])
                q.add_bulk([{"name": "noop", "data": {}, "opts": {"removeOnComplete": True}} for _ in range(n)])
                added[0] += n
        finally:
            q.close()

    producer = threading.Thread(target=produce, name="soak-producer", daemon=True)
    child = workers.start(server.url, None, {"record": False, "stats_every": 1.0}, concurrency=concurrency)
    latest = {"completed": 0, "failed": 0}

    def read_stats() -> None:
        for line in child.stdout:
            parts = line.split()
            if parts and parts[0] == "STAT":
                latest["completed"], latest["failed"] = int(parts[1]), int(parts[2])

    threading.Thread(target=read_stats, name="soak-stats", daemon=True).start()
    proc = psutil.Process(child.pid)
    samples: List[Dict[str, float]] = []
    t0 = time.monotonic()
    producer.start()
    last_done, last_t = 0, t0
    try:
        deadline = t0 + float(os.environ.get("ECHOMQ_SOAK_MAX_S", "7200"))
        while latest["completed"] + latest["failed"] < total:
            assert time.monotonic() < deadline, f"soak not done: {latest} of {total}"
            assert child.poll() is None, "the worker process died"
            time.sleep(1.0)
            now = time.monotonic()
            done = latest["completed"]
            samples.append({"t": round(now - t0, 2), "completed": done,
                            "rss_mb": round(proc.memory_info().rss / 2 ** 20, 1),
                            "jobs_per_s": round((done - last_done) / (now - last_t), 1)})
            last_done, last_t = done, now
        elapsed = time.monotonic() - t0
    finally:
        stop.set()
        producer.join(10)
    machine["load_after"] = list(os.getloadavg())
    try:
        assert latest["failed"] == 0
        assert latest["completed"] == total
        assert r.llen(keys.wait) == 0 and r.llen(keys.active) == 0
        rss = [s["rss_mb"] for s in samples]
        quarter = max(1, len(rss) // 4)
        early = sorted(rss[quarter:2 * quarter])[len(rss[quarter:2 * quarter]) // 2]
        late = sorted(rss[-quarter:])[len(rss[-quarter:]) // 2]
        result = {"jobs": total, "concurrency": concurrency, "seconds": round(elapsed, 1),
                  "jobs_per_s": round(total / elapsed, 1), "rss_mb_second_quarter_median": early,
                  "rss_mb_last_quarter_median": late, "rss_mb_max": max(rss), "machine": machine,
                  "samples": samples}
        with open(os.path.join(out_dir, "soak.json"), "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1)
        _plot(samples, os.path.join(out_dir, "soak.png"),
              f"{total:,} no-op jobs, concurrency {concurrency}: {result['jobs_per_s']:,.0f} jobs/s on average")
        # flat: no growth from the second quarter (warmed up) to the last
        assert late - early < 25, f"RSS grew from {early} MB to {late} MB"
    finally:
        r.close()
        server.stop()

"""How long a cancellation from anywhere takes to stop a running job
(``python -m bench.cancel_latency [--rounds 50]``).

On a throwaway Redis (the test suite's ``RedisServer``) a worker runs in a child process
(its own interpreter, patched for gevent, as ``echomq-gevent`` runs it) with a processor
that sleeps until it is cancelled and then writes the time it was stopped. This process
adds one job at a time, waits until it runs, takes the time and calls
``Queue.cancel_job`` (``cancelJob-9`` publishes on the queue's channel); the latency is
the stop time minus that time (one machine, one clock): the script's round trip, the
publish, the worker's subscription thread, the hand-over to its hub and the
``JobCancelled`` thrown into the processor. Prints one JSON object: p50, p90, p99 and
max in ms over the rounds, and the machine, and writes ``cancel.md`` and ``cancel.json``
into ``--out`` (default ``bench/results``) and a row to its ``history.md`` (not with
``--no-history``).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from typing import Any, Dict, List

from bench.harness import Bench
from bench.queue_age import _cpu_model, machine_meta
from bench.report import save_case
from echomq_gevent.queue.queue import Queue

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = '''
from gevent import monkey; monkey.patch_all()
import sys, time
import gevent, redis
from echomq_gevent import Worker, JobCancelled
url, prefix, queue = sys.argv[1:4]
r = redis.Redis.from_url(url, decode_responses=True)

def proc(job):
    r.set(f"{prefix}:started:{job.id}", "1")
    try:
        gevent.sleep(60)
    except JobCancelled:
        r.set(f"{prefix}:stopped:{job.id}", repr(time.time()))
        raise

w = Worker(queue, proc, connection=url, prefix=prefix, drain_delay=1)
print("ready", flush=True)
w.run()
'''


def _pct(values: List[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100.0 * (len(ordered) - 1))))]


def measure(rounds: int) -> Dict[str, Any]:
    with Bench(verbose=True) as bench:
        client = bench.client
        assert client is not None
        prefix, qname = "bench", "cancel"
        env = dict(os.environ, PYTHONPATH=ROOT)
        child = subprocess.Popen([sys.executable, "-c", CHILD, bench.url, prefix, qname], env=env)
        queue = Queue(qname, connection=bench.url, prefix=prefix)
        latencies: List[float] = []
        load_before = round(os.getloadavg()[0], 2)
        try:
            for _ in range(rounds):
                job = queue.add("sleep", {})
                deadline = time.monotonic() + 30
                while not client.exists(f"{prefix}:started:{job.id}"):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"job {job.id} did not start")
                    time.sleep(0.002)
                time.sleep(0.05)  # the processor is asleep in gevent.sleep
                t0 = time.time()
                out = queue.cancel_job(job.id, "bench")
                assert out.outcome == "accepted", out
                while True:
                    stopped = client.get(f"{prefix}:stopped:{job.id}")
                    if stopped:
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"job {job.id} was not stopped")
                    time.sleep(0.001)
                latencies.append((float(stopped) - t0) * 1000.0)
                while queue.get_job_state(job.id) != "failed":
                    time.sleep(0.002)
        finally:
            child.terminate()
            child.wait(timeout=30)
            queue.close()
        load = os.getloadavg()
        return {
            "rounds": rounds, "loadavg_before": load_before,
            "p50_ms": round(_pct(latencies, 50), 2), "p90_ms": round(_pct(latencies, 90), 2),
            "p99_ms": round(_pct(latencies, 99), 2), "max_ms": round(max(latencies), 2),
            "cpu": _cpu_model(), "cpus": os.cpu_count(), "loadavg_1m": round(load[0], 2),
            "redis": bench.redis_version, "python": platform.python_version(),
        }


def markdown(result: Dict[str, Any], meta: Dict[str, Any]) -> str:
    return "\n".join([
        "# Cancel latency: an active job on another process", "",
        f"{meta['date']} · {meta['machine']}, {result['cpu']} · Redis {result['redis']} · Python {result['python']} · "
        f"commit {meta['commit']} · load average 1 min {result['loadavg_before']}–{result['loadavg_1m']} · "
        f"{result['rounds']} cancels, one at a time, of a job sleeping in a worker of another process "
        "(from the `Queue.cancel_job` call to `JobCancelled` in the processor)", "",
        "| p50 | p90 | p99 | max |", "| --- | --- | --- | --- |",
        f"| {result['p50_ms']} ms | {result['p90_ms']} ms | {result['p99_ms']} ms | {result['max_ms']} ms |", ""])


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    parser.add_argument("--no-history", action="store_true", help="no row in history.md")
    args = parser.parse_args(argv)
    result = measure(args.rounds)
    meta = machine_meta(ROOT)
    print(json.dumps(result))
    rows = [] if args.no_history else [
        f"| {meta['date']} | {meta['commit']} | {meta['machine']}, {result['cpu']} | {result['redis']} | "
        f"{result['rounds']} | {result['loadavg_before']}–{result['loadavg_1m']} | cancel latency, another "
        f"process, p50 / p99 ms ({result['p50_ms']} / {result['p99_ms']}) | – |"]
    save_case(args.out, "cancel", markdown(result, meta), {"meta": meta, **result}, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

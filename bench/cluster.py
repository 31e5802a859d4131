"""Benchmark: queues on one primary of a Redis Cluster against queues spread over three.

``python -m bench.cluster`` starts a cluster of three primaries (no replicas) on free
loopback ports, fills ``--queues`` queues with ``--jobs`` no-op jobs each, then runs one
worker process per queue (``bench/drivers/ours_worker.py``, gevent-patched) until every
job is completed, twice:

* **one primary**: the queue names share one hash tag (``q0{one}``, ``q1{one}``...), so
  every queue lives in the same slot;
* **three primaries**: each queue name is its own tag (``{q0}``...), chosen so that the
  queues are spread evenly over the primaries.

It reports the aggregate jobs/s, the Redis CPU seconds each primary spent (``INFO cpu``)
and the machine (CPU, cores, load), and writes ``bench/results/cluster.json`` and
``cluster.md``. A cluster spreads *Redis's* work; on a machine where the worker processes
use every core, the aggregate rate is bounded by the workers, not by Redis; the CPU
column shows where the time went.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from echomq_gevent import Queue  # noqa: E402
from echomq_gevent.connection.cluster import key_slot  # noqa: E402


def _redis_server_module() -> Any:
    path = os.path.join(ROOT, "tests", "redis_server.py")
    spec = importlib.util.spec_from_file_location("echomq_bench_redis_server", path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def _names(group: Any, layout: str, count: int, run: int) -> List[str]:
    if layout == "one":
        return [f"r{run}q{i}{{one{run}}}" for i in range(count)]
    primaries = group.primary_ports()
    by_owner: Dict[int, List[str]] = {p: [] for p in primaries}
    i = 0
    while sum(len(v) for v in by_owner.values()) < count:
        name = f"{{r{run}q{i}}}"
        owner = group.owner_of(key_slot(f"bench:{name}:wait"))
        if len(by_owner[owner]) < -(-count // len(primaries)):
            by_owner[owner].append(name)
        i += 1
    names: List[str] = []
    while len(names) < count:
        for p in primaries:
            if by_owner[p] and len(names) < count:
                names.append(by_owner[p].pop())
    return names


def _cpu(group: Any) -> Dict[int, float]:
    out = {}
    for port in group.primary_ports():
        info = group.ask(port, "INFO", "cpu")
        out[port] = float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
    return out


def run_layout(group: Any, layout: str, queues: int, jobs: int, concurrency: int, run: int) -> Dict[str, Any]:
    names = _names(group, layout, queues, run)
    for name in names:
        q = Queue(name, connection=group.url, prefix="bench")
        q.pause()  # the workers start on paused queues; resuming them all is the start line
        for start in range(0, jobs, 1000):
            q.add_bulk([{"name": "n", "data": {"i": i}, "opts": {"removeOnComplete": True}}
                        for i in range(start, min(jobs, start + 1000))])
        q.close()
    tmp = tempfile.mkdtemp(prefix="echomq-bench-cluster-")
    procs = []
    for i, name in enumerate(names):
        cfg = {"url": group.url, "prefix": "bench", "queue": name, "concurrency": concurrency, "mode": "noop",
               "report": os.path.join(tmp, f"w{i}.json")}
        procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "drivers", "ours_worker.py"),
                                       json.dumps(cfg)], stdout=subprocess.PIPE, text=True))
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "READY"
    watchers = [Queue(n, connection=group.url, prefix="bench") for n in names]
    load0 = os.getloadavg()[0]
    cpu0, t0 = _cpu(group), time.monotonic()
    for w in watchers:
        w.resume()
    while True:
        left = sum(w.get_job_counts("waiting", "active")["waiting"] + w.get_job_counts("active")["active"]
                   for w in watchers)
        if left == 0:
            break
        time.sleep(0.05)
    elapsed = time.monotonic() - t0
    cpu1 = _cpu(group)
    load1 = os.getloadavg()[0]
    for p in procs:
        p.terminate()
    processed = 0
    for i, p in enumerate(procs):
        p.wait(30)
        with open(os.path.join(tmp, f"w{i}.json"), encoding="utf-8") as fh:
            processed += json.load(fh)["processed"]
    for w in watchers:
        w.close()
    owners = sorted({group.owner_of(key_slot(f"bench:{n}:wait")) for n in names})
    return {"layout": "one primary" if layout == "one" else "three primaries", "queues": queues,
            "jobs_per_queue": jobs, "concurrency": concurrency, "primaries_used": len(owners),
            "processed": processed, "seconds": round(elapsed, 2),
            "jobs_per_s": round(queues * jobs / elapsed), "redis_cpu_s_per_primary":
                {str(p): round(cpu1[p] - cpu0[p], 2) for p in cpu1},
            "load1_before": round(load0, 2), "load1_after": round(load1, 2)}


def main(argv: Any = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__.split("\n\n")[0])
    ap.add_argument("--queues", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=5000, help="jobs per queue")
    ap.add_argument("--concurrency", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args(argv)
    rs = _redis_server_module()
    group = rs.ClusterGroup(primaries=3, replicas=0).start()
    rows = []
    try:
        run = 0
        for _ in range(args.rounds):
            for layout in ("one", "three"):
                run += 1
                row = run_layout(group, layout, args.queues, args.jobs, args.concurrency, run)
                print(json.dumps(row), file=sys.stderr)
                rows.append(row)
        version = subprocess.run([group.binary, "--version"], capture_output=True, text=True).stdout.strip()
    finally:
        group.stop()
    cpu = "?"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            cpu = next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import gevent
    import redis

    machine = {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
               "gevent": gevent.__version__, "redis_py": redis.__version__, "redis_server": version,
               "platform": platform.platform()}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "cluster.json"), "w", encoding="utf-8") as fh:
        json.dump({"machine": machine, "rows": rows}, fh, indent=1)
    lines = ["# Queues on one primary vs. spread over three (Redis Cluster)", "",
             f"`python -m bench.cluster --queues {args.queues} --jobs {args.jobs} --concurrency {args.concurrency} "
             f"--rounds {args.rounds}`: one worker process per queue, no-op jobs (`removeOnComplete`), "
             f"a cluster of three primaries without replicas on loopback.", "",
             f"Machine: {machine['cpu']}, {machine['cores']} cores, Python {machine['python']}, gevent "
             f"{machine['gevent']}, redis-py {machine['redis_py']}, {version.split(' sha=')[0]}; other work "
             f"was running on the machine (load averages below).", "",
             "| layout | primaries used | jobs | seconds | jobs/s (all queues) | Redis CPU s per primary | load before/after |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        cpu_text = ", ".join(f"{v}" for v in sorted(row["redis_cpu_s_per_primary"].values(), reverse=True))
        lines.append(f"| {row['layout']} | {row['primaries_used']} | {row['queues'] * row['jobs_per_queue']} | "
                     f"{row['seconds']} | {row['jobs_per_s']} | {cpu_text} | {row['load1_before']}/"
                     f"{row['load1_after']} |")
    with open(os.path.join(args.out, "cluster.md"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

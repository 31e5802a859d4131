"""The Redis cost of one scrape of the queues' gauges (``python -m bench.queue_age``).

On a throwaway Redis (the test suite's ``RedisServer``) one queue gets N jobs (default
1e6) written straight in by ``scale_fill.lua`` (not timed): N/2 in ``wait``, N/4 in
``prioritized`` over P priority levels (default 10), N/4 in ``delayed``, half of those
already due. Then the scrape of ``echomq_gevent.host.queue_gauges`` (one pipeline:
``getCounts-1`` twice, ``getOldestJobTimestamp-1``, ``ZRANGE repeat``) runs R times
(default 200), and the Redis time it cost is read from ``INFO commandstats`` (the
``usec`` of each command, scripts counted with what they call), with the longest single
command from ``SLOWLOG`` (every command of 0 µs or more is logged during the runs).
Prints one JSON object: the per-scrape Redis µs (mean, and of the age script alone),
the wall time of a scrape seen by the client, and the machine, and writes
``queue_age.md`` and ``queue_age.json`` into ``--out`` (default ``bench/results``) and a
row to its ``history.md`` (not with ``--no-history``).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from typing import Any, Dict, List

from bench.harness import Bench
from bench.report import git_commit, save_case
from bench.scale import Filler
from echomq_gevent.host.queue_gauges import QueueGauges
from echomq_gevent.protocol.keys import QueueKeys


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def machine_meta(root: str) -> Dict[str, Any]:
    """When and where a bench case ran (date, commit, machine), for its result files."""
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": git_commit(root),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}"}


def _commandstats(client: Any) -> Dict[str, Dict[str, float]]:
    return {k: v for k, v in client.info("commandstats").items()}


def measure(n: int, priorities: int, rounds: int) -> Dict[str, Any]:
    with Bench(verbose=True) as bench:
        client = bench.client
        assert client is not None
        keys = QueueKeys("age1e6", "bench")
        filler = Filler(bench)
        now = int(time.time() * 1000)
        t = time.monotonic()
        filler.fill(keys, "wait", n // 2, ts=now - 600_000)
        filler.fill(keys, "prioritized", n // 4, ts=now - 300_000, priorities=priorities)
        filler.fill(keys, "delayed", n // 4, ts=now - 900_000, due0=now - 60_000, step_ms=120_000 / (n // 4))
        bench.log(f"filled {n} jobs in {time.monotonic() - t:.1f} s")
        gauges = QueueGauges(lambda: client, [keys])
        stats = gauges.read()["age1e6"]  # loads the scripts once
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 100000)
        client.slowlog_reset()
        client.config_resetstat()
        wall = []
        load_before = round(os.getloadavg()[0], 2)
        for _ in range(rounds):
            t = time.perf_counter()
            gauges.read()
            wall.append(time.perf_counter() - t)
        cs = _commandstats(client)
        slow = client.slowlog_get(100000)
        client.config_set("slowlog-log-slower-than", 10000)
        evalsha_usec = cs.get("cmdstat_evalsha", {}).get("usec", 0)
        zrange_usec = cs.get("cmdstat_zrange", {}).get("usec", 0)
        age_us = [e["duration"] for e in slow if "getOldest" in str(e.get("command", "")) or
                  _is_age_call(e, client)]
        wall.sort()
        info = client.info("server")
        return {
            "jobs": n, "wait": n // 2, "prioritized": n // 4, "priorities": priorities, "delayed": n // 4,
            "oldest_state": stats.age.state, "ready": stats.ready,
            "rounds": rounds,
            "redis_us_per_scrape": round((evalsha_usec + zrange_usec) / rounds, 1),
            "age_script_us_mean": round(sum(age_us) / len(age_us), 1) if age_us else None,
            "longest_command_us": max((e["duration"] for e in slow), default=0),
            "client_wall_ms_p50": round(wall[len(wall) // 2] * 1000, 3),
            "client_wall_ms_p99": round(wall[int(len(wall) * 0.99) - 1] * 1000, 3),
            "redis_version": info.get("redis_version"),
            "cpu": _cpu_model(), "cpus": os.cpu_count(), "loadavg_before": load_before,
            "loadavg": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(),
        }


_AGE_SHA: Dict[int, str] = {}


def _is_age_call(entry: Dict[str, Any], client: Any) -> bool:
    """A SLOWLOG entry of EVALSHA of getOldestJobTimestamp-1 (matched by its SHA)."""
    from echomq_gevent.protocol.library import library

    sha = _AGE_SHA.setdefault(0, library().shas["getOldestJobTimestamp-1"])
    return sha in str(entry.get("command", ""))


def markdown(results: List[Dict[str, Any]], meta: Dict[str, Any]) -> str:
    first = results[0]
    loads = [r["loadavg_before"] for r in results] + [r["loadavg"][0] for r in results]
    lines = [f"# The queue gauges' scrape on a queue of {first['jobs']:,} jobs", "",
             f"{meta['date']} · {meta['machine']}, {first['cpu']} · Redis {first['redis_version']} · "
             f"Python {first['python']} · commit {meta['commit']} · load average 1 min {min(loads)}–{max(loads)} · "
             f"{first['jobs']:,} jobs ({first['wait']:,} wait, {first['prioritized']:,} prioritized, "
             f"{first['delayed']:,} delayed, about half due) · {first['rounds']} scrapes each", "",
             "| priority levels in use | Redis µs per scrape (mean) | of which the age script | "
             "longest single command µs | scrape wall ms p50 / p99 (client) |",
             "| --- | --- | --- | --- | --- |"]
    for r in results:
        lines.append(f"| {r['priorities']:,} | {r['redis_us_per_scrape']} | {r['age_script_us_mean']} | "
                     f"{r['longest_command_us']} | {r['client_wall_ms_p50']} / {r['client_wall_ms_p99']} |")
    return "\n".join(lines) + "\n"


def main(argv: Any = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--priorities", type=int, nargs="+", default=[10, 1000],
                    help="priority levels in use, one measurement each (default 10 1000)")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--no-history", action="store_true", help="no row in history.md")
    args = ap.parse_args(argv)
    results = [measure(args.jobs, p, args.rounds) for p in args.priorities]
    meta = machine_meta(ROOT)
    print(json.dumps(results, indent=2))
    rows = [] if args.no_history else [
        f"| {meta['date']} | {meta['commit']} | {meta['machine']}, {r['cpu']} | {r['redis_version']} | "
        f"{r['rounds']} | {r['loadavg_before']}–{r['loadavg'][0]} | queue gauges: Redis µs per scrape, "
        f"{r['jobs']:,} jobs over {r['priorities']:,} priority levels (the age script {r['age_script_us_mean']} µs; "
        f"longest command {r['longest_command_us']} µs): {r['redis_us_per_scrape']} µs | – |" for r in results]
    save_case(args.out, "queue_age", markdown(results, meta), {"meta": meta, "runs": results}, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

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
the wall time of a scrape seen by the client, and the machine.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from typing import Any, Dict

from bench.harness import Bench
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
            "cpu": _cpu_model(), "cpus": os.cpu_count(), "loadavg": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(),
        }


_AGE_SHA: Dict[int, str] = {}


def _is_age_call(entry: Dict[str, Any], client: Any) -> bool:
    """A SLOWLOG entry of EVALSHA of getOldestJobTimestamp-1 (matched by its SHA)."""
    from echomq_gevent.protocol.library import library

    sha = _AGE_SHA.setdefault(0, library().shas["getOldestJobTimestamp-1"])
    return sha in str(entry.get("command", ""))


def main(argv: Any = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--priorities", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args(argv)
    print(json.dumps(measure(args.jobs, args.priorities, args.rounds), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

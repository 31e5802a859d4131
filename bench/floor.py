"""``python -m bench.run --floor``: the price of one Redis round trip, per client stack.

A worker at concurrency 1 cannot go faster than one sequential round trip per job. This
measures that floor for the client stacks — redis-py plain, redis-py under gevent through its
pool and on one kept connection (ours), ioredis (BullMQ Node) — with N sequential PINGs and N
``moveToFinished``-shaped EVALSHAs of a trivial script, each in its own subprocess, against
the harness's private Redis. Writes ``floor.md``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Dict, List

from .harness import Bench, BenchError
from .impls import DRIVERS, node_binary

STACKS = (
    ("redis-py + hiredis, plain", [sys.executable, os.path.join(DRIVERS, "floor_py.py")], {"gevent": False}),
    ("redis-py + hiredis under gevent, pooled", [sys.executable, os.path.join(DRIVERS, "floor_py.py")],
     {"gevent": True}),
    ("redis-py + hiredis under gevent, kept connection (ours)",
     [sys.executable, os.path.join(DRIVERS, "floor_py.py")], {"gevent": True, "single": True}),
    ("ioredis (BullMQ Node)", [node_binary(), os.path.join(DRIVERS, "floor_node.js")], {}),
)


def measure_floor(bench: Bench, n: int = 20000, rounds: int = 3) -> List[Dict[str, Any]]:
    """Rows ``{stack, probe, per_s, wall_us, cpu_us}``: medians over ``rounds`` runs."""
    samples: Dict[tuple, List[Dict[str, float]]] = {}
    for _ in range(rounds):
        for label, cmd, extra in STACKS:
            cfg = dict(extra, url=bench.url, n=n)
            res = subprocess.run(cmd + [json.dumps(cfg)], capture_output=True, text=True, timeout=300)
            if res.returncode != 0:
                raise BenchError(f"floor probe {label} failed: {res.stderr.strip()[-2000:]}")
            for line in res.stdout.splitlines():
                row = json.loads(line)
                samples.setdefault((label, row["probe"]), []).append(row)
    out = []
    for (label, probe), rows in samples.items():
        rows = sorted(rows, key=lambda r: r["per_s"])
        mid = rows[len(rows) // 2]
        out.append({"stack": label, "probe": probe, "per_s": mid["per_s"], "wall_us": mid["wall_us"],
                    "cpu_us": mid["cpu_us"]})
    return out


def floor_markdown(rows: List[Dict[str, Any]], redis_version: str) -> str:
    lines = ["# One Redis round trip, per client stack", "",
             f"Sequential calls on one connection to a private Redis {redis_version}; median of the "
             "rounds. Client CPU is user+system time of the calling process.", "",
             "| client stack | call | calls/s | wall µs/call | client CPU µs/call |",
             "| --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['stack']} | {r['probe']} | {r['per_s']:,.0f} | {r['wall_us']:.0f} | {r['cpu_us']:.0f} |")
    return "\n".join(lines) + "\n"

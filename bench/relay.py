"""``python -m bench.run --only relay``: the Relay, ours against Node bullmq 6.7.0's.

Each implementation runs a publisher node and a subscriber node in one process of its own
(``drivers/relay_ours.py``, gevent-patched; ``drivers/relay_node.js``) against the harness's
private Redis, in alternating order, a fresh namespace per run. Measured per run:
publish->deliver latency (messages one at a time, the next published once the last
arrived; p50 and p99 over all of them), messages/s (published back to back, each publish
awaited, until the last is delivered) and the process's CPU per message over both phases.
Medians over the rounds, and ours/Node ratios. Writes ``relay.md``.
"""
from __future__ import annotations

import json
import os
import subprocess
import uuid
from typing import Any, Dict, List

from .harness import Bench, BenchError, rotated
from .impls import DRIVERS, node_binary, ours_python

DRIVERS_BY_IMPL = {
    "ours": lambda: [ours_python(), os.path.join(DRIVERS, "relay_ours.py")],
    "node": lambda: [node_binary(), os.path.join(DRIVERS, "relay_node.js")],
}


def _pct(values: List[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _median(values: List[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def run_once(bench: Bench, impl: str, latency_n: int, throughput_n: int) -> Dict[str, Any]:
    cfg = {"url": bench.url, "namespace": "bench" + uuid.uuid4().hex[:8], "latencyN": latency_n,
           "throughputN": throughput_n}
    load = os.getloadavg()[0]
    res = subprocess.run(DRIVERS_BY_IMPL[impl]() + [json.dumps(cfg)], capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        raise BenchError(f"relay driver {impl} failed: {res.stderr.strip()[-2000:]}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    lat = out["latency_ms"]
    if len(lat) != latency_n:
        raise BenchError(f"relay driver {impl}: {len(lat)} latency samples of {latency_n}")
    return {"impl": impl, "p50_ms": _pct(lat, 0.5), "p99_ms": _pct(lat, 0.99),
            "msgs_per_s": throughput_n / out["throughput_s"],
            "cpu_us_per_msg": out["cpu_s"] * 1e6 / (latency_n + throughput_n), "load1_before": round(load, 2)}


def measure_relay(bench: Bench, impls: List[str], rounds: int = 3, latency_n: int = 2000,
                  throughput_n: int = 10000) -> Dict[str, Any]:
    """Every round runs each implementation once, the order rotating; returns
    ``{runs: [...], medians: {impl: {...}}}``."""
    runs: List[Dict[str, Any]] = []
    for rnd in range(rounds):
        order = rotated(impls, rnd)
        for impl in order:
            row = run_once(bench, impl, latency_n, throughput_n)
            row["round"] = rnd + 1
            runs.append(row)
            bench.log(f"  relay {impl:<5} round {rnd + 1}: p50 {row['p50_ms']:.3f} ms, p99 {row['p99_ms']:.3f} ms, "
                      f"{row['msgs_per_s']:,.0f} msgs/s, {row['cpu_us_per_msg']:.0f} us CPU/msg, "
                      f"load {row['load1_before']}")
    medians = {impl: {k: _median([r[k] for r in runs if r["impl"] == impl])
                      for k in ("p50_ms", "p99_ms", "msgs_per_s", "cpu_us_per_msg")} for impl in impls}
    return {"runs": runs, "medians": medians}


def relay_markdown(result: Dict[str, Any], meta: Dict[str, Any]) -> str:
    med = result["medians"]
    loads = [r["load1_before"] for r in result["runs"]]
    lines = ["# The Relay: ours against Node bullmq 6.7.0", "",
             f"{meta['date']} · {meta['cpu']} · Redis {meta['redis']} · Python {meta['python']}, Node {meta['node']} · "
             f"commit {meta['commit']} · load average 1 min {min(loads)}-{max(loads)} (a shared machine: other "
             f"work skews these) · {meta['rounds']} rounds, median", "",
             "| impl | publish->deliver p50 ms | p99 ms | messages/s | CPU us/message |",
             "| --- | --- | --- | --- | --- |"]
    for impl, row in med.items():
        lines.append(f"| {impl} | {row['p50_ms']:.3f} | {row['p99_ms']:.3f} | {row['msgs_per_s']:,.0f} | "
                     f"{row['cpu_us_per_msg']:.0f} |")
    if "ours" in med and "node" in med:
        o, n = med["ours"], med["node"]
        lines += ["", f"ours / Node: p50 {o['p50_ms'] / n['p50_ms']:.2f}, p99 {o['p99_ms'] / n['p99_ms']:.2f} "
                  f"(lower is better); messages/s {o['msgs_per_s'] / n['msgs_per_s']:.2f} (higher is better); "
                  f"CPU per message {o['cpu_us_per_msg'] / n['cpu_us_per_msg']:.2f}"]
    lines += ["", "| round | impl | p50 ms | p99 ms | messages/s | load |", "| --- | --- | --- | --- | --- | --- |"]
    for r in result["runs"]:
        lines.append(f"| {r['round']} | {r['impl']} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} | {r['msgs_per_s']:,.0f} | "
                     f"{r['load1_before']} |")
    return "\n".join(lines) + "\n"

"""The scale section as a whole: the case sizes (issue 30's, or tiny with ``--quick``) and
the run of every case asked for every implementation, with the rounds of the throughput
cases reduced to their median round."""
from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, List, Optional

from ..harness import Bench, BenchError
from ..impls import Impl
from .admin import measure_admin, measure_dashboard
from .backlogs import SHORT_BACKLOG, measure_backlog, measure_payload, measure_prioritized
from .lateness import measure_delayed, measure_schedulers
from .queues import BUSY_VARIANTS, measure_busy, measure_idle
from .tools import Filler


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

"""The status table: job counts per queue, the age of the oldest job ready to run, the
workers seen, the job schedulers (and how late their runs are) and,
when a supervisor runs the file on this host, its worker processes.

Printed by ``echomq-gevent status`` and by the framework status commands
(``manage.py echomq_status``, ``flask echomq status``); it only reads Redis, so it does
not patch the process for gevent.
"""
from __future__ import annotations

import json
import sys
from typing import Any, Dict, List, Optional, Sequence

__all__ = ["STATUS_TYPES", "PROCESSES_KEY", "POOLS_KEY", "status_report", "print_status", "describe_scheduler",
           "describe_processes", "describe_age", "describe_pool"]

#: The key of the supervisors' processes in ``status --json`` (a queue name cannot hold ``:``).
PROCESSES_KEY = "echomq:supervisors"
#: The key of the file's pools in ``status --json``.
POOLS_KEY = "echomq:pools"

STATUS_TYPES = ("waiting", "prioritized", "active", "delayed", "waiting-children", "completed", "failed")


def status_report(url: str, names: Sequence[str], prefix: str) -> Dict[str, Any]:
    """``{queue: {"counts": {...}, "paused": bool, "age": {...}, "workers": [...],
    "schedulers": [...], "now": ms}}`` for ``names`` (schedulers soonest first; ``age``:
    :meth:`QueueAge.as_dict <echomq_gevent.queue.stats.QueueAge.as_dict>`, the oldest job
    ready to run)."""
    from ..queue.queue import Queue

    report: Dict[str, Any] = {}
    for name in names:
        queue = Queue(name, connection=url, prefix=prefix)
        try:
            counts = queue.get_job_counts(*STATUS_TYPES)
            workers = queue.get_workers()
            age = queue.get_queue_age()
            report[name] = {"counts": counts, "paused": age.paused, "age": age.as_dict(),
                            "workers": [w.get("name") or w.get("addr") for w in workers],
                            "schedulers": [s.as_dict() for s in queue.get_job_schedulers(asc=True)],
                            "now": age.now_ms}
        finally:
            queue.close()
    return report


def print_status(url: str, names: Sequence[str], prefix: str, as_json: bool = False, out: Any = None,
                 supervisors: Sequence[Dict[str, Any]] = (), pools: Sequence[Dict[str, Any]] = ()) -> int:
    """Print the report of ``names`` as a table (or JSON) to ``out`` (stdout); returns 0.
    ``supervisors``: the state of each supervisor running the file on this host
    (:func:`echomq_gevent.host.process_state.read_states`), shown after the queues (a list
    under :data:`PROCESSES_KEY` in JSON, when there is one). ``pools``: the file's pools
    (:func:`echomq_gevent.host.pools.describe_pools`), each shown with its budget and what
    its queues use (under :data:`POOLS_KEY` in JSON)."""
    from .pools import pool_usage

    out = out or sys.stdout
    if any(pool.get("patterns") for pool in pools):  # the queues of the pools' patterns, found now
        names = list(names) + _found_queues(url, prefix, pools, names)
    report = status_report(url, names, prefix)
    counts = {name: info["counts"] for name, info in report.items()}
    used = [pool_usage(pool, counts) for pool in pools]
    if as_json:
        full: Dict[str, Any] = dict(report)
        if supervisors:
            full[PROCESSES_KEY] = list(supervisors)
        if used:
            full[POOLS_KEY] = used
        print(json.dumps(full, indent=2, sort_keys=True), file=out)
        return 0
    width = max([len(n) for n in names] + [5])
    cols = [(t, max(len(t), 7)) for t in STATUS_TYPES]
    print(f"{'queue':<{width}}  " + "  ".join(f"{t:>{w}}" for t, w in cols) + "  workers  oldest", file=out)
    for name, info in report.items():
        c = info["counts"]
        row = f"{name:<{width}}  " + "  ".join(f"{c.get(t, 0):>{w}}" for t, w in cols)
        oldest = describe_age(info["age"]["age_seconds"]) if info["age"]["oldest_timestamp"] is not None else "-"
        row += f"  {len(info['workers']):>7}  {oldest:>6}" + ("  (paused)" if info["paused"] else "")
        print(row, file=out)
    for name, info in report.items():
        for s in info["schedulers"]:
            print(f"{name}: scheduler {describe_scheduler(s, info.get('now'))}", file=out)
    for pool in used:
        for line in describe_pool(pool):
            print(line, file=out)
    for state in supervisors:
        for line in describe_processes(state):
            print(line, file=out)
    return 0


def _found_queues(url: str, prefix: str, pools: Sequence[Dict[str, Any]], names: Sequence[str]) -> List[str]:
    from ..connection.clients import close_client, make_client
    from .pools import add_found_queues

    client = make_client(url)
    try:
        return add_found_queues(list(pools), client, prefix, exclude=names)
    finally:
        close_client(client)


def describe_pool(pool: Dict[str, Any]) -> List[str]:
    """The lines of one pool (:func:`echomq_gevent.host.pools.pool_usage`): its order and
    budget, then each queue with its weight, cap, jobs active and ready. ``active`` counts
    every worker of the queue (a Node worker on it too): Redis does not know whose jobs
    are whose."""
    processes = pool.get("processes") or 1
    per = f"{pool['concurrency']} slots" + (f" x {processes} processes" if processes > 1 else "")
    turn = f", turns of {pool['turn']} jobs" if (pool.get("turn") or 1) > 1 else ""
    lines = [f"pool {pool['name']}: {pool['order']}{turn}, {per}; {pool['in_use']} of {pool['budget']} in use"]
    if pool.get("patterns"):
        found = sum(1 for q in pool["queues"] if q.get("found"))
        lines.append(f"  patterns {', '.join(pool['patterns'])}: {found} queue(s) found, at most "
                     f"{pool.get('max_per_queue')} slots each")
    width = max([len(q["queue"]) for q in pool["queues"]] + [5])
    for q in pool["queues"]:
        weight = f"weight {q['weight']}  " if q.get("weight") is not None else ""
        lines.append(f"  {q['queue']:<{width}}  {weight}cap {q['cap']}  active {q['active']}  ready {q['ready']}")
    return lines


def describe_processes(state: Dict[str, Any]) -> List[str]:
    """The lines of the supervisor's processes: a heading, then one row per process
    (slot, pid, state, jobs done, RSS, started at, queues)."""
    from datetime import datetime

    def when(ts: Any) -> str:
        return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if isinstance(ts, (int, float)) else "?"

    sup = state["supervisor"]
    rows = state["processes"]
    lines = [f"supervisor pid {sup.get('pid')} ({sup.get('config')}), {len(rows)} worker process(es)"
             + (", stopping" if sup.get("stopping") else "")]
    lines.append(f"  {'process':>7}  {'pid':>7}  {'state':<10}  {'jobs':>7}  {'RSS MB':>7}  "
                 f"{'started at':<19}  queues")
    for p in rows:
        rss = p.get("rss_mb")
        lines.append(f"  {p.get('index', '?'):>7}  {p.get('pid', '?'):>7}  {str(p.get('state', '?')):<10}  "
                     f"{p.get('jobs', 0):>7}  {(f'{rss:.1f}' if isinstance(rss, (int, float)) else '?'):>7}  "
                     f"{when(p.get('started_at')):<19}  {', '.join(str(q) for q in p.get('queues') or [])}")
    return lines


def describe_age(seconds: float) -> str:
    """How long the oldest ready job has waited, short: ``0.4s``, ``42s``, ``12m``, ``3.5h``, ``2.0d``."""
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def describe_scheduler(s: Dict[str, Any], now: Optional[int] = None) -> str:
    """One status line: ``<id> <pattern or every>, next <UTC time>, <n> runs[, limit N]``,
    and, given the clock reading ``now`` (ms), ``LATE by <age>`` when that run's time has
    passed and no worker has taken it."""
    from datetime import datetime, timezone

    how = f"pattern {s['pattern']!r}" + (f" ({s['tz']})" if s.get("tz") else "") if s.get("pattern") \
        else f"every {s.get('every')} ms"
    nxt = s.get("next")
    when = datetime.fromtimestamp(nxt / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") if nxt else "none"
    out = f"{s['key']!r} {how}, next run {when}, {s.get('iterationCount', 0)} runs"
    if s.get("limit") is not None:
        out += f" (limit {s['limit']})"
    if now is not None and nxt and now - nxt >= 1000:
        out += f", LATE by {describe_age((now - nxt) / 1000)}"
    return out

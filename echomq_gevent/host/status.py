"""The status table: job counts per queue, the workers seen and the job schedulers.

Printed by ``echomq-gevent status`` and by the framework status commands
(``manage.py echomq_status``, ``flask echomq status``); it only reads Redis, so it does
not patch the process for gevent.
"""
from __future__ import annotations

import json
import sys
from typing import Any, Dict, Sequence

__all__ = ["STATUS_TYPES", "status_report", "print_status", "describe_scheduler"]

STATUS_TYPES = ("waiting", "prioritized", "active", "delayed", "waiting-children", "completed", "failed")


def status_report(url: str, names: Sequence[str], prefix: str) -> Dict[str, Any]:
    """``{queue: {"counts": {...}, "paused": bool, "workers": [...], "schedulers": [...]}}``
    for ``names`` (schedulers soonest first)."""
    from ..queue.queue import Queue

    report: Dict[str, Any] = {}
    for name in names:
        queue = Queue(name, connection=url, prefix=prefix)
        try:
            counts = queue.get_job_counts(*STATUS_TYPES)
            workers = queue.get_workers()
            report[name] = {"counts": counts, "paused": queue.is_paused(),
                            "workers": [w.get("name") or w.get("addr") for w in workers],
                            "schedulers": [s.as_dict() for s in queue.get_job_schedulers(asc=True)]}
        finally:
            queue.close()
    return report


def print_status(url: str, names: Sequence[str], prefix: str, as_json: bool = False, out: Any = None) -> int:
    """Print the report of ``names`` as a table (or JSON) to ``out`` (stdout); returns 0."""
    out = out or sys.stdout
    report = status_report(url, names, prefix)
    if as_json:
        print(json.dumps(report, indent=2, sort_keys=True), file=out)
        return 0
    width = max([len(n) for n in names] + [5])
    cols = [(t, max(len(t), 7)) for t in STATUS_TYPES]
    print(f"{'queue':<{width}}  " + "  ".join(f"{t:>{w}}" for t, w in cols) + "  workers", file=out)
    for name, info in report.items():
        c = info["counts"]
        row = f"{name:<{width}}  " + "  ".join(f"{c.get(t, 0):>{w}}" for t, w in cols)
        row += f"  {len(info['workers']):>7}" + ("  (paused)" if info["paused"] else "")
        print(row, file=out)
    for name, info in report.items():
        for s in info["schedulers"]:
            print(f"{name}: scheduler {describe_scheduler(s)}", file=out)
    return 0


def describe_scheduler(s: Dict[str, Any]) -> str:
    """One status line: ``<id> <pattern or every>, next <UTC time>, <n> runs[, limit N]``."""
    from datetime import datetime, timezone

    how = f"pattern {s['pattern']!r}" + (f" ({s['tz']})" if s.get("tz") else "") if s.get("pattern") \
        else f"every {s.get('every')} ms"
    nxt = s.get("next")
    when = datetime.fromtimestamp(nxt / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") if nxt else "none"
    out = f"{s['key']!r} {how}, next run {when}, {s.get('iterationCount', 0)} runs"
    if s.get("limit") is not None:
        out += f" (limit {s['limit']})"
    return out

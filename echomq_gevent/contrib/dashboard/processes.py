"""The dashboard's worker processes section (under the queues of the overview): for each
supervisor of ``echomq-gevent --processes N`` running the dashboard's configuration file
on this host, its processes with their pid, state, jobs done, RSS, start time and queues,
as ``echomq-gevent status`` prints them. Empty when the dashboard was given no way to
read them (see ``Dashboard(processes=...)``) or no supervisor runs.

The states come from the supervisors' state files, which are written on the host they
run on: a dashboard on another host sees none. Runs on the request's greenlet."""
from __future__ import annotations

import logging
import time
from typing import Any, List

from .render import h

log = logging.getLogger("echomq_gevent.dashboard")


def _started(ts: Any) -> str:
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or ts <= 0:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def _number(value: Any, spec: str = "d") -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "?"
    return format(value, spec)


def processes_section(ui: Any) -> str:
    read = getattr(ui, "processes", None)
    if read is None:
        return ""
    try:
        states = list(read())
    except Exception as exc:  # a state file the dashboard may not read: the page still answers
        log.warning("dashboard: the worker processes cannot be read: %s", exc)
        return f'<h2 id="processes">Worker processes</h2><p>They cannot be read: {h(exc)}</p>'
    if not states:
        return ""
    parts: List[str] = ['<h2 id="processes">Worker processes</h2>']
    for state in states:
        sup = state.get("supervisor") or {}
        rows = [p for p in state.get("processes") or [] if isinstance(p, dict)]
        parts.append(
            f'<p data-supervisor="{h(sup.get("pid"))}">supervisor pid {h(sup.get("pid"))}, '
            f'{len(rows)} worker process(es){", stopping" if sup.get("stopping") else ""}</p>'
            '<table class="processes"><tr><th>process</th><th>pid</th><th>state</th><th>jobs done</th>'
            '<th>RSS MB</th><th>started at</th><th>queues</th></tr>')
        for p in rows:
            queues = p.get("queues") if isinstance(p.get("queues"), list) else []
            parts.append(
                f'<tr data-pid="{h(p.get("pid"))}"><td class="n">{h(p.get("index", "?"))}</td>'
                f'<td class="n">{h(p.get("pid", "?"))}</td><td>{h(p.get("state", "?"))}</td>'
                f'<td class="n">{h(_number(p.get("jobs", 0)))}</td>'
                f'<td class="n">{h(_number(p.get("rss_mb"), ".1f"))}</td>'
                f'<td>{h(_started(p.get("started_at")))}</td>'
                f'<td>{h(", ".join(str(q) for q in queues))}</td></tr>')
        parts.append("</table>")
    return "".join(parts)

"""The dashboard's pools section (under the queues of the overview): each pool of the
configuration with its order and budget, and per queue its weight, its cap and what it
uses now (jobs active and ready, from the queue's counts). Empty when the dashboard was
given no pools (``Dashboard(pools=...)``; ``echomq-gevent -c FILE dashboard`` passes the
file's). ``active`` counts every worker of the queue: Redis does not say whose a job is.
Runs on the request's greenlet."""
from __future__ import annotations

import fnmatch
from typing import Any, Dict, List, Mapping

from .render import h

__all__ = ["pools_section"]


def pools_section(ui: Any, req: Any, counts: Mapping[str, Mapping[str, int]]) -> str:
    """The HTML of the pools; ``counts``: the counts the overview read, by queue (a pooled
    queue it did not list is read here)."""
    from ...host.pools import pool_usage

    pools = getattr(ui, "pools", None) or []
    if not pools:
        return ""
    known: Dict[str, Mapping[str, int]] = dict(counts)
    parts: List[str] = ['<h2 id="pools">Pools</h2>']
    declared = {row["queue"] for pool in pools for row in pool["queues"] if not row.get("found")}
    for pool in pools:
        patterns = pool.get("patterns") or ()
        if patterns:  # the queues its patterns find, among those the overview lists
            pool = dict(pool, queues=list(pool["queues"]) + [
                {"queue": name, "weight": 1 if pool["order"] == "weighted" else None,
                 "cap": pool.get("max_per_queue"), "found": True}
                for name in sorted(counts) if name not in declared and name not in (pool.get("declared") or ())
                and any(fnmatch.fnmatchcase(name, p) for p in patterns)])
        for row in pool["queues"]:
            if row["queue"] not in known:
                known[row["queue"]] = ui.reads.counts(ui.reads.queue(row["queue"]))
        used = pool_usage(pool, known)
        processes = used.get("processes") or 1
        per = f"{used['concurrency']} slots" + (f" &times; {int(processes)} processes" if processes > 1 else "")
        found = (f'; patterns {h(", ".join(patterns))}: {sum(1 for q in used["queues"] if q.get("found"))} '
                 f'queue(s) found' if patterns else "")
        turn = f', turns of {h(used["turn"])} jobs' if (used.get("turn") or 1) > 1 else ""
        parts.append(
            f'<p data-pool="{h(used["name"])}"><b>{h(used["name"])}</b>: {h(used["order"])}{turn}, {per}; '
            f'<span data-in-use="{h(used["in_use"])}">{h(used["in_use"])}</span> of {h(used["budget"])} in use'
            f'{found}</p>'
            '<table class="pools"><tr><th>queue</th><th>weight</th><th>cap</th><th>active</th><th>ready</th>'
            '<th>share of the budget</th></tr>')
        budget = max(1, int(used["budget"]))
        for q in used["queues"]:
            share = min(100, round(100 * q["active"] / budget))
            parts.append(
                f'<tr data-pool-queue="{h(q["queue"])}"><td><a href="{h(req.url("/queue", name=q["queue"]))}">'
                f'{h(q["queue"])}</a></td><td class="n">{h("-" if q["weight"] is None else q["weight"])}</td>'
                f'<td class="n">{h(q["cap"])}</td><td class="n">{h(q["active"])}</td>'
                f'<td class="n">{h(q["ready"])}</td><td class="n">{share} %</td></tr>')
        parts.append("</table>")
    return "".join(parts)

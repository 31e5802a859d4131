"""What the chaos tests share (waiting is the ``wait_for`` fixture of ``tests/conftest.py``):
writing jobs as a foreign producer would and counting a job's end events (the TCP proxy the test
controls is ``tests/tcp_proxy.py``)."""
from __future__ import annotations

import json
import os
import time
from typing import Any, Callable, Dict, List, Optional

import redis

from echomq_gevent.protocol.keys import QueueKeys


def write_job(r: "redis.Redis", keys: QueueKeys, fields: Optional[Dict[str, Any]] = None,
              job_id: Optional[str] = None, raw: Optional[Callable[["redis.Redis", str], None]] = None) -> str:
    """Put a job in ``wait`` the way any producer speaking the protocol could: the hash
    (``fields`` as given, garbage included), the id pushed on ``wait`` and the marker.
    ``raw(r, job_key)`` writes the job key itself instead of ``fields`` (a wrong type,
    say); with neither, no hash is written at all."""
    if job_id is None:
        job_id = str(r.incr(keys.base + "id"))
    if raw is not None:
        raw(r, keys.job(job_id))
    elif fields:
        r.hset(keys.job(job_id), mapping={k: v for k, v in fields.items()})
    r.lpush(keys.wait, job_id)
    r.zadd(keys.marker, {"0": 0})
    return job_id


def good_fields(name: str = "task", data: Any = None, opts: Optional[Dict[str, Any]] = None) -> Dict[str, str]:
    """The fields a well-behaved producer writes (as Node's ``Job.asJSON``)."""
    return {"name": name, "data": json.dumps(data if data is not None else {}),
            "opts": json.dumps(opts if opts is not None else {"attempts": 0}),
            "timestamp": str(int(time.time() * 1000)), "delay": "0", "priority": "0"}


def end_events(r: "redis.Redis", keys: QueueKeys) -> Dict[str, List[str]]:
    """job id -> the ``completed``/``failed`` events the queue's stream holds for it."""
    out: Dict[str, List[str]] = {}
    for _id, fields in r.xrange(keys.events):
        if fields.get("event") in ("completed", "failed"):
            out.setdefault(fields.get("jobId", "?"), []).append(fields["event"])
    return out


def runs_of(r: "redis.Redis", prefix: str) -> Dict[str, int]:
    """job id -> how many times a chaos worker process ran it (recorded in the session's Redis)."""
    counts: Dict[str, int] = {}
    for job_id in r.lrange(f"{prefix}:chaos:runs", 0, -1):
        counts[job_id] = counts.get(job_id, 0) + 1
    return counts


def add_jobs(url: str, qname: str, prefix: str, n: int, seconds: float = 0) -> List[str]:
    """Add ``n`` jobs whose processor sleeps ``seconds`` (batches of 500); their ids."""
    from echomq_gevent import Queue

    q = Queue(qname, connection=url, prefix=prefix)
    try:
        out: List[str] = []
        for start in range(0, n, 500):
            batch = [{"name": "work", "data": {"s": seconds}} for _ in range(min(500, n - start))]
            out.extend(j.id for j in q.add_bulk(batch))
        return out
    finally:
        q.close()


def assert_every_job_ended_once(queue_r: "redis.Redis", keys: QueueKeys, ids: List[str]) -> None:
    """Every job of ``ids`` is completed, with exactly one end event, and ``active`` is empty."""
    completed = set(queue_r.zrange(keys.completed, 0, -1))
    lost = [i for i in ids if i not in completed]
    assert not lost, f"{len(lost)} job(s) not completed, e.g. {lost[:10]}"
    events = end_events(queue_r, keys)
    twice = {i: e for i, e in events.items() if len(e) != 1}
    assert not twice, f"jobs with more than one end event: {dict(list(twice.items())[:10])}"
    assert queue_r.llen(keys.active) == 0


def record_figure(name: str, value: float, unit: str) -> None:
    """Add a measured figure to the JSON file named by ``$ECHOMQ_CHAOS_REPORT`` (``make
    chaos`` sets it; docs/reliability.md quotes it); nothing without it."""
    path = os.environ.get("ECHOMQ_CHAOS_REPORT")
    if not path:
        return
    data: Dict[str, Any] = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    data[name] = {"value": round(value, 2), "unit": unit}
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)

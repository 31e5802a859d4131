"""Comparison helpers shared by the interop tests (no fixtures here)."""
from __future__ import annotations

import base64
import time
import uuid
from typing import Any, Dict, List, Optional

import redis

from echomq_gevent.protocol.clock import now_ms
from echomq_gevent.protocol.keys import QueueKeys

#: Node ``Job`` attribute -> our ``Job`` attribute, for every field both decode from the hash.
JOB_FIELDS = [
    ("id", "id"),
    ("name", "name"),
    ("data", "data"),
    ("opts", "opts"),
    ("progress", "progress"),
    ("attemptsMade", "attempts_made"),
    ("attemptsStarted", "attempts_started"),
    ("stalledCounter", "stalled_counter"),
    ("timestamp", "timestamp"),
    ("delay", "delay"),
    ("priority", "priority"),
    ("processedOn", "processed_on"),
    ("finishedOn", "finished_on"),
    ("returnvalue", "returnvalue"),
    ("failedReason", "failed_reason"),
    ("stacktrace", "stacktrace"),
    ("parentKey", "parent_key"),
    ("parent", "parent"),
    ("repeatJobKey", "repeat_job_key"),
    ("processedBy", "processed_by"),
    ("deferredFailure", "deferred_failure"),
]

_MISSING = "<attribute missing>"

#: The count types Node's getJobCounts() reports by default in v6.
COUNT_TYPES = ["active", "completed", "delayed", "failed", "prioritized", "waiting",
               "waiting-children"]


def ours_as_node(job: Any) -> Dict[str, Any]:
    """Our Job's decoded fields under Node's attribute names."""
    return {node: getattr(job, py, _MISSING) for node, py in JOB_FIELDS}


def node_fields(view: Dict[str, Any]) -> Dict[str, Any]:
    """The same fields from a Node job view (absent in JSON = undefined in Node = None)."""
    out = {node: view.get(node) for node, _ in JOB_FIELDS}
    # Node builds an absent stacktrace as [] and an absent progress as 0, and keeps the
    # attribute; the JSON view only drops undefined, so nothing else needs normalising.
    return out


def assert_same_job(ours: Any, theirs: Dict[str, Any], ignore: tuple = ()) -> None:
    """Every decoded field of our Job equals Node's, with a diff naming the fields."""
    assert ours is not None, f"our Queue could not read job {theirs.get('id')!r} that Node sees"
    mine = ours_as_node(ours)
    node = node_fields(theirs)
    diff = {k: {"ours": mine[k], "node": node[k]} for k in mine
            if k not in ignore and mine[k] != node[k]}
    assert not diff, f"job {theirs.get('id')!r}: fields differ from Node's Job: {diff}"


def token() -> str:
    """A lock token shaped like Node's ``<uuid>:<n>``."""
    return f"{uuid.uuid4()}:0"


def dump_queue(r: redis.Redis, keys: QueueKeys) -> Dict[str, Any]:
    """Every key of a queue as (suffix -> comparable content), for twin comparisons.

    Stream entries lose their ids (times differ); ``meta.version`` is dropped (Node's Queue
    writes its package version, which no script reads).
    """
    out: Dict[str, Any] = {}
    for key in sorted(r.scan_iter(match=keys.base + "*", count=1000)):
        suffix = key[len(keys.base):]
        kind = r.type(key)
        if kind == "hash":
            value: Any = r.hgetall(key)
            if key == keys.meta:
                value.pop("version", None)
        elif kind == "list":
            value = r.lrange(key, 0, -1)
        elif kind == "zset":
            value = r.zrange(key, 0, -1, withscores=True)
        elif kind == "set":
            value = sorted(r.smembers(key))
        elif kind == "stream":
            value = [fields for _id, fields in r.xrange(key)]
        else:
            value = r.get(key)
        out[suffix] = (kind, value)
    return out


def worker_client_name(prefix: str, queue: str) -> str:
    """CLIENT SETNAME of a Node worker's blocking connection (docs/architecture.md, "Where things run")."""
    return f"{prefix}:{base64.b64encode(queue.encode()).decode()}"


def wait_blocked_on_marker(r: redis.Redis, prefix: str, queue: str, timeout: float = 10.0,
                           count: int = 1) -> None:
    """Poll CLIENT LIST until ``count`` workers' blocking connections (Node's or ours: both
    name them after the queue) sit in BZPOPMIN together."""
    name = worker_client_name(prefix, queue)
    deadline = time.monotonic() + timeout
    while True:
        blocked = sum(1 for client in r.client_list()
                      if client.get("name", "").startswith(name) and client.get("cmd") == "bzpopmin")
        if blocked >= count:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{count} worker(s) on {prefix}:{queue} never blocked in BZPOPMIN "
                                 f"together within {timeout}s (saw {blocked})")
        time.sleep(0.01)


def finish_opts(tok: str, attempts: int = 0,
                keep: Optional[Dict[str, int]] = None) -> Dict[str, Any]:
    """ARGV[8] of moveToFinished as a worker would send it."""
    return {"token": tok, "keepJobs": keep or {"count": -1}, "lockDuration": 30000,
            "attempts": attempts, "maxMetricsSize": ""}


def take(queue: Any, expect_id: Optional[str] = None) -> tuple:
    """moveToActive once through our scripts; returns (job_id, token). Asserts a job came."""
    tok = token()
    res = queue.scripts.move_to_active(tok, 30000, now_ms())
    assert res and res[1] not in (0, "0", None), f"moveToActive returned no job: {res!r}"
    job_id = str(res[1])
    if expect_id is not None:
        assert job_id == expect_id, f"moveToActive took job {job_id}, expected {expect_id}"
    return job_id, tok


def event_names(lines: List[Dict[str, Any]]) -> List[str]:
    return [line.get("event") for line in lines]

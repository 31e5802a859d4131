"""Helpers for the worker-side script tests (``test_scripts_*.py``).

Jobs are written straight into Redis (hash fields as in docs/protocol.md, "The job hash"; ids pushed into the
state lists/sets by hand), so a test can build any state, including odd ones, without
depending on the add scripts.
"""
from __future__ import annotations

import json
import time
from typing import Any, Dict, List, Optional

import redis

from echomq_gevent.protocol.clock import now_ms
from echomq_gevent.protocol.keys import QueueKeys
from echomq_gevent.protocol.scripts import Scripts

TOKEN = "worker-token:0"
LOCK_MS = 30000


def make_job(r: "redis.Redis", keys: QueueKeys, job_id: str, *, name: str = "task",
             data: Any = None, opts: Optional[Dict[str, Any]] = None, timestamp: Optional[int] = None,
             priority: int = 0, delay: int = 0, **extra: Any) -> str:
    """HSET a job hash with the fields the add scripts write; ``extra`` adds more fields
    (``parentKey``, ``parent`` as a dict -> JSON, ``defa``, ``rjk``, ``deid``...)."""
    fields: Dict[str, Any] = {
        "name": name,
        "data": json.dumps({} if data is None else data),
        "opts": json.dumps(opts or {"attempts": 0}),
        "timestamp": timestamp if timestamp is not None else now_ms(),
        "delay": delay,
        "priority": priority,
    }
    for key, value in extra.items():
        fields[key] = json.dumps(value) if isinstance(value, dict) else value
    r.hset(keys.job(job_id), mapping=fields)
    return job_id


def add_waiting(r: "redis.Redis", keys: QueueKeys, job_id: str, lifo: bool = False, **kw: Any) -> str:
    """A standard job at the back of wait (LPUSH), or at the front when ``lifo``."""
    make_job(r, keys, job_id, **kw)
    if lifo:
        r.rpush(keys.wait, job_id)
    else:
        r.lpush(keys.wait, job_id)
    return job_id


def add_prioritized(r: "redis.Redis", keys: QueueKeys, job_id: str, priority: int, **kw: Any) -> str:
    """A job in prioritized with score priority*2^32 + INCR pc, as addPrioritizedJob does."""
    make_job(r, keys, job_id, priority=priority, **kw)
    counter = r.incr(keys.pc)
    r.zadd(keys.prioritized, {job_id: priority * 2 ** 32 + counter})
    return job_id


def add_delayed(r: "redis.Redis", keys: QueueKeys, job_id: str, due_ms: int, seq: int = 0, **kw: Any) -> str:
    """A job in delayed, due at ``due_ms`` (score due*4096 + seq)."""
    kw.setdefault("delay", 1000)
    make_job(r, keys, job_id, **kw)
    r.zadd(keys.delayed, {job_id: due_ms * 4096 + seq})
    return job_id


def fetch(scripts: Scripts, token: str = TOKEN, now: Optional[int] = None, **kw: Any) -> List[Any]:
    return scripts.move_to_active(token, LOCK_MS, now if now is not None else now_ms(), **kw)


def activate(scripts: Scripts, job_id: str, token: str = TOKEN, **kw: Any) -> List[Any]:
    """Fetch and check that ``job_id`` is the job that became active."""
    res = fetch(scripts, token, **kw)
    assert res[1] == job_id, f"expected job {job_id} to be fetched, got {res!r}"
    return res


def finish_opts(token: str = TOKEN, keep: Optional[Dict[str, Any]] = None, attempts: int = 1,
                metrics: Any = "", limiter: Optional[Dict[str, int]] = None,
                name: Optional[str] = None) -> Dict[str, Any]:
    """The ARGV[8] map of moveToFinished."""
    return {"token": token, "keepJobs": keep if keep is not None else {"count": -1},
            "lockDuration": LOCK_MS, "attempts": attempts, "maxMetricsSize": metrics,
            "limiter": limiter, "name": name}


def as_dict(flat: List[str]) -> Dict[str, str]:
    return dict(zip(flat[::2], flat[1::2]))


def queue_state(r: "redis.Redis", keys: QueueKeys) -> Dict[str, Any]:
    """Every key of the queue and its content (stream entries without their ids; the
    lock's time to live left out)."""
    out = {}
    for key in sorted(r.scan_iter(match=keys.base + "*")):
        kind = r.type(key)
        if kind == "hash":
            out[key] = r.hgetall(key)
        elif kind == "list":
            out[key] = r.lrange(key, 0, -1)
        elif kind == "set":
            out[key] = sorted(r.smembers(key))
        elif kind == "zset":
            out[key] = r.zrange(key, 0, -1, withscores=True)
        elif kind == "stream":
            out[key] = [fields for _, fields in r.xrange(key)]
        else:
            out[key] = r.get(key)
    # the queue's own name, wherever a value holds it, as "Q"
    return json.loads(json.dumps({k[len(keys.base):]: v for k, v in out.items()}).replace(keys.base[:-1], "Q"))

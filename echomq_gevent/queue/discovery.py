"""Finding the queues that exist under a prefix: a SCAN (never ``KEYS``) for each queue's
``events``, ``meta`` and ``id`` keys, BullMQ's marks of a queue.

Every BullMQ v6 add writes all three, whatever the job's id: ``addStandardJob``,
``addPrioritizedJob`` and ``addDelayedJob`` each ``XADD`` an ``added`` event to the
``events`` stream, ``INCR`` the ``id`` counter (also for a job with an id of its own) and
set ``opts.maxLenEvents`` in ``meta`` when it is missing; Node's ``Queue`` writes ``meta``
as it opens. The stream stays while the queue lives (it is capped, never deleted, by the
events a queue writes), so a queue is found even when its counter or its meta were
deleted by hand, or written by a producer that keeps neither.

Used by the dashboard (every queue under the prefix) and by the pools whose ``queues``
hold a pattern (``tenant-*``, :mod:`echomq_gevent.worker.pool.watch`). One pass over the
keyspace finds the three keys (``[emi][dev]*``, the exact suffix checked here), 5,000 keys
a SCAN call: its cost grows with the number of keys in the database, not with the queues
found.
"""
from __future__ import annotations

import fnmatch
from typing import Any, Set

from ..connection.cluster import scan_keys

__all__ = ["find_queues", "glob_escape", "QUEUE_MARKS"]

#: The keys whose presence says a queue exists (any one is enough).
QUEUE_MARKS = ("events", "meta", "id")
_SUFFIXES = tuple(":" + mark for mark in QUEUE_MARKS)


def glob_escape(text: str) -> str:
    """``text`` with the SCAN pattern's special characters escaped."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def find_queues(client: Any, prefix: str, pattern: str = "*", count: int = 5000) -> Set[str]:
    """The names of the queues under ``prefix`` that have an ``events``, ``meta`` or
    ``id`` key and match ``pattern`` (a glob on the queue name: ``*``, ``?``, ``[...]``).
    Any greenlet; one SCAN pass (on a Redis Cluster, one per primary)."""
    head = prefix + ":"
    found: Set[str] = set()
    for key in scan_keys(client, glob_escape(head) + pattern + ":[emi][dev]*", count=count):
        for suffix in _SUFFIXES:
            if key.endswith(suffix):
                name = key[len(head):-len(suffix)]
                # a job's own keys can match the glob too (<queue>:<id>:...): a queue name has no ':'
                if name and ":" not in name and fnmatch.fnmatchcase(name, pattern):
                    found.add(name)
    return found

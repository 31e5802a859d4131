"""Finding the queues that exist under a prefix: a SCAN (never ``KEYS``) for each queue's
``meta`` and ``id`` keys, BullMQ's marks of a queue (Node's ``Queue`` writes ``meta`` as it
opens; an add without a job id of its own counts in ``id``).

Used by the dashboard (every queue under the prefix) and by the pools whose ``queues``
hold a pattern (``tenant-*``, :mod:`echomq_gevent.host.families`). One pass over the
keyspace finds both keys (``[mi][ed]*``, the exact suffix checked here), 5,000 keys a SCAN
call: its cost grows with the number of keys in the database, not with the queues found.
"""
from __future__ import annotations

import fnmatch
from typing import Any, Set

from ..connection.cluster import scan_keys

__all__ = ["find_queues", "glob_escape"]

_SUFFIXES = (":meta", ":id")


def glob_escape(text: str) -> str:
    """``text`` with the SCAN pattern's special characters escaped."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def find_queues(client: Any, prefix: str, pattern: str = "*", count: int = 5000) -> Set[str]:
    """The names of the queues under ``prefix`` that have a ``meta`` or an ``id`` key and
    match ``pattern`` (a glob on the queue name: ``*``, ``?``, ``[...]``). Any greenlet;
    one SCAN pass (on a Redis Cluster, one per primary)."""
    head = prefix + ":"
    found: Set[str] = set()
    for key in scan_keys(client, glob_escape(head) + pattern + ":[mi][ed]*", count=count):
        for suffix in _SUFFIXES:
            if key.endswith(suffix):
                name = key[len(head):-len(suffix)]
                # a job's own keys can match the glob too (<queue>:<id>:...): a queue name has no ':'
                if name and ":" not in name and fnmatch.fnmatchcase(name, pattern):
                    found.add(name)
    return found

"""Finding queues by their marks on a real Redis: any of ``events``, ``meta`` and ``id``
makes a queue found; a job's own keys never do; the pattern is applied to the name."""
from __future__ import annotations

from echomq_gevent.queue.discovery import find_queues


def test_a_queue_is_found_by_any_of_its_marks_and_by_nothing_else(r, prefix):
    r.xadd(f"{prefix}:by-events:events", {"event": "added", "jobId": "a"})
    r.hset(f"{prefix}:by-meta:meta", "opts.maxLenEvents", 10000)
    r.set(f"{prefix}:by-id:id", 3)
    # not queues: a job's keys (a name with ':'), other keys of a queue alone, another prefix
    r.set(f"{prefix}:jobs-only:7:lock", "t")
    r.lpush(f"{prefix}:wait-only:wait", "1")
    r.hset(f"{prefix}:q:ev:events", "x", 1)
    r.xadd(f"{prefix}x:other:events", {"event": "added"})
    assert find_queues(r, prefix) == {"by-events", "by-meta", "by-id"}
    assert find_queues(r, prefix, "by-[em]*") == {"by-events", "by-meta"}
    assert find_queues(r, prefix, "nothing-*") == set()

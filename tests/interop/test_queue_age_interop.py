"""``getOldestJobTimestamp-1`` on a queue filled by Node's ``bullmq@6.7.0``: the script is
read only and gives the answer a twin queue filled by our ``Queue`` gives, and the one the
jobs' own timestamps and delays say."""
from __future__ import annotations

import pytest

from echomq_gevent import Queue

pytestmark = pytest.mark.interop

T0 = 1_700_000_000_000


def _jobs(with_due_delayed: bool):
    jobs = [{"name": "fifo", "data": {}, "opts": {"timestamp": T0 + 300}},
            {"name": "fifo2", "data": {}, "opts": {"timestamp": T0 + 400}},
            {"name": "lifo", "data": {}, "opts": {"timestamp": T0 + 200, "lifo": True}},
            {"name": "p5", "data": {}, "opts": {"timestamp": T0 + 100, "priority": 5}},
            {"name": "p1", "data": {}, "opts": {"timestamp": T0 + 500, "priority": 1}},
            {"name": "later", "data": {}, "opts": {"delay": 3_600_000}}]
    if with_due_delayed:  # due at T0 + 50, long past, and never promoted (no worker)
        jobs.append({"name": "due", "data": {}, "opts": {"timestamp": T0, "delay": 50}})
    return jobs


def _answer(queue):
    age = queue.get_queue_age()
    return age.oldest_timestamp, queue.get_job(age.job_id).name if age.job_id else None, age.state, age.paused


def _keys(r, queue):
    return {k: r.dump(k) for k in r.scan_iter(match=queue.keys.base + "*") if not k.endswith(":events")}


@pytest.mark.parametrize("with_due_delayed", [False, True])
def test_node_filled_and_python_filled_queues_give_the_same_oldest_job(node, redis_url, prefix, qname, r,
                                                                        with_due_delayed):
    node.run("addBulk", jobs=_jobs(with_due_delayed))
    theirs = Queue(qname, connection=redis_url, prefix=prefix)
    twin = Queue(qname + "-twin", connection=redis_url, prefix=prefix)
    try:
        twin.add_bulk(_jobs(with_due_delayed))
        before = _keys(r, theirs)
        expected = (T0 + 50, "due", "delayed", False) if with_due_delayed else (T0 + 100, "p5", "prioritized", False)
        assert _answer(theirs) == expected
        assert _answer(twin) == expected
        assert _keys(r, theirs) == before, "read only: nothing of the queue changed"
        node.run("pause")
        assert _answer(theirs) == expected[:3] + (True,)
    finally:
        theirs.close()
        twin.close()

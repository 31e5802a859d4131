"""Queue.cancel_job (cancelJob-9) on a real Redis, without a worker: every state, bad
input, the parent's failure policy, removeOnFail, idempotence."""
from __future__ import annotations

import json

import pytest

from echomq_gevent import FlowProducer

from integration.queue_helpers import take


def _snapshot(r, prefix, qname):
    keys = sorted(r.keys(f"{prefix}:{qname}:*"))
    return {k: r.dump(k) for k in keys}


@pytest.mark.parametrize("opts, state", [
    ({}, "waiting"),
    ({"delay": 60000}, "delayed"),
    ({"priority": 3}, "prioritized"),
])
def test_a_job_that_waits_fails_at_once_and_never_runs(queue, r, prefix, qname, events, opts, state):
    job = queue.add("j", {"x": 1}, opts)
    out = queue.cancel_job(job.id, "not wanted")
    assert (out.outcome, out.state, out.changed) == ("cancelled", state, True)
    back = queue.get_job(job.id)
    assert queue.get_job_state(job.id) == "failed"
    assert back.failed_reason == "job cancelled: not wanted" and back.finished_on
    assert r.lrange(f"{prefix}:{qname}:active", 0, -1) == []
    assert r.zcard(f"{prefix}:{qname}:delayed") == 0 and r.zcard(f"{prefix}:{qname}:prioritized") == 0
    failed = [e for e in events() if e["event"] == "failed"]
    assert failed == [{"event": "failed", "jobId": job.id, "failedReason": "job cancelled: not wanted",
                       "prev": state}]
    assert "retries-exhausted" in events.names()


def test_no_reason_and_remove_on_fail(queue, r, prefix, qname):
    job = queue.add("j", {}, {"removeOnFail": True})
    assert queue.cancel_job(job.id).outcome == "cancelled"
    assert not r.exists(f"{prefix}:{qname}:{job.id}") and r.zcard(f"{prefix}:{qname}:failed") == 0
    kept = [queue.add("k", {}, {"removeOnFail": 1}) for _ in range(3)]
    for j in kept:
        queue.cancel_job(j.id)
    assert r.zrange(f"{prefix}:{qname}:failed", 0, -1) == [kept[-1].id]
    assert queue.get_job(kept[-1].id).failed_reason == "job cancelled"


def test_finished_jobs_are_left_alone_and_a_second_call_changes_nothing(queue, r, prefix, qname):
    job = queue.add("j", {})
    assert queue.cancel_job(job.id, "once").outcome == "cancelled"
    before = _snapshot(r, prefix, qname)
    again = queue.cancel_job(job.id, "twice")
    assert (again.outcome, again.state, again.changed) == ("finished", "failed", False)
    assert _snapshot(r, prefix, qname) == before


def test_a_missing_id_writes_nothing(queue, r, prefix, qname):
    queue.add("j", {})
    before = _snapshot(r, prefix, qname)
    out = queue.cancel_job("no-such-job", "x")
    assert (out.outcome, out.state) == ("missing", "unknown")
    assert "does not exist" in out.describe()
    assert _snapshot(r, prefix, qname) == before


@pytest.mark.parametrize("reason", [123, b"bytes", ["a"], "x" * 1001])
def test_a_bad_reason_is_refused_before_anything_is_written(queue, r, prefix, qname, reason):
    job = queue.add("j", {})
    before = _snapshot(r, prefix, qname)
    with pytest.raises(ValueError, match="reason"):
        queue.cancel_job(job.id, reason)
    assert _snapshot(r, prefix, qname) == before
    assert queue.cancel_job(job.id, "x" * 1000).outcome == "cancelled"


def test_an_active_job_is_marked_and_signalled(queue, r, prefix, qname):
    job = queue.add("j", {})
    take(queue)
    pubsub = r.pubsub()
    pubsub.subscribe(f"{prefix}:{qname}:cancellation")
    pubsub.get_message(timeout=1)  # the subscribe confirmation
    out = queue.cancel_job(job.id, "stop it")
    assert (out.outcome, out.state) == ("accepted", "active")
    msg = pubsub.get_message(timeout=2)
    assert json.loads(msg["data"]) == {"jobId": job.id, "reason": "stop it", "queue": f"{prefix}:{qname}:"}
    pubsub.close()
    assert r.hget(f"{prefix}:{qname}:{job.id}", "cancelled") == "stop it"
    assert r.hget(f"{prefix}:{qname}:{job.id}", "defa") == "job cancelled: stop it"
    assert queue.get_job_state(job.id) == "active"


def test_a_parent_waiting_for_children_fails_and_a_child_applies_fpof(queue, redis_url, prefix, r):
    kids_name = queue.name + "-kids"
    producer = FlowProducer(connection=redis_url, prefix=prefix)
    try:
        tree = producer.add({"name": "p", "queueName": queue.name, "children": [
            {"name": "c1", "queueName": kids_name, "opts": {"failParentOnFailure": True}},
            {"name": "c2", "queueName": kids_name},
        ]})
    finally:
        producer.close()
    parent = tree["job"]
    c1 = tree["children"][0]["job"]
    from echomq_gevent import Queue
    kids = Queue(kids_name, connection=redis_url, prefix=prefix)
    try:
        out = kids.cancel_job(c1.id, "bad child")
        assert out.outcome == "cancelled" and out.state == "waiting"
        # failParentOnFailure: the parent leaves waiting-children with a deferred failure
        assert r.zscore(f"{prefix}:{queue.name}:{parent.id}:unsuccessful", f"{prefix}:{kids_name}:{c1.id}")
        assert r.hget(f"{prefix}:{queue.name}:{parent.id}", "defa")
        assert queue.get_job_state(parent.id) == "waiting"
        # the other way: cancel a parent that waits for its children
        producer = FlowProducer(connection=redis_url, prefix=prefix)
        try:
            tree2 = producer.add({"name": "p2", "queueName": queue.name,
                                  "children": [{"name": "c", "queueName": kids_name}]})
        finally:
            producer.close()
        out2 = queue.cancel_job(tree2["job"].id)
        assert (out2.outcome, out2.state) == ("cancelled", "waiting-children")
        assert queue.get_job_state(tree2["job"].id) == "failed"
    finally:
        kids.close()

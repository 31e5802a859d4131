"""Our ``QueueEvents`` and ``Job.wait_until_finished`` beside the real Node ``bullmq@6.7.0``.

Both QueueEvents read one stream; for jobs run by a Node worker and by ours they must
report the same events, with the same decoded fields and the same entry ids.
"""
from __future__ import annotations

import gevent.event
import pytest

from echomq_gevent.queue.events import JobFailedError, QueueEvents, QueueEventsProducer

pytestmark = pytest.mark.interop

_BEHAVIOUR = {
    "ok": {"progress": [10, {"p": "x"}], "return": {"r": [1, "é"]}},
    "flaky": {"failTimes": 1, "failMessage": "first try fails", "return": "fine"},
    "doomed": {"failTimes": 9, "failMessage": "always broken"},
}


def _collect(qe: QueueEvents) -> list:
    seen: list = []
    for name in ("added", "waiting", "active", "progress", "completed", "failed", "delayed",
                 "retries-exhausted", "drained", "stalled", "removed"):
        qe.on(name, lambda args, eid, name=name: seen.append((name, args, eid)))
    qe.on("sentinel", lambda args, eid: seen.append(("sentinel", args, eid)), custom=True)
    return seen


def _reached(qe: QueueEvents, name: str) -> gevent.event.Event:
    flag = gevent.event.Event()
    qe.once(name, lambda _args, _eid: flag.set(), custom=True)
    return flag


@pytest.mark.parametrize("side", ["node", "python"])
def test_our_queue_events_sees_what_node_queue_events_sees(node, redis_url, prefix, qname, queue, side):
    ours = QueueEvents(qname, connection=redis_url, prefix=prefix, blocking_timeout=1000)
    try:
        seen = _collect(ours)
        end = _reached(ours, "sentinel")
        theirs = node.events()
        assert ours.wait_until_ready(10)
        queue.add_bulk([
            ("ok", {"n": 1}, None),
            ("flaky", {"n": 2}, {"attempts": 2, "backoff": {"type": "fixed", "delay": 50}}),
            ("doomed", {"n": 3}, None),
        ])
        if side == "node":
            worker = node.worker(workerOpts={"concurrency": 1}, byName=_BEHAVIOUR, stopAfter=3)
        else:
            worker = node.python_worker(workerOpts={"concurrency": 1, "drain_delay": 1}, byName=_BEHAVIOUR,
                                        stopAfter=3)
        worker.wait_event("exit", timeout=30)
        with QueueEventsProducer(qname, connection=redis_url, prefix=prefix) as producer:
            producer.publish_event("sentinel", {"end": "yes"})
        theirs.wait_event("sentinel", timeout=10)
        assert end.wait(10), f"our reader did not reach the sentinel; it saw {seen}"
        node_lines = [(ln["event"], ln.get("args") or {}, ln["id"]) for ln in theirs.snapshot()
                      if ln["event"] not in ("ready", "exit")]
        assert [ln for ln in node_lines if ln[0] == "error"] == []
        assert seen == node_lines
        names = [n for n, _a, _i in seen]
        for expected in ("progress", "completed", "failed", "delayed", "retries-exhausted", "drained"):
            assert expected in names, names
        progress = [a["data"] for n, a, _i in seen if n == "progress"]
        assert progress == [10, {"p": "x"}]
        completed = {a["jobId"]: a["returnvalue"] for n, a, _i in seen if n == "completed"}
        assert sorted(map(repr, completed.values())) == sorted(map(repr, [{"r": [1, "é"]}, "fine"]))
    finally:
        ours.close()


def test_wait_until_finished_on_jobs_a_node_worker_runs(node, redis_url, prefix, qname, queue):
    qe = QueueEvents(qname, connection=redis_url, prefix=prefix, blocking_timeout=1000)
    try:
        ok = queue.add("ok", {"n": 1})
        doomed = queue.add("doomed", {"n": 2})
        node.worker(workerOpts={"concurrency": 2}, byName=_BEHAVIOUR, stopAfter=2)
        assert ok.wait_until_finished(qe, timeout=20) == {"r": [1, "é"]}
        with pytest.raises(JobFailedError, match="always broken"):
            doomed.wait_until_finished(qe, timeout=20)
        # and the other way round: Node waits on a job our worker runs
        mine = queue.add("ok", {"n": 3})
        node.python_worker(workerOpts={"concurrency": 1, "drain_delay": 1}, byName=_BEHAVIOUR, stopAfter=1)
        assert node.run("waitUntilFinished", jobId=mine.id, ttl=20000)["returnvalue"] == {"r": [1, "é"]}
        assert mine.wait_until_finished(qe, timeout=5) == {"r": [1, "é"]}
    finally:
        qe.close()


def test_wait_until_finished_on_a_removed_job_rejects_as_node_does(node, redis_url, prefix, qname, queue):
    """A job completed with removeOnComplete has no hash left: Node's waitUntilFinished
    rejects with isFinished's "Missing key for job <key>. isFinished", and ours raises
    JobFailedError with the very same text (from our isFinished-3)."""
    qe = QueueEvents(qname, connection=redis_url, prefix=prefix, blocking_timeout=1000)
    try:
        job = queue.add("ok", {"n": 1}, {"removeOnComplete": True})
        node.python_worker(workerOpts={"concurrency": 1, "drain_delay": 1}, byName=_BEHAVIOUR,
                           stopAfter=1).wait_event("exit", timeout=30)
        assert not queue.scripts.client.exists(queue.keys.job(job.id))
        theirs = node.run_line("waitUntilFinished", jobId=job.id, ttl=5000, removed=True)
        assert not theirs["ok"], theirs
        assert theirs["error"] == f"Missing key for job {queue.keys.job(job.id)}. isFinished"
        with pytest.raises(JobFailedError) as caught:
            job.wait_until_finished(qe, timeout=5)
        assert caught.value.failed_reason == theirs["error"]
    finally:
        qe.close()


# ---------------------------------------------------------------------------------------
# Metrics: Node's getMetrics reads the same numbers whichever worker served the queue
# ---------------------------------------------------------------------------------------

def test_node_get_metrics_equal_over_node_and_python_served_twins(node, r, redis_url, prefix, qname):
    import time

    from echomq_gevent import Queue

    # Both runs must finish inside one clock minute, or one twin records an extra point.
    while 60000 - int(time.time() * 1000) % 60000 < 25000:
        gevent.sleep(0.2)
    seed_ts = int(time.time() * 1000) - 3 * 60000
    twins = {"node": qname, "python": qname + "py"}
    jobs = [{"name": "ok", "data": {"i": i}} for i in range(3)] + [
        {"name": "doomed", "data": {}},
        {"name": "flaky", "data": {}, "opts": {"attempts": 2, "backoff": {"type": "fixed", "delay": 20}}}]
    for side, name in twins.items():
        q = Queue(name, connection=redis_url, prefix=prefix)
        for kind in ("completed", "failed"):
            r.hset(q.keys.metrics(kind), mapping={"count": 4, "prevTS": seed_ts, "prevCount": 1})
        q.close()
        node.run("addBulk", queue=name, jobs=jobs)
    opts = {"concurrency": 1, "metrics": {"maxDataPoints": 10}}
    runs = [node.worker(queue=twins["node"], workerOpts=opts, byName=_BEHAVIOUR, stopAfter=5),
            node.python_worker(queue=twins["python"], workerOpts=dict(opts, drain_delay=1), byName=_BEHAVIOUR,
                               stopAfter=5)]
    for run in runs:
        run.wait_event("exit", timeout=30)
    got = {side: {kind: node.run("queueCall", queue=name, method="getMetrics", args=[kind])
                  for kind in ("completed", "failed")} for side, name in twins.items()}
    for side in twins:
        for kind in ("completed", "failed"):
            assert got[side][kind]["meta"]["prevTS"] > seed_ts
            got[side][kind]["meta"].pop("prevTS")
    assert got["python"] == got["node"]
    assert got["node"]["completed"] == {"meta": {"count": 8, "prevCount": 4}, "data": [0, 0, 3], "count": 3}
    assert got["node"]["failed"]["meta"]["count"] == 5
    # and our get_metrics reads what Node reads
    q = Queue(twins["node"], connection=redis_url, prefix=prefix)
    ours = q.get_metrics("completed")
    q.close()
    ours["meta"].pop("prevTS")
    assert ours == got["node"]["completed"]


# ---------------------------------------------------------------------------------------
# Cancellation: a job cancelled on our worker ends failed, as Node's QueueEvents sees it
# ---------------------------------------------------------------------------------------

def test_a_job_cancelled_on_our_worker_is_failed_with_the_reason_node_sees(node, queue):
    watcher = node.events()
    long_job = queue.add("long", {})
    ours = node.python_worker(workerOpts={"drain_delay": 1}, behaviour={"sleepMs": 30000}, stopAfter=1)
    ours.wait_event("process", timeout=10, jobId=long_job.id)
    ours.send("cancel 999 nothing")
    refused = ours.wait_event("cancel-refused", timeout=5)
    assert "is not active on this worker" in refused["error"]
    ours.send(f"cancel {long_job.id} operator asked")
    ours.wait_event("cancelled", timeout=5, jobId=long_job.id)
    failed = watcher.wait_event("failed", timeout=10)
    assert failed["args"] == {"jobId": long_job.id, "failedReason": "job cancelled: operator asked",
                              "prev": "active"}
    assert node.run("getJob", jobId=long_job.id)["failedReason"] == "job cancelled: operator asked"

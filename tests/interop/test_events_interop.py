"""Our ``QueueEvents`` and ``Job.wait_until_finished`` beside the real Node ``bullmq@6.7.0``.

Both QueueEvents read one stream; for jobs run by a Node worker and by ours they must
report the same events, with the same decoded fields and the same entry ids.
"""
from __future__ import annotations

import gevent.event
import pytest

from echomq_gevent.events import JobFailedError, QueueEvents, QueueEventsProducer

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

"""Queue.cancel_job (cancelJob-9) on jobs a real Node ``bullmq@6.7.0`` worker runs or
will run. A Node worker does not subscribe to the cancellation channel: a job it runs
goes on running; what happens next is what these tests pin down."""
from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.interop


def _until(predicate, timeout=15.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_node_worker_runs_on_and_its_retry_meets_the_deferred_failure(node, queue, r, prefix, qname):
    worker = node.worker(workerOpts={"drainDelay": 1},
                         byName={"fails": {"sleepMs": 800, "failTimes": 1, "failMessage": "node failed"},
                                 "completes": {"sleepMs": 800, "return": "done"}})
    failing = queue.add("fails", {}, {"attempts": 3})
    worker.wait_event("process", timeout=15)
    out = queue.cancel_job(failing.id, "stop")
    assert (out.outcome, out.state) == ("accepted", "active")
    # the processor runs to its end (no signal reaches it), fails with attempts left; Node
    # retries it, and the retry's pick-up meets "defa": failed without running again
    _until(lambda: queue.get_job_state(failing.id) == "failed", what="the job to fail")
    back = queue.get_job(failing.id)
    assert back.failed_reason == "job cancelled: stop"
    assert len([ln for ln in worker.events("process") if ln["jobId"] == failing.id]) == 1
    assert back.attempts_made == 2  # the failed run and the deferred failure

    completing = queue.add("completes", {}, {"attempts": 3})
    _until(lambda: queue.get_job_state(completing.id) == "active", what="the second job to run")
    assert queue.cancel_job(completing.id, "too slow").outcome == "accepted"
    _until(lambda: queue.get_job_state(completing.id) == "completed", what="the job to complete")
    assert queue.get_job(completing.id).returnvalue == "done"
    # Node's own moveToFinished leaves the mark behind on a completed job
    fields = r.hgetall(f"{prefix}:{qname}:{completing.id}")
    assert fields.get("cancelled") == "too slow" and fields.get("defa") == "job cancelled: too slow"
    worker.stop()


def test_a_job_cancelled_while_waiting_never_reaches_a_node_worker(node, queue):
    job = queue.add("j", {}, {"delay": 300})
    assert queue.cancel_job(job.id, "not needed").outcome == "cancelled"
    worker = node.worker(workerOpts={"drainDelay": 1}, behaviour={"return": 1})
    time.sleep(1.0)
    assert worker.events("process") == []
    assert queue.get_job(job.id).failed_reason == "job cancelled: not needed"
    worker.stop()

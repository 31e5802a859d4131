"""Plugins change what the worker does, on real Redis: processors by job name, failure
policies, custom backoff, telemetry in order, and a raising telemetry plugin that never
fails a job."""
from __future__ import annotations

import inspect
import time
from typing import Any, List, Tuple

import gevent
import pluggy
import pytest

from echomq_gevent import DelayedError, FailureDecision, RateLimitError, hookimpl
from echomq_gevent.plugins.host import PluginHost, make_plugin_manager
from echomq_gevent.queue.queue import Queue




class Recorder:
    """Telemetry plugin that records every event as (event, job id, extra)."""

    def __init__(self) -> None:
        self.__name__ = "test-recorder"
        self.events: List[Tuple[str, Any, Any]] = []

    def of(self, job_id: str) -> List[str]:
        return [e for e, j, _x in self.events if j == job_id]

    @hookimpl
    def echomq_worker_started(self, worker):
        self.events.append(("worker_started", None, worker.queue_name))

    @hookimpl
    def echomq_worker_stopping(self, worker, reason):
        self.events.append(("worker_stopping", None, reason))

    @hookimpl
    def echomq_job_active(self, job):
        self.events.append(("active", job.id, job.attempts_made))

    @hookimpl
    def echomq_job_completed(self, job, result, duration_ms):
        assert duration_ms >= 0
        self.events.append(("completed", job.id, result))

    @hookimpl
    def echomq_job_retried(self, job, error, delay_ms):
        self.events.append(("retried", job.id, delay_ms))

    @hookimpl
    def echomq_job_failed(self, job, error):
        self.events.append(("failed", job.id, str(error)))

    @hookimpl
    def echomq_job_moved(self, job, state, error):
        self.events.append(("moved", job.id, state))


class Exploding:
    """Telemetry plugin whose every hook raises."""

    __name__ = "test-exploding"

    def __init__(self) -> None:
        self.calls = 0

    def _boom(self) -> None:
        self.calls += 1
        raise RuntimeError("telemetry is broken")

    @hookimpl
    def echomq_worker_started(self):
        self._boom()

    @hookimpl
    def echomq_job_active(self):
        self._boom()

    @hookimpl
    def echomq_job_completed(self):
        self._boom()

    @hookimpl
    def echomq_job_retried(self):
        self._boom()

    @hookimpl
    def echomq_job_failed(self):
        self._boom()


@pytest.fixture
def run_worker(redis_url, prefix, qname):
    """Start a Worker on the test queue with the given plugins; closed afterwards."""
    from echomq_gevent.worker.worker import Worker

    started = []

    def start(*plugins, processor=None, **options):
        host = PluginHost(make_plugin_manager(list(plugins)))
        options.setdefault("drain_delay", 0.2)
        options.setdefault("stalled_interval", 5000)
        w = Worker(qname, processor=processor, connection=redis_url, prefix=prefix, plugins=host, **options)
        w.start()
        started.append(w)
        return w

    yield start
    for w in started:
        w.close(timeout=5)


def state_is(queue: Queue, job_id: str, *states: str):
    return lambda: queue.get_job_state(job_id) in states


class Processors:
    """Routes job names of the test queue to small functions."""

    __name__ = "test-processors"

    def __init__(self, qname: str) -> None:
        self.qname = qname
        self.failures_left = {}

    def ok(self, job):
        return {"ok": job.data}

    def flaky(self, job):
        left = self.failures_left.get(job.id, 1)
        if left > 0:
            self.failures_left[job.id] = left - 1
            raise RuntimeError(f"flaky failure of job {job.id}")
        return "recovered"

    def broken(self, job):
        raise ValueError(f"job {job.id} is broken")

    @hookimpl
    def echomq_register_processors(self, registry):
        registry.add(self.qname, "ok", self.ok)
        registry.add(self.qname, "flaky", self.flaky)

    @hookimpl
    def echomq_get_processor(self, queue, job_name):
        if queue == self.qname and job_name == "broken":
            return self.broken
        return None


# --- processors ------------------------------------------------------------------------------------------
def test_plugin_processors_serve_by_name_and_unknown_names_fail_clearly(queue, run_worker, qname, wait_for):
    rec = Recorder()
    run_worker(Processors(qname), rec, concurrency=2)
    unknown = queue.add("no-such-job", {})
    ok = queue.add("ok", {"n": 1})
    wait_for(state_is(queue, ok.id, "completed"), what="the routed job to complete")
    wait_for(state_is(queue, unknown.id, "failed"), what="the unknown job to fail")
    assert queue.get_job(ok.id).returnvalue == {"ok": {"n": 1}}
    reason = queue.get_job(unknown.id).failed_reason
    assert "no-such-job" in reason and qname in reason, reason
    # the worker carries on after the unknown name
    later = queue.add("ok", {"n": 2})
    wait_for(state_is(queue, later.id, "completed"), what="a later job to complete")


# --- telemetry -----------------------------------------------------------------------------------------------
def test_telemetry_sees_every_lifecycle_event_in_order(queue, run_worker, qname, wait_for):
    rec = Recorder()
    w = run_worker(Processors(qname), rec, concurrency=1)
    good = queue.add("ok", {"x": 1})
    flaky = queue.add("flaky", {}, {"attempts": 2})
    bad = queue.add("broken", {}, {"attempts": 1})
    for j in (good, flaky, bad):
        wait_for(state_is(queue, j.id, "completed", "failed"), what=f"job {j.id} to finish")
    wait_for(lambda: len(rec.of(bad.id)) >= 2, what="the failure event")
    w.close(timeout=5)
    assert rec.events[0][0] == "worker_started"
    assert rec.of(good.id) == ["active", "completed"]
    assert rec.of(flaky.id) == ["active", "retried", "active", "completed"]
    assert rec.of(bad.id) == ["active", "failed"]
    assert rec.events[-1][0] == "worker_stopping"
    attempts = [x for e, j, x in rec.events if j == flaky.id and e == "active"]
    assert attempts == [0, 1]


def test_a_raising_telemetry_plugin_never_fails_a_job(queue, run_worker, qname, wait_for):
    boom, rec = Exploding(), Recorder()
    run_worker(Processors(qname), boom, rec)
    job = queue.add("ok", {"y": 2})
    wait_for(state_is(queue, job.id, "completed", "failed"), what="the job to finish")
    assert queue.get_job_state(job.id) == "completed"
    assert queue.get_job(job.id).returnvalue == {"ok": {"y": 2}}
    assert boom.calls >= 2  # it was called, and raised, for active and completed
    wait_for(lambda: rec.of(job.id) == ["active", "completed"], what="the other plugin's events")


# --- failure policy ------------------------------------------------------------------------------------------
class Policy:
    __name__ = "test-policy"

    def __init__(self, decide) -> None:
        self.decide = decide

    @hookimpl
    def echomq_failure_decision(self, worker, job, error):
        return self.decide(job, error)


def test_policy_fail_stops_retries_that_attempts_would_allow(queue, run_worker, qname, wait_for):
    run_worker(Processors(qname), Policy(lambda job, err: FailureDecision.fail()))
    job = queue.add("broken", {}, {"attempts": 5})
    wait_for(state_is(queue, job.id, "failed"), what="the job to fail")
    assert queue.get_job(job.id).attempts_made == 1


def test_policy_retry_retries_beyond_attempts_with_its_delay(queue, run_worker, qname, wait_for):
    procs = Processors(qname)
    decided = []

    def decide(job, err):
        decided.append(job.attempts_made)
        return FailureDecision.retry(delay=300)

    run_worker(procs, Policy(decide))
    job = queue.add("flaky", {}, {"attempts": 1})  # BullMQ's rule would fail it at once
    wait_for(lambda: queue.get_job_state(job.id) == "delayed", what="the job to be delayed")
    wait_for(state_is(queue, job.id, "completed"), what="the retried job to complete")
    done = queue.get_job(job.id)
    assert done.returnvalue == "recovered" and done.attempts_made == 2
    assert decided == [0]


def test_policy_unrecoverable_and_default(queue, run_worker, qname, wait_for):
    def decide(job, err):
        if job.data.get("fatal"):
            return FailureDecision.unrecoverable()
        return None  # BullMQ's rule

    procs = Processors(qname)
    procs.failures_left = {}
    run_worker(procs, Policy(decide), concurrency=2)
    fatal = queue.add("broken", {"fatal": True}, {"attempts": 3})
    normal = queue.add("flaky", {}, {"attempts": 3})
    wait_for(state_is(queue, fatal.id, "failed"), what="the fatal job to fail")
    wait_for(state_is(queue, normal.id, "completed"), what="the normal job to complete after a retry")
    assert queue.get_job(fatal.id).attempts_made == 1
    assert queue.get_job(normal.id).attempts_made == 2


def test_policy_move_sends_a_copy_to_another_queue(queue, run_worker, qname, redis_url, prefix, wait_for):
    dlq_name = qname + "-dlq"
    run_worker(Processors(qname), Policy(lambda job, err: FailureDecision.move_to(dlq_name)))
    job = queue.add("broken", {"payload": 7}, {"attempts": 4})
    wait_for(state_is(queue, job.id, "failed"), what="the job to fail here")
    dlq = Queue(dlq_name, connection=redis_url, prefix=prefix)
    try:
        waiting = wait_for(lambda: dlq.get_jobs(["waiting"]), what="the copy in the other queue")
        assert [(j.name, j.data) for j in waiting] == [("broken", {"payload": 7})]
        assert waiting[0].attempts_made == 0
    finally:
        dlq.obliterate(force=True)
        dlq.close()


def test_a_raising_policy_falls_back_to_the_default_rule(queue, run_worker, qname, wait_for):
    def decide(job, err):
        raise RuntimeError("policy bug")

    run_worker(Processors(qname), Policy(decide))
    job = queue.add("flaky", {}, {"attempts": 2})
    wait_for(state_is(queue, job.id, "completed"), what="the job to complete by the default retry")


# --- custom backoff -----------------------------------------------------------------------------------------
class Linear:
    __name__ = "test-linear-backoff"

    def __init__(self) -> None:
        self.asked: List[Tuple[str, int, int]] = []

    @hookimpl
    def echomq_backoff_delay(self, backoff_type, attempts_made, delay, error, job):
        if backoff_type == "linear":
            self.asked.append((backoff_type, attempts_made, delay))
            return 5000 * attempts_made
        if backoff_type == "never":
            return -1
        return None


def test_custom_backoff_type_sets_the_delay(queue, run_worker, qname, r, prefix, wait_for):
    lin = Linear()
    run_worker(Processors(qname), lin)
    before = int(time.time() * 1000)
    job = queue.add("broken", {}, {"attempts": 3, "backoff": {"type": "linear", "delay": 10}})
    wait_for(state_is(queue, job.id, "delayed"), what="the job to be delayed by the custom backoff")
    score = r.zscore(f"{prefix}:{qname}:delayed", job.id)
    due = int(score) >> 12
    assert before + 5000 <= due <= int(time.time() * 1000) + 5000
    assert lin.asked == [("linear", 1, 10)]


def test_custom_backoff_minus_one_fails_the_job(queue, run_worker, qname, wait_for):
    run_worker(Processors(qname), Linear())
    job = queue.add("broken", {}, {"attempts": 3, "backoff": {"type": "never"}})
    wait_for(state_is(queue, job.id, "failed"), what="the job to fail without retry")
    assert queue.get_job(job.id).attempts_made == 1


def test_unknown_backoff_type_fails_the_job_and_logs_the_type(queue, run_worker, qname, caplog, wait_for):
    run_worker(Processors(qname))
    job = queue.add("broken", {}, {"attempts": 3, "backoff": {"type": "nobody-knows"}})
    wait_for(state_is(queue, job.id, "failed"), what="the job to fail")
    assert queue.get_job(job.id).attempts_made == 1
    assert any("nobody-knows" in rec.getMessage() for rec in caplog.records)


# --- the remaining lifecycle events: stalled, lock lost, handed back -------------------------------------------
class Sink:
    """Records stalled / lock-lost / handed-back events."""

    __name__ = "test-sink"

    def __init__(self) -> None:
        self.events: List[Tuple[str, Any]] = []

    @hookimpl
    def echomq_job_active(self, job):
        self.events.append(("active", job.id))

    @hookimpl
    def echomq_job_completed(self, job):
        self.events.append(("completed", job.id))

    @hookimpl
    def echomq_job_stalled(self, queue, job_id):
        self.events.append(("stalled", job_id))

    @hookimpl
    def echomq_job_lock_lost(self, job):
        self.events.append(("lock_lost", job.id))

    @hookimpl
    def echomq_job_handed_back(self, job):
        self.events.append(("handed_back", job.id))


def nap(job):
    gevent.sleep(float(job.data.get("s", 0)))
    return "woke"


def test_telemetry_sees_a_stalled_job_recovered(queue, run_worker, wait_for):
    import uuid

    job = queue.add("nap", {"s": 0})
    # a "crashed" worker took it: active, but its lock is gone
    res = queue.scripts.move_to_active(uuid.uuid4().hex, 30000, int(time.time() * 1000))
    assert res[1] == job.id
    queue.client.delete(queue.keys.lock(job.id))
    sink = Sink()
    run_worker(sink, processor=nap, stalled_interval=300)
    wait_for(state_is(queue, job.id, "completed"), what="the stalled job to be recovered and completed")
    assert [e for e in sink.events if e[1] == job.id] == [("stalled", job.id), ("active", job.id),
                                                           ("completed", job.id)]


def test_telemetry_sees_a_lost_lock_and_the_result_is_not_written(queue, run_worker, wait_for):
    sink = Sink()
    woke = []

    def nap_and_tell(job):
        try:
            return nap(job)
        finally:  # returned, or cancelled because its lock was lost
            woke.append(job.id)
    w = run_worker(sink, processor=nap_and_tell, lock_duration=1000)
    job = queue.add("nap", {"s": 2.5})
    wait_for(lambda: ("active", job.id) in sink.events, what="the job to start")
    queue.client.set(queue.keys.lock(job.id), "another-worker", px=60000)  # someone else owns it now
    wait_for(lambda: ("lock_lost", job.id) in sink.events, what="the lock-lost event")
    # the processor ends, then the worker settles (here: discards) and frees the slot
    wait_for(lambda: woke == [job.id] and not w.active_jobs, what="the processor to end and its slot to free")
    assert ("completed", job.id) not in sink.events
    assert queue.get_job_state(job.id) == "active"
    assert queue.get_job(job.id).returnvalue is None


def test_telemetry_sees_jobs_handed_back_at_shutdown(queue, run_worker, wait_for):
    sink = Sink()
    w = run_worker(sink, processor=nap, concurrency=2)
    jobs = [queue.add("nap", {"s": 30}) for _ in range(2)]
    wait_for(lambda: all(("active", j.id) in sink.events for j in jobs), what="both jobs to start")
    w.close(timeout=0.2)
    assert sorted(e for e in sink.events if e[0] == "handed_back") == sorted(("handed_back", j.id) for j in jobs)
    assert {queue.get_job_state(j.id) for j in jobs} == {"waiting"}


# --- the built-in default policy is itself a plugin ------------------------------------------------------------
def test_builtin_plugin_answers_bullmq_rule_when_no_user_plugin_decides():
    import types

    from echomq_gevent import UnrecoverableError

    host = PluginHost(make_plugin_manager([Policy(lambda job, err: None)]))
    worker = types.SimpleNamespace(options={"max_started_attempts": None}, plugins=host)

    def job(made, attempts, backoff=None, started=0):
        opts = {"attempts": attempts}
        if backoff is not None:
            opts["backoff"] = backoff
        return types.SimpleNamespace(id="1", queue_name="q", opts=opts, attempts_made=made,
                                     attempts_started=started)

    err = RuntimeError("x")
    assert host.failure_decision(worker, job(0, 3, {"type": "exponential", "delay": 100}), err) == \
        FailureDecision.retry(100)
    assert host.failure_decision(worker, job(1, 3, {"type": "exponential", "delay": 100}), err) == \
        FailureDecision.retry(200)
    assert host.failure_decision(worker, job(0, 3, 250), err) == FailureDecision.retry(250)
    assert host.failure_decision(worker, job(0, 3), err) == FailureDecision.retry(0)
    assert host.failure_decision(worker, job(2, 3), err) == FailureDecision.fail()
    assert host.failure_decision(worker, job(0, 0), err) == FailureDecision.fail()
    assert host.failure_decision(worker, job(0, 3), UnrecoverableError("no")) == FailureDecision.unrecoverable()
    assert host.failure_decision(worker, job(0, 3, {"type": "mystery"}), err) == FailureDecision.fail()
    worker.options["max_started_attempts"] = 2
    assert host.failure_decision(worker, job(0, 5, started=2), err) == FailureDecision.fail()
    names = [impl.plugin_name for impl in host.pm.hook.echomq_failure_decision.get_hookimpls()]
    assert names[0] == "echomq_gevent.builtin"  # asked last


class SelfMoving:
    """Processors that move their job themselves: once to delayed, once rate limited."""

    __name__ = "test-self-moving"

    def __init__(self, qname: str) -> None:
        self.qname = qname
        self.runs: dict = {}

    def later(self, job):
        self.runs[job.id] = self.runs.get(job.id, 0) + 1
        if self.runs[job.id] == 1:
            job.move_to_delayed(int(time.time() * 1000) + 50, job.token)
            raise DelayedError()
        return "later"

    def limited(self, job):
        self.runs[job.id] = self.runs.get(job.id, 0) + 1
        if self.runs[job.id] == 1:
            raise RateLimitError()
        return "limited"

    @hookimpl
    def echomq_register_processors(self, registry):
        registry.add(self.qname, "later", self.later)
        registry.add(self.qname, "limited", self.limited)


def test_telemetry_sees_jobs_their_processor_moved(queue, run_worker, qname, wait_for):
    """DelayedError and RateLimitError end a run with ``moved`` (not completed/failed/retried),
    and the job's next run starts with ``active`` again."""
    rec = Recorder()
    run_worker(SelfMoving(qname), rec, concurrency=1)
    later = queue.add("later", {})
    limited = queue.add("limited", {})
    for j in (later, limited):
        wait_for(state_is(queue, j.id, "completed"), what=f"job {j.id} to complete")
    assert rec.of(later.id) == ["active", "moved", "active", "completed"]
    assert rec.of(limited.id) == ["active", "moved", "active", "completed"]
    states = {j: x for e, j, x in rec.events if e == "moved"}
    assert states == {later.id: "delayed", limited.id: "wait"}
    assert queue.get_job(later.id).attempts_made == 1 and queue.get_job(limited.id).attempts_made == 1


# --- wrapper hooks -------------------------------------------------------------------------------------------
#: new-style wrappers (``wrapper=True``) came with pluggy 1.1; the old style works on 1.0 too
NEW_STYLE_WRAPPERS = "wrapper" in inspect.signature(pluggy.HookimplMarker.__call__).parameters


class OldStyleTiming:
    """An old-style ``hookwrapper=True`` around job activation and completion."""

    __name__ = "test-old-timing"

    def __init__(self) -> None:
        self.seen: List[str] = []

    @hookimpl(hookwrapper=True)
    def echomq_job_active(self, job):
        self.seen.append("before active " + job.id)
        outcome = yield
        outcome.get_result()
        self.seen.append("after active " + job.id)

    @hookimpl(hookwrapper=True)
    def echomq_job_completed(self, job, result, duration_ms):
        self.seen.append("before completed " + job.id)
        yield
        self.seen.append("after completed " + job.id)


def test_wrapper_hooks_run_around_the_telemetry_and_a_raising_plugin_stays_guarded(queue, run_worker, qname, wait_for):
    old, boom, rec = OldStyleTiming(), Exploding(), Recorder()
    run_worker(Processors(qname), boom, rec, old)
    job = queue.add("ok", {"w": 1})
    wait_for(state_is(queue, job.id, "completed", "failed"), what="the job to finish")
    assert queue.get_job_state(job.id) == "completed"
    wait_for(lambda: "after completed " + job.id in old.seen, what="the wrapper to close")
    assert old.seen == ["before active " + job.id, "after active " + job.id,
                        "before completed " + job.id, "after completed " + job.id]
    # the raising plugin was called under the wrappers and the recorder still saw everything
    assert boom.calls >= 2
    assert rec.of(job.id) == ["active", "completed"]


@pytest.mark.skipif(not NEW_STYLE_WRAPPERS, reason="pluggy < 1.1 has no wrapper=True")
def test_new_style_wrappers_run_and_a_raising_one_is_logged(queue, run_worker, qname, caplog, wait_for):
    class Timing:
        __name__ = "test-timing"

        def __init__(self) -> None:
            self.spans: List[Tuple[str, str]] = []

        @hookimpl(wrapper=True)
        def echomq_job_completed(self, job, result, duration_ms):
            self.spans.append(("enter", job.id))
            try:
                return (yield)
            finally:
                self.spans.append(("exit", job.id))

    class Broken:
        __name__ = "test-broken-wrapper"

        @hookimpl(wrapper=True)
        def echomq_job_active(self, job):
            raise RuntimeError("wrapper is broken")
            yield  # pragma: no cover

    timing, rec = Timing(), Recorder()
    run_worker(Processors(qname), rec, timing, Broken())
    job = queue.add("ok", {})
    wait_for(state_is(queue, job.id, "completed", "failed"), what="the job to finish")
    assert queue.get_job_state(job.id) == "completed"
    wait_for(lambda: ("exit", job.id) in timing.spans, what="the wrapper to close its span")
    assert timing.spans == [("enter", job.id), ("exit", job.id)]
    wait_for(lambda: "wrapper is broken" in caplog.text, what="the wrapper's error in the log")

"""``echomq_gevent.testing``: ``drain`` runs jobs with real workers in the test's process
(values and reasons in order, backoff skipped, flows children first, the worker's own
reason for a job nothing serves, raised errors, a timeout naming the jobs), and
``enqueued`` / ``assert_enqueued`` read what was added."""
from __future__ import annotations

import os
import traceback

import gevent
import pytest

from echomq_gevent import FlowProducer, UnrecoverableError
from echomq_gevent.testing import DrainTimeout, assert_enqueued, drain, enqueued

HERE = os.path.dirname(os.path.abspath(__file__))


def test_drain_runs_every_job_and_returns_values_and_reasons_in_order(queue):
    for n in range(3):
        queue.add("double", {"n": n})
    queue.add("explode", {})

    def explode(job):
        raise ValueError("boom")

    result = drain(queue, {"double": lambda job: job.data["n"] * 2, "explode": explode})
    assert result.values == [0, 2, 4]
    assert [o.name for o in result.completed] == ["double"] * 3
    assert result.reasons == ["boom"] and isinstance(result.failed[0].error, ValueError)
    assert queue.get_job_counts("waiting", "active", "completed", "failed") == {
        "waiting": 0, "active": 0, "completed": 3, "failed": 1}


def test_processors_by_queue_and_name(queue, redis_url, prefix, qname):
    from echomq_gevent import Queue

    other = Queue(qname + "-other", connection=redis_url, prefix=prefix)
    try:
        queue.add("job", {})
        other.add("job", {})
        result = drain([queue, other], {(queue.name, "job"): lambda j: "first", (other.name, "job"): lambda j: "other"})
        assert sorted(result.values) == ["first", "other"]
    finally:
        other.close()


def test_retries_skip_their_backoff(queue):
    """A job that fails twice with a 60 s exponential backoff, then succeeds: drain
    promotes each retry at once, so it ends within drain's 10 s."""
    job = queue.add("flaky", {}, {"attempts": 3, "backoff": {"type": "exponential", "delay": 60000}})
    runs = []

    def flaky(j):
        runs.append(j.attempts_made)
        if len(runs) < 3:
            raise RuntimeError(f"try {len(runs)}")
        return "ok"

    result = drain(queue, {"flaky": flaky}, timeout=10)
    assert runs == [0, 1, 2] and result.values == ["ok"]
    assert [o.reason for o in result.retried] == ["try 1", "try 2"]
    assert queue.get_job(job.id).attempts_made == 3


def test_delayed_jobs_run_or_stay(queue):
    queue.add("later", {"n": 1}, {"delay": 3_600_000})
    assert drain(queue, {"later": lambda j: "ran"}, delayed="leave").values == []
    assert queue.get_job_counts("delayed")["delayed"] == 1
    assert drain(queue, {"later": lambda j: "ran"}).values == ["ran"]


def test_a_flow_drains_children_before_the_parent(queue, redis_url, prefix):
    from echomq_gevent import Queue

    kids = Queue(queue.name + "-kids", connection=redis_url, prefix=prefix)
    producer = FlowProducer(connection=redis_url, prefix=prefix)
    try:
        producer.add({"name": "total", "queueName": queue.name, "data": {},
                      "children": [{"name": "part", "queueName": kids.name, "data": {"n": n}} for n in (1, 2)]})

        def total(job):
            return sum(job.children.get_children_values().values())

        result = drain([queue, kids], {"part": lambda j: j.data["n"] * 10, "total": total})
        assert [o.name for o in result.completed] == ["part", "part", "total"]
        assert result.completed[-1].value == 30
    finally:
        producer.close()
        kids.close()


def test_a_job_no_processor_serves_fails_with_the_workers_reason(queue):
    queue.add("unknown", {})
    result = drain(queue, {"known": lambda j: 1})
    assert result.reasons == [f"no processor for job name 'unknown' on queue {queue.name!r}: pass processor= to "
                              f"the Worker, set processor: in the queue's config, or register one with a plugin"]
    queue.add("unknown", {})
    with pytest.raises(UnrecoverableError, match="no processor for job name 'unknown'"):
        drain(queue, {"known": lambda j: 1}, raise_errors=True)


def test_raise_errors_raises_the_processors_exception_with_its_traceback(queue):
    queue.add("charge", {"amount": 5}, {"attempts": 5})

    def charge_card(job):
        raise KeyError("card")

    with pytest.raises(KeyError) as info:
        drain(queue, {"charge": charge_card}, raise_errors=True)
    frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert "charge_card" in frames


def test_a_processor_that_never_returns_stops_at_the_timeout_naming_it(queue):
    stuck = queue.add("stuck", {})

    def forever(job):
        gevent.sleep(3600)

    with pytest.raises(DrainTimeout) as info:
        drain(queue, {"stuck": forever}, timeout=1)
    assert info.value.active == [(queue.name, stuck.id)]
    assert f"{queue.name}:{stuck.id}" in str(info.value)
    assert queue.get_job_state(stuck.id) == "waiting", "handed back"


def test_processors_from_the_yaml_file(queue, tmp_path, redis_url):
    config = tmp_path / "worker.yaml"
    config.write_text(f"redis: {{url: '{redis_url}'}}\nprefix: {queue.prefix}\nentry_points: false\n"
                      f"plugin_paths: ['{HERE}']\nqueues:\n  {queue.name}:\n    processor: kit_jobs:double\n"
                      f"    concurrency: 2\n")
    queue.add("any", {"n": 21})
    assert drain(queue, config=str(config)).values == [42]


def test_drain_needs_processors_or_a_config(queue):
    from echomq_gevent import ConfigError

    with pytest.raises(ConfigError, match="pass processors="):
        drain(queue)
    with pytest.raises(ValueError, match="delayed"):
        drain(queue, {}, delayed="skip")


def test_enqueued_and_assert_enqueued(queue):
    first = queue.add("welcome", {"user": 1})
    queue.add("welcome", {"user": 2}, {"delay": 60000})
    queue.add("invoice", {"order": 9}, {"priority": 3})
    assert [j.id for j in enqueued(queue, "welcome")][0] == first.id
    assert len(enqueued(queue)) == 3
    assert_enqueued(queue, "welcome", count=2)
    assert_enqueued(queue, "invoice", data={"order": 9}, opts={"priority": 3})
    with pytest.raises(AssertionError) as info:
        assert_enqueued(queue, "welcome", data={"user": 3})
    message = str(info.value)
    assert "expected at least one job(s) with name='welcome', data={'user': 3}" in message
    assert "'invoice' data={'order': 9}" in message and "the queue holds 3 job(s)" in message
    with pytest.raises(AssertionError, match="expected exactly 1"):
        assert_enqueued(queue, "welcome", count=1)

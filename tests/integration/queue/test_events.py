"""QueueEvents, QueueEventsProducer and Job.wait_until_finished against a real Redis."""
from __future__ import annotations

import gevent
import pytest

from echomq_gevent import Queue
from echomq_gevent.queue.events import (EVENT_NAMES, EventsClosedError, JobFailedError, QueueEvents,
                                  QueueEventsProducer, WaitTimeoutError)
from redis_server import RedisServer

from integration.worker_helpers import make_worker, running


@pytest.fixture
def events(redis_url, prefix, qname):
    qe = QueueEvents(qname, connection=redis_url, prefix=prefix, blocking_timeout=500)
    assert qe.wait_until_ready(10)
    yield qe
    qe.close()


def record(qe: QueueEvents, *names: str) -> list:
    seen: list = []
    for name in names:
        qe.on(name, lambda args, eid, name=name: seen.append((name, args, eid)))
    return seen


def test_every_event_of_a_job_our_worker_runs(redis_url, prefix, qname, queue, events, wait_for):
    seen = record(events, "added", "waiting", "active", "progress", "completed", "drained")
    per_job: list = []

    def proc(job):
        job.update_progress({"half": 0.5})
        return {"ok": [1, 2]}

    job = queue.add("work", {"x": 1})
    events.on(f"completed:{job.id}", lambda args, eid: per_job.append(args))
    with running(make_worker(redis_url, prefix, qname, proc)):
        wait_for(lambda: any(n == "drained" for n, _a, _i in seen), what="drained event")
    names = [n for n, _a, _i in seen]
    assert names == ["added", "waiting", "active", "progress", "completed", "drained"]
    by_name = {n: a for n, a, _i in seen}
    assert by_name["added"] == {"jobId": job.id, "name": "work"}
    assert by_name["progress"] == {"jobId": job.id, "data": {"half": 0.5}}
    assert by_name["completed"] == {"jobId": job.id, "returnvalue": {"ok": [1, 2]}, "prev": "active"}
    assert by_name["drained"] == {}
    assert per_job == [by_name["completed"]]
    ids = [i for _n, _a, i in seen]
    assert ids == sorted(ids, key=lambda i: tuple(int(p) for p in i.split("-"))) and len(set(ids)) == len(ids)


def test_failed_and_delayed_fields_are_decoded(redis_url, prefix, qname, queue, events, wait_for):
    seen = record(events, "failed", "delayed", "retries-exhausted")
    delayed = queue.add("later", {}, {"delay": 60000})

    def proc(job):
        raise ValueError("bad input 7")

    job = queue.add("boom", {})
    with running(make_worker(redis_url, prefix, qname, proc)):
        wait_for(lambda: any(n == "failed" for n, _a, _i in seen), what="failed event")
    by_name = {n: a for n, a, _i in seen}
    assert by_name["failed"] == {"jobId": job.id, "failedReason": "bad input 7", "prev": "active"}
    assert by_name["delayed"]["jobId"] == delayed.id
    assert isinstance(by_name["delayed"]["delay"], int) and by_name["delayed"]["delay"] >= delayed.timestamp + 60000


def test_iterator_form_and_replay_from_zero(redis_url, prefix, qname, queue, events):
    got: list = []

    def consume():
        for ev in events.listen(timeout=10):
            got.append(ev)
            if len(got) == 4:
                return

    reader = gevent.spawn(consume)
    gevent.sleep(0)
    a = queue.add("a", {})
    b = queue.add("b", {})
    reader.join(10)
    assert [(e.name, e.args["jobId"]) for e in got] == [("added", a.id), ("waiting", a.id),
                                                       ("added", b.id), ("waiting", b.id)]
    replay = QueueEvents(qname, connection=redis_url, prefix=prefix, last_event_id="0", blocking_timeout=500)
    try:
        again = []
        for ev in replay.listen(timeout=2):
            again.append(ev)
            if len(again) == 4:
                break
        assert again == got
    finally:
        replay.close()


def test_unknown_event_names_are_refused_and_nothing_is_written(events, r, queue):
    before = r.exists(queue.keys.events)
    with pytest.raises(ValueError, match=r"unknown event 'compelted'.*did you mean 'completed'"):
        events.on("compelted", lambda a, i: None)
    with pytest.raises(ValueError, match="unknown event 'nope:12'"):
        events.once("nope:12", lambda a, i: None)
    with pytest.raises(ValueError, match="non-empty string"):
        events.on("", lambda a, i: None)
    with pytest.raises(TypeError, match="callable"):
        events.on("completed", "not a function")
    assert events.listener_count("compelted") == 0
    assert r.exists(queue.keys.events) == before
    with pytest.raises(ValueError, match="last_event_id"):
        QueueEvents("q", connection=r, last_event_id="", autorun=False)
    with pytest.raises(ValueError, match="blocking_timeout"):
        QueueEvents("q", connection=r, blocking_timeout=0, autorun=False)
    assert set(EVENT_NAMES) >= {"added", "waiting", "active", "progress", "completed", "failed", "delayed",
                                "stalled", "retries-exhausted", "removed", "duplicated", "deduplicated",
                                "drained", "paused", "resumed", "cleaned", "waiting-children"}


def test_custom_events_from_the_producer(redis_url, prefix, qname, events, r, queue, wait_for):
    seen = []
    events.on("deploy", lambda args, eid: seen.append(args), custom=True)
    with QueueEventsProducer(qname, connection=redis_url, prefix=prefix) as producer:
        entry = producer.publish_event("deploy", {"version": "1.2", "hosts": 3})
        wait_for(lambda: seen, what="custom event")
        assert seen == [{"version": "1.2", "hosts": "3"}]
        assert r.xrange(queue.keys.events)[-1] == (entry, {"event": "deploy", "version": "1.2", "hosts": "3"})
        length = r.xlen(queue.keys.events)
        for bad, match in ((("", {}), "event_name"), (("x", {"event": "y"}), "field names"),
                           (("x", {"obj": {"a": 1}}), "json.dumps"), (("x", {"flag": True}), "text or a number")):
            with pytest.raises(ValueError, match=match):
                producer.publish_event(*bad)
        with pytest.raises(ValueError, match="max_events"):
            producer.publish_event("x", {}, max_events=0)
        assert r.xlen(queue.keys.events) == length


def test_wait_until_finished_returns_the_value_or_raises_the_reason(redis_url, prefix, qname, queue, events):
    def proc(job):
        gevent.sleep(0.2)
        if job.name == "bad":
            raise RuntimeError("card declined")
        return {"sum": job.data["a"] + job.data["b"]}

    good = queue.add("good", {"a": 2, "b": 3})
    bad = queue.add("bad", {})
    with running(make_worker(redis_url, prefix, qname, proc, concurrency=2)):
        assert good.wait_until_finished(events, timeout=10) == {"sum": 5}
        with pytest.raises(JobFailedError, match="card declined") as info:
            bad.wait_until_finished(events, timeout=10)
        assert info.value.failed_reason == "card declined" and info.value.job_id == bad.id
    assert events.listener_count(f"completed:{good.id}") == 0 and events.listener_count(f"failed:{bad.id}") == 0


def test_wait_until_finished_on_a_job_that_finished_before_waiting(redis_url, prefix, qname, queue, r, wait_for):
    job = queue.add("early", {})
    with running(make_worker(redis_url, prefix, qname, lambda j: "done early")):
        wait_for(lambda: r.zscore(queue.keys.completed, job.id) is not None, what="job completed")
    # a QueueEvents started after the finish never sees the event; isFinished answers
    qe = QueueEvents(qname, connection=redis_url, prefix=prefix, blocking_timeout=500)
    try:
        assert job.wait_until_finished(qe, timeout=5) == "done early"
        gone = queue.add("gone", {})
        queue.remove_job(gone.id)
        with pytest.raises(JobFailedError, match=r"^Missing key for job .*\. isFinished$"):
            gone.wait_until_finished(qe, timeout=5)
    finally:
        qe.close()


def test_wait_until_finished_times_out_and_ends_on_close(redis_url, prefix, qname, queue, events, wait_for):
    job = queue.add("never", {})
    with pytest.raises(WaitTimeoutError, match=f"job {job.id}"):
        job.wait_until_finished(events, timeout=0.3)
    waiter = gevent.spawn(job.wait_until_finished, events)
    wait_for(lambda: events.listener_count(f"completed:{job.id}") == 1, what="waiter listening")
    events.close()
    waiter.join(5)
    assert isinstance(waiter.exception, EventsClosedError)
    with pytest.raises(EventsClosedError):
        job.wait_until_finished(events)
    other = Queue("other", connection=redis_url, prefix=prefix)
    try:
        qe = QueueEvents(qname, connection=redis_url, prefix=prefix)
        with pytest.raises(ValueError, match="belongs to queue"):
            other.add("x", {}).wait_until_finished(qe, timeout=1)
        qe.close()
    finally:
        other.obliterate(force=True)
        other.close()


def test_reading_resumes_from_its_place_after_the_connection_is_killed(events, queue, r, wait_for):
    seen = record(events, "added")
    first = queue.add("one", {})
    wait_for(lambda: len(seen) == 1, what="first event")
    errors = []
    events.on("error", lambda exc, _eid: errors.append(exc))
    for client in r.client_list():
        if client.get("name") == events.client_name:
            r.execute_command("CLIENT", "KILL", "ID", client["id"])
    during = [queue.add("during", {}) for _ in range(3)]
    wait_for(lambda: len(seen) == 4, what="events written while the reader reconnected")
    assert [a["jobId"] for _n, a, _i in seen] == [first.id] + [j.id for j in during]
    after = queue.add("after", {})
    wait_for(lambda: len(seen) == 5, what="event after the reconnection")
    assert seen[-1][1]["jobId"] == after.id


def test_reading_survives_a_redis_restart(prefix, qname, wait_for):
    server = RedisServer().start()
    try:
        q = Queue(qname, connection=server.url, prefix=prefix)
        qe = QueueEvents(qname, connection=server.url, prefix=prefix, blocking_timeout=500)
        seen = record(qe, "added")
        errors: list = []
        qe.on("error", lambda exc, _eid: errors.append(exc))
        q.add("before", {})
        wait_for(lambda: len(seen) == 1, what="event before the restart")
        port = server.port
        server.stop()
        wait_for(lambda: errors, what="the reader to report the lost connection")
        server = RedisServer(port=port).start()
        job = wait_for(lambda: _try_add(q), timeout=10, what="Redis back")
        wait_for(lambda: len(seen) == 2, timeout=15, what="event after the restart")
        assert seen[-1][1]["jobId"] == job.id
        assert "reading events failed" in str(errors[0])
        qe.close()
        q.close()
    finally:
        server.stop()


def _try_add(q: Queue):
    try:
        return q.add("after", {})
    except Exception:
        return None


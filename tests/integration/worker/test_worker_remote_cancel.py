"""Queue.cancel_job reaching the worker that runs the job (cancelJob-9, the cancellation
channel, the mark), with real workers and Redis: every order of cancel against pick-up,
lock loss and finish that can be hit deterministically, and bad messages."""
from __future__ import annotations

import json
import logging

import gevent
import gevent.event

from echomq_gevent.errors import JobCancelled
from echomq_gevent.worker.remote_cancel import CancelSubscriber, _registry

from integration.queue_helpers import now_ms, take
from integration.worker_helpers import Recorder, host_with, make_worker, running, sleeper_until_cancelled


def _subscribed(w) -> bool:
    remote = w._lifecycle.remote
    return remote is not None and remote.subscribed > 0


def test_an_active_job_is_stopped_and_fails_without_retry(redis_url, prefix, qname, queue, wait_for, events):
    job = queue.add("long", {}, {"attempts": 3})
    starts, seen = [], []

    def proc(j):
        starts.append(j.id)
        try:
            gevent.sleep(30)
        except JobCancelled as exc:
            seen.append(exc.reason)
            raise

    rec = Recorder()
    w = make_worker(redis_url, prefix, qname, proc, plugins=host_with(rec))
    with running(w):
        wait_for(lambda: starts and _subscribed(w), what="the job to run and the worker to subscribe")
        out = queue.cancel_job(job.id, "operator")
        assert (out.outcome, out.state) == ("accepted", "active")
        wait_for(lambda: queue.get_job_state(job.id) == "failed", timeout=2, what="the job to fail within a second")
    back = queue.get_job(job.id)
    assert seen == ["operator"] and starts == [job.id]  # never retried, though attempts were left
    assert back.failed_reason == "job cancelled: operator" and back.attempts_made == 1
    assert not back.deferred_failure  # the mark served: cleared with the failure
    assert rec.names("failed") == [job.id] and not rec.names("retried")


def test_a_marked_job_picked_up_later_fails_without_running(redis_url, prefix, qname, queue, r, wait_for):
    job = queue.add("j", {})
    take(queue)  # another worker holds it...
    assert queue.cancel_job(job.id, "late").outcome == "accepted"
    # ...and loses it: its lock expires, the stalled check moves it back to wait
    r.delete(f"{prefix}:{qname}:{job.id}:lock")
    for _ in range(2):  # a stalled check marks, the next one moves
        r.delete(f"{prefix}:{qname}:stalled-check")
        queue.scripts.move_stalled_jobs_to_wait(1, now_ms(), 30000)
    assert queue.get_job_state(job.id) == "waiting"
    ran = []
    w = make_worker(redis_url, prefix, qname, lambda j: ran.append(j.id))
    with running(w):
        wait_for(lambda: queue.get_job_state(job.id) == "failed", what="the job to fail at pick-up")
    assert ran == [] and queue.get_job(job.id).failed_reason == "job cancelled: late"


def test_a_signal_that_comes_before_the_pick_up_is_registered_is_honoured(redis_url, prefix, qname, queue, r,
                                                                          wait_for):
    # the race: moveToActive read the job before cancelJob-9 marked it, and the message
    # reaches the worker before the pick-up's answer does. Hit in order: the message first
    # (no mark on the job), then the job is added and picked up
    w = make_worker(redis_url, prefix, qname, lambda j: ran.append(j.id))
    ran = []
    with running(w):
        wait_for(lambda: _subscribed(w), what="the worker to subscribe")
        r.publish(f"{prefix}:{qname}:cancellation", json.dumps({"jobId": "race-1", "reason": "raced"}))
        wait_for(lambda: "race-1" in w._lifecycle.ctx.cancel_requests, what="the request to be kept")
        queue.add("j", {}, {"jobId": "race-1", "attempts": 3})
        wait_for(lambda: queue.get_job_state("race-1") == "failed", what="the job to fail")
    assert ran == [] and queue.get_job("race-1").failed_reason == "job cancelled: raced"


def test_a_mark_written_while_disconnected_is_honoured_at_resubscription(redis_url, prefix, qname, queue, r,
                                                                        wait_for):
    job = queue.add("long", {})
    started = gevent.event.Event()

    def proc(j):
        started.set()
        gevent.sleep(30)

    w = make_worker(redis_url, prefix, qname, proc)
    with running(w):
        wait_for(lambda: started.is_set() and _subscribed(w), what="the job to run")
        # the mark without its message (as if the worker was disconnected when it went)
        r.hset(f"{prefix}:{qname}:{job.id}", mapping={"cancelled": "while away", "defa": "job cancelled: while away"})
        gevent.sleep(0.3)
        assert queue.get_job_state(job.id) == "active"
        # the subscription's connection drops: it subscribes again and reads the marks
        sub = w._lifecycle.remote.subscriber
        for client in r.client_list():
            if int(client.get("sub", 0)) > 0 and client.get("cmd") in ("subscribe", "ping", "unsubscribe"):
                r.client_kill_filter(_id=client["id"])
        wait_for(lambda: queue.get_job_state(job.id) == "failed", timeout=5, what="the job to fail")
        assert sub.errors >= 1
    assert queue.get_job(job.id).failed_reason == "job cancelled: while away"


def test_a_job_that_finished_first_keeps_its_result(redis_url, prefix, qname, queue, wait_for):
    job = queue.add("quick", {})
    w = make_worker(redis_url, prefix, qname, lambda j: "done")
    with running(w):
        wait_for(lambda: queue.get_job_state(job.id) == "completed", what="the job to complete")
    out = queue.cancel_job(job.id, "too late")
    assert (out.outcome, out.state) == ("finished", "completed")
    assert queue.get_job(job.id).returnvalue == "done"


def test_bad_messages_are_ignored_with_one_line_and_the_worker_goes_on(redis_url, prefix, qname, queue, r,
                                                                      wait_for, caplog):
    started = gevent.event.Event()
    job = queue.add("long", {})

    def proc(j):
        started.set()
        if j.name == "long":
            gevent.sleep(30)
        return "ok"

    w = make_worker(redis_url, prefix, qname, proc, concurrency=2)
    channel = f"{prefix}:{qname}:cancellation"
    with caplog.at_level(logging.WARNING, logger="echomq_gevent.worker"), running(w):
        wait_for(lambda: started.is_set() and _subscribed(w), what="the job to run")
        for garbage in ("not json", "[1, 2]", json.dumps({"reason": "no id"}),
                        json.dumps({"jobId": job.id, "reason": 5}),
                        json.dumps({"jobId": job.id, "reason": "x", "queue": f"{prefix}:other-queue:"})):
            r.publish(channel, garbage)
        wait_for(lambda: len([m for m in caplog.messages if "cancellation channel" in m]) == 5,
                 what="five log lines")
        assert queue.get_job_state(job.id) == "active"
        other = queue.add("short", {})
        wait_for(lambda: queue.get_job_state(other.id) == "completed", what="the worker to go on")
        # a message in upstream's shape (no "queue") is honoured
        r.publish(channel, json.dumps({"jobId": job.id, "reason": "upstream shape"}))
        wait_for(lambda: queue.get_job_state(job.id) == "failed", what="the job to fail")
    assert queue.get_job(job.id).failed_reason == "job cancelled: upstream shape"


def test_workers_of_one_process_share_one_subscription(redis_url, prefix, qname, queue, r, wait_for):
    from echomq_gevent import Queue
    other_name = qname + "-b"
    w1 = make_worker(redis_url, prefix, qname, lambda j: gevent.sleep(30))
    w2 = make_worker(redis_url, prefix, other_name, lambda j: gevent.sleep(30))
    q2 = Queue(other_name, connection=redis_url, prefix=prefix)
    try:
        with running(w1), running(w2):
            wait_for(lambda: _subscribed(w1) and _subscribed(w2), what="both subscribed")
            assert w1._lifecycle.remote.subscriber is w2._lifecycle.remote.subscriber
            subs = [c for c in r.client_list() if int(c.get("sub", 0)) > 0]
            assert len(subs) == 1 and int(subs[0]["sub"]) == 2
            a, b = queue.add("a", {}), q2.add("b", {})
            wait_for(lambda: queue.get_job_state(a.id) == "active" and q2.get_job_state(b.id) == "active",
                     what="both running")
            q2.cancel_job(b.id, "only b")
            wait_for(lambda: q2.get_job_state(b.id) == "failed", what="b to fail", timeout=5)
            assert queue.get_job_state(a.id) == "active"
        wait_for(lambda: not any(isinstance(s, CancelSubscriber) and not s.stopped for s in _registry.values()),
                 what="the subscription to end with the last worker")
    finally:
        q2.close()


def test_a_mark_whose_message_was_missed_stops_the_job_at_the_next_renewal(redis_url, prefix, qname, queue,
                                                                           monkeypatch, wait_for):
    # no subscription at all (as if it missed the message without noticing): cancelJob-9
    # publishes to no one, and the lock renewal, which reads the marks in its own send,
    # stops the job
    from echomq_gevent.worker.remote_cancel import RemoteCancels

    monkeypatch.setattr(RemoteCancels, "start", lambda self: None)
    job = queue.add("long", {}, {"attempts": 3})
    proc, started, stopped = sleeper_until_cancelled()
    w = make_worker(redis_url, prefix, qname, proc, lock_duration=2000)  # a renewal every 0.5 s
    with running(w):
        wait_for(started.is_set, what="the job to run")
        renewals = w._lifecycle.ctx.locks.renewals
        out = queue.cancel_job(job.id, "no message")
        assert (out.outcome, out.state) == ("accepted", "active")
        wait_for(lambda: queue.get_job_state(job.id) == "failed", timeout=5, what="the job to fail")
        assert w._lifecycle.ctx.locks.renewals > renewals  # it was the renewal that read it
        assert w._lifecycle.remote.subscribed == 0
    back = queue.get_job(job.id)
    assert [reason for reason, _ in stopped] == ["no message"] and back.attempts_made == 1  # for good: no retry
    assert back.failed_reason == "job cancelled: no message"


def test_the_renewal_reads_the_marks_in_the_same_send(queue, r, prefix, qname):
    from integration.queue_helpers import TOKEN

    a, b = queue.add("a", {}), queue.add("b", {})
    take(queue)
    take(queue)
    r.hset(f"{prefix}:{qname}:{b.id}", "cancelled", "why")
    failed, marks = queue.scripts.extend_locks_reading_marks([a.id, b.id, "gone"], [TOKEN, TOKEN, TOKEN], 5000)
    assert failed == ["gone"] and marks == {b.id: "why"}
    assert 4000 < r.pttl(f"{prefix}:{qname}:{a.id}:lock") <= 5000
    r.script_flush()  # NOSCRIPT: loaded and called again
    failed, marks = queue.scripts.extend_locks_reading_marks([a.id, b.id], [TOKEN, "not-ours"], 5000)
    assert failed == [b.id] and marks == {b.id: "why"}


class _Listener:
    """A listener as a worker's cancellation part is one: its hub's loop and the calls."""

    def __init__(self) -> None:
        self.loop = gevent.get_hub().loop
        self.subscribed = gevent.event.Event()

    def on_subscribed(self) -> None:
        self.subscribed.set()

    def on_message(self, data) -> None:
        pass


def test_a_server_gone_after_the_last_listener_left_ends_the_subscription_without_a_warning(caplog, wait_for):
    """The process's last worker leaves, then its Redis goes (the command's embedded Redis
    stops right after the workers): the subscription ends without a line saying it failed."""
    import redis
    from redis_server import RedisServer

    server = RedisServer().start()
    try:
        listener = _Listener()
        client = redis.Redis.from_url(server.url)
        with caplog.at_level(logging.WARNING, logger="echomq_gevent.worker"):
            sub = CancelSubscriber.join(client, "echomq:cancel", listener)
            assert listener.subscribed.wait(5)  # the thread then reads its connection
            sub.leave("echomq:cancel", listener)
            server.stop()
            wait_for(lambda: sub.stopped, timeout=5, what="the subscription to end")
        assert not [m for m in caplog.messages if "cancellation channel" in m], caplog.messages
        assert sub.errors == 0
        client.close()
    finally:
        server.stop()

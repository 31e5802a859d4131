"""Queue methods on a real Redis (the scripts they call are our own Lua)."""
from __future__ import annotations

import base64
import time

import pytest
import redis

from echomq_gevent import Job, Queue
from echomq_gevent.errors import EchoMQError, JobNotInState
from echomq_gevent.protocol.scripts import Scripts
from integration.queue_helpers import TOKEN, now_ms, take

@pytest.fixture
def q(queue):
    return queue


def finish(q: Queue, job_id: str, target: str = "completed", value: str = '"ok"') -> None:
    field = "returnvalue" if target == "completed" else "failedReason"
    q.scripts.move_to_finished(job_id, now_ms(), field, value, target, False,
                               {"token": TOKEN, "keepJobs": {"count": -1}, "lockDuration": 30000,
                                "attempts": 1, "maxMetricsSize": ""})


# -- connections ------------------------------------------------------------------------
def test_accepts_a_client_instance_and_leaves_it_open(redis_url, prefix, qname):
    raw = redis.Redis.from_url(redis_url)  # not decoding: cloned
    q = Queue(qname, raw, prefix=prefix)
    assert q.client is not raw
    assert q.add("a", {"x": "é"}).id == "1"
    assert q.get_job("1").data == {"x": "é"}
    q.close()
    decoding = redis.Redis.from_url(redis_url, decode_responses=True)
    q2 = Queue(qname, decoding, prefix=prefix)
    assert q2.client is decoding
    q2.close()
    assert decoding.ping()  # still usable: the queue did not own it
    decoding.close()
    raw.close()


def test_shared_pool_size(redis_url, prefix, qname):
    q = Queue(qname, redis_url, prefix=prefix, max_connections=7)
    assert q.client.connection_pool.max_connections == 7
    q.close()


def test_bad_queue_name():
    with pytest.raises(ValueError, match="must not contain ':'"):
        Queue("a:b", "redis://127.0.0.1:1/0")


def test_default_job_options_are_merged_under_job_options(r, redis_url, prefix, qname):
    q = Queue(qname, redis_url, prefix=prefix,
              default_job_options={"attempts": 4, "removeOnComplete": True, "jobId": "never"})
    job = q.add("a", 1, {"attempts": 2})
    assert job.id == "1"
    assert job.opts == {"attempts": 2, "removeOnComplete": True}
    assert q.get_job(job.id).opts == {"attempts": 2, "removeOnComplete": True}
    assert q.add("b", 1).opts == {"attempts": 4, "removeOnComplete": True}
    with pytest.raises(EchoMQError, match="'atempts'"):
        Queue(qname, redis_url, prefix=prefix, default_job_options={"atempts": 4})
    q.close()


# -- reading jobs -----------------------------------------------------------------------
def test_get_job_round_trip(q):
    added = q.add("send", {"to": ["a", "b"]}, {"attempts": 3, "backoff": 500, "keepLogs": 2,
                                                "priority": 4, "timestamp": 1795965485578})
    job = q.get_job(added.id)
    assert isinstance(job, Job)
    assert (job.id, job.name, job.data) == ("1", "send", {"to": ["a", "b"]})
    assert job.opts == {"attempts": 3, "backoff": {"type": "fixed", "delay": 500}, "keepLogs": 2,
                        "priority": 4, "timestamp": 1795965485578}
    assert job.opts == added.opts
    assert (job.timestamp, job.priority, job.delay, job.progress) == (1795965485578, 4, 0, 0)
    assert (job.attempts_made, job.attempts_started, job.stalled_counter) == (0, 0, 0)
    assert job.processed_on is None and job.finished_on is None and job.returnvalue is None
    assert job.stacktrace == [] and job.failed_reason is None and job.decode_error is None
    assert q.get_job("404") is None


def test_get_job_state_for_every_state(q, r):
    q.add("active", 1)
    assert take(q) == "1"
    q.add("done", 1)
    assert take(q) == "2"
    finish(q, "2")
    q.add("bad", 1)
    assert take(q) == "3"
    finish(q, "3", "failed", "boom")
    q.add("w", 1)
    q.add("p", 1, {"priority": 2})
    q.add("d", 1, {"delay": 60000})
    r.zadd(q.keys.waiting_children, {"wc": 1})
    assert {i: q.get_job_state(i) for i in ["1", "2", "3", "4", "5", "6", "wc", "nope"]} == {
        "1": "active", "2": "completed", "3": "failed", "4": "waiting", "5": "prioritized",
        "6": "delayed", "wc": "waiting-children", "nope": "unknown"}
    assert q.get_job_counts() == {"active": 1, "completed": 1, "delayed": 1, "failed": 1,
                                  "prioritized": 1, "waiting": 1, "waiting-children": 1}
    assert list(q.get_job_counts()) == ["active", "completed", "delayed", "failed", "prioritized",
                                        "waiting", "waiting-children"]
    assert q.get_job_counts("waiting", "wait", "failed") == {"waiting": 1, "wait": 1, "failed": 1}
    assert q.get_job_counts(["completed", "completed"]) == {"completed": 1}
    assert q.get_job_count_by_types("waiting", "prioritized") == 2
    assert q.count() == 4


def test_unknown_count_type(q):
    with pytest.raises(ValueError, match="unknown job type 'complete' \\(did you mean 'completed'\\?\\)"):
        q.get_job_counts("complete")


def test_get_jobs_orders_like_bullmq(q, r):
    for n in range(4):
        q.add(f"w{n}", n)
    r.zadd(q.keys.completed, {"c1": 10, "c2": 30, "c3": 20})
    for cid in ("c1", "c2", "c3"):
        r.hset(q.keys.job(cid), mapping={"name": cid, "data": "{}", "opts": "{}", "timestamp": "1"})
    ids = lambda jobs: [j.id for j in jobs]  # noqa: E731
    assert ids(q.get_jobs("waiting", asc=True)) == ["1", "2", "3", "4"]
    assert ids(q.get_jobs(["waiting"])) == ["4", "3", "2", "1"]
    assert ids(q.get_jobs("waiting", 0, 1, asc=True)) == ["1", "2"]
    assert ids(q.get_jobs("waiting", 1, 2)) == ["3", "2"]
    assert ids(q.get_jobs("completed")) == ["c2", "c3", "c1"]
    assert ids(q.get_jobs("completed", asc=True)) == ["c1", "c3", "c2"]
    assert ids(q.get_jobs(["completed", "waiting"], 0, 0)) == ["c2", "4"]
    # ids without a hash and legacy markers are skipped
    r.zadd(q.keys.completed, {"ghost": 40})
    r.rpush(q.keys.wait, "0:legacy")
    assert ids(q.get_jobs("completed")) == ["c2", "c3", "c1"]
    assert "0:legacy" not in q.get_job_ids("waiting")
    assert len(q.get_jobs()) == 7
    assert q.get_jobs("failed") == []


def test_get_job_logs(q):
    job = q.add("a", 1, {"keepLogs": 3})
    for i in range(5):
        job.log(f"line {i}")
    assert q.get_job_logs(job.id) == {"logs": ["line 2", "line 3", "line 4"], "count": 3}
    assert q.get_job_logs(job.id, 0, 0, asc=False) == {"logs": ["line 4"], "count": 3}
    assert q.get_job_logs("nope") == {"logs": [], "count": 0}


# -- control ----------------------------------------------------------------------------
def test_pause_and_resume(q, r):
    q.add("a", 1)
    assert r.exists(q.keys.marker)
    assert q.is_paused() is False
    q.pause()
    assert q.is_paused() is True
    assert r.hget(q.keys.meta, "paused") == "1"
    assert r.exists(q.keys.marker) == 0
    assert q.scripts.move_to_active(TOKEN, 30000, now_ms())[:2] == [0, 0]
    q.add("b", 1)
    assert r.exists(q.keys.marker) == 0
    assert q.get_job_counts("waiting") == {"waiting": 2}
    q.resume()
    assert q.is_paused() is False
    assert r.zscore(q.keys.marker, "0") == 0
    assert [f["event"] for _, f in r.xrange(q.keys.events)] == [
        "added", "waiting", "paused", "added", "waiting", "resumed"]
    assert take(q) == "1"


def test_resume_moves_a_legacy_paused_list(q, r):
    r.rpush(q.keys.paused, "x", "y")
    q.pause()
    q.resume()
    assert r.exists(q.keys.paused) == 0
    assert set(r.lrange(q.keys.wait, 0, -1)) == {"x", "y"}
    assert [f["event"] for _, f in r.xrange(q.keys.events)].count("resumed") == 1


def test_promote_job(q, r):
    job = q.add("a", 1, {"delay": 60000})
    q.promote_job(job.id)
    assert r.lrange(q.keys.wait, 0, -1) == [job.id]
    assert r.hget(q.keys.job(job.id), "delay") == "0"
    with pytest.raises(JobNotInState):
        q.promote_job(job.id)


def test_remove_job(q, r):
    job = q.add("a", 1)
    job.log("x")
    assert q.remove_job(job.id) == 1
    assert r.exists(q.keys.job(job.id), q.keys.logs(job.id)) == 0
    assert r.llen(q.keys.wait) == 0
    q.add("b", 1)
    take(q)
    assert q.remove_job("2") == 0  # locked by a worker
    assert r.exists(q.keys.job("2")) == 1


def test_drain(q, r):
    q.add("a", 1)
    q.add("p", 1, {"priority": 1})
    q.add("d", 1, {"delay": 60000})
    q.drain()
    assert q.get_job_counts("waiting", "prioritized", "delayed") == {"waiting": 0, "prioritized": 0, "delayed": 1}
    assert r.exists(q.keys.job("1"), q.keys.job("2")) == 0
    q.drain(delayed=True)
    assert q.get_job_counts("delayed") == {"delayed": 0}
    assert r.exists(q.keys.job("3")) == 0


def test_drain_of_more_than_one_batch_runs_in_several_script_calls(q, r, monkeypatch):
    import echomq_gevent.queue.admin as admin_module
    from echomq_gevent.protocol.admin import AdminScripts

    monkeypatch.setattr(admin_module, "_DRAIN_BATCH", 3)
    q.add_bulk([{"name": "a", "data": i} for i in range(7)])
    q.add_bulk([{"name": "p", "data": i, "opts": {"priority": 2}} for i in range(4)])
    calls = []
    original = AdminScripts.drain

    def counting(self, *args):
        calls.append(args)
        return original(self, *args)

    monkeypatch.setattr(AdminScripts, "drain", counting)
    q.drain()
    # wait: 3 + 3 + 1, prioritized: 3 + 1 + 0, in the same three calls
    assert [c[1] for c in calls] == [3, 3, 3]
    assert q.get_job_counts("waiting", "prioritized") == {"waiting": 0, "prioritized": 0}
    assert not r.keys(q.keys.base + "[0-9]*")


def test_obliterate(q, r, prefix):
    for n in range(5):
        q.add("a", n)
    q.add("d", 1, {"delay": 60000})
    take(q)
    with pytest.raises(EchoMQError, match="has active jobs; wait for them or pass force=True"):
        q.obliterate()
    q.obliterate(force=True, count=2)
    assert list(r.scan_iter(match=f"{prefix}:{q.name}:*")) == []


def test_global_limits_and_manual_rate_limit(q, r):
    q.set_global_concurrency(3)
    q.set_global_rate_limit(10, 1000)
    assert q.get_meta()["concurrency"] == "3"
    assert (r.hget(q.keys.meta, "max"), r.hget(q.keys.meta, "duration")) == ("10", "1000")
    q.remove_global_concurrency()
    q.remove_global_rate_limit()
    assert r.hmget(q.keys.meta, "concurrency", "max", "duration") == [None, None, None]
    with pytest.raises(ValueError, match="global concurrency must be an integer >= 1"):
        q.set_global_concurrency(0)
    with pytest.raises(ValueError, match="global rate limit duration"):
        q.set_global_rate_limit(1, -5)
    q.rate_limit(5000)
    assert r.get(q.keys.limiter) == "9007199254740991"
    assert 0 < q.get_rate_limit_ttl() <= 5000
    with pytest.raises(ValueError, match="rate_limit expects milliseconds"):
        q.rate_limit(-1)


def test_get_workers_from_client_names(q, redis_url):
    encoded = base64.b64encode(q.name.encode()).decode()
    assert q.client_name() == f"{q.prefix}:{encoded}"
    clients = []
    try:
        for suffix in ("", ":w:w1", ":qe"):
            # its own pool: redis-py 4.x's from_url would hand single_connection_client to the pool
            pool = redis.ConnectionPool.from_url(redis_url, decode_responses=True)
            c = redis.Redis(connection_pool=pool, single_connection_client=True)
            c.client_setname(q.client_name() + suffix)
            clients.append(c)
        workers = q.get_workers()
        assert sorted(w["rawname"] for w in workers) == sorted([q.client_name(), q.client_name() + ":w:w1"])
        assert {w["name"] for w in workers} == {q.name}
        assert all("addr" in w for w in workers)
    finally:
        for c in clients:
            c.close()
            c.connection_pool.disconnect()
    # the server drops closed connections asynchronously: poll with a deadline
    deadline = time.monotonic() + 5
    while q.get_workers() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert q.get_workers() == []


def test_scripts_attribute_is_shared(q):
    assert isinstance(q.scripts, Scripts)
    assert q.scripts.keys is q.keys

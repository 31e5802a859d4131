"""The Queue getters and admin calls beyond the basics, and keepLastIfActive deduplication,
against a real Redis."""
from __future__ import annotations

import pytest

from echomq_gevent import Queue
from echomq_gevent.errors import JobLockMismatch, JobNotExist

from integration.queue_helpers import TOKEN, take
from integration.worker_helpers import make_worker, running

KEEP_LAST = {"id": "kl", "keepLastIfActive": True, "ttl": 5000}


def _events(r, queue):
    return [f for _id, f in r.xrange(queue.keys.events)]


# ------------------------------------------------------------------ keepLastIfActive
def test_keep_last_if_active_parks_the_last_add_and_creates_it_when_the_owner_finishes(
        redis_url, prefix, qname, queue, r, wait_for):
    owner = queue.add("o", {"v": 1}, {"deduplication": KEEP_LAST})
    assert r.pttl(queue.keys.dedup("kl")) == -1, "keepLastIfActive ignores ttl: the key never expires"
    # while the owner only waits, a second add is dropped (nothing parked)
    assert queue.add("n", {"v": 0}, {"deduplication": KEEP_LAST}).id == owner.id
    assert not r.exists(queue.keys.base + "dn:kl")
    assert take(queue) == owner.id
    assert queue.add("n", {"v": 2}, {"deduplication": KEEP_LAST}).id == owner.id
    assert queue.add("n", {"v": 3}, {"deduplication": KEEP_LAST}).id == owner.id
    parked = r.hgetall(queue.keys.base + "dn:kl")
    assert (parked["name"], parked["data"], parked["jid"]) == ("n", '{"v":3}', "4")
    assert queue.get_deduplication_job_id("kl") == owner.id
    dedup_events = [f for f in _events(r, queue) if f["event"] == "deduplicated"]
    assert dedup_events[-2:] == [
        {"event": "deduplicated", "jobId": owner.id, "deduplicationId": "kl", "deduplicatedJobId": "3"},
        {"event": "deduplicated", "jobId": owner.id, "deduplicationId": "kl", "deduplicatedJobId": "4"}]
    # the owner finishes (through the worker's finish script): the parked job is created
    queue.scripts.move_to_finished(owner.id, 1, "returnvalue", "1", "completed", False,
                                   {"token": TOKEN, "keepJobs": {"count": -1}, "attempts": 0,
                                    "lockDuration": 30000, "maxMetricsSize": ""})
    assert queue.get_deduplication_job_id("kl") == "4"
    created = queue.get_job("4")
    assert (created.name, created.data, created.deduplication_id) == ("n", {"v": 3}, "kl")
    assert queue.get_job_state("4") == "waiting" and not r.exists(queue.keys.base + "dn:kl")
    ran = []
    with running(make_worker(redis_url, prefix, qname, lambda j: ran.append(j.data))):
        wait_for(lambda: ran == [{"v": 3}], what="the parked job to run")


def test_keep_last_if_active_with_replace_and_extend(queue, r):
    for extra in ({"replace": True}, {"extend": True}):
        dedup = dict(KEEP_LAST, id="x" + next(iter(extra)), **extra)
        owner = queue.add("o", {}, {"deduplication": dedup})
        assert take(queue) == owner.id
        assert queue.add("n", {"v": 9}, {"deduplication": dedup}).id == owner.id
        assert r.hget(queue.keys.base + "dn:" + dedup["id"], "data") == '{"v":9}', extra
        assert r.pttl(queue.keys.dedup(dedup["id"])) == -1


def test_deduplication_key_getter_and_removal(queue, r):
    assert queue.get_deduplication_job_id("none") is None
    job = queue.add("a", {}, {"deduplication": {"id": "d1"}})
    assert queue.get_deduplication_job_id("d1") == job.id
    assert queue.remove_deduplication_key("d1") == 1
    assert queue.remove_deduplication_key("d1") == 0
    assert queue.add("a", {}, {"deduplication": {"id": "d1"}}).id != job.id
    with pytest.raises(ValueError, match="deduplication_id must be a non-empty string"):
        queue.get_deduplication_job_id("")


# ------------------------------------------------------------------ limits
def test_global_limit_getters(queue, r):
    assert queue.get_global_concurrency() is None and queue.get_global_rate_limit() is None
    queue.set_global_concurrency(2)
    queue.set_global_rate_limit(5, 1000)
    assert queue.get_global_concurrency() == 2
    assert queue.get_global_rate_limit() == {"max": 5, "duration": 1000}
    r.hdel(queue.keys.meta, "duration")
    assert queue.get_global_rate_limit() is None


def test_is_maxed_follows_global_concurrency(queue):
    queue.add_bulk([("a", {}), ("b", {})])
    assert not queue.is_maxed()
    queue.set_global_concurrency(1)
    assert not queue.is_maxed()
    take(queue)
    assert queue.is_maxed()
    queue.remove_global_concurrency()
    assert not queue.is_maxed()


def test_rate_limit_ttl_has_nodes_semantics(queue, r):
    assert queue.get_rate_limit_ttl() == -2  # no key, no limit: the plain PTTL
    queue.rate_limit(5000)
    assert 0 < queue.get_rate_limit_ttl() <= 5000  # manual limit, no max: PTTL
    r.set(queue.keys.limiter, 3, px=4000)  # 3 jobs started in this window
    assert queue.get_rate_limit_ttl(5) == 0  # below the limit
    assert 0 < queue.get_rate_limit_ttl(3) <= 4000
    queue.set_global_rate_limit(10, 4000)
    assert queue.get_rate_limit_ttl() == 0  # global max 10 not reached
    queue.set_global_rate_limit(2, 4000)
    assert 0 < queue.get_rate_limit_ttl() <= 4000
    assert queue.remove_rate_limit_key() == 1 and queue.get_rate_limit_ttl(1) == 0
    for bad in (0, -1, "3", True):
        with pytest.raises(ValueError, match="max_jobs must be an integer >= 1"):
            queue.get_rate_limit_ttl(bad)


# ------------------------------------------------------------------ counts, workers, events
def test_counts_per_priority(queue):
    queue.add_bulk([("a", {}), ("b", {}), ("p", {}, {"priority": 3}), ("p", {}, {"priority": 3}),
                    ("q", {}, {"priority": 4}), ("d", {}, {"priority": 3, "delay": 60000})])
    assert queue.get_counts_per_priority([3, 0, 4, 3, 7]) == {"3": 2, "0": 2, "4": 1, "7": 0}
    assert queue.get_counts_per_priority([]) == {}
    for bad in ([-1], ["1"], [2_097_153]):
        with pytest.raises(ValueError, match="priorities must be integers"):
            queue.get_counts_per_priority(bad)


def test_workers_count(redis_url, prefix, qname, queue, wait_for):
    assert queue.get_workers_count() == 0
    with running(make_worker(redis_url, prefix, qname, lambda j: None)):
        wait_for(lambda: queue.get_workers_count() == 1, what="the worker's connection")


def test_trim_events_and_the_streams_option(redis_url, prefix, qname, queue, r):
    for i in range(300):
        r.xadd(queue.keys.events, {"event": "custom", "i": i})
    removed = queue.trim_events(10)
    assert removed > 0 and r.xlen(queue.keys.events) == 300 - removed >= 10
    assert queue.trim_events(0) >= 0
    with pytest.raises(ValueError, match="max_length must be an integer >= 0"):
        queue.trim_events(-1)
    q = Queue(qname, connection=redis_url, prefix=prefix, streams={"events": {"maxLen": 50}})
    assert r.hget(q.keys.meta, "opts.maxLenEvents") == "50"
    q.close()
    meta = dict(r.hgetall(queue.keys.meta))
    for bad in ({"events": {"maxlen": 5}}, {"events": {"maxLen": 0}}, {"other": 1}, 5):
        with pytest.raises(ValueError, match="streams|maxLen"):
            Queue(qname, connection=redis_url, prefix=prefix, streams=bad)
    assert dict(r.hgetall(queue.keys.meta)) == meta


# ------------------------------------------------------------------ orphans
def test_remove_orphaned_jobs(queue, r):
    live = queue.add("live", {})
    queue.add("live2", {})
    live.log("kept")
    for i in range(5):
        key = queue.keys.job(f"orphan{i}")
        r.hset(key, mapping={"name": "lost", "data": "{}"})
        r.rpush(key + ":logs", "x")
    r.set(queue.keys.lock("orphan0"), "tok")
    r.hset(queue.keys.base + "dn:zz", "name", "parked")  # not a job: left alone
    assert queue.remove_orphaned_jobs(count=1000, limit=2) >= 2
    assert queue.remove_orphaned_jobs() <= 3
    assert not [k for k in r.scan_iter(match=queue.keys.base + "orphan*")]
    assert r.exists(queue.keys.job(live.id), queue.keys.logs(live.id), queue.keys.base + "dn:zz") == 3
    assert queue.remove_orphaned_jobs() == 0
    with pytest.raises(ValueError, match="count must be an integer >= 1"):
        queue.remove_orphaned_jobs(count=0)


# ------------------------------------------------------------------ job calls
def test_job_clear_logs(queue, r):
    job = queue.add("a", {})
    for i in range(5):
        job.log(f"line {i}")
    job.clear_logs(2)
    assert queue.get_job_logs(job.id) == {"logs": ["line 3", "line 4"], "count": 2}
    job.clear_logs()
    assert not r.exists(queue.keys.logs(job.id))
    with pytest.raises(ValueError, match="keep_logs"):
        job.clear_logs(-1)


def test_job_move_to_wait_checks_the_token(queue, r):
    job = queue.add("a", {})
    assert take(queue) == job.id
    before = {k: r.dump(k) for k in (queue.keys.active, queue.keys.wait, queue.keys.lock(job.id))}
    with pytest.raises(JobLockMismatch, match=f"job {job.id}"):
        job.move_to_wait("another-token")
    assert {k: r.dump(k) for k in before} == before, "a wrong token changed nothing"
    assert job.move_to_wait(TOKEN) == 0
    assert queue.get_job_state(job.id) == "waiting" and not r.exists(queue.keys.lock(job.id))
    gone = queue.add("b", {})
    queue.remove_job(gone.id)
    with pytest.raises(JobNotExist, match="does not exist"):
        gone.move_to_wait(TOKEN)


def test_shortcuts_bad_input(queue, r):
    with pytest.raises(JobNotExist):
        queue.update_job_progress("404", 5)
    with pytest.raises(ValueError, match="keep_logs"):
        queue.add_job_log("1", "x", -1)
    with pytest.raises(ValueError, match="timestamp"):
        queue.get_delayed_count("now")
    assert queue.get_version() is None and not r.exists(queue.keys.job("404"))


def test_job_remove_deduplication_key_only_removes_its_own(queue, r):
    first = queue.add("a", {}, {"deduplication": {"id": "own"}})
    plain = queue.add("b", {})
    assert plain.remove_deduplication_key() is False
    r.set(queue.keys.dedup("own"), "someone-else")
    assert first.remove_deduplication_key() is False and r.get(queue.keys.dedup("own")) == "someone-else"
    r.set(queue.keys.dedup("own"), first.id)
    assert first.remove_deduplication_key() is True and not r.exists(queue.keys.dedup("own"))

"""moveToFinished-14 on a real Redis (docs/protocol.md, "Fetching and finishing"): error codes and their order, keepJobs,
events, parents, deduplication, metrics and fetch-next."""
from __future__ import annotations

import json

import pytest

from echomq_gevent.errors import (
    JobHasFailedChildren, JobLockMismatch, JobLockNotExist, JobNotExist, JobNotInState,
    JobPendingChildren,
)
from echomq_gevent.protocol.keys import QueueKeys
from integration.worker_scripts_helpers import (
    TOKEN, activate, add_delayed, add_prioritized, add_waiting, as_dict, finish_opts, make_job, now_ms,
)


def complete(scripts, job_id, value='"done"', now=None, fetch_next=False, **kw):
    return scripts.move_to_finished(job_id, now or now_ms(), "returnvalue", value, "completed",
                                    fetch_next, finish_opts(**kw))


def fail(scripts, job_id, reason="boom", now=None, fetch_next=False, fields=None, **kw):
    return scripts.move_to_finished(job_id, now or now_ms(), "failedReason", reason, "failed",
                                    fetch_next, finish_opts(**kw), fields)


def running(r, keys, scripts, job_id, **kw):
    """A job that a worker holds: in active, locked with TOKEN."""
    add_waiting(r, keys, job_id, **kw)
    activate(scripts, job_id)
    return job_id


# -- error codes ------------------------------------------------------------------------
def test_missing_job_is_minus_1(scripts):
    with pytest.raises(JobNotExist):
        complete(scripts, "nope")


def test_pending_children_block_completion_before_the_lock_check(r, keys, scripts):
    running(r, keys, scripts, "p")
    r.sadd(keys.dependencies("p"), keys.job("child"))
    with pytest.raises(JobPendingChildren):
        complete(scripts, "p", token="someone-else")
    # failing is allowed with pending children; the lock is checked then
    with pytest.raises(JobLockMismatch):
        fail(scripts, "p", token="someone-else")
    fail(scripts, "p")
    assert r.zscore(keys.failed, "p") is not None


def test_failed_children_block_completion(r, keys, scripts):
    running(r, keys, scripts, "p")
    r.zadd(keys.unsuccessful("p"), {keys.job("c"): 1})
    with pytest.raises(JobHasFailedChildren):
        complete(scripts, "p")
    assert r.lrange(keys.active, 0, -1) == ["p"]


def test_wrong_token_is_minus_6_and_changes_nothing(r, keys, scripts):
    running(r, keys, scripts, "1")
    with pytest.raises(JobLockMismatch):
        fail(scripts, "1", token="other", fields=["failedReason", "x"])
    assert r.hget(keys.job("1"), "failedReason") is None
    assert r.get(keys.lock("1")) == TOKEN
    assert r.lrange(keys.active, 0, -1) == ["1"]


def test_missing_lock_is_minus_2(r, keys, scripts):
    running(r, keys, scripts, "1")
    r.delete(keys.lock("1"))
    with pytest.raises(JobLockNotExist):
        complete(scripts, "1")


def test_not_active_is_minus_3_checked_after_the_lock(r, keys, scripts):
    make_job(r, keys, "1")
    r.lpush(keys.wait, "1")
    with pytest.raises(JobLockNotExist):
        complete(scripts, "1")
    r.set(keys.lock("1"), TOKEN)
    with pytest.raises(JobNotInState):
        complete(scripts, "1")
    with pytest.raises(JobNotInState):
        complete(scripts, "1", token="0")  # token "0" skips the lock check only


# -- completing and failing ---------------------------------------------------------------
def test_complete_records_result_and_emits_events(r, keys, scripts, events):
    running(r, keys, scripts, "1")
    r.sadd(keys.stalled, "1")
    now = now_ms()
    assert complete(scripts, "1", value='{"a": 1}', now=now) == 0
    job = r.hgetall(keys.job("1"))
    assert job["returnvalue"] == '{"a": 1}'
    assert job["finishedOn"] == str(now)
    assert job["atm"] == "1"
    assert r.zrange(keys.completed, 0, -1, withscores=True) == [("1", float(now))]
    assert r.exists(keys.lock("1")) == 0
    assert r.sismember(keys.stalled, "1") == 0
    assert r.llen(keys.active) == 0
    assert events(keys)[1:] == [
        {"event": "completed", "jobId": "1", "returnvalue": '{"a": 1}', "prev": "active"},
        {"event": "drained"},
    ]


def test_no_drained_event_while_jobs_remain(r, keys, scripts, events):
    running(r, keys, scripts, "1")
    add_prioritized(r, keys, "p", 1)
    complete(scripts, "1")
    assert "drained" not in events.names(keys)


def test_fail_sets_fields_drops_defa_and_reports_exhaustion(r, keys, scripts, events):
    running(r, keys, scripts, "1", defa="child x failed")
    stack = json.dumps(["Error: boom\n  at f"])
    fail(scripts, "1", reason="boom", fields=["stacktrace", stack], attempts=1)
    job = r.hgetall(keys.job("1"))
    assert job["failedReason"] == "boom"
    assert job["stacktrace"] == stack
    assert "defa" not in job
    assert r.zscore(keys.failed, "1") is not None
    assert events(keys)[1:] == [
        {"event": "failed", "jobId": "1", "failedReason": "boom", "prev": "active"},
        {"event": "retries-exhausted", "jobId": "1", "attemptsMade": "1"},
        {"event": "drained"},
    ]


def test_no_retries_exhausted_while_attempts_remain(r, keys, scripts, events):
    running(r, keys, scripts, "1")
    fail(scripts, "1", attempts=3)
    assert events.names(keys)[1:] == ["failed", "drained"]


def test_default_attempts_zero_always_reports_exhaustion(r, keys, scripts, events):
    running(r, keys, scripts, "1")
    r.hset(keys.job("1"), "atm", 2)
    fail(scripts, "1", attempts=0)
    assert events(keys)[2] == {"event": "retries-exhausted", "jobId": "1", "attemptsMade": "3"}


def test_events_are_capped_to_the_meta_limit_by_the_finish_event(r, keys, scripts, events):
    r.hset(keys.meta, "opts.maxLenEvents", 10)
    pipe = r.pipeline()
    for i in range(1000):
        pipe.xadd(keys.events, {"event": "progress", "jobId": str(i), "data": "1"})
    pipe.execute()
    running(r, keys, scripts, "1")
    complete(scripts, "1")
    length = r.xlen(keys.events)
    assert 10 <= length < 500  # approximate trim (whole stream nodes)
    assert events.names(keys)[-2:] == ["completed", "drained"]


@pytest.mark.parametrize("outcome", ["completed", "failed"])
def test_a_cap_of_zero_keeps_only_the_finish_events(r, keys, scripts, events, outcome):
    # Node's Queue option streams.events.maxLen: 0. "XADD ... MAXLEN ~ 0" would drop the
    # new entry with the old ones; the stream must end with just this call's events.
    r.hset(keys.meta, "opts.maxLenEvents", 0)
    pipe = r.pipeline()
    for i in range(300):
        pipe.xadd(keys.events, {"event": "progress", "jobId": str(i), "data": "1"})
    pipe.execute()
    running(r, keys, scripts, "1")
    if outcome == "completed":
        complete(scripts, "1")
        assert events.names(keys) == ["completed", "drained"]
    else:
        fail(scripts, "1", attempts=5)
        assert events.names(keys) == ["failed", "drained"]


@pytest.mark.parametrize("stored, after", [
    (None, "1"), ("0", "1"), ("41", "42"), ("-2", "-1"),
    ("99999999999999", "100000000000000"),  # past what the script counts itself: Redis counts it
])
def test_attempts_made_is_written_with_the_result(r, keys, scripts, stored, after):
    running(r, keys, scripts, "1")
    if stored is not None:
        r.hset(keys.job("1"), "atm", stored)
    complete(scripts, "1")
    assert r.hget(keys.job("1"), "atm") == after


def test_a_garbage_attempts_made_restarts_at_one(r, keys, scripts):
    running(r, keys, scripts, "1")
    r.hset(keys.job("1"), "atm", "007")  # Redis does not read leading zeros as an integer
    fail(scripts, "1")
    assert r.hget(keys.job("1"), "atm") == "1"
    assert r.zscore(keys.failed, "1") is not None


def test_missing_max_events_is_initialised(r, keys, scripts):
    running(r, keys, scripts, "1")
    complete(scripts, "1")
    assert r.hget(keys.meta, "opts.maxLenEvents") == "10000"


# -- keepJobs ---------------------------------------------------------------------------------
def test_count_zero_deletes_the_job_and_its_keys(r, keys, scripts, events):
    running(r, keys, scripts, "1")
    r.rpush(keys.logs("1"), "line")
    r.hset(keys.processed("1"), "k", "v")
    complete(scripts, "1", keep={"count": 0})
    assert r.exists(keys.job("1"), keys.logs("1"), keys.processed("1")) == 0
    assert r.zcard(keys.completed) == 0
    assert events.names(keys)[-2:] == ["completed", "drained"]


def test_count_minus_one_and_absent_keep_everything(r, keys, scripts):
    for i in range(3):
        running(r, keys, scripts, str(i))
        complete(scripts, str(i), keep={"count": -1} if i else {})
    assert r.zcard(keys.completed) == 3


def test_count_n_keeps_the_newest_n(r, keys, scripts):
    now = now_ms()
    for i in range(5):
        running(r, keys, scripts, str(i))
        fail(scripts, str(i), now=now + i, keep={"count": 2})
    assert r.zrange(keys.failed, 0, -1) == ["3", "4"]
    assert [r.exists(keys.job(str(i))) for i in range(5)] == [0, 0, 0, 1, 1]


def test_age_removes_old_jobs_with_a_limit(r, keys, scripts):
    now = now_ms()
    for i in range(5):  # finished an hour ago
        make_job(r, keys, f"old{i}")
        r.zadd(keys.completed, {f"old{i}": now - 3600_000 + i})
    make_job(r, keys, "recent")
    r.zadd(keys.completed, {"recent": now - 1000})
    running(r, keys, scripts, "1")
    complete(scripts, "1", now=now, keep={"age": 60, "limit": 2})
    # the two most recent of the old ones went first
    assert r.zrange(keys.completed, 0, -1) == ["old0", "old1", "old2", "recent", "1"]
    assert r.exists(keys.job("old3"), keys.job("old4")) == 0
    running(r, keys, scripts, "2")
    complete(scripts, "2", now=now, keep={"age": 60})
    assert r.zrange(keys.completed, 0, -1) == ["recent", "1", "2"]
    assert r.exists(keys.job("old0")) == 0


def test_age_and_count_together(r, keys, scripts):
    now = now_ms()
    for i in range(3):
        make_job(r, keys, f"r{i}")
        r.zadd(keys.completed, {f"r{i}": now - 10 + i})
    make_job(r, keys, "old")
    r.zadd(keys.completed, {"old": now - 100_000})
    running(r, keys, scripts, "1")
    complete(scripts, "1", now=now, keep={"age": 50, "count": 2})
    assert r.zrange(keys.completed, 0, -1) == ["r2", "1"]


# -- metrics -------------------------------------------------------------------------------------
def test_metrics_count_per_minute(r, keys, scripts):
    t0 = 1_800_000_000_000 - (1_800_000_000_000 % 60000) + 1000
    mkey = keys.metrics("completed")
    running(r, keys, scripts, "1")
    complete(scripts, "1", now=t0, metrics=10)
    assert r.hgetall(mkey) == {"count": "1", "prevTS": str(t0), "prevCount": "0"}
    running(r, keys, scripts, "2")
    complete(scripts, "2", now=t0 + 5000, metrics=10)  # same minute: counted only
    assert r.hget(mkey, "count") == "2" and r.exists(mkey + ":data") == 0
    running(r, keys, scripts, "3")
    complete(scripts, "3", now=t0 + 3 * 60000, metrics=10)  # three minutes later
    assert r.lrange(mkey + ":data", 0, -1) == ["0", "0", "2"]
    assert r.hgetall(mkey) == {"count": "3", "prevTS": str(t0 + 3 * 60000), "prevCount": "2"}
    running(r, keys, scripts, "4")
    complete(scripts, "4", now=t0 + 60 * 60000, metrics=4)  # capped at maxDataPoints
    assert r.lrange(mkey + ":data", 0, -1) == ["0", "0", "0", "1"]


def test_no_metrics_without_max_size(r, keys, scripts):
    running(r, keys, scripts, "1")
    fail(scripts, "1", metrics="")
    assert r.exists(keys.metrics("failed")) == 0


# -- fetch next ---------------------------------------------------------------------------------
def test_fetch_next_returns_the_next_job(r, keys, scripts, events):
    running(r, keys, scripts, "1")
    add_waiting(r, keys, "2")
    res = complete(scripts, "1", fetch_next=True, name="w9")
    assert res[1:] == ["2", 0, 0]
    assert as_dict(res[0])["pb"] == "w9"
    assert r.get(keys.lock("2")) == TOKEN
    assert events.names(keys)[-2:] == ["completed", "active"]


def test_fetch_next_reports_rate_limit_paused_and_delayed(r, keys, scripts, events):
    running(r, keys, scripts, "1")
    add_waiting(r, keys, "2")
    r.zadd(keys.marker, {"0": 0})  # as an add writes it
    r.set(keys.limiter, 5, px=10000)
    res = complete(scripts, "1", fetch_next=True, limiter={"max": 5, "duration": 10000})
    assert res[:2] == [0, 0] and res[2] > 0 and res[3] == 0
    assert r.zscore(keys.marker, "0") == 0  # job 2 is still waiting: its marker stays

    r.delete(keys.limiter)
    activate(scripts, "2")
    r.hset(keys.meta, "paused", 1)
    assert complete(scripts, "2", fetch_next=True) == [0, 0, 0, 0]

    r.hdel(keys.meta, "paused")
    add_waiting(r, keys, "3")
    activate(scripts, "3")
    due = now_ms() + 60000
    add_delayed(r, keys, "d", due)
    assert complete(scripts, "3", fetch_next=True) == [0, 0, 0, due]
    assert "drained" not in events.names(keys)


def test_fetch_next_with_nothing_left_returns_zero_and_drains(r, keys, scripts, events):
    running(r, keys, scripts, "1")
    assert complete(scripts, "1", fetch_next=True) in (0, None)
    assert events.names(keys)[-1] == "drained"
    # the base marker the pick-up of job 1 wrote is stale now: gone, so the next idle
    # worker's BZPOPMIN waits for a real job instead of waking for an empty fetch
    assert r.exists(keys.marker) == 0


# -- parents -----------------------------------------------------------------------------------
@pytest.fixture
def parent_keys(qname, prefix):
    return QueueKeys(qname + "parent", prefix)


def make_parent(r, pk, parent_id="P", children=(), **kw):
    make_job(r, pk, parent_id, **kw)
    r.zadd(pk.waiting_children, {parent_id: 1})
    if children:
        r.sadd(pk.dependencies(parent_id), *children)
    return pk.job(parent_id)


def make_child(r, keys, scripts, pk, child_id, parent_id="P", **flags):
    parent = {"id": parent_id, "queueKey": pk.queue_key}
    parent.update(flags)
    running(r, keys, scripts, child_id, parentKey=pk.job(parent_id), parent=parent)
    return keys.job(child_id)


def test_completed_child_releases_parent_when_last(r, keys, scripts, parent_keys, events):
    pk = parent_keys
    make_parent(r, pk, children=[keys.job("c1"), keys.job("c2")])
    make_child(r, keys, scripts, pk, "c1")
    make_child(r, keys, scripts, pk, "c2")
    complete(scripts, "c1", value='"one"')
    assert r.hgetall(pk.processed("P")) == {keys.job("c1"): '"one"'}
    assert r.zscore(pk.waiting_children, "P") is not None
    complete(scripts, "c2", value="2")
    assert r.hgetall(pk.processed("P")) == {keys.job("c1"): '"one"', keys.job("c2"): "2"}
    assert r.zcard(pk.waiting_children) == 0
    assert r.lrange(pk.wait, 0, -1) == ["P"]
    assert r.zscore(pk.marker, "0") == 0
    assert events(pk) == [{"event": "waiting", "jobId": "P", "prev": "waiting-children"}]


def test_released_parent_goes_to_prioritized_or_delayed(r, keys, scripts, parent_keys, events):
    pk = parent_keys
    make_parent(r, pk, "P1", children=[keys.job("a")], priority=4)
    make_parent(r, pk, "P2", children=[keys.job("b")], delay=5000)
    make_child(r, keys, scripts, pk, "a", parent_id="P1")
    make_child(r, keys, scripts, pk, "b", parent_id="P2")
    complete(scripts, "a")
    assert r.zscore(pk.prioritized, "P1") == 4 * 2 ** 32 + 1
    now = now_ms()
    complete(scripts, "b", now=now)
    assert r.zscore(pk.delayed, "P2") == (now + 5000) * 4096
    assert r.zscore(pk.marker, "1") == now + 5000
    assert events(pk)[-1] == {"event": "delayed", "jobId": "P2", "delay": str(now + 5000)}


def test_completed_child_already_removed_from_deps_leaves_parent(r, keys, scripts, parent_keys):
    pk = parent_keys
    make_parent(r, pk, children=[keys.job("other")])
    make_child(r, keys, scripts, pk, "c")
    complete(scripts, "c")
    assert r.exists(pk.processed("P")) == 0


def test_failed_child_without_flags_keeps_parent_waiting(r, keys, scripts, parent_keys):
    pk = parent_keys
    make_parent(r, pk, children=[keys.job("c")])
    make_child(r, keys, scripts, pk, "c")
    fail(scripts, "c")
    assert r.smembers(pk.dependencies("P")) == {keys.job("c")}
    assert r.zscore(pk.waiting_children, "P") is not None


def test_failed_child_with_fpof_fails_parent_through_defa(r, keys, scripts, parent_keys):
    pk = parent_keys
    make_parent(r, pk, children=[keys.job("c"), keys.job("c2")])
    make_child(r, keys, scripts, pk, "c", fpof=True)
    now = now_ms()
    fail(scripts, "c", now=now)
    child_key = keys.job("c")
    assert r.zrange(pk.unsuccessful("P"), 0, -1, withscores=True) == [(child_key, float(now))]
    assert r.hget(pk.job("P"), "defa") == f"child {child_key} failed"
    assert r.lrange(pk.wait, 0, -1) == ["P"]
    assert r.smembers(pk.dependencies("P")) == {keys.job("c2")}


def test_fpof_on_a_delayed_parent(r, keys, scripts, parent_keys):
    pk = parent_keys
    make_parent(r, pk, children=[keys.job("c")], delay=1000)
    r.zrem(pk.waiting_children, "P")
    r.zadd(pk.delayed, {"P": 123})
    make_child(r, keys, scripts, pk, "c", fpof=True)
    fail(scripts, "c")
    assert r.zcard(pk.delayed) == 0
    assert r.hget(pk.job("P"), "delay") == "0"
    assert r.lrange(pk.wait, 0, -1) == ["P"]


def test_fpof_on_an_active_parent_only_sets_defa(r, keys, scripts, parent_keys):
    pk = parent_keys
    make_parent(r, pk, children=[keys.job("c")])
    r.zrem(pk.waiting_children, "P")
    make_child(r, keys, scripts, pk, "c", fpof=True)
    fail(scripts, "c")
    assert r.hget(pk.job("P"), "defa") is not None
    assert r.llen(pk.wait) == 0


def test_cpof_releases_parent_despite_pending_children(r, keys, scripts, parent_keys):
    pk = parent_keys
    make_parent(r, pk, children=[keys.job("c"), keys.job("c2")])
    make_child(r, keys, scripts, pk, "c", cpof=True)
    fail(scripts, "c", reason="bad")
    assert r.hgetall(pk.failed_children("P")) == {keys.job("c"): "bad"}
    assert r.lrange(pk.wait, 0, -1) == ["P"]
    assert "defa" not in r.hgetall(pk.job("P"))


@pytest.mark.parametrize("flag", ["idof", "rdof"])
def test_idof_rdof_release_parent_only_when_nothing_pending(r, keys, scripts, parent_keys, flag):
    pk = parent_keys
    make_parent(r, pk, children=[keys.job("c"), keys.job("c2")])
    make_child(r, keys, scripts, pk, "c", **{flag: True})
    make_child(r, keys, scripts, pk, "c2", **{flag: True})
    fail(scripts, "c", reason="bad")
    assert r.llen(pk.wait) == 0
    fail(scripts, "c2", reason="worse")
    assert r.lrange(pk.wait, 0, -1) == ["P"]
    expected = {keys.job("c"): "bad", keys.job("c2"): "worse"} if flag == "idof" else {}
    assert r.hgetall(pk.failed_children("P")) == expected


def test_removed_failed_child_without_flags_unblocks_parent(r, keys, scripts, parent_keys, events):
    pk = parent_keys
    make_parent(r, pk, children=[keys.job("c")])
    make_child(r, keys, scripts, pk, "c")
    fail(scripts, "c", keep={"count": 0})
    assert r.exists(keys.job("c")) == 0
    assert r.lrange(pk.wait, 0, -1) == ["P"]
    assert events(pk)[-1] == {"event": "waiting", "jobId": "P", "prev": "waiting-children"}


def test_retention_of_children_unlinks_them_from_parent(r, keys, scripts, parent_keys):
    pk = parent_keys
    make_parent(r, pk, children=[keys.job("old")])
    make_job(r, keys, "old", parentKey=pk.job("P"))
    r.zadd(keys.failed, {"old": 1})
    running(r, keys, scripts, "1")
    fail(scripts, "1", keep={"count": 1})
    assert r.exists(keys.job("old")) == 0
    assert r.lrange(pk.wait, 0, -1) == ["P"]


# -- deduplication -----------------------------------------------------------------------------
def test_dedup_key_without_ttl_is_released_by_its_owner(r, keys, scripts):
    running(r, keys, scripts, "1", deid="d1")
    r.set(keys.dedup("d1"), "1")
    running(r, keys, scripts, "2", deid="d2")
    r.set(keys.dedup("d2"), "someone-else")
    running(r, keys, scripts, "3", deid="d3")
    r.set(keys.dedup("d3"), "3", px=60000)
    for job_id in ("1", "2", "3"):
        complete(scripts, job_id)
    assert r.exists(keys.dedup("d1")) == 0
    assert r.get(keys.dedup("d2")) == "someone-else"
    assert r.get(keys.dedup("d3")) == "3"


def test_stored_next_job_is_created_when_owner_finishes(r, keys, scripts, events):
    r.set(keys.id, 7)
    running(r, keys, scripts, "1", deid="d")
    r.set(keys.dedup("d"), "1")
    opts = {"de": {"id": "d", "keepLastIfActive": True}, "attempts": 0}
    r.hset(keys.base + "dn:d", mapping={"name": "again", "data": '{"v": 2}',
                                        "opts": json.dumps(opts), "jid": "next"})
    now = now_ms()
    complete(scripts, "1", now=now)
    assert r.exists(keys.base + "dn:d") == 0
    assert r.get(keys.id) == "8"
    job = r.hgetall(keys.job("next"))
    assert job["name"] == "again" and job["data"] == '{"v": 2}'
    assert job["deid"] == "d" and job["timestamp"] == str(now)
    assert json.loads(job["opts"]) == opts
    assert r.get(keys.dedup("d")) == "next"
    assert r.ttl(keys.dedup("d")) == -1
    assert r.lrange(keys.wait, 0, -1) == ["next"]
    assert [(e["event"], e["jobId"]) for e in events(keys)[1:3]] == [("added", "next"),
                                                                        ("waiting", "next")]


def test_stored_next_job_without_id_takes_the_counter_and_can_be_delayed(r, keys, scripts, events):
    r.set(keys.id, 41)
    running(r, keys, scripts, "1", deid="d")
    opts = {"de": {"id": "d", "ttl": 5000}, "delay": 2000, "priority": 3}
    r.hset(keys.base + "dn:d", mapping={"name": "n", "data": "{}", "opts": json.dumps(opts)})
    now = now_ms()
    complete(scripts, "1", now=now)
    assert r.get(keys.dedup("d")) == "42"
    assert 0 < r.pttl(keys.dedup("d")) <= 5000
    assert r.hget(keys.job("42"), "delay") == "2000"
    assert r.zrange(keys.delayed, 0, -1, withscores=True) == [("42", float((now + 2000) * 4096))]
    assert r.zscore(keys.marker, "1") == now + 2000
    assert {"event": "delayed", "jobId": "42", "delay": str(now + 2000)} in events(keys)


def test_stored_next_job_with_priority_goes_to_prioritized(r, keys, scripts):
    running(r, keys, scripts, "1", deid="d")
    opts = {"de": {"id": "d"}, "priority": 3}
    r.hset(keys.base + "dn:d", mapping={"name": "n", "data": "{}", "opts": json.dumps(opts),
                                        "jid": "x"})
    complete(scripts, "1")
    assert r.zscore(keys.prioritized, "x") == 3 * 2 ** 32 + 1
    assert r.hget(keys.job("x"), "priority") == "3"

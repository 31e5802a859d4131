"""The queue admin scripts (pause, promote, changePriority, updateProgress, addLog,
updateData, getCounts, getStateV2, removeJob, isFinished, drain, obliterate) on a real
Redis, called through the :class:`~echomq_gevent.protocol.scripts.Scripts` wrappers.

Jobs are written straight into Redis with the fields of docs/protocol.md "The job hash" (``put_job``), so
these tests depend on nothing but the scripts under test.
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

import pytest

from echomq_gevent.errors import JobBelongsToJobScheduler, JobNotExist, JobNotInState
from echomq_gevent.protocol.keys import QueueKeys
from echomq_gevent.protocol.scripts import Scripts

TS = 1_700_000_000_000  # a fixed "now" in ms
PRIO = 2 ** 32


@pytest.fixture
def sc(r, prefix, qname) -> Scripts:
    return Scripts(r, QueueKeys(qname, prefix))


@pytest.fixture
def k(sc) -> QueueKeys:
    return sc.keys


def put_job(r, keys: QueueKeys, job_id: str, state: Optional[str] = None, score: Optional[float] = None,
            **fields: Any) -> str:
    """Write a job hash (the job hash fields) and put its id into ``state``.

    ``state``: wait/paused/active (LPUSH), or a sorted-set state, scored by ``score``.
    Returns the job key.
    """
    h: Dict[str, Any] = {
        "name": "test", "data": "{}", "opts": '{"attempts":0}', "timestamp": TS,
        "delay": 0, "priority": 0,
    }
    h.update({key: (json.dumps(v) if isinstance(v, (dict, list)) else v) for key, v in fields.items()})
    r.hset(keys.job(job_id), mapping=h)
    if state in ("wait", "paused", "active"):
        r.lpush(keys.state_key(state), job_id)
    elif state is not None:
        r.zadd(keys.state_key(state), {job_id: TS if score is None else score})
    return keys.job(job_id)




def wait_ids(r, keys: QueueKeys) -> List[str]:
    """Ids of wait in the order workers take them (right end first)."""
    return list(reversed(r.lrange(keys.wait, 0, -1)))


# -- pause-7 ------------------------------------------------------------------------------

def test_pause_sets_flag_drops_marker_keeps_jobs_and_emits(r, sc, k, events):
    put_job(r, k, "1", "wait")
    r.zadd(k.marker, {"0": 0})
    assert sc.pause(True) == 0
    assert r.hget(k.meta, "paused") == "1"
    assert not r.exists(k.marker)
    assert r.lrange(k.wait, 0, -1) == ["1"]
    assert not r.exists(k.paused)
    assert events(k) == [{"event": "paused"}]


def test_pause_and_resume_without_event(r, sc, k):
    sc.pause(True, emit=False)
    sc.pause(False, emit=False)
    assert not r.exists(k.events)
    assert not r.hexists(k.meta, "paused")


def test_resume_clears_flag_adds_base_marker_and_emits(r, sc, k, events):
    put_job(r, k, "1", "wait")
    sc.pause(True)
    assert sc.pause(False) == 0
    assert not r.hexists(k.meta, "paused")
    assert r.zrange(k.marker, 0, -1, withscores=True) == [("0", 0.0)]
    assert [e["event"] for e in events(k)] == ["paused", "resumed"]


def test_resume_base_marker_for_prioritized_only(r, sc, k):
    put_job(r, k, "1", "prioritized", score=3 * PRIO + 1, priority=3)
    sc.pause(True)
    sc.pause(False)
    assert r.zscore(k.marker, "0") == 0


def test_resume_sets_delay_marker_when_only_delayed(r, sc, k):
    due = TS + 5000
    put_job(r, k, "1", "delayed", score=due * 4096 + 3)
    put_job(r, k, "2", "delayed", score=(due + 10) * 4096)
    sc.pause(True)
    sc.pause(False)
    assert r.zrange(k.marker, 0, -1, withscores=True) == [("1", pytest.approx(due + 3 / 4096))]


def test_resume_empty_queue_writes_no_marker(r, sc, k):
    sc.pause(True)
    sc.pause(False)
    assert not r.exists(k.marker)


def test_resume_renames_legacy_paused_list_when_wait_is_missing(r, sc, k):
    r.lpush(k.paused, "a", "b", "c")  # "a" oldest, next to run
    for j in "abc":
        put_job(r, k, j)
    r.hset(k.meta, "paused", "1")
    assert sc.pause(False) == 0
    assert not r.exists(k.paused)
    assert wait_ids(r, k) == ["a", "b", "c"]
    assert r.zscore(k.marker, "0") == 0


def test_resume_moves_legacy_paused_list_in_batches_keeping_order(r, sc, k, events):
    legacy = [f"p{i}" for i in range(7005)]  # p0 oldest
    r.lpush(k.paused, *legacy)
    put_job(r, k, "w", "wait")
    r.hset(k.meta, "paused", "1")
    assert sc.pause(False) == 5
    assert r.llen(k.paused) == 5
    assert r.llen(k.wait) == 7001
    assert sc.pause(False, emit=False) == 0
    assert not r.exists(k.paused)
    # the legacy jobs run first, oldest first, then the job that was already in wait
    assert wait_ids(r, k) == legacy + ["w"]
    assert [e["event"] for e in events(k)] == ["resumed"]


# -- promote-9 ----------------------------------------------------------------------------

def test_promote_moves_delayed_job_to_wait(r, sc, k, events):
    put_job(r, k, "1", "delayed", score=(TS + 9000) * 4096, delay=9000)
    put_job(r, k, "0", "wait")
    assert sc.promote("1") == 0
    assert not r.zscore(k.delayed, "1")
    assert r.lrange(k.wait, 0, -1) == ["1", "0"]  # LPUSH: behind the job already waiting
    assert r.hget(k.job("1"), "delay") == "0"
    assert r.zscore(k.marker, "0") == 0
    assert events(k) == [{"event": "waiting", "jobId": "1", "prev": "delayed"}]


def test_promote_prioritized_job_gets_priority_score(r, sc, k):
    put_job(r, k, "1", "delayed", score=(TS + 9000) * 4096, delay=9000, priority=4)
    r.set(k.pc, 6)
    sc.promote("1")
    assert r.zscore(k.prioritized, "1") == 4 * PRIO + 7
    assert not r.exists(k.wait)
    assert r.zscore(k.marker, "0") == 0


def test_promote_not_delayed_is_minus_3(r, sc, k):
    put_job(r, k, "1", "wait")
    with pytest.raises(JobNotInState) as err:
        sc.promote("1")
    assert err.value.code == -3 and "promote-9" in str(err.value)
    assert r.lrange(k.wait, 0, -1) == ["1"]
    assert not r.exists(k.events)


def test_promote_drops_legacy_marker_at_head_of_wait(r, sc, k):
    put_job(r, k, "1", "delayed", score=TS * 4096)
    r.rpush(k.wait, "x")
    r.lpush(k.wait, "0:123")
    sc.promote("1")
    assert r.lrange(k.wait, 0, -1) == ["1", "x"]


def test_promote_in_paused_queue_writes_no_marker(r, sc, k):
    put_job(r, k, "1", "delayed", score=TS * 4096)
    r.hset(k.meta, "paused", "1")
    sc.promote("1")
    assert r.lrange(k.wait, 0, -1) == ["1"]
    assert not r.exists(k.marker)


def test_promote_in_maxed_queue_writes_no_marker(r, sc, k):
    put_job(r, k, "1", "delayed", score=TS * 4096)
    put_job(r, k, "a", "active")
    r.hset(k.meta, "concurrency", 1)
    sc.promote("1")
    assert r.lrange(k.wait, 0, -1) == ["1"]
    assert not r.exists(k.marker)


# -- changePriority-7 ---------------------------------------------------------------------

def test_change_priority_missing_job(r, sc, k):
    with pytest.raises(JobNotExist):
        sc.change_priority("nope", 3)


def test_change_priority_from_wait_to_prioritized(r, sc, k):
    put_job(r, k, "1", "wait")
    r.set(k.pc, 10)
    assert sc.change_priority("1", 5) == 0
    assert not r.exists(k.wait)
    assert r.zscore(k.prioritized, "1") == 5 * PRIO + 11
    assert r.hget(k.job("1"), "priority") == "5"
    assert r.zscore(k.marker, "0") == 0


def test_change_priority_lifo_goes_in_front_of_its_band(r, sc, k):
    put_job(r, k, "a", "prioritized", score=2 * PRIO + 1, priority=2)
    put_job(r, k, "b", "prioritized", score=5 * PRIO + 2, priority=5)
    sc.change_priority("b", 2, lifo=True)
    assert r.zscore(k.prioritized, "b") == 2 * PRIO
    assert r.zrange(k.prioritized, 0, -1) == ["b", "a"]


def test_change_priority_within_prioritized_takes_a_fresh_counter(r, sc, k):
    put_job(r, k, "a", "prioritized", score=1 * PRIO + 1, priority=1)
    put_job(r, k, "b", "prioritized", score=3 * PRIO + 2, priority=3)
    r.set(k.pc, 2)
    sc.change_priority("a", 3)
    assert r.zscore(k.prioritized, "a") == 3 * PRIO + 3
    assert r.zrange(k.prioritized, 0, -1) == ["b", "a"]  # behind the job that had it first
    assert r.get(k.pc) == "3"


def test_change_priority_to_zero_goes_to_wait_fifo_or_lifo(r, sc, k):
    put_job(r, k, "w", "wait")
    put_job(r, k, "a", "prioritized", score=2 * PRIO + 1, priority=2)
    put_job(r, k, "b", "prioritized", score=2 * PRIO + 2, priority=2)
    sc.change_priority("a", 0)
    sc.change_priority("b", 0, lifo=True)
    assert wait_ids(r, k) == ["b", "w", "a"]
    assert r.zcard(k.prioritized) == 0
    assert r.hget(k.job("a"), "priority") == "0"


def test_change_priority_of_delayed_job_only_sets_field(r, sc, k):
    put_job(r, k, "1", "delayed", score=TS * 4096)
    sc.change_priority("1", 7)
    assert r.hget(k.job("1"), "priority") == "7"
    assert r.zscore(k.delayed, "1") == TS * 4096
    assert not r.exists(k.prioritized) and not r.exists(k.marker)


def test_change_priority_in_paused_queue_writes_no_marker(r, sc, k):
    put_job(r, k, "1", "wait")
    r.hset(k.meta, "paused", "1")
    sc.change_priority("1", 1)
    assert r.zscore(k.prioritized, "1") == PRIO + 1
    assert not r.exists(k.marker)


# -- updateProgress-3, addLog-2, updateData-1 ---------------------------------------------

def test_update_progress_number_and_object(r, sc, k, events):
    put_job(r, k, "1", "active")
    assert sc.update_progress("1", "42") == 0
    assert sc.update_progress("1", json.dumps({"step": 2, "of": 3})) == 0
    assert json.loads(r.hget(k.job("1"), "progress")) == {"step": 2, "of": 3}
    evs = events(k)
    assert evs[0] == {"event": "progress", "jobId": "1", "data": "42"}
    assert json.loads(evs[1]["data"]) == {"step": 2, "of": 3}
    assert r.hget(k.meta, "opts.maxLenEvents") == "10000"


def test_update_progress_respects_existing_events_cap(r, sc, k):
    put_job(r, k, "1", "active")
    r.hset(k.meta, "opts.maxLenEvents", 50)
    sc.update_progress("1", "1")
    assert r.hget(k.meta, "opts.maxLenEvents") == "50"


def test_update_progress_missing_job(r, sc, k):
    with pytest.raises(JobNotExist) as err:
        sc.update_progress("9", "1")
    assert "'9'" in str(err.value)
    assert not r.exists(k.events)


def test_add_log_without_limit_returns_count(r, sc, k):
    put_job(r, k, "1", "active")
    assert [sc.add_log("1", f"line {i}") for i in range(3)] == [1, 2, 3]
    assert r.lrange(k.logs("1"), 0, -1) == ["line 0", "line 1", "line 2"]


def test_add_log_keep_logs_trims_to_newest(r, sc, k):
    put_job(r, k, "1", "active")
    assert [sc.add_log("1", f"l{i}", keep_logs=2) for i in range(4)] == [1, 2, 2, 2]
    assert r.lrange(k.logs("1"), 0, -1) == ["l2", "l3"]


def test_add_log_keep_logs_zero_keeps_nothing(r, sc, k):
    put_job(r, k, "1", "active")
    assert sc.add_log("1", "x", keep_logs=0) == 0
    assert not r.exists(k.logs("1"))


def test_add_log_missing_job(r, sc, k):
    with pytest.raises(JobNotExist):
        sc.add_log("9", "x")
    assert not r.exists(k.logs("9"))


def test_update_data(r, sc, k):
    put_job(r, k, "1", "wait")
    assert sc.update_data("1", '{"a":[1,2]}') == 0
    assert r.hget(k.job("1"), "data") == '{"a":[1,2]}'
    with pytest.raises(JobNotExist):
        sc.update_data("9", "{}")
    assert not r.exists(k.job("9"))


# -- getCounts-1 --------------------------------------------------------------------------

def test_get_counts_every_state(r, sc, k):
    for i in range(3):
        put_job(r, k, f"w{i}", "wait")
    put_job(r, k, "a", "active")
    put_job(r, k, "d1", "delayed", score=TS * 4096)
    put_job(r, k, "d2", "delayed", score=(TS + 1) * 4096)
    put_job(r, k, "p", "prioritized", score=PRIO + 1)
    put_job(r, k, "c", "completed")
    for i in range(4):
        put_job(r, k, f"f{i}", "failed")
    put_job(r, k, "wc", "waiting-children")
    put_job(r, k, "lp", "paused")
    types = ["wait", "active", "delayed", "prioritized", "completed", "failed",
             "waiting-children", "paused"]
    assert sc.get_counts(types) == [3, 1, 2, 1, 1, 4, 1, 1]
    assert sc.get_counts(["waiting"]) == [3]
    assert sc.get_counts([]) == []


def test_get_counts_skips_and_removes_legacy_marker(r, sc, k):
    put_job(r, k, "1", "wait")
    r.rpush(k.wait, "0:1234")  # right end: where a worker would pop it
    assert sc.get_counts(["wait"]) == [1]
    assert r.lrange(k.wait, 0, -1) == ["1"]
    r.rpush(k.paused, "0:99")
    assert sc.get_counts(["paused", "wait"]) == [0, 1]
    assert not r.exists(k.paused)


def test_get_counts_delayed_cutoff(r, sc, k):
    put_job(r, k, "a", "delayed", score=(TS - 1) * 4096 + 4095)
    put_job(r, k, "b", "delayed", score=TS * 4096)
    put_job(r, k, "c", "delayed", score=(TS + 5) * 4096 + 1)
    put_job(r, k, "w", "wait")
    assert sc.get_counts(["delayed"], delayed_cutoff_ms=TS) == [1]
    assert sc.get_counts(["delayed", "wait"], delayed_cutoff_ms=TS + 6) == [3, 1]
    assert sc.get_counts(["delayed"]) == [3]
    # the cutoff only narrows "delayed"
    assert sc.get_counts(["wait"], delayed_cutoff_ms=0) == [1]


# -- getStateV2-8 -------------------------------------------------------------------------

@pytest.mark.parametrize("state,expected", [
    ("completed", "completed"), ("failed", "failed"), ("delayed", "delayed"),
    ("prioritized", "prioritized"), ("active", "active"), ("wait", "waiting"),
    ("paused", "waiting"), ("waiting-children", "waiting-children"),
])
def test_get_state_each_state(r, sc, k, state, expected):
    put_job(r, k, "1", state)
    assert sc.get_state("1") == expected


def test_get_state_unknown(r, sc, k):
    put_job(r, k, "1")
    assert sc.get_state("1") == "unknown"
    assert sc.get_state("nope") == "unknown"


def test_get_state_order_of_checks(r, sc, k):
    # an id found in several places (a broken queue) reports the first state in the
    # documented order
    order = ["completed", "failed", "delayed", "prioritized", "active", "wait",
             "waiting-children"]
    for state in order:
        put_job(r, k, "1", state)
    expected = ["completed", "failed", "delayed", "prioritized", "active", "waiting",
                "waiting-children"]
    for state, exp in zip(order, expected):
        assert sc.get_state("1") == exp
        if state in ("active", "wait"):
            r.lrem(k.state_key(state), 0, "1")
        else:
            r.zrem(k.state_key(state), "1")
    assert sc.get_state("1") == "unknown"


def test_get_state_finds_id_deep_in_list(r, sc, k):
    r.lpush(k.wait, *[f"x{i}" for i in range(500)])
    put_job(r, k, "deep")
    r.rpush(k.wait, "deep")
    assert sc.get_state("deep") == "waiting"


# -- isFinished-3 -------------------------------------------------------------------------

def test_is_finished_codes(r, sc, k):
    put_job(r, k, "c", "completed", returnvalue='{"ok":true}')
    put_job(r, k, "f", "failed", failedReason="boom")
    put_job(r, k, "w", "wait")
    assert sc.admin.is_finished("c") == 1
    assert sc.admin.is_finished("f") == 2
    assert sc.admin.is_finished("w") == 0
    assert sc.admin.is_finished("nope") == -1


def test_is_finished_with_result(r, sc, k):
    put_job(r, k, "c", "completed", returnvalue='{"ok":true}')
    put_job(r, k, "f", "failed", failedReason="boom")
    put_job(r, k, "w", "active")
    assert sc.admin.is_finished("c", return_value=True) == [1, '{"ok":true}']
    assert sc.admin.is_finished("f", return_value=True) == [2, "boom"]
    assert sc.admin.is_finished("w", return_value=True) == [0]
    # Node's isFinished text: Job.waitUntilFinished (Node's and ours) rejects with it
    assert sc.admin.is_finished("nope", return_value=True) == [-1, f"Missing key for job {k.job('nope')}. isFinished"]


# -- removeJob-2 --------------------------------------------------------------------------

@pytest.mark.parametrize("state", ["wait", "paused", "active", "delayed", "prioritized",
                                   "completed", "failed", "waiting-children"])
def test_remove_job_from_each_state(r, sc, k, state, events):
    key = put_job(r, k, "1", state)
    r.rpush(k.logs("1"), "a log line")
    put_job(r, k, "2", state)
    assert sc.remove_job("1") == 1
    assert not r.exists(key, k.logs("1"))
    assert sc.get_state("1") == "unknown"
    assert sc.get_state("2") != "unknown"
    assert events(k) == [{"event": "removed", "jobId": "1", "prev": state}]


def test_remove_missing_job_is_quiet(r, sc, k):
    assert sc.remove_job("nope") == 1
    assert not r.exists(k.events)


def test_remove_locked_job_returns_0_and_changes_nothing(r, sc, k):
    key = put_job(r, k, "1", "active")
    r.set(key + ":lock", "tok", px=30000)
    assert sc.remove_job("1") == 0
    assert r.exists(key) and r.lrange(k.active, 0, -1) == ["1"]
    assert not r.exists(k.events)


def test_remove_job_with_locked_child_returns_0(r, sc, k, prefix):
    other = QueueKeys("children", prefix)
    child = put_job(r, other, "c1", "active", parentKey=k.job("p"))
    r.set(child + ":lock", "tok", px=30000)
    parent = put_job(r, k, "p", "waiting-children")
    r.sadd(parent + ":dependencies", child)
    assert sc.remove_job("p") == 0
    assert r.exists(parent, child)
    # without removeChildren the child's lock does not matter
    assert sc.remove_job("p", remove_children=False) == 1
    assert not r.exists(parent)
    assert r.exists(child)


def test_remove_scheduler_current_job_is_minus_8(r, sc, k):
    r.zadd(k.repeat, {"every-min": TS})
    jid = f"repeat:every-min:{TS}"
    put_job(r, k, jid, "delayed", rjk="every-min")
    with pytest.raises(JobBelongsToJobScheduler) as err:
        sc.remove_job(jid)
    assert err.value.code == -8
    assert r.exists(k.job(jid))
    # an older iteration of the same scheduler is an ordinary job
    old = f"repeat:every-min:{TS - 60000}"
    put_job(r, k, old, "completed", rjk="every-min")
    assert sc.remove_job(old) == 1
    assert not r.exists(k.job(old))


def test_remove_job_with_children_across_queues(r, sc, k, prefix, events):
    other = QueueKeys("children", prefix)
    parent = put_job(r, k, "p", "waiting-children")
    done = put_job(r, other, "done", "completed", parentKey=parent)
    pending = put_job(r, other, "pending", "wait", parentKey=parent)
    failed = put_job(r, other, "bad", "failed", parentKey=parent)
    unsucc = put_job(r, other, "worse", "failed", parentKey=parent)
    grandchild = put_job(r, other, "gc", "delayed", parentKey=pending)
    r.sadd(pending + ":dependencies", grandchild)
    r.hset(parent + ":processed", done, '"r"')
    r.hset(parent + ":failed", failed, "err")
    r.zadd(parent + ":unsuccessful", {unsucc: TS})
    r.sadd(parent + ":dependencies", pending)

    assert sc.remove_job("p") == 1
    for key in (parent, done, pending, failed, unsucc, grandchild, parent + ":dependencies",
                parent + ":processed", parent + ":failed", parent + ":unsuccessful"):
        assert not r.exists(key), key
    # the parent left waiting-children, not wait: removing its children did not release it
    assert events(k) == [{"event": "removed", "jobId": "p", "prev": "waiting-children"}]
    assert not r.exists(k.wait) and not r.exists(k.marker)
    child_events = {(e["jobId"], e["prev"]) for e in events(other)}
    assert child_events == {("done", "completed"), ("pending", "wait"), ("bad", "failed"),
                            ("worse", "failed"), ("gc", "delayed")}


def test_remove_last_child_releases_parent(r, sc, k, prefix, events):
    pq = QueueKeys("parents", prefix)
    parent = put_job(r, pq, "p", "waiting-children")
    c1 = put_job(r, k, "c1", "wait", parentKey=parent)
    c2 = put_job(r, k, "c2", "wait", parentKey=parent)
    r.sadd(parent + ":dependencies", c1, c2)

    assert sc.remove_job("c1") == 1
    assert r.smembers(parent + ":dependencies") == {c2}
    assert r.zscore(pq.waiting_children, "p") is not None

    assert sc.remove_job("c2") == 1
    assert not r.exists(parent + ":dependencies")
    assert r.zscore(pq.waiting_children, "p") is None
    assert r.lrange(pq.wait, 0, -1) == ["p"]
    assert r.zscore(pq.marker, "0") == 0
    assert events(pq) == [{"event": "waiting", "jobId": "p", "prev": "waiting-children"}]


def test_remove_last_child_releases_prioritized_parent_without_marker_when_paused(r, sc, k, prefix):
    pq = QueueKeys("parents", prefix)
    parent = put_job(r, pq, "p", "waiting-children", priority=3)
    r.hset(pq.meta, "paused", "1")
    c1 = put_job(r, k, "c1", "wait", parentKey=parent)
    r.sadd(parent + ":dependencies", c1)
    sc.remove_job("c1")
    assert r.zscore(pq.prioritized, "p") == 3 * PRIO + 1
    assert not r.exists(pq.marker)


def test_remove_child_of_missing_parent(r, sc, k):
    put_job(r, k, "c", "wait", parentKey=k.job("gone"))
    assert sc.remove_job("c") == 1
    assert not r.exists(k.job("c"))
    assert not r.exists(k.job("gone"))


def test_remove_job_frees_its_dedup_key_only_if_owned(r, sc, k):
    put_job(r, k, "1", "delayed", deid="d1")
    r.set(k.dedup("d1"), "1")
    r.hset(k.base + "dn:d1", mapping={"name": "next", "data": "{}"})
    put_job(r, k, "2", "delayed", deid="d2")
    r.set(k.dedup("d2"), "someone-else")
    sc.remove_job("1")
    sc.remove_job("2")
    assert not r.exists(k.dedup("d1"), k.base + "dn:d1")
    assert r.get(k.dedup("d2")) == "someone-else"


def test_remove_event_respects_events_cap(r, sc, k):
    put_job(r, k, "1", "wait")
    sc.remove_job("1")
    assert r.hget(k.meta, "opts.maxLenEvents") == "10000"


# -- drain-5 ------------------------------------------------------------------------------

def _populate_for_drain(r, k):
    for j in ("w1", "w2"):
        put_job(r, k, j, "wait")
    put_job(r, k, "lp", "paused")
    put_job(r, k, "p1", "prioritized", score=PRIO + 1)
    put_job(r, k, "d1", "delayed", score=TS * 4096)
    put_job(r, k, "a1", "active")
    put_job(r, k, "c1", "completed")
    put_job(r, k, "f1", "failed")
    put_job(r, k, "wc", "waiting-children")
    r.rpush(k.logs("w1"), "x")


def test_drain_without_delayed(r, sc, k):
    _populate_for_drain(r, k)
    sc.admin.drain()
    for j in ("w1", "w2", "lp", "p1"):
        assert not r.exists(k.job(j)), j
    assert not r.exists(k.wait, k.paused, k.prioritized, k.logs("w1"))
    for j in ("d1", "a1", "c1", "f1", "wc"):
        assert r.exists(k.job(j)), j
    assert r.zcard(k.delayed) == 1
    assert not r.exists(k.events)


def test_drain_with_delayed(r, sc, k):
    _populate_for_drain(r, k)
    sc.admin.drain(include_delayed=True)
    assert not r.exists(k.delayed, k.job("d1"))
    assert r.exists(k.job("a1"), k.job("c1"))


def test_drain_spares_each_schedulers_current_job(r, sc, k):
    r.zadd(k.repeat, {"s1": TS + 1000, "s2": TS + 2000})
    cur1, cur2 = f"repeat:s1:{TS + 1000}", f"repeat:s2:{TS + 2000}"
    put_job(r, k, cur1, "delayed", score=(TS + 1000) * 4096, rjk="s1")
    put_job(r, k, f"repeat:s1:{TS}", "delayed", score=TS * 4096, rjk="s1")  # stale iteration
    # s2's current job was promoted already and waits between two ordinary jobs
    put_job(r, k, "w1", "wait")
    put_job(r, k, cur2, "wait", rjk="s2")
    put_job(r, k, "w2", "wait")
    sc.admin.drain(include_delayed=True)
    assert r.zrange(k.delayed, 0, -1) == [cur1]
    assert r.lrange(k.wait, 0, -1) == [cur2]
    assert r.exists(k.job(cur1), k.job(cur2)) == 2
    assert not r.exists(k.job(f"repeat:s1:{TS}"), k.job("w1"), k.job("w2"))


def test_drain_with_a_count_deletes_that_many_per_key_and_says_when_it_is_done(r, sc, k):
    r.zadd(k.repeat, {"s1": TS + 1000})
    cur = f"repeat:s1:{TS + 1000}"
    put_job(r, k, cur, "wait", rjk="s1")  # the scheduler's next job, at the head of wait
    for i in range(5):
        put_job(r, k, f"w{i}", "wait")
        put_job(r, k, f"p{i}", "prioritized", score=PRIO + i)
    put_job(r, k, "d1", "delayed", score=TS * 4096)
    assert sc.admin.drain(count=2) == 1
    # each key is read 2 + 1 deep (one more per spared job): w4, w3, w2 and p0, p1, p2 go
    assert r.lrange(k.wait, 0, -1) == ["w1", "w0", cur] and r.zcard(k.prioritized) == 2
    assert sc.admin.drain(count=2) == 1  # 2 more from each: a full batch, maybe more left
    assert sc.admin.drain(count=2) == 0  # none left but the spared job
    assert r.lrange(k.wait, 0, -1) == [cur]
    assert not r.exists(k.prioritized)
    assert r.exists(k.job(cur), k.job("d1")) == 2  # spared; delayed stays without the flag
    assert not any(r.exists(k.job(f"w{i}"), k.job(f"p{i}")) for i in range(5))
    assert sc.admin.drain(count=2) == 0  # nothing left: a no-op


def test_drain_child_releases_parent_in_other_queue_and_purges_same_queue_parent(r, sc, k, prefix, events):
    pq = QueueKeys("parents", prefix)
    other_parent = put_job(r, pq, "op", "waiting-children")
    c1 = put_job(r, k, "c1", "wait", parentKey=other_parent)
    r.sadd(other_parent + ":dependencies", c1)
    same_parent = put_job(r, k, "sp", "waiting-children")
    c2 = put_job(r, k, "c2", "wait", parentKey=same_parent)
    r.sadd(same_parent + ":dependencies", c2)
    sc.admin.drain()
    assert r.lrange(pq.wait, 0, -1) == ["op"]
    assert r.zscore(pq.marker, "0") is not None
    assert events(pq) == []  # a bulk purge writes no events, in the parent's queue either (as Node's)
    assert not r.exists(same_parent)
    assert r.zcard(k.waiting_children) == 0


def test_drain_purged_parent_releases_its_own_parent(r, sc, k, prefix):
    gq = QueueKeys("grand", prefix)
    grand = put_job(r, gq, "g", "waiting-children")
    parent = put_job(r, k, "p", "waiting-children", parentKey=grand, deid="pd")
    r.set(k.dedup("pd"), "p")
    r.sadd(grand + ":dependencies", parent)
    child = put_job(r, k, "c", "wait", parentKey=parent)
    r.sadd(parent + ":dependencies", child)
    sc.admin.drain()
    assert not r.exists(child, parent, k.dedup("pd"))
    assert r.lrange(gq.wait, 0, -1) == ["g"]
    assert not r.exists(grand + ":dependencies")


def test_drain_frees_dedup_keys(r, sc, k):
    put_job(r, k, "1", "wait", deid="d")
    r.set(k.dedup("d"), "1")
    sc.admin.drain()
    assert not r.exists(k.dedup("d"))


def test_drain_large_wait_list(r, sc, k):
    pipe = r.pipeline(transaction=False)
    ids = [str(i) for i in range(8000)]
    for j in ids:
        pipe.hset(k.job(j), mapping={"name": "n", "data": "{}"})
    pipe.lpush(k.wait, *ids)
    pipe.execute()
    sc.admin.drain()
    assert not r.exists(k.wait)
    assert r.exists(*[k.job(j) for j in ids[:50]]) == 0


# -- obliterate-2 -------------------------------------------------------------------------

def test_obliterate_refuses_unpaused_queue(r, sc, k):
    put_job(r, k, "1", "wait")
    assert sc.admin.obliterate() == -1
    assert r.exists(k.job("1"))


def test_obliterate_refuses_active_jobs_without_force(r, sc, k):
    put_job(r, k, "1", "active")
    r.hset(k.meta, "paused", "1")
    assert sc.admin.obliterate() == -2
    assert r.exists(k.job("1"))


def test_obliterate_everything_in_one_call(r, sc, k, prefix):
    a = put_job(r, k, "a", "active")
    r.set(a + ":lock", "tok")
    for state in ("delayed", "completed", "wait", "paused", "prioritized", "failed"):
        put_job(r, k, state[:3], state)
    r.rpush(k.logs("wai"), "x")
    r.hset(k.job("wai"), "deid", "dd")
    r.set(k.dedup("dd"), "wai")
    r.zadd(k.repeat, {"s": TS})
    r.hset(k.scheduler("s"), mapping={"name": "n", "every": 1000})
    for key in (k.id, k.pc, k.stalled_check, k.limiter, k.base + "delay"):
        r.set(key, 1)
    r.sadd(k.stalled, "a")
    r.hset(k.metrics("completed"), "count", 1)
    r.lpush(k.metrics("completed") + ":data", 1)
    r.xadd(k.events, {"event": "x"})
    r.zadd(k.marker, {"0": 0})
    r.hset(k.meta, mapping={"paused": 1, "opts.maxLenEvents": 10000})
    other = QueueKeys("other", prefix)
    put_job(r, other, "keep", "wait")

    assert sc.admin.obliterate(force=True) == 0
    assert r.keys(k.base + "*") == []
    assert r.exists(other.job("keep"), other.wait) == 2


def test_obliterate_keeps_a_parent_waiting_for_children_in_another_queue(r, sc, k, prefix):
    # Node's obliterate leaves waiting-children alone: the parent stays with its pending
    # child's link until that child (in another queue) finishes
    cq = QueueKeys("children", prefix)
    parent = put_job(r, k, "p", "waiting-children")
    child = put_job(r, cq, "c", "wait", parentKey=parent)
    r.sadd(parent + ":dependencies", child)
    # a parent whose only child is in this queue goes with that child
    local_parent = put_job(r, k, "lp", "waiting-children")
    local_child = put_job(r, k, "lc", "wait", parentKey=local_parent)
    r.sadd(local_parent + ":dependencies", local_child)
    r.hset(k.meta, "paused", "1")
    assert sc.admin.obliterate() == 0
    assert sorted(r.keys(k.base + "*")) == sorted([parent, parent + ":dependencies", k.waiting_children])
    assert r.zrange(k.waiting_children, 0, -1) == ["p"]
    assert r.exists(child) and r.lrange(cq.wait, 0, -1) == ["c"]


def test_obliterate_children_releases_parent_in_other_queue_without_event(r, sc, k, prefix, events):
    pq = QueueKeys("parents", prefix)
    parent = put_job(r, pq, "p", "waiting-children")
    r.xadd(pq.events, {"event": "waiting-children", "jobId": "p"})
    for i in range(3):
        child = put_job(r, k, f"c{i}", "wait", parentKey=parent)
        r.sadd(parent + ":dependencies", child)
    r.hset(k.meta, "paused", "1")
    assert sc.admin.obliterate(count=2) == 1  # two children gone: the parent still waits for one
    assert r.zrange(pq.waiting_children, 0, -1) == ["p"]
    assert sc.admin.obliterate(count=2) == 0
    assert r.keys(k.base + "*") == []
    assert r.lrange(pq.wait, 0, -1) == ["p"] and r.zcard(pq.waiting_children) == 0
    assert [e["event"] for e in events(pq)] == ["waiting-children"]


def test_obliterate_pages_through_big_queue(r, sc, k):
    for i in range(5):
        put_job(r, k, f"d{i}", "delayed", score=(TS + i) * 4096)
    for i in range(4):
        put_job(r, k, f"c{i}", "completed", score=TS + i)
    for i in range(3):
        put_job(r, k, f"w{i}", "wait")
    r.hset(k.meta, "paused", "1")
    calls = []
    while True:
        res = sc.admin.obliterate(count=4)
        calls.append(res)
        if res == 0:
            break
        assert len(calls) < 20
        # each batch removes at most 4 job hashes
        remaining = sum(r.exists(k.job(j)) for j in
                        [f"d{i}" for i in range(5)] + [f"c{i}" for i in range(4)] +
                        [f"w{i}" for i in range(3)])
        assert remaining >= 12 - 4 * len(calls)
        assert r.hexists(k.meta, "paused")  # infrastructure stays until the end
    assert calls == [1, 1, 1, 0]
    assert r.keys(k.base + "*") == []


def test_obliterate_first_batch_removes_oldest_delayed_first(r, sc, k):
    for i in range(5):
        put_job(r, k, f"d{i}", "delayed", score=(TS + i) * 4096)
    r.hset(k.meta, "paused", "1")
    assert sc.admin.obliterate(count=2) == 1
    assert r.zrange(k.delayed, 0, -1) == ["d2", "d3", "d4"]
    assert not r.exists(k.job("d0"), k.job("d1"))


def test_obliterate_force_deletes_active_jobs_and_locks_in_batches(r, sc, k):
    for i in range(3):
        key = put_job(r, k, f"a{i}", "active")
        r.set(key + ":lock", "tok")
    r.hset(k.meta, "paused", "1")
    assert sc.admin.obliterate(count=2, force=True) == 1
    assert r.llen(k.active) == 1
    assert sc.admin.obliterate(count=2, force=True) == 0
    assert r.keys(k.base + "*") == []


# -- getState-8 (no LPOS) -----------------------------------------------------------------

@pytest.mark.parametrize("state,expected", [
    ("completed", "completed"), ("failed", "failed"), ("delayed", "delayed"),
    ("prioritized", "prioritized"), ("active", "active"), ("wait", "waiting"),
    ("paused", "waiting"), ("waiting-children", "waiting-children"), (None, "unknown"),
])
def test_get_state_without_lpos_agrees(r, sc, k, state, expected):
    r.lpush(k.wait, "other")
    r.lpush(k.active, "other2")
    put_job(r, k, "1", state)
    assert sc.admin.get_state_without_lpos("1") == expected
    assert sc.get_state("1") == expected


# -- changeDelay-4 ------------------------------------------------------------------------

def test_change_delay_rescores_and_emits(r, sc, k, events):
    put_job(r, k, "1", "delayed", score=(TS + 60000) * 4096, delay=60000)
    put_job(r, k, "2", "delayed", score=(TS + 9000) * 4096, delay=9000)
    r.zadd(k.marker, {"1": TS + 9000})
    assert sc.admin.change_delay("1", 5000, TS) == 0
    assert r.zscore(k.delayed, "1") == (TS + 5000) * 4096
    assert r.hget(k.job("1"), "delay") == "5000"
    assert r.zscore(k.marker, "1") == TS + 5000
    assert events(k) == [{"event": "delayed", "jobId": "1", "delay": str(TS + 5000)}]


def test_change_delay_keeps_fifo_within_a_millisecond(r, sc, k):
    put_job(r, k, "a", "delayed", score=(TS + 100) * 4096)
    put_job(r, k, "b", "delayed", score=(TS + 999) * 4096)
    sc.admin.change_delay("b", 100, TS)
    assert r.zscore(k.delayed, "b") == (TS + 100) * 4096 + 1
    assert r.zrange(k.delayed, 0, -1) == ["a", "b"]


def test_change_delay_errors(r, sc, k):
    with pytest.raises(JobNotExist):
        sc.admin.change_delay("nope", 10, TS)
    put_job(r, k, "w", "wait")
    with pytest.raises(JobNotInState):
        sc.admin.change_delay("w", 10, TS)
    assert not r.exists(k.delayed, k.events)


# -- reprocessJob-9 -----------------------------------------------------------------------

def test_reprocess_failed_job(r, sc, k, events):
    put_job(r, k, "1", "failed", failedReason="boom", finishedOn=TS, processedOn=TS - 5,
            atm=3, ats=3, stacktrace=["e"])
    put_job(r, k, "0", "wait")
    assert sc.admin.reprocess_job("1", "failed", reset_attempts_made=True, reset_attempts_started=True) == 1
    h = r.hgetall(k.job("1"))
    for gone in ("failedReason", "finishedOn", "processedOn", "atm", "ats"):
        assert gone not in h
    assert h["stacktrace"] == '["e"]'
    assert r.lrange(k.wait, 0, -1) == ["1", "0"]
    assert r.zcard(k.failed) == 0
    assert r.zscore(k.marker, "0") == 0
    assert events(k) == [{"event": "waiting", "jobId": "1", "prev": "failed"}]


def test_reprocess_completed_job_keeps_attempts_lifo_and_priority(r, sc, k):
    put_job(r, k, "1", "completed", returnvalue='"ok"', finishedOn=TS, atm=1, ats=1)
    put_job(r, k, "2", "completed", returnvalue='"ok"', priority=2)
    put_job(r, k, "0", "wait")
    r.hset(k.meta, "paused", "1")
    sc.admin.reprocess_job("1", "completed", lifo=True)
    sc.admin.reprocess_job("2", "completed")
    h = r.hgetall(k.job("1"))
    assert "returnvalue" not in h and h["atm"] == "1" and h["ats"] == "1"
    assert wait_ids(r, k) == ["1", "0"]
    assert r.zscore(k.prioritized, "2") == 2 * PRIO + 1
    assert not r.exists(k.marker)


def test_reprocess_errors(r, sc, k):
    with pytest.raises(JobNotExist):
        sc.admin.reprocess_job("nope", "failed")
    put_job(r, k, "1", "completed")
    with pytest.raises(JobNotInState):
        sc.admin.reprocess_job("1", "failed")
    assert r.zscore(k.completed, "1") is not None


def test_reprocess_child_becomes_pending_again(r, sc, k, prefix):
    pq = QueueKeys("parents", prefix)
    parent = put_job(r, pq, "p", "waiting-children")
    done = put_job(r, k, "done", "completed", returnvalue='"r"', parentKey=parent)
    bad = put_job(r, k, "bad", "failed", failedReason="x", parentKey=parent)
    worse = put_job(r, k, "worse", "failed", failedReason="y", parentKey=parent)
    r.hset(parent + ":processed", done, '"r"')
    r.hset(parent + ":failed", bad, "x")
    r.zadd(parent + ":unsuccessful", {worse: TS})
    sc.admin.reprocess_job("done", "completed")
    sc.admin.reprocess_job("bad", "failed")
    sc.admin.reprocess_job("worse", "failed")
    assert r.smembers(parent + ":dependencies") == {done, bad, worse}
    assert not r.exists(parent + ":processed", parent + ":failed", parent + ":unsuccessful")


# -- moveJobsToWait-8 ---------------------------------------------------------------------

def test_retry_failed_jobs_in_batches(r, sc, k, events):
    for i in range(3):
        put_job(r, k, f"f{i}", "failed", score=TS + i, failedReason="x", finishedOn=TS + i,
                processedOn=TS)
    assert sc.admin.move_jobs_to_wait("failed", count=2, max_score=TS + 10) == 1
    assert wait_ids(r, k) == ["f0", "f1"]
    assert "failedReason" not in r.hgetall(k.job("f0"))
    assert sc.admin.move_jobs_to_wait("failed", count=2, max_score=TS + 10) == 0
    assert wait_ids(r, k) == ["f0", "f1", "f2"]
    assert r.zcard(k.failed) == 0
    assert [(e["jobId"], e["prev"]) for e in events(k)] == [("f0", "failed"), ("f1", "failed"),
                                                               ("f2", "failed")]
    assert r.zscore(k.marker, "0") == 0
    assert sc.admin.move_jobs_to_wait("failed") == 0


def test_retry_completed_jobs_up_to_a_finish_time(r, sc, k, prefix):
    pq = QueueKeys("parents", prefix)
    parent = put_job(r, pq, "p", "completed")
    put_job(r, k, "old", "completed", score=TS - 10, returnvalue="1", finishedOn=TS - 10,
            parentKey=parent)
    r.hset(parent + ":processed", k.job("old"), "1")
    put_job(r, k, "new", "completed", score=TS + 10, returnvalue="2", finishedOn=TS + 10)
    assert sc.admin.move_jobs_to_wait("completed", max_score=TS) == 0
    assert r.zrange(k.completed, 0, -1) == ["new"]
    assert wait_ids(r, k) == ["old"]
    assert "returnvalue" not in r.hgetall(k.job("old"))
    assert r.smembers(parent + ":dependencies") == {k.job("old")}


def test_retry_a_batch_larger_than_one_slice_keeps_the_order_and_each_jobs_parent(r, sc, k, prefix):
    # 6,001 failed jobs in one call: the bulk ZREM and LPUSH go in slices of 5,000
    pq = QueueKeys("parents", prefix)
    parent = put_job(r, pq, "p", "waiting-children")
    pipe = r.pipeline(transaction=False)
    for i in range(6000):
        pipe.hset(k.job(f"f{i}"), mapping={"name": "j", "data": "{}", "failedReason": "x",
                                           "finishedOn": TS, "priority": 2 if i % 1000 == 7 else 0})
        pipe.zadd(k.failed, {f"f{i}": TS + i})
    pipe.execute()
    child = put_job(r, k, "child", "failed", score=TS + 6000, failedReason="x", parentKey=parent)
    r.zadd(parent + ":unsuccessful", {child: TS})
    assert sc.admin.move_jobs_to_wait("failed", count=7000, max_score=TS + 7000) == 0
    plain = [f"f{i}" for i in range(6000) if i % 1000 != 7]
    assert wait_ids(r, k) == plain + ["child"]
    assert r.zrange(k.prioritized, 0, -1) == [f"f{i}" for i in range(6000) if i % 1000 == 7]
    assert r.zcard(k.failed) == 0
    assert r.smembers(parent + ":dependencies") == {child}
    assert not r.exists(parent + ":unsuccessful")
    assert "failedReason" not in r.hgetall(k.job("f5999"))


def test_retry_batch_keeps_the_events_stream_capped(r, sc, k):
    r.hset(k.meta, "opts.maxLenEvents", 10)
    pipe = r.pipeline(transaction=False)
    for i in range(1000):
        pipe.hset(k.job(f"f{i}"), mapping={"name": "j", "failedReason": "x", "finishedOn": TS})
        pipe.zadd(k.failed, {f"f{i}": TS})
    pipe.execute()
    assert sc.admin.move_jobs_to_wait("failed", count=1000, max_score=TS) == 1
    # one "waiting" event per job was written, then the stream trimmed near its cap (the
    # approximate trim keeps whole nodes of 100 entries)
    assert r.llen(k.wait) == 1000
    assert r.xlen(k.events) <= 200
    assert r.xrevrange(k.events, count=1)[0][1]["jobId"] == "f999"


def test_promote_all_delayed_jobs(r, sc, k, events):
    put_job(r, k, "d1", "delayed", score=(TS + 5) * 4096, delay=5)
    put_job(r, k, "d2", "delayed", score=(TS + 9) * 4096, delay=9, priority=3)
    r.hset(k.meta, "paused", "1")
    assert sc.admin.move_jobs_to_wait("delayed") == 0
    assert r.zcard(k.delayed) == 0
    assert wait_ids(r, k) == ["d1"]
    assert r.zscore(k.prioritized, "d2") == 3 * PRIO + 1
    assert r.hget(k.job("d1"), "delay") == "0"
    assert not r.exists(k.marker)
    assert [e["prev"] for e in events(k)] == ["delayed", "delayed"]


# -- cleanJobsInSet-3 ---------------------------------------------------------------------

def test_clean_finished_jobs_by_finish_time_and_limit(r, sc, k, events):
    for i in range(4):
        put_job(r, k, f"c{i}", "completed", score=TS + i, finishedOn=TS + i)
        r.rpush(k.logs(f"c{i}"), "x")
    assert sc.admin.clean_jobs_in_set("completed", TS + 2, limit=2) == ["c0", "c1"]
    assert r.zrange(k.completed, 0, -1) == ["c2", "c3"]
    assert not r.exists(k.job("c0"), k.logs("c0"))
    assert sc.admin.clean_jobs_in_set("completed", TS + 2) == ["c2"]
    assert [e for e in events(k)] == [{"event": "cleaned", "count": "2"},
                                         {"event": "cleaned", "count": "1"}]


def test_clean_wait_by_timestamp_keeps_order_of_the_rest(r, sc, k):
    put_job(r, k, "old1", "wait", timestamp=TS - 100)
    put_job(r, k, "new1", "wait", timestamp=TS + 100)
    put_job(r, k, "old2", "wait", timestamp=TS - 50)
    put_job(r, k, "new2", "wait", timestamp=TS + 50)
    assert sorted(sc.admin.clean_jobs_in_set("waiting", TS)) == ["old1", "old2"]
    assert wait_ids(r, k) == ["new1", "new2"]
    assert not r.exists(k.job("old1"), k.job("old2"))


def test_clean_wait_with_limit_looks_at_the_oldest_end(r, sc, k):
    for j in ("a", "b", "c"):
        put_job(r, k, j, "wait", timestamp=TS - 1)
    assert sc.admin.clean_jobs_in_set("wait", TS, limit=2) == ["b", "a"]
    assert wait_ids(r, k) == ["c"]


def test_clean_active_skips_locked_jobs(r, sc, k):
    put_job(r, k, "free", "active", processedOn=TS - 10, timestamp=TS - 100)
    locked = put_job(r, k, "locked", "active", processedOn=TS - 10)
    r.set(locked + ":lock", "tok")
    put_job(r, k, "recent", "active", processedOn=TS + 10, timestamp=TS - 100)
    assert sc.admin.clean_jobs_in_set("active", TS) == ["free"]
    assert sorted(r.lrange(k.active, 0, -1)) == ["locked", "recent"]


def test_clean_delayed_spares_scheduler_job_and_prioritized_uses_timestamp(r, sc, k):
    r.zadd(k.repeat, {"s": TS})
    cur = f"repeat:s:{TS}"
    put_job(r, k, cur, "delayed", score=TS * 4096, rjk="s", timestamp=TS - 100)
    put_job(r, k, "d", "delayed", score=(TS + 1) * 4096, timestamp=TS - 100)
    put_job(r, k, "p-old", "prioritized", score=PRIO + 1, timestamp=TS - 1)
    put_job(r, k, "p-new", "prioritized", score=PRIO + 2, timestamp=TS + 1)
    assert sc.admin.clean_jobs_in_set("delayed", TS) == ["d"]
    assert r.zrange(k.delayed, 0, -1) == [cur]
    assert sc.admin.clean_jobs_in_set("prioritized", TS) == ["p-old"]
    assert r.zrange(k.prioritized, 0, -1) == ["p-new"]


def test_clean_nothing_still_reports(r, sc, k, events):
    assert sc.admin.clean_jobs_in_set("failed", TS) == []
    assert events(k) == [{"event": "cleaned", "count": "0"}]

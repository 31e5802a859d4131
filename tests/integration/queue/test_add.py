"""The add scripts on a real Redis: every branch of docs/protocol.md, "Adding jobs"."""
from __future__ import annotations

import json

import pytest
import redis

from echomq_gevent import Queue
from echomq_gevent.errors import InvalidOptionError, ParentJobCannotBeReplaced, ParentJobNotExist

TWO32 = 2 ** 32


@pytest.fixture
def q(redis_url, prefix, qname):
    queue = Queue(qname, redis_url, prefix=prefix)
    yield queue
    queue.close()




def test_auto_id_standard_job(r, q, events):
    job = q.add("send", {"to": "a@b"}, {"timestamp": 1795965485578})
    assert job.id == "1"
    assert r.get(q.keys.id) == "1"
    fields = r.hgetall(q.keys.job("1"))
    opts = fields.pop("opts")
    assert fields == {"name": "send", "data": '{"to":"a@b"}', "timestamp": "1795965485578",
                      "delay": "0", "priority": "0"}
    assert json.loads(opts) == {"timestamp": 1795965485578, "attempts": 0}
    assert q.add("send", {}).id == "2"
    # FIFO: new jobs on the left, workers pop from the right
    assert r.lrange(q.keys.wait, 0, -1) == ["2", "1"]
    assert r.zrange(q.keys.marker, 0, -1, withscores=True) == [("0", 0.0)]
    assert r.hget(q.keys.meta, "opts.maxLenEvents") == "10000"
    assert events(q) == [
        {"event": "added", "jobId": "1", "name": "send"}, {"event": "waiting", "jobId": "1"},
        {"event": "added", "jobId": "2", "name": "send"}, {"event": "waiting", "jobId": "2"},
    ]


def test_existing_events_cap_is_kept(r, q):
    r.hset(q.keys.meta, "opts.maxLenEvents", "50")
    q.add("a", 1)
    assert r.hget(q.keys.meta, "opts.maxLenEvents") == "50"


def test_custom_id_and_duplicate(r, q, events):
    job = q.add("a", {"v": 1}, {"jobId": "order-7"})
    assert job.id == "order-7"
    assert r.get(q.keys.id) == "1"
    assert json.loads(r.hget(q.keys.job("order-7"), "opts")) == {"jobId": "order-7", "attempts": 0}
    dup = q.add("b", {"v": 2}, {"jobId": "order-7"})
    assert dup.id == "order-7"
    # the counter moves on every add, duplicates included
    assert r.get(q.keys.id) == "2"
    assert r.hget(q.keys.job("order-7"), "data") == '{"v":1}'
    assert r.lrange(q.keys.wait, 0, -1) == ["order-7"]
    assert events(q)[-1] == {"event": "duplicated", "jobId": "order-7"}
    assert [e["event"] for e in events(q)] == ["added", "waiting", "duplicated"]
    # an auto id after that skips the counter values the custom ids used
    assert q.add("c", 1).id == "3"


def test_lifo_goes_to_the_right_end(r, q):
    q.add("a", 1)
    q.add("b", 1, {"lifo": True})
    q.add("c", 1)
    # RPOPLPUSH takes from the right: the lifo job runs first
    assert r.lrange(q.keys.wait, 0, -1) == ["3", "1", "2"]


def test_paused_queue_gets_no_marker(r, q):
    r.hset(q.keys.meta, "paused", "1")
    q.add("a", 1)
    q.add("p", 1, {"priority": 2})
    assert r.exists(q.keys.marker) == 0
    assert r.lrange(q.keys.wait, 0, -1) == ["1"]
    assert r.zcard(q.keys.prioritized) == 1


@pytest.mark.parametrize("concurrency,active,marker", [(1, 1, False), (2, 1, True), (1, 0, True)])
def test_maxed_queue_gets_no_marker(r, q, concurrency, active, marker):
    r.hset(q.keys.meta, "concurrency", concurrency)
    for i in range(active):
        r.lpush(q.keys.active, f"x{i}")
    q.add("a", 1)
    assert bool(r.exists(q.keys.marker)) is marker
    assert r.lrange(q.keys.wait, 0, -1) == ["1"]


def test_prioritized_scores_and_counter(r, q, events):
    a = q.add("a", 1, {"priority": 5})
    b = q.add("b", 1, {"priority": 5})
    c = q.add("c", 1, {"priority": 1})
    assert r.get(q.keys.pc) == "3"
    assert r.zrange(q.keys.prioritized, 0, -1, withscores=True) == [
        (c.id, 1 * TWO32 + 3), (a.id, 21474836481.0), (b.id, 5 * TWO32 + 2)]
    assert r.hget(q.keys.job(a.id), "priority") == "5"
    assert r.llen(q.keys.wait) == 0
    assert r.zrange(q.keys.marker, 0, -1, withscores=True) == [("0", 0.0)]
    assert events(q)[:2] == [{"event": "added", "jobId": "1", "name": "a"},
                                {"event": "waiting", "jobId": "1"}]


def test_delayed_scores_marker_and_event(r, q, events):
    ts = 1795965485000
    a = q.add("a", 1, {"delay": 578, "timestamp": ts})
    b = q.add("b", 1, {"delay": 578, "timestamp": ts})
    c = q.add("c", 1, {"delay": 100, "timestamp": ts})
    due = ts + 578
    assert r.zrange(q.keys.delayed, 0, -1, withscores=True) == [
        (c.id, (ts + 100) * 4096.0), (a.id, 7356274628927488.0), (b.id, due * 4096.0 + 1)]
    # delay marker: member "1" at the earliest due time
    assert r.zrange(q.keys.marker, 0, -1, withscores=True) == [("1", float(ts + 100))]
    fields = r.hgetall(q.keys.job(a.id))
    assert fields["delay"] == "578" and fields["timestamp"] == str(ts)
    assert json.loads(fields["opts"])["delay"] == 578
    evs = events(q)
    assert evs[:2] == [{"event": "added", "jobId": a.id, "name": "a"},
                       {"event": "delayed", "jobId": a.id, "delay": str(due)}]
    assert r.llen(q.keys.wait) == 0 and r.exists(q.keys.pc) == 0


def test_delayed_with_priority_stays_delayed(r, q):
    job = q.add("a", 1, {"delay": 1000, "priority": 3})
    assert r.zscore(q.keys.delayed, job.id) is not None
    assert r.zcard(q.keys.prioritized) == 0
    assert r.hget(q.keys.job(job.id), "priority") == "3"


def test_sequence_is_capped_at_the_top_of_the_bucket(r, q):
    ts = 1795965485000
    r.zadd(q.keys.delayed, {"other": (ts + 10) * 4096 + 4095})
    job = q.add("a", 1, {"delay": 10, "timestamp": ts})
    assert r.zscore(q.keys.delayed, job.id) == (ts + 10) * 4096 + 4095


def test_opts_json_is_cjson_encoded(r, q):
    q.scripts.add_job("a/b", "a", 1795965485000, "1",
                      {"jobId": "a/b", "repeat": {"every": 1234567890123456, "pattern": "x/y"},
                       "backoff": {"type": "exponential", "delay": 200, "jitter": 0.25}, "attempts": 0})
    raw = r.hget(q.keys.job("a/b"), "opts")
    assert '"jobId":"a\\/b"' in raw
    assert '"every":1.2345678901235e+15' in raw
    assert '"jitter":0.25' in raw
    assert json.loads(raw)["backoff"] == {"type": "exponential", "delay": 200, "jitter": 0.25}


def test_empty_options_are_an_object(r, q):
    # Scripts called directly with no options at all: cjson writes {} not []
    job_id = q.scripts.add_job("", "raw", 5, "{}", {})
    assert r.hget(q.keys.job(job_id), "opts") == "{}"


def test_float_timestamp_as_node_sends_it(r, q):
    job_id = q.scripts.add_job("", "n", 1795965485578.0, "{}", {"attempts": 0})
    assert r.hget(q.keys.job(job_id), "timestamp") == "1795965485578"


def test_repeat_option_is_refused_with_a_pointer_to_job_schedulers(r, q):
    with pytest.raises(InvalidOptionError) as info:
        q.add("report", {}, {"repeat": {"every": 1000}})
    assert "'repeat'" in str(info.value) and "upsert_job_scheduler" in str(info.value)
    assert r.keys(f"{q.keys.base}*") == []


def test_repeat_job_key_and_telemetry(r, q):
    job = q.add("a", 1, {"repeatJobKey": "sched-1", "telemetry": {"metadata": "tp"}})
    fields = r.hgetall(q.keys.job(job.id))
    assert fields["rjk"] == "sched-1"
    assert json.loads(fields["opts"]) == {"tm": "tp", "attempts": 0}
    assert job.repeat_job_key == "sched-1"


# -- parents ----------------------------------------------------------------------------
def parent_opts(r, prefix, pname="parents", pid="p1", **flags):
    r.hset(f"{prefix}:{pname}:{pid}", mapping={"name": "parent", "data": "{}"})
    return dict({"parent": {"id": pid, "queue": f"{prefix}:{pname}"}}, **flags)


def test_missing_parent_is_refused(r, q, prefix):
    with pytest.raises(ParentJobNotExist) as info:
        q.add("child", 1, {"parent": {"id": "nope", "queue": f"{prefix}:parents"}})
    assert str(info.value) == (
        f"addStandardJob-9: parent job does not exist (the queue, code -5): job name 'child', "
        f"parent '{prefix}:parents:nope': add the parent first (or check opts.parent.queue, '<prefix>:<queue>')")
    assert r.exists(q.keys.id) == 0
    assert r.exists(q.keys.job("1")) == 0


@pytest.mark.parametrize("opts", [{}, {"delay": 50}, {"priority": 2}])
def test_child_is_linked_to_its_parent(r, q, prefix, opts):
    child = q.add("child", 1, dict(parent_opts(r, prefix, failParentOnFailure=True), **opts))
    fields = r.hgetall(q.keys.job(child.id))
    assert fields["parentKey"] == f"{prefix}:parents:p1"
    assert json.loads(fields["parent"]) == {"id": "p1", "queueKey": f"{prefix}:parents", "fpof": True}
    assert json.loads(fields["opts"])["fpof"] is True
    assert json.loads(fields["opts"])["parent"] == {"id": "p1", "queue": f"{prefix}:parents"}
    assert r.smembers(f"{prefix}:parents:p1:dependencies") == {q.keys.job(child.id)}
    assert child.parent_key == f"{prefix}:parents:p1"


def test_duplicate_with_another_live_parent_is_refused(r, q, prefix):
    q.add("child", 1, dict(parent_opts(r, prefix, pid="p1"), jobId="c"))
    with pytest.raises(ParentJobCannotBeReplaced, match=f"job 'c'.*parent '{prefix}:parents:p2'"):
        q.add("child", 1, dict(parent_opts(r, prefix, pid="p2"), jobId="c"))
    assert r.hget(q.keys.job("c"), "parentKey") == f"{prefix}:parents:p1"


def test_duplicate_without_parent_keeps_the_existing_parent(r, q, prefix, events):
    q.add("child", 1, dict(parent_opts(r, prefix, pid="p1"), jobId="c"))
    assert q.add("child", 2, {"jobId": "c"}).id == "c"
    assert r.hget(q.keys.job("c"), "parentKey") == f"{prefix}:parents:p1"
    assert events(q)[-1] == {"event": "duplicated", "jobId": "c"}


def test_duplicate_gets_a_parent_attached(r, q, prefix):
    q.add("child", 1, {"jobId": "c"})
    q.add("child", 1, dict(parent_opts(r, prefix, pid="p1"), jobId="c"))
    assert r.hget(q.keys.job("c"), "parentKey") == f"{prefix}:parents:p1"
    assert r.smembers(f"{prefix}:parents:p1:dependencies") == {q.keys.job("c")}


def test_duplicate_of_a_completed_job_releases_the_waiting_parent(r, q, prefix):
    q.add("child", 1, {"jobId": "c"})
    r.lrem(q.keys.wait, 0, "c")
    r.zadd(q.keys.completed, {"c": 1})
    r.hset(q.keys.job("c"), "returnvalue", '{"ok":true}')
    pk = f"{prefix}:parents"
    opts = parent_opts(r, prefix, pid="p1", jobId="c")
    r.hset(f"{pk}:p1", mapping={"priority": "0", "delay": "0"})
    r.zadd(f"{pk}:waiting-children", {"p1": 1})
    q.add("child", 1, opts)
    assert r.hgetall(f"{pk}:p1:processed") == {q.keys.job("c"): '{"ok":true}'}
    assert r.zcard(f"{pk}:waiting-children") == 0
    assert r.lrange(f"{pk}:wait", 0, -1) == ["p1"]
    assert r.zrange(f"{pk}:marker", 0, -1, withscores=True) == [("0", 0.0)]
    assert [f for _, f in r.xrange(f"{pk}:events")] == [
        {"event": "waiting", "jobId": "p1", "prev": "waiting-children"}]


# -- deduplication ----------------------------------------------------------------------
def test_simple_deduplication(r, q, events):
    a = q.add("a", 1, {"deduplication": {"id": "d1"}})
    b = q.add("a", 2, {"deduplication": {"id": "d1"}})
    assert b.id == a.id == "1"
    assert r.get(q.keys.id) == "2"
    assert r.exists(q.keys.job("2")) == 0
    assert r.get(q.keys.dedup("d1")) == "1"
    assert r.pttl(q.keys.dedup("d1")) == -1
    assert r.hget(q.keys.job("1"), "deid") == "d1"
    assert json.loads(r.hget(q.keys.job("1"), "opts"))["de"] == {"id": "d1"}
    assert events(q)[-1] == {"event": "deduplicated", "jobId": "1", "deduplicationId": "d1",
                                "deduplicatedJobId": "2"}


def test_throttle_mode_sets_a_ttl(r, q):
    q.add("a", 1, {"deduplication": {"id": "d1", "ttl": 60000}})
    assert 0 < r.pttl(q.keys.dedup("d1")) <= 60000
    assert q.add("a", 1, {"deduplication": {"id": "d1", "ttl": 60000}}).id == "1"
    r.delete(q.keys.dedup("d1"))  # window over
    assert q.add("a", 1, {"deduplication": {"id": "d1", "ttl": 60000}}).id == "3"


def test_extend_refreshes_the_window(r, q):
    q.add("a", 1, {"deduplication": {"id": "d1", "ttl": 60000, "extend": True}})
    r.pexpire(q.keys.dedup("d1"), 1000)
    assert q.add("a", 1, {"deduplication": {"id": "d1", "ttl": 60000, "extend": True}}).id == "1"
    assert r.pttl(q.keys.dedup("d1")) > 1000


def test_stale_key_is_taken_over(r, q):
    r.set(q.keys.dedup("d1"), "gone")
    job = q.add("a", 1, {"deduplication": {"id": "d1"}})
    assert job.id == "1"
    assert r.get(q.keys.dedup("d1")) == "1"
    assert r.lrange(q.keys.wait, 0, -1) == ["1"]


def test_replace_drops_a_delayed_owner(r, q, events):
    q.add("a", 1, {"delay": 60000, "deduplication": {"id": "d1", "replace": True, "ttl": 60000}})
    new = q.add("a", 2, {"delay": 60000, "deduplication": {"id": "d1", "replace": True, "ttl": 60000}})
    assert new.id == "2"
    assert r.exists(q.keys.job("1")) == 0
    assert r.zrange(q.keys.delayed, 0, -1) == ["2"]
    assert r.get(q.keys.dedup("d1")) == "2"
    assert r.pttl(q.keys.dedup("d1")) > 0
    evs = events(q)
    assert {"event": "removed", "jobId": "1", "prev": "delayed"} in evs
    assert {"event": "deduplicated", "jobId": "2", "deduplicationId": "d1", "deduplicatedJobId": "1"} in evs


def test_replace_keeps_an_owner_that_is_not_delayed(r, q, events):
    q.add("a", 1, {"deduplication": {"id": "d1", "replace": True}})
    assert q.add("a", 2, {"deduplication": {"id": "d1", "replace": True}}).id == "1"
    assert r.exists(q.keys.job("2")) == 0
    # as BullMQ: no "deduplicated" event on this path
    assert [e["event"] for e in events(q)] == ["added", "waiting"]


def test_reschedule_pushes_the_owner_out(r, q, events):
    ts = 1795965485000
    q.add("a", 1, {"delay": 1000, "timestamp": ts, "deduplication": {"id": "d1", "reschedule": True}})
    q.add("a", 1, {"delay": 5000, "timestamp": ts + 10, "deduplication": {"id": "d1", "reschedule": True}})
    assert r.zscore(q.keys.delayed, "1") == (ts + 10 + 5000) * 4096
    assert r.hget(q.keys.job("1"), "delay") == "5000"
    assert r.zscore(q.keys.marker, "1") == ts + 10 + 5000
    assert events(q)[-1] == {"event": "delayed", "jobId": "1", "delay": str(ts + 5010)}


# -- bulk and script reload -------------------------------------------------------------
def test_add_bulk_is_one_round_trip(r, q, monkeypatch):
    q.add_bulk([("warm", 0)])  # first call loads the scripts
    writes = []
    real_send = redis.connection.Connection.send_packed_command

    def counting_send(self, command, check_health=True):
        writes.append(b"".join(command) if isinstance(command, (list, tuple)) else command)
        return real_send(self, command, check_health)

    monkeypatch.setattr(redis.connection.Connection, "send_packed_command", counting_send)
    jobs = q.add_bulk([("a", 1), ("b", 2, {"priority": 3}), {"name": "c", "data": 3, "opts": {"delay": 500}},
                       ("d", 4, {"jobId": "dd", "lifo": True})])
    monkeypatch.undo()
    assert len(writes) == 1 and writes[0].count(b"EVALSHA") == 4
    assert [j.id for j in jobs] == ["2", "3", "4", "dd"]
    assert r.lrange(q.keys.wait, 0, -1) == ["2", "1", "dd"]
    assert r.zrange(q.keys.prioritized, 0, -1) == ["3"]
    assert r.zrange(q.keys.delayed, 0, -1) == ["4"]


def test_add_bulk_validates_everything_first(r, q):
    with pytest.raises(Exception, match="'priority'"):
        q.add_bulk([("a", 1), ("b", 2, {"priority": -1})])
    assert r.exists(q.keys.id) == 0
    assert q.add_bulk([]) == []


def test_add_bulk_reports_a_script_error(r, q, prefix):
    with pytest.raises(ParentJobNotExist, match=f"job name 'b', parent '{prefix}:nope:x'"):
        q.add_bulk([("a", 1), ("b", 2, {"parent": {"id": "x", "queue": f"{prefix}:nope"}}), ("c", 3)])
    # the refused add stopped before the id counter, so "c" got id 2
    assert r.lrange(q.keys.wait, 0, -1) == ["2", "1"]


def test_scripts_reload_after_flush(r, q):
    q.add("a", 1)
    r.script_flush()
    assert q.add("b", 1).id == "2"
    r.script_flush()
    assert [j.id for j in q.add_bulk([("c", 1), ("d", 1)])] == ["3", "4"]


@pytest.mark.parametrize("priority,delay", [(3, 0), (0, 250)])
def test_released_parent_goes_to_prioritized_or_delayed(r, q, prefix, priority, delay):
    ts = 1795965485000
    q.add("child", 1, {"jobId": "c"})
    r.lrem(q.keys.wait, 0, "c")
    r.zadd(q.keys.completed, {"c": 1})
    pk = f"{prefix}:parents"
    opts = parent_opts(r, prefix, pid="p1", jobId="c", timestamp=ts)
    r.hset(f"{pk}:p1", mapping={"priority": priority, "delay": delay})
    r.zadd(f"{pk}:waiting-children", {"p1": 1})
    q.add("child", 1, opts)
    # no returnvalue stored on the child: recorded as JSON null
    assert r.hgetall(f"{pk}:p1:processed") == {q.keys.job("c"): "null"}
    if delay:
        assert r.zrange(f"{pk}:delayed", 0, -1, withscores=True) == [("p1", (ts + delay) * 4096.0)]
        assert r.zrange(f"{pk}:marker", 0, -1, withscores=True) == [("1", float(ts + delay))]
        assert [f for _, f in r.xrange(f"{pk}:events")] == [
            {"event": "delayed", "jobId": "p1", "delay": str(ts + delay)}]
    else:
        assert r.zrange(f"{pk}:prioritized", 0, -1, withscores=True) == [("p1", 3 * TWO32 + 1)]
        assert r.zrange(f"{pk}:marker", 0, -1, withscores=True) == [("0", 0.0)]
    assert r.llen(f"{pk}:wait") == 0


def test_parent_with_pending_children_stays_waiting(r, q, prefix):
    q.add("child", 1, {"jobId": "c"})
    r.lrem(q.keys.wait, 0, "c")
    r.zadd(q.keys.completed, {"c": 1})
    pk = f"{prefix}:parents"
    opts = parent_opts(r, prefix, pid="p1", jobId="c")
    r.sadd(f"{pk}:p1:dependencies", "other-child")
    r.zadd(f"{pk}:waiting-children", {"p1": 1})
    q.add("child", 1, opts)
    assert r.zrange(f"{pk}:waiting-children", 0, -1) == ["p1"]
    assert r.exists(f"{pk}:events", f"{pk}:wait") == 0

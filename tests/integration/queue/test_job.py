"""Job decoding (docs/protocol.md, "The job hash") and the calls a processor makes, on a real Redis."""
from __future__ import annotations

import json
import time

import pytest

from echomq_gevent.protocol.clock import now_ms
from echomq_gevent import Job, Queue
from echomq_gevent.errors import InvalidJobDataError, JobLockMismatch, JobNotExist


@pytest.fixture
def q(redis_url, prefix, qname):
    queue = Queue(qname, redis_url, prefix=prefix)
    yield queue
    queue.close()


NODE_LIKE = {
    "name": "mail", "data": '{"to":"a@b","n":[1,2]}',
    "opts": '{"kl":5,"jobId":"custom-id","removeOnFail":{"age":3600,"count":100},"lifo":true,'
            '"attempts":3,"de":{"id":"d"},"fpof":true,"tm":"meta","omc":false}',
    "timestamp": "1795965485578", "delay": "0", "priority": "7", "processedOn": "1795965485600",
    "finishedOn": "1795965485700", "returnvalue": '{"ok":1}', "failedReason": "not json: plain",
    "stacktrace": '["Error: a\\n at x","Error: b"]', "progress": '{"pct":50}', "atm": "2", "ats": "3",
    "stc": "1", "pb": "w1", "rjk": "sched", "deid": "d", "defa": "job stalled more than allowable limit",
    "parentKey": "bull:p:1", "parent": '{"id":"1","queueKey":"bull:p","fpof":true}',
}


def test_decodes_every_field_like_node(q):
    job = Job.from_fields(q.scripts, "custom-id", NODE_LIKE)
    assert job.id == "custom-id" and job.name == "mail"
    assert job.data == {"to": "a@b", "n": [1, 2]}
    assert job.opts == {"keepLogs": 5, "jobId": "custom-id", "removeOnFail": {"age": 3600, "count": 100},
                        "lifo": True, "attempts": 3, "deduplication": {"id": "d"},
                        "failParentOnFailure": True, "telemetry": {"metadata": "meta", "omitContext": False}}
    assert (job.timestamp, job.delay, job.priority) == (1795965485578, 0, 7)
    assert (job.processed_on, job.finished_on) == (1795965485600, 1795965485700)
    assert job.returnvalue == {"ok": 1}
    assert job.failed_reason == "not json: plain"
    assert job.stacktrace == ["Error: a\n at x", "Error: b"]
    assert job.progress == {"pct": 50}
    assert (job.attempts_made, job.attempts_started, job.stalled_counter) == (2, 3, 1)
    assert (job.processed_by, job.repeat_job_key, job.deduplication_id) == ("w1", "sched", "d")
    assert job.deferred_failure == "job stalled more than allowable limit"
    assert job.parent_key == "bull:p:1"
    assert job.parent == {"id": "1", "queueKey": "bull:p", "fpof": True}
    assert (job.queue_name, job.prefix, job.queue_qualified_name) == (q.name, q.prefix, f"{q.prefix}:{q.name}")
    assert job.token is None and job.decode_error is None
    json.dumps(job.to_dict())  # JSON-able


def test_legacy_attempts_made_field_wins_over_atm(q):
    job = Job.from_fields(q.scripts, "1", {"name": "a", "attemptsMade": "4", "atm": "1"})
    assert job.attempts_made == 4


def test_defaults_for_a_minimal_hash(q):
    job = Job.from_fields(q.scripts, "9", {"name": "a"})
    assert job.data == {} and job.opts == {} and job.progress == 0
    assert (job.timestamp, job.delay, job.priority, job.attempts_made) == (0, 0, 0, 0)
    assert job.returnvalue is None and job.stacktrace == [] and job.parent is None
    assert job.decode_error is None


@pytest.mark.parametrize("field,value,attr,fallback", [
    ("data", "{not json", "data", None),
    ("data", "NaN", "data", None),
    ("opts", "[1,2", "opts", {}),
    ("opts", "[1]", "opts", {}),
    ("progress", "oops", "progress", 0),
])
def test_invalid_json_sets_decode_error_and_never_raises(q, r, field, value, attr, fallback):
    fields = {"name": "a", "data": "{}", "opts": "{}", "timestamp": "5"}
    fields[field] = value
    r.hset(q.keys.job("7"), mapping=fields)
    job = q.get_job("7")
    assert getattr(job, attr) == fallback
    assert job.decode_error.startswith(f"job 7: field '{field}' is not valid JSON (")
    assert job.timestamp == 5


def test_corrupted_returnvalue_and_stacktrace_are_tolerated(q):
    job = Job.from_fields(q.scripts, "1", {"name": "a", "returnvalue": "not-json", "stacktrace": "{}"})
    assert job.returnvalue is None and job.stacktrace == []
    assert job.decode_error is None


def test_from_flat_equals_from_fields(q):
    flat = [x for kv in NODE_LIKE.items() for x in kv]
    a = Job.from_flat(q.scripts, "custom-id", flat)
    b = Job.from_fields(q.scripts, "custom-id", NODE_LIKE)
    assert a.to_dict() == b.to_dict()


def test_from_flat_of_a_fetched_job(q):
    q.add("a", {"x": 1}, {"attempts": 2})
    res = q.scripts.move_to_active("tok", 30000, now_ms(), name="w9")
    job = Job.from_flat(q.scripts, res[1], res[0])
    assert (job.id, job.data, job.attempts_started, job.processed_by) == ("1", {"x": 1}, 1, "w9")
    assert job.opts == {"attempts": 2}
    assert job.processed_on is not None


def test_update_progress_number_and_object(q, r):
    job = q.add("a", 1)
    job.update_progress(42)
    assert job.progress == 42
    assert r.hget(q.keys.job(job.id), "progress") == "42"
    job.update_progress({"step": "b/c", "pct": 0.5})
    assert q.get_job(job.id).progress == {"step": "b/c", "pct": 0.5}
    evs = [f for _, f in r.xrange(q.keys.events)][-2:]
    assert evs == [{"event": "progress", "jobId": job.id, "data": "42"},
                   {"event": "progress", "jobId": job.id, "data": '{"step":"b/c","pct":0.5}'}]
    with pytest.raises(InvalidJobDataError, match="progress of job 'a' cannot be stored as JSON"):
        job.update_progress(float("nan"))
    r.delete(q.keys.job(job.id))
    with pytest.raises(JobNotExist):
        job.update_progress(1)


def test_log_respects_keep_logs(q, r):
    job = q.add("a", 1, {"keepLogs": 2})
    assert [job.log(f"l{i}") for i in range(4)] == [1, 2, 2, 2]
    assert r.lrange(q.keys.logs(job.id), 0, -1) == ["l2", "l3"]
    other = q.add("b", 1)
    assert [other.log("x") for _ in range(3)] == [1, 2, 3]


def test_update_data(q):
    job = q.add("a", {"v": 1})
    job.update_data({"v": 2})
    assert job.data == {"v": 2}
    assert q.get_job(job.id).data == {"v": 2}
    with pytest.raises(InvalidJobDataError):
        job.update_data({"bad": object()})


def test_move_to_delayed_keeps_attempts(q, r):
    q.add("a", 1)
    res = q.scripts.move_to_active("tok", 30000, now_ms())
    job = Job.from_flat(q.scripts, res[1], res[0])
    job.token = "tok"
    due = now_ms() + 60000
    job.move_to_delayed(due)
    assert job.get_state() == "delayed"
    assert r.hget(q.keys.job(job.id), "atm") in (None, "0")
    score = r.zscore(q.keys.delayed, job.id)
    assert abs(score // 4096 - due) <= 50
    assert 59000 <= job.delay <= 60000


def test_move_to_delayed_with_the_wrong_token(q):
    q.add("a", 1)
    res = q.scripts.move_to_active("tok", 30000, now_ms())
    job = Job.from_flat(q.scripts, res[1], res[0])
    with pytest.raises(JobLockMismatch):
        job.move_to_delayed(now_ms() + 1000, token="other")


def test_state_helpers_and_remove(q, r):
    job = q.add("a", 1)
    assert job.get_state() == "waiting"
    assert job.is_waiting() and not job.is_completed() and not job.is_failed()
    r.lrem(q.keys.wait, 0, job.id)
    r.zadd(q.keys.completed, {job.id: 1})
    assert job.is_completed()
    job.remove()
    assert job.get_state() == "unknown"
    q.add("b", 1)
    res = q.scripts.move_to_active("tok", 30000, now_ms())
    active = Job.from_flat(q.scripts, res[1], res[0])
    assert active.is_active()
    with pytest.raises(RuntimeError, match="locked by a worker"):
        active.remove()


@pytest.mark.parametrize("raw,data,error", [
    (' {"a":1} ', {"a": 1}, None),          # white space is fine for JSON.parse too
    ('{"a":1}x', None, "Extra data"),
    ("-Infinity", None, "-Infinity is not JSON"),
    ('"text"', "text", None),
    ("", {}, None),                          # Node reads a missing/empty data as {}
])
def test_json_edge_cases(q, raw, data, error):
    job = Job.from_fields(q.scripts, "5", {"name": "a", "data": raw})
    assert job.data == data
    if error is None:
        assert job.decode_error is None
    else:
        assert error in job.decode_error


def test_options_checked_once_per_text_and_bad_ones_every_time(q, monkeypatch):
    from echomq_gevent.queue import job as job_module

    calls = []
    real = job_module.stored_options_problems
    monkeypatch.setattr(job_module, "stored_options_problems", lambda opts: calls.append(opts) or real(opts))
    monkeypatch.setattr(job_module, "_CHECKED_OPTS", set())
    good = '{"attempts":3,"backoff":{"type":"fixed","delay":5}}'
    bad = '{"attempts":"three"}'
    jobs = [Job.from_fields(q.scripts, str(i), {"name": "a", "opts": text})
            for i, text in enumerate([good, bad, good, bad, good])]
    assert [j.decode_error is None for j in jobs] == [True, False, True, False, True]
    assert all("invalid stored options" in j.decode_error and "attempts" in j.decode_error
               for j in jobs if j.decode_error)
    assert jobs[4].opts == {"attempts": 3, "backoff": {"type": "fixed", "delay": 5}}
    assert jobs[2].opts is not jobs[0].opts  # every job its own options
    assert len(calls) == 3  # the good text once, the bad one each time
    monkeypatch.setattr(job_module, "_CHECKED_OPTS_MAX", 2)
    for i in range(5):  # the remembered set stays bounded
        Job.from_fields(q.scripts, "x", {"name": "a", "opts": '{"attempts":%d}' % (i + 1)})
    assert len(job_module._CHECKED_OPTS) <= 2

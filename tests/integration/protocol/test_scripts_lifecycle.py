"""Whole job lifecycles through the scripts (add -> fetch -> retry/delay -> finish), checked
against the event sequences observed with Node bullmq 6.7.0 (docs/protocol.md, "Fetching and finishing")."""
from __future__ import annotations

import json

from integration.worker_scripts_helpers import (
    TOKEN, as_dict, fetch, finish_opts, now_ms,
)


def add(scripts, name, opts=None, now=None, data=None):
    opts = dict(opts or {})
    opts.setdefault("attempts", 0)
    return scripts.add_job("", name, now or now_ms(), json.dumps(data or {}), opts)


def test_order_of_standard_lifo_prioritized_and_delayed_jobs(r, keys, scripts):
    now = now_ms()
    std = add(scripts, "std", now=now)
    lifo = add(scripts, "lifo", {"lifo": True}, now=now)
    prio = add(scripts, "prio", {"priority": 3}, now=now)
    late = add(scripts, "late", {"delay": 500}, now=now)
    got = [fetch(scripts, now=now)[1] for _ in range(3)]
    assert got == [lifo, std, prio]
    assert fetch(scripts, now=now) == [0, 0, 0, now + 500]
    assert fetch(scripts, now=now + 500)[1] == late


def test_retry_with_backoff_then_final_failure_matches_node_sequence(r, keys, scripts, events):
    now = now_ms()
    job_id = add(scripts, "flaky", {"attempts": 2, "backoff": {"type": "fixed", "delay": 200}},
                 now=now)
    assert fetch(scripts, now=now)[1] == job_id
    scripts.update_progress(job_id, "50")
    stack = json.dumps(["Error: first"])
    scripts.move_to_delayed(job_id, now, TOKEN, 200,
                            fields_to_update=["failedReason", "first", "stacktrace", stack])
    assert fetch(scripts, now=now + 100) == [0, 0, 0, now + 200]
    res = fetch(scripts, now=now + 200)
    assert res[1] == job_id
    fields = as_dict(res[0])
    assert (fields["atm"], fields["ats"], fields["delay"]) == ("1", "2", "0")
    scripts.update_progress(job_id, "90")
    scripts.move_to_finished(job_id, now + 300, "failedReason", "second", "failed", True,
                             finish_opts(attempts=2))
    assert events.names(keys) == [
        "added", "waiting", "active", "progress", "delayed", "waiting", "active", "progress",
        "failed", "retries-exhausted", "drained",
    ]
    evs = events(keys)
    assert evs[4] == {"event": "delayed", "jobId": job_id, "delay": str(now + 200)}
    assert evs[5] == {"event": "waiting", "jobId": job_id, "prev": "delayed"}
    assert evs[9] == {"event": "retries-exhausted", "jobId": job_id, "attemptsMade": "2"}
    job = r.hgetall(keys.job(job_id))
    assert (job["atm"], job["failedReason"], job["finishedOn"]) == ("2", "second", str(now + 300))


def test_immediate_retries_then_completion(r, keys, scripts, events):
    job_id = add(scripts, "again", {"attempts": 3})
    for attempt in (1, 2):
        assert fetch(scripts)[1] == job_id
        scripts.retry_job(job_id, now_ms(), TOKEN, fields_to_update=["failedReason", f"try {attempt}"])
    res = fetch(scripts)
    assert res[1] == job_id
    assert (as_dict(res[0])["atm"], as_dict(res[0])["failedReason"]) == ("2", "try 2")
    assert scripts.move_to_finished(job_id, now_ms(), "returnvalue", "null", "completed", False,
                                    finish_opts(keep={"count": 0})) == 0
    assert r.exists(keys.job(job_id)) == 0
    assert events.names(keys)[-3:] == ["active", "completed", "drained"]


def test_busy_queue_is_worked_through_with_fetch_next(r, keys, scripts, events):
    ids = [add(scripts, f"n{i}") for i in range(20)]
    res = fetch(scripts)
    done = []
    while res and res[1]:
        done.append(res[1])
        res = scripts.move_to_finished(res[1], now_ms(), "returnvalue", '"ok"', "completed", True,
                                       finish_opts(keep={"count": 5}))
    assert done == ids
    assert r.zcard(keys.completed) == 5
    assert r.llen(keys.active) == 0
    assert events.names(keys)[-1] == "drained"
    assert r.exists(*[keys.lock(i) for i in ids]) == 0

"""Job schedulers on a real Redis: the Queue API, the four scripts, and the run a worker
creates when it takes a scheduler's job (Node's twins are in tests/interop)."""
from __future__ import annotations

import json
import logging
import time
from datetime import datetime, timedelta, timezone

import gevent
import pytest

from echomq_gevent.protocol.clock import now_ms
from echomq_gevent import CronError, InvalidOptionError, Job
from echomq_gevent.protocol.cron import next_run
from echomq_gevent.errors import JobBelongsToJobScheduler
from echomq_gevent.queue.schedulers import schedule_next_run


def take(queue, job_id):
    """The job as a worker would read it after pick-up."""
    return Job.from_fields(queue.scripts, job_id, queue.client.hgetall(queue.keys.job(job_id)))


def test_every_scheduler_writes_node_keys(r, queue):
    before = now_ms()
    job = queue.upsert_job_scheduler("tick", {"every": 60000}, {"name": "beat", "data": {"n": 1},
                                                                "opts": {"attempts": 2}})
    millis = int(job.id.rsplit(":", 1)[1])
    assert job.id == f"repeat:tick:{millis}" and before <= millis <= now_ms()
    assert r.zscore(queue.keys.repeat, "tick") == millis
    stored = r.hgetall(queue.keys.scheduler("tick"))
    assert stored == {"name": "beat", "every": "60000", "offset": str(millis % 60000), "data": '{"n":1}',
                      "opts": '{"attempts":2}', "ic": "1"}
    fields = r.hgetall(queue.keys.job(job.id))
    assert fields["rjk"] == "tick" and fields["name"] == "beat" and fields["delay"] == "0"
    opts = json.loads(fields["opts"])
    assert opts["repeat"] == {"every": 60000, "count": 1} and opts["repeatJobKey"] == "tick"
    assert opts["jobId"] == job.id and opts["attempts"] == 2 and "prevMillis" not in opts
    assert r.lrange(queue.keys.wait, 0, -1) == [job.id]
    assert int(r.get(queue.keys.id)) == 1


def test_cron_scheduler_first_run_is_the_next_match(r, queue):
    job = queue.upsert_job_scheduler("daily", {"pattern": "0 9 * * *", "tz": "Europe/Paris"})
    millis = int(job.id.rsplit(":", 1)[1])
    assert abs(millis - next_run("0 9 * * *", now_ms(), "Europe/Paris")) < 2000
    assert r.zscore(queue.keys.delayed, job.id) is not None
    scheduler = queue.get_job_scheduler("daily")
    assert (scheduler.pattern, scheduler.tz, scheduler.next, scheduler.iteration_count) == \
        ("0 9 * * *", "Europe/Paris", millis, 1)
    assert scheduler.name == "daily"  # the template name defaults to the id
    opts = json.loads(r.hget(queue.keys.job(job.id), "opts"))
    assert opts["prevMillis"] == millis and opts["repeat"]["pattern"] == "0 9 * * *"


def test_upsert_replaces_the_upcoming_run_and_keeps_the_count(r, queue):
    first = queue.upsert_job_scheduler("s", {"pattern": "0 9 * * *"}, {"data": {"v": 1}})
    r.hset(queue.keys.scheduler("s"), "ic", 7)
    second = queue.upsert_job_scheduler("s", {"pattern": "30 10 * * *"}, {"data": {"v": 2}})
    assert first.id != second.id
    assert not r.exists(queue.keys.job(first.id))
    assert r.zrange(queue.keys.delayed, 0, -1) == [second.id]
    assert queue.get_job_scheduler("s").iteration_count == 7
    assert queue.get_job_scheduler("s").template == {"data": {"v": 2}}
    assert queue.get_job_schedulers_count() == 1


def test_same_every_upsert_reuses_the_slot(r, queue):
    first = queue.upsert_job_scheduler("s", {"every": 3600000, "offset": 5000}, {"data": {"v": 1}})
    second = queue.upsert_job_scheduler("s", {"every": 3600000, "offset": 5000}, {"data": {"v": 2}})
    assert first.id == second.id and second.data == {"v": 2}


def test_list_count_remove(r, queue):
    queue.upsert_job_scheduler("a", {"every": 1000000})
    queue.upsert_job_scheduler("b", {"pattern": "0 0 1 1 *"})
    assert [s.key for s in queue.get_job_schedulers(asc=True)] == ["a", "b"]
    assert [s.key for s in queue.get_job_schedulers()] == ["b", "a"]
    assert [s.key for s in queue.get_job_schedulers(0, 0)] == ["b"]
    assert queue.get_job_schedulers_count() == 2
    upcoming = f"repeat:b:{int(r.zscore(queue.keys.repeat, 'b'))}"
    with pytest.raises(JobBelongsToJobScheduler):
        queue.remove_job(upcoming)
    assert queue.remove_job_scheduler("b") is True
    assert not r.exists(queue.keys.job(upcoming)) and not r.exists(queue.keys.scheduler("b"))
    events = [e[1] for e in r.xrange(queue.keys.events)]
    assert {"event": "removed", "jobId": upcoming, "prev": "delayed"} in events
    assert queue.remove_job_scheduler("b") is False
    assert queue.get_job_scheduler("b") is None
    assert queue.get_job_schedulers_count() == 1


def test_limit_zero_and_end_date_without_a_run(r, queue):
    assert queue.upsert_job_scheduler("none", {"every": 1000, "limit": 0}) is None
    soon = datetime.now(timezone.utc) + timedelta(minutes=1)
    assert queue.upsert_job_scheduler("yearly", {"pattern": "0 0 1 1 *", "endDate": soon}) is None
    assert queue.get_job_schedulers_count() == 0


@pytest.mark.parametrize("repeat, template, message", [
    ({"every": 1000, "pattern": "* * * * *"}, None, "'every' and 'pattern' cannot be used together"),
    ({}, None, "give 'every'"),
    ({"pattern": "61 * * * *"}, None, "repeat.pattern: invalid cron pattern '61 * * * *'"),
    ({"pattern": "0 9 * * *", "tz": "Nowhere/City"}, None, "repeat.tz: unknown time zone 'Nowhere/City'"),
    ({"every": 0}, None, "'every': must be an integer number of ms >= 1"),
    ({"every": 1000, "evry": 5}, None, "'evry': is not a repeat option (did you mean 'every'?)"),
    ({"every": 1000, "endDate": 1000}, None, "End date must be greater than current timestamp"),
    ({"pattern": "* * * * *", "immediately": True, "startDate": 5}, None, "'immediately' and 'startDate'"),
    ({"every": 1000, "startDate": "yesterday"}, None, "'startDate': must be ms since the epoch"),
    ({"every": 1000}, {"opts": {"jobId": "x"}}, "template option 'jobId'"),
    ({"every": 1000}, {"nmae": "x"}, "did you mean 'name'?"),
    ({"every": 1000}, {"opts": {"attempts": -1}}, "'attempts'"),
])
def test_bad_input_names_the_field(r, queue, repeat, template, message):
    with pytest.raises((InvalidOptionError, CronError)) as info:
        queue.upsert_job_scheduler("bad", repeat, template)
    assert message in str(info.value)
    assert r.keys(f"{queue.keys.base}*") == []


def test_taking_a_run_creates_the_next_once(r, queue):
    job = queue.upsert_job_scheduler("s", {"every": 1000}, {"data": {"k": "v"}})
    first = int(job.id.rsplit(":", 1)[1])
    taken = take(queue, job.id)
    nxt = schedule_next_run(queue.scripts, taken)
    assert nxt == f"repeat:s:{first + 1000}" or int(nxt.rsplit(":", 1)[1]) % 1000 == first % 1000
    assert r.zscore(queue.keys.repeat, "s") == int(nxt.rsplit(":", 1)[1])
    assert r.hget(queue.keys.scheduler("s"), "ic") == "2"
    opts = json.loads(r.hget(queue.keys.job(nxt), "opts"))
    assert opts["repeat"]["count"] == 2 and opts["jobId"] == nxt
    assert json.loads(r.hget(queue.keys.job(nxt), "data")) == {"k": "v"}
    # the same run taken again (a second worker, a stalled retry) creates nothing
    assert schedule_next_run(queue.scripts, taken) is None
    assert r.hget(queue.keys.scheduler("s"), "ic") == "2"
    # the next run exists already when its producer asks again: a "duplicated" event
    r.zadd(queue.keys.repeat, {"s": first})
    assert schedule_next_run(queue.scripts, taken) is None
    assert [e[1] for e in r.xrange(queue.keys.events)][-1] == {"event": "duplicated", "jobId": nxt}


def test_cron_run_taken_creates_the_next_match(r, queue):
    job = queue.upsert_job_scheduler("c", {"pattern": "*/10 * * * * *", "tz": "Asia/Tokyo"})
    millis = int(job.id.rsplit(":", 1)[1])
    nxt = schedule_next_run(queue.scripts, take(queue, job.id), now=millis)
    assert nxt == f"repeat:c:{millis + 10000}"
    assert json.loads(r.hget(queue.keys.job(nxt), "opts"))["prevMillis"] == millis + 10000


def test_runs_of_one_pattern_taken_together_write_what_a_cold_cache_writes(r, queue):
    from echomq_gevent.protocol import cron

    ids = [queue.upsert_job_scheduler(f"c{i}", {"pattern": "*/10 * * * * *", "tz": "Europe/Paris"}).id
           for i in range(6)]
    millis = int(ids[0].rsplit(":", 1)[1])
    assert all(int(i.rsplit(":", 1)[1]) == millis for i in ids)
    made = []
    for n, job_id in enumerate(ids):
        if n % 2 == 0:
            cron._clear_caches()  # even ones cold, odd ones from the cache
        made.append(schedule_next_run(queue.scripts, take(queue, job_id), now=millis + 137 * n))
    assert made == [f"repeat:c{i}:{millis + 10000}" for i in range(6)]
    opts = [json.loads(r.hget(queue.keys.job(nxt), "opts")) for nxt in made]
    assert {o["prevMillis"] for o in opts} == {millis + 10000}


def test_limit_ends_the_schedule(r, queue):
    job = queue.upsert_job_scheduler("twice", {"every": 1000, "limit": 2})
    second = schedule_next_run(queue.scripts, take(queue, job.id))
    assert second is not None
    assert schedule_next_run(queue.scripts, take(queue, second)) is None
    assert r.hget(queue.keys.scheduler("twice"), "ic") == "2"


def test_a_removed_scheduler_creates_no_more_runs(r, queue):
    job = queue.upsert_job_scheduler("gone", {"every": 1000})
    taken = take(queue, job.id)
    queue.remove_job_scheduler("gone")
    assert schedule_next_run(queue.scripts, taken) is None
    assert queue.get_job_schedulers_count() == 0


def test_foreign_run_with_bad_repeat_options_is_logged_not_raised(r, queue, caplog):
    job = queue.upsert_job_scheduler("s", {"every": 1000})
    raw = json.loads(r.hget(queue.keys.job(job.id), "opts"))
    raw["repeat"] = {"every": 1000, "pattern": "* * * * *"}
    r.hset(queue.keys.job(job.id), "opts", json.dumps(raw))
    with caplog.at_level(logging.ERROR, logger="echomq_gevent.schedulers"):
        assert schedule_next_run(queue.scripts, take(queue, job.id)) is None
    assert "'every' and 'pattern' cannot be used together" in caplog.text and job.id in caplog.text


def test_legacy_repeatable_job_is_reported(r, queue, caplog):
    queue.client.hset(queue.keys.job("repeat:old"), mapping={
        "name": "old", "data": "{}", "opts": json.dumps({"repeat": {"every": 1000}}), "rjk": "old:old::UTC:1000",
        "timestamp": 1, "delay": 0, "priority": 0})
    with caplog.at_level(logging.ERROR, logger="echomq_gevent.schedulers"):
        assert schedule_next_run(queue.scripts, take(queue, "repeat:old")) is None
    assert "BullMQ 5 repeatable job" in caplog.text


def test_our_worker_keeps_a_schedule_running(redis_url, queue):
    from echomq_gevent import Worker
    queue.upsert_job_scheduler("w", {"every": 100}, {"name": "w"})
    seen = []
    worker = Worker(queue.name, lambda job: seen.append(job.id), connection=redis_url, prefix=queue.prefix,
                    drain_delay=1)
    worker.start()
    try:
        deadline = time.monotonic() + 60
        while len(seen) < 4 and time.monotonic() < deadline:
            gevent.sleep(0.05)
        assert len(seen) >= 4, seen
    finally:
        worker.close(timeout=5)
    assert len(set(seen)) == len(seen) and all(j.startswith("repeat:w:") for j in seen)


def test_ensure_is_idempotent_and_notices_changes(r, queue):
    from echomq_gevent.queue.schedulers import ensure_job_scheduler
    repeat = {"pattern": "0 3 * * *", "tz": "Europe/Paris"}
    template = {"name": "nightly", "data": {"k": 1}, "opts": {"attempts": 2}}
    assert ensure_job_scheduler(queue, "n", repeat, template) == "upserted"
    first = queue.get_job_scheduler("n").next
    stamp = r.hget(queue.keys.job(f"repeat:n:{first}"), "timestamp")
    assert ensure_job_scheduler(queue, "n", repeat, template) == "unchanged"
    assert r.hget(queue.keys.job(f"repeat:n:{first}"), "timestamp") == stamp
    assert ensure_job_scheduler(queue, "n", repeat, dict(template, data={"k": 2})) == "upserted"
    assert queue.get_job_scheduler("n").template["data"] == {"k": 2}
    assert ensure_job_scheduler(queue, "n", {"pattern": "0 4 * * *", "tz": "Europe/Paris"}, template) == "upserted"
    assert queue.get_job_scheduler("n").pattern == "0 4 * * *"
    assert ensure_job_scheduler(queue, "e", {"every": 60000}) == "upserted"
    assert ensure_job_scheduler(queue, "e", {"every": 60000}) == "unchanged"
    assert ensure_job_scheduler(queue, "z", {"every": 60000, "limit": 0}) == "no run"


def test_the_guide_examples_run(redis_url, prefix, capsys):
    """The Python blocks of docs/schedulers.md run as written (on this test's Redis and prefix;
    the block that starts a worker forever is only compiled)."""
    import os
    import re
    doc = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))), "docs",
                       "schedulers.md")
    with open(doc, encoding="utf-8") as fh:
        blocks = re.findall(r"```python\n(.*?)```", fh.read(), re.S)
    assert len(blocks) >= 4
    namespace: dict = {}
    for block in blocks:
        code = block.replace('"redis://127.0.0.1:6379/0"', f'"{redis_url}", prefix="{prefix}"')
        compiled = compile(code, "docs/schedulers.md", "exec")
        if ".run()" in block:
            continue
        exec(compiled, namespace)
    out = capsys.readouterr().out
    assert "repeat:morning-report:" in out and "cannot be used together" in out
    assert "invalid cron pattern '61 * * * *'" in out and "1774854000000" in out


def test_unknown_repeat_keys_of_another_producer_travel_on(r, queue):
    job = queue.upsert_job_scheduler("s", {"every": 1000})
    raw = json.loads(r.hget(queue.keys.job(job.id), "opts"))
    raw["repeat"]["utc"] = True  # an option of older BullMQ versions
    r.hset(queue.keys.job(job.id), "opts", json.dumps(raw))
    nxt = schedule_next_run(queue.scripts, take(queue, job.id))
    assert nxt is not None
    assert json.loads(r.hget(queue.keys.job(nxt), "opts"))["repeat"] == {"every": 1000, "count": 2, "utc": True}

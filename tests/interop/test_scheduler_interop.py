"""Job schedulers across runtimes: a schedule made by either side keeps running when the
other side's worker serves it, and a mixed fleet creates each run exactly once.

Intervals are short (a few hundred ms) and every wait is on a positive signal (N runs
completed) with a generous deadline, so a loaded machine only makes the tests slower.
"""
from __future__ import annotations

import json
import time
from typing import Dict, List

import pytest
import redis

from echomq_gevent import InvalidOptionError, Queue
from echomq_gevent.protocol.cron import CronError, next_run
from echomq_gevent.protocol.keys import QueueKeys
from interop_node import NodeToolError

pytestmark = pytest.mark.interop

RUNS = 4
DEADLINE = 60.0


def _completed_runs(proc, scheduler_id: str) -> List[str]:
    return [ln["jobId"] for ln in proc.events("completed") if str(ln["jobId"]).startswith(f"repeat:{scheduler_id}:")]


def _wait_runs(procs, scheduler_id: str, count: int, timeout: float = DEADLINE) -> List[str]:
    """Wait until the processes together completed ``count`` runs of the scheduler."""
    end = time.monotonic() + timeout
    while True:
        runs = [job_id for proc in procs for job_id in _completed_runs(proc, scheduler_id)]
        if len(runs) >= count:
            return runs
        if time.monotonic() > end:
            raise AssertionError(f"only {len(runs)} of {count} runs of {scheduler_id!r} completed in {timeout} s; "
                                 + "\n".join(p.describe() for p in procs))
        time.sleep(0.05)


def _millis(job_id: str) -> int:
    return int(job_id.rsplit(":", 1)[1])


def _scheduler_hash(r: redis.Redis, prefix: str, qname: str, scheduler_id: str) -> Dict[str, str]:
    return r.hgetall(QueueKeys(qname, prefix).scheduler(scheduler_id))


def test_node_every_scheduler_keeps_running_on_our_worker(node, r, prefix, qname):
    node.run("upsertJobScheduler", schedulerId="tick", repeat={"every": 300},
             template={"name": "tick", "data": {"n": 1}})
    ours = node.python_worker(workerOpts={"drain_delay": 1}, behaviour={"returnData": True})
    runs = _wait_runs([ours], "tick", RUNS)
    assert not ours.events("error"), ours.describe()
    assert len(set(runs)) == len(runs)
    millis = [_millis(j) for j in runs]
    assert millis == sorted(millis)
    for a, b in zip(millis, millis[1:]):  # on the "every" grid, slots missed under load skipped
        assert (b - a) % 300 == 0 and b > a
    scheduler = node.run("getJobScheduler", schedulerId="tick")
    assert scheduler["iterationCount"] >= RUNS + 1 and scheduler["next"] > millis[-1]
    # the run our worker created reads back in Node like one Node created
    upcoming = node.run("getJob", jobId=f"repeat:tick:{scheduler['next']}")
    assert upcoming["repeatJobKey"] == "tick" and upcoming["name"] == "tick" and upcoming["data"] == {"n": 1}
    assert upcoming["opts"]["repeat"]["every"] == 300 and upcoming["opts"]["repeat"]["count"] >= RUNS + 1


def test_node_cron_scheduler_keeps_running_on_our_worker(node, r, prefix, qname):
    node.run("upsertJobScheduler", schedulerId="cron", repeat={"pattern": "* * * * * *", "tz": "Europe/Paris"},
             template={"name": "cron"})
    ours = node.python_worker(workerOpts={"drain_delay": 1})
    runs = _wait_runs([ours], "cron", 3)
    assert not ours.events("error"), ours.describe()
    millis = [_millis(j) for j in runs]
    assert all(m % 1000 == 0 for m in millis) and millis == sorted(set(millis))
    scheduler = node.run("getJobScheduler", schedulerId="cron")
    upcoming = node.run("getJob", jobId=f"repeat:cron:{scheduler['next']}")
    # the next run is the pattern's next second after the previous run's time (or after now)
    assert upcoming["opts"]["prevMillis"] == scheduler["next"]
    assert upcoming["opts"]["repeat"] == {"pattern": "* * * * * *", "tz": "Europe/Paris",
                                          "count": upcoming["opts"]["repeat"]["count"]}


def test_python_scheduler_is_served_by_a_node_worker(node, redis_url, prefix, qname):
    with Queue(qname, connection=redis_url, prefix=prefix) as q:
        first = q.upsert_job_scheduler("py-every", {"every": 300}, {"name": "beat", "data": {"from": "py"}})
        assert first.id.startswith("repeat:py-every:")
        theirs = node.worker(workerOpts={"drainDelay": 1}, behaviour={"returnData": True})
        runs = _wait_runs([theirs], "py-every", RUNS)
        assert not theirs.events("error"), theirs.describe()
        done = [ln for ln in theirs.events("completed") if ln["jobId"] in runs]
        assert all(ln["result"] == {"from": "py"} for ln in done)
        scheduler = q.get_job_scheduler("py-every")
        assert scheduler.iteration_count >= RUNS + 1 and scheduler.every == 300


def test_python_cron_scheduler_is_served_by_a_node_worker(node, redis_url, prefix, qname):
    with Queue(qname, connection=redis_url, prefix=prefix) as q:
        q.upsert_job_scheduler("py-cron", {"pattern": "*/1 * * * * *", "tz": "America/New_York"})
        theirs = node.worker(workerOpts={"drainDelay": 1})
        runs = _wait_runs([theirs], "py-cron", 3)
        assert not theirs.events("error"), theirs.describe()
        assert all(_millis(j) % 1000 == 0 for j in runs)


def test_mixed_fleet_runs_each_slot_once(node, r, redis_url, prefix, qname):
    """A Node worker and ours serve one schedule: every run is created and processed once."""
    node.run("upsertJobScheduler", schedulerId="shared", repeat={"every": 200}, template={"name": "shared"})
    theirs = node.worker(workerOpts={"drainDelay": 1, "concurrency": 2}, behaviour={"sleepMs": 30})
    ours = node.python_worker(workerOpts={"drain_delay": 1, "concurrency": 2}, behaviour={"sleepMs": 30})
    _wait_runs([theirs, ours], "shared", 12)
    theirs.stop()
    ours.stop()
    processed: Dict[str, int] = {}
    for proc in (theirs, ours):
        for ln in proc.events("process"):
            processed[ln["jobId"]] = processed.get(ln["jobId"], 0) + 1
    twice = {job_id: n for job_id, n in processed.items() if n > 1}
    assert not twice, f"runs processed more than once: {twice}"
    keys = QueueKeys(qname, prefix)
    created = {k[len(keys.base):] for k in r.scan_iter(match=keys.base + "repeat:shared:*")
               if k[len(keys.base):].rsplit(":", 1)[1].isdigit()}
    ic = int(_scheduler_hash(r, prefix, qname, "shared")["ic"])
    assert ic == len(created), f"ic {ic} but {len(created)} runs exist"
    millis = sorted(_millis(j) for j in created)
    assert len(set(millis)) == len(millis)
    assert all((b - a) % 200 == 0 for a, b in zip(millis, millis[1:]))
    # no "duplicated" attempt got through: Redis holds no run besides the scheduler's chain
    assert set(processed) <= created


def test_next_run_created_by_our_worker_matches_node_worker(node, r, redis_url, prefix):
    """Twin queues, one scheduler each (same cron pattern): the run after the first one, made
    by Node's worker in one and by ours in the other, has the same fields and options."""
    template = {"name": "twin", "data": {"k": [1, 2]}, "opts": {"attempts": 2, "removeOnComplete": 50,
                                                             "backoff": {"type": "fixed", "delay": 10}}}
    # limit 2: whatever the timing, exactly two runs exist, the second made by the worker
    repeat = {"pattern": "*/1 * * * * *", "tz": "Asia/Kolkata", "limit": 2}
    made = {}
    for qname, kind in (("twin-node", "node"), ("twin-py", "py")):
        node.run("upsertJobScheduler", queue=qname, schedulerId="s", repeat=repeat, template=template)
        spawn = node.worker if kind == "node" else node.python_worker
        opts = {"drainDelay": 1} if kind == "node" else {"drain_delay": 1}
        proc = spawn(queue=qname, workerOpts=opts, stopAfter=1)
        proc.wait_event("exit", timeout=DEADLINE)
        nxt = int(r.zscore(QueueKeys(qname, prefix).repeat, "s"))
        fields = r.hgetall(QueueKeys(qname, prefix).job(f"repeat:s:{nxt}"))
        fields["opts"] = json.loads(fields["opts"])
        made[kind] = (fields, _scheduler_hash(r, prefix, qname, "s"))
    (nf, nsched), (pf, psched) = made["node"], made["py"]
    assert set(nf) == set(pf)
    for field in ("name", "data", "priority", "rjk"):
        assert nf[field] == pf[field], field
    varying = ("timestamp", "delay", "prevMillis", "jobId")
    assert {k: v for k, v in nf["opts"].items() if k not in varying} == \
        {k: v for k, v in pf["opts"].items() if k not in varying}
    assert nf["opts"]["repeat"]["count"] == 2
    assert pf["opts"]["prevMillis"] == int(pf["opts"]["jobId"].rsplit(":", 1)[1])
    assert {k: v for k, v in nsched.items()} == {k: v for k, v in psched.items()}


@pytest.mark.parametrize("repeat, field", [
    ({"pattern": "61 * * * *"}, "repeat.pattern"),
    ({"pattern": "0 0 30 2 *"}, "repeat.pattern"),
    ({"every": 1000, "pattern": "* * * * *"}, "'every'"),
    ({"pattern": "0 9 * * *", "tz": "Mars/Olympus"}, "repeat.tz"),
])
def test_bad_input_is_refused_by_both_sides(node, redis_url, prefix, qname, repeat, field):
    with pytest.raises(NodeToolError):
        node.run("upsertJobScheduler", schedulerId="bad", repeat=repeat)
    with Queue(qname, connection=redis_url, prefix=prefix) as q:
        with pytest.raises((InvalidOptionError, CronError)) as info:
            q.upsert_job_scheduler("bad-py", repeat)
        assert field in str(info.value)
        assert q.get_job_schedulers_count() == 0


def test_python_reads_node_schedulers_and_node_reads_ours(node, redis_url, prefix, qname):
    node.run("upsertJobScheduler", schedulerId="n1", repeat={"every": 60000, "limit": 3},
             template={"name": "n", "data": {"x": 1}, "opts": {"priority": 3}})
    with Queue(qname, connection=redis_url, prefix=prefix) as q:
        q.upsert_job_scheduler("p1", {"pattern": "0 9 * * 1-5", "tz": "Europe/Paris"}, {"data": {"y": 2}})
        for scheduler_id in ("n1", "p1"):
            theirs = node.run("getJobScheduler", schedulerId=scheduler_id)
            assert q.get_job_scheduler(scheduler_id).as_dict() == theirs
        assert [s.as_dict() for s in q.get_job_schedulers(asc=True)] == node.run("getJobSchedulers", asc=True)
        assert q.get_job_schedulers_count() == node.run("getJobSchedulersCount") == 2
        nxt = q.get_job_scheduler("p1").next
        assert nxt == next_run("0 9 * * 1-5", nxt - 1, "Europe/Paris")
        assert node.run("removeJobScheduler", schedulerId="p1") is True
        assert q.remove_job_scheduler("n1") is True
        assert q.remove_job_scheduler("n1") is False
        assert node.run("getJobSchedulersCount") == 0

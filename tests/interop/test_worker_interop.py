"""Our ``Worker`` (in its own gevent-patched process) beside the real Node ``bullmq@6.7.0``.

Node produces and watches, our worker processes; both workers share one queue; a worker
of either kind that dies holding a job is recovered by the other's stalled check.
"""
from __future__ import annotations

import json
import time

import pytest

from echomq_gevent.protocol.keys import QueueKeys
from interop_helpers import (
    COUNT_TYPES,
    dump_queue,
    event_names,
    now_ms,
    wait_blocked_on_marker,
)

pytestmark = pytest.mark.interop


def test_node_producer_our_worker_node_observers(node):
    events = node.events()
    added = node.batch(
        {"cmd": "add", "name": "echo", "data": {"v": 1, "s": "é"}, "opts": {"removeOnFail": 5}},
        {"cmd": "add", "name": "flaky", "data": {"v": 2},
         "opts": {"attempts": 3, "backoff": {"type": "fixed", "delay": 100}}},
        {"cmd": "add", "name": "none", "data": {"v": 3}, "opts": {"priority": 2}},
        {"cmd": "add", "name": "doomed", "data": {"v": 4}, "opts": {"attempts": 2}},
    )
    ids = {job["name"]: job["id"] for job in added}
    ours = node.python_worker(
        workerOpts={"concurrency": 2, "drain_delay": 1, "name": "py-w1"}, stopAfter=4,
        behaviour={"returnData": True},
        byName={"flaky": {"failTimes": 2, "return": {"third": "time"}},
                "none": {"progress": [10, {"p": "x"}]},
                "doomed": {"failTimes": 99, "failMessage": "always broken"}})
    ours.wait_event("exit", timeout=30)
    assert not ours.events("error"), ours.describe()

    # Our processor saw the jobs exactly as Node's Job describes them.
    for name, job_id in ids.items():
        theirs = node.run("getJob", jobId=job_id)
        first = next(ln for ln in ours.events("process") if ln["jobId"] == job_id)["job"]
        for field in ("id", "name", "data", "opts", "timestamp", "delay", "priority"):
            assert first[field] == theirs[field], f"job {name}: {field} differs"
        assert first["attemptsMade"] == 0 and first["attemptsStarted"] == 1
        assert theirs["processedBy"] == "py-w1"
        assert theirs["finishedOn"] and theirs["finishedOn"] >= theirs["processedOn"]

    echo, flaky, none, doomed = (node.run("getJob", jobId=ids[n])
                                 for n in ("echo", "flaky", "none", "doomed"))
    assert echo["returnvalue"] == {"v": 1, "s": "é"} and echo["attemptsMade"] == 1
    assert flaky["returnvalue"] == {"third": "time"}
    assert (flaky["attemptsMade"], flaky["attemptsStarted"]) == (3, 3)
    assert flaky["failedReason"] == "planned failure 2" and len(flaky["stacktrace"]) == 2
    assert none["returnvalue"] is None and none["progress"] == {"p": "x"}
    assert doomed["failedReason"] == "always broken" and doomed["attemptsMade"] == 2
    counts = node.run("counts", types=COUNT_TYPES)
    assert (counts["completed"], counts["failed"], counts["waiting"]) == (3, 1, 0)

    # Node's QueueEvents decoded the whole run without an error.
    events.wait_event("drained", timeout=10)
    events.wait_for(lambda ln: ln.get("event") == "retries-exhausted", timeout=10,
                    what="retries-exhausted of the doomed job")
    lines = events.snapshot()
    assert "error" not in event_names(lines), events.describe()
    completed = {ln["args"]["jobId"]: ln["args"]["returnvalue"] for ln in lines
                 if ln["event"] == "completed"}
    assert completed == {ids["echo"]: {"v": 1, "s": "é"}, ids["flaky"]: {"third": "time"},
                         ids["none"]: None}
    failed = [ln["args"] for ln in lines if ln["event"] == "failed"]
    assert failed == [{"jobId": ids["doomed"], "failedReason": "always broken", "prev": "active"}]
    progress = [ln["args"]["data"] for ln in lines if ln["event"] == "progress"]
    assert progress == [10, {"p": "x"}]
    # Retries with a backoff went through `delayed`, without one through `waiting`.
    flaky_delays = [ln for ln in lines if ln["event"] == "delayed"
                    and ln["args"]["jobId"] == ids["flaky"]]
    assert len(flaky_delays) == 2


def test_node_wait_until_finished_on_our_worker(node):
    job = node.run("add", name="w", data={"x": 2})
    waiter = node.spawn("waitUntilFinished", jobId=job["id"], ttl=20000)
    node.python_worker(workerOpts={"drain_delay": 1}, stopAfter=1,
                       behaviour={"return": {"doubled": 4}})
    line = waiter.wait_for(lambda ln: "ok" in ln, timeout=20, what="waitUntilFinished's answer")
    assert line.get("ok") is True, waiter.describe()
    assert line["result"] == {"returnvalue": {"doubled": 4}, "undefined": False}


def test_our_blocked_worker_wakes_for_node_jobs(node, r, prefix, qname):
    """Markers the other way: Node's add wakes our worker blocked with a long drain delay."""
    ours = node.python_worker(workerOpts={"drain_delay": 8}, stopAfter=2,
                              behaviour={"return": 1})
    wait_blocked_on_marker(r, prefix, qname)
    job = node.run("add", name="now", data={})
    line = ours.wait_event("process", timeout=10, jobId=job["id"])
    # From Node's own add time. Without the marker wake-up the worker would sleep out its
    # 8 s drain delay, so half of it tells the two apart however loaded the machine is.
    latency = line["t"] - job["timestamp"]
    assert latency < 4000, f"our worker took Node's job after {latency} ms (drain delay 8000 ms)"
    wait_blocked_on_marker(r, prefix, qname)
    delayed = node.run("add", name="later", data={}, opts={"delay": 1500})
    due = delayed["timestamp"] + 1500
    line = ours.wait_event("process", timeout=12, jobId=delayed["id"])
    processed_on = line["job"]["processedOn"]
    assert due - 2 <= processed_on < due + 4000, (
        f"Node's delayed job ran at due{processed_on - due:+d} ms (drain delay 8000 ms)")


def test_node_pause_stops_our_worker_and_resume_restarts_it(node, queue):
    ours = node.python_worker(workerOpts={"drain_delay": 1}, stopAfter=2, behaviour={"return": 1})
    first = node.run("add", name="a", data={})
    ours.wait_event("completed", timeout=10, jobId=first["id"])
    node.run("pause")
    held = node.run("add", name="b", data={})
    # A negative needs time: more than two drain-delay cycles without taking the job.
    with pytest.raises(AssertionError):
        ours.wait_event("process", timeout=2.5, jobId=held["id"])
    assert queue.get_job_state(held["id"]) == "waiting"
    resumed_at = now_ms()
    node.run("resume")
    line = ours.wait_event("process", timeout=5, jobId=held["id"])
    assert line["t"] - resumed_at < 1500


def test_our_worker_and_a_node_worker_share_5000_jobs_exactly_once(node, queue, r, prefix, qname):
    total = 5000
    for start in range(0, total, 1000):
        node.run("addBulk", jobs=[{"name": "n", "data": {"i": i}}
                                  for i in range(start, start + 1000)])
    events = node.events()  # from here on: active/completed of every job, decoded by Node
    ours = node.python_worker(workerOpts={"concurrency": 50, "drain_delay": 1},
                              behaviour={"returnData": True})
    theirs = node.worker(workerOpts={"concurrency": 50, "drainDelay": 1},
                         behaviour={"returnData": True})
    deadline = time.monotonic() + 120
    counts = {}
    while time.monotonic() < deadline:
        counts = queue.get_job_counts("completed", "waiting", "active", "failed")
        if counts["completed"] == total:
            break
        time.sleep(0.1)
    assert counts.get("completed") == total, f"not all {total} jobs completed in time: {counts}"
    ours.stop()
    theirs.stop()
    by_us = [ln["jobId"] for ln in ours.events("process")]
    by_node = [ln["jobId"] for ln in theirs.events("process")]
    assert len(set(by_us)) == len(by_us), "our worker ran some job twice"
    assert len(set(by_node)) == len(by_node), "the Node worker ran some job twice"
    assert not set(by_us) & set(by_node), "a job ran in both workers"
    assert len(by_us) + len(by_node) == total
    assert by_us and by_node, f"one worker got nothing: ours {len(by_us)}, Node {len(by_node)}"
    keys = QueueKeys(qname, prefix)
    pipe = r.pipeline(transaction=False)
    for i in range(1, total + 1):
        pipe.hmget(keys.job(str(i)), "ats", "atm")
    assert set(map(tuple, pipe.execute())) == {("1", "1")}
    assert queue.get_job_counts("failed", "active", "waiting") == {"failed": 0, "active": 0,
                                                                   "waiting": 0}
    # Node's QueueEvents decoded every completion, whichever worker wrote it.
    deadline = time.monotonic() + 30
    while len(events.events("completed")) < total and time.monotonic() < deadline:
        time.sleep(0.05)
    completed = events.events("completed")
    assert not events.events("error"), events.describe()
    assert sorted(int(ln["args"]["jobId"]) for ln in completed) == list(range(1, total + 1))
    assert all(ln["args"]["returnvalue"] == {"i": int(ln["args"]["jobId"]) - 1}
               for ln in completed)


def test_node_worker_crash_is_recovered_by_our_worker(node, queue, r, prefix, qname):
    """A Node worker dies holding a job; our stalled check gives it back and we run it.

    The dying workers skip stall checks: a check sets `stalled-check` for its own interval,
    which would (correctly) keep the rescuer from checking for that long."""
    events = node.events()
    job = node.run("add", name="c", data={"c": 1})
    dying = node.worker(workerOpts={"lockDuration": 1000, "drainDelay": 1,
                                    "skipStalledCheck": True},
                        behaviour={"crash": True})
    dying.wait_event("process", timeout=10, jobId=job["id"])
    dying.proc.wait(10)
    ours = node.python_worker(workerOpts={"stalled_interval": 500, "lock_duration": 1000,
                                          "drain_delay": 1},
                              stopAfter=1, behaviour={"return": "recovered"})
    done = ours.wait_event("completed", timeout=15, jobId=job["id"])
    assert done["result"] == "recovered"
    assert done["job"]["stalledCounter"] == 1
    events.wait_event("stalled", timeout=10)
    theirs = node.run("getJob", jobId=job["id"])
    assert (theirs["stalledCounter"], theirs["attemptsStarted"]) == (1, 2)
    assert theirs["returnvalue"] == "recovered"


def test_our_worker_crash_is_recovered_by_a_node_worker(node, queue):
    job = queue.add("c", {"c": 2})
    dying = node.python_worker(workerOpts={"lock_duration": 1000, "drain_delay": 1,
                                           "skip_stalled_check": True},
                               behaviour={"crash": True}, ready=False)
    dying.wait_event("process", timeout=15, jobId=job.id)
    dying.proc.wait(10)
    theirs = node.worker(workerOpts={"stalledInterval": 500, "lockDuration": 1000,
                                     "drainDelay": 1},
                         stopAfter=1, behaviour={"return": "rescued"})
    stalled = theirs.wait_event("stalled", timeout=15)
    assert stalled["jobId"] == job.id
    done = theirs.wait_event("completed", timeout=15, jobId=job.id)
    assert done["job"]["stalledCounter"] == 1
    back = queue.get_job(job.id)
    assert back.returnvalue == "rescued" and back.stalled_counter == 1


def test_our_worker_fails_a_job_stalled_too_often_without_running_it(node, queue):
    """Our stall check (max_stalled_count 0) marks Node's dead job with `defa`; our worker then
    fails it without running the processor, as BullMQ does."""
    job = node.run("add", name="s", data={})
    dying = node.worker(workerOpts={"lockDuration": 1000, "drainDelay": 1,
                                    "skipStalledCheck": True},
                        behaviour={"crash": True})
    dying.wait_event("process", timeout=10, jobId=job["id"])
    dying.proc.wait(10)
    checker = node.python_worker(workerOpts={"stalled_interval": 500, "lock_duration": 1000,
                                             "max_stalled_count": 0, "drain_delay": 1},
                                 behaviour={"return": "must not run"}, stopAfter=1)
    failed = checker.wait_event("failed", timeout=15, jobId=job["id"])
    assert failed["error"] == "job stalled more than allowable limit"
    assert not [ln for ln in checker.events("process") if ln["jobId"] == job["id"]]
    theirs = node.run("getJob", jobId=job["id"])
    assert theirs["failedReason"] == "job stalled more than allowable limit"
    assert node.run("getState", jobId=job["id"]) == "failed"


def _node_stall_check_until(node, job_id, timeout=15.0):
    """Run Node stall checks (maxStalledCount 0) until one reports ``job_id`` stalled."""
    deadline = time.monotonic() + timeout
    while True:
        found = node.run("stalledCheck", workerOpts={"maxStalledCount": 0,
                                                     "stalledInterval": 50})
        if job_id in found:
            return
        assert time.monotonic() < deadline, f"Node's stall check never found job {job_id}"
        time.sleep(0.1)


def test_node_stall_check_defers_failure_that_our_worker_applies(node, queue):
    """Our worker dies holding a job; a Node stall check (maxStalledCount 0) marks it `defa`;
    our next worker fails it at once, without running the processor."""
    job = queue.add("s", {"s": 1})
    dying = node.python_worker(workerOpts={"lock_duration": 1000, "drain_delay": 1,
                                           "skip_stalled_check": True},
                               behaviour={"crash": True}, ready=False)
    dying.wait_event("process", timeout=15, jobId=job.id)
    dying.proc.wait(10)
    _node_stall_check_until(node, job.id)
    back = queue.get_job(job.id)
    assert back.deferred_failure == "job stalled more than allowable limit"
    assert back.stalled_counter == 1 and queue.get_job_state(job.id) == "waiting"
    ours = node.python_worker(workerOpts={"drain_delay": 1, "skip_stalled_check": True},
                              behaviour={"return": "must not run"}, stopAfter=1)
    failed = ours.wait_event("failed", timeout=15, jobId=job.id)
    assert failed["error"] == "job stalled more than allowable limit"
    assert not ours.events("process")
    theirs = node.run("getJob", jobId=job.id)
    assert theirs["failedReason"] == "job stalled more than allowable limit"
    assert theirs.get("deferredFailure") is None
    assert node.run("getState", jobId=job.id) == "failed"


# ---------------------------------------------------------------------------------------
# Twin runs: the same jobs through a Node worker and through ours leave the same Redis
# ---------------------------------------------------------------------------------------

TWIN_TS = 1795965485578

TWIN_JOBS = [
    # (name, data, opts, behaviour)
    ("obj", {"i": 1}, {}, {"return": {"r": [1, "é", None]}}),
    ("none", {"i": 2}, {}, {}),
    ("progress-logs", {"i": 3}, {"keepLogs": 2},
     {"progress": [5, {"p": 1}], "log": ["a", "b", "c"], "return": 3}),
    ("retry-now", {"i": 4}, {"attempts": 2}, {"failTimes": 1, "return": "second"}),
    ("exhausted", {"i": 5}, {"attempts": 2}, {"failTimes": 9, "failMessage": "no luck"}),
    ("unrecoverable", {"i": 6}, {"attempts": 5}, {"unrecoverable": True, "failMessage": "fatal"}),
    ("gone-ok", {"i": 7}, {"removeOnComplete": True}, {"return": 1}),
    ("gone-fail", {"i": 8}, {"removeOnFail": True}, {"failTimes": 1}),
    ("keep-one", {"i": 9}, {"removeOnComplete": 1}, {"return": 9}),
    # keep-one-b must finish in a later millisecond than keep-one: completed-set scores are
    # finishedOn, and a tie would keep whichever id sorts last, in Node as in ours.
    ("keep-one-b", {"i": 10}, {"removeOnComplete": 1}, {"sleepMs": 5, "return": 10}),
    ("prio", {"i": 11}, {"priority": 3}, {"return": "p"}),
    # immediate retries keep their place rules: LIFO back to the front, priority by a new pc
    ("lifo-retry", {"i": 14}, {"lifo": True, "attempts": 2}, {"failTimes": 1, "return": "l"}),
    ("prio-retry", {"i": 15}, {"priority": 2, "attempts": 2}, {"failTimes": 1, "return": "q"}),
    # stackTraceLimit keeps only the newest traces
    ("trace-limit", {"i": 16}, {"attempts": 3, "stackTraceLimit": 1}, {"failTimes": 9}),
    # a backoff long enough that the jobs queued behind it always run first
    ("backoff", {"i": 12}, {"attempts": 2, "backoff": 600}, {"failTimes": 1, "return": "late"}),
    # the processor postpones itself (due well before job 12's retry), no attempt counted
    ("self-delayed", {"i": 13}, {}, {"delayOnceMs": 250, "return": "after"}),
]

#: Keys whose content depends on when checks and waits happened, not on what the
#: worker did: stall-check bookkeeping, the wake-up marker and the limiter window (which
#: expires on its own; its count is compared right after each run instead).
_TIMING_KEYS = ("stalled-check", "stalled", "marker", "limiter")


def _normalised_dump(r, keys):
    """dump_queue without times, tokens and stack text (which differ by runtime)."""
    out = {}
    for suffix, (kind, value) in dump_queue(r, keys).items():
        if suffix in _TIMING_KEYS:
            continue
        if kind == "hash" and "name" in value and "opts" in value:
            value = dict(value)
            for field in ("processedOn", "finishedOn"):
                if field in value:
                    value[field] = "<time>"
            if "stacktrace" in value:
                value["stacktrace"] = f"<{len(json.loads(value['stacktrace']))} traces>"
        elif kind == "zset" and suffix in ("completed", "failed"):
            value = sorted(member for member, _score in value)
        elif kind == "stream":
            value = [dict(f, delay="<due>") if f.get("event") == "delayed" else f
                     for f in value if f.get("event") != "drained"]
        out[suffix] = (kind, value)
    return out


def _twin_run(node, r, prefix, qname, jobs, worker_opts=None, py_worker_opts=None):
    """Add ``jobs`` (by Node) to two queues, process one with a Node worker and the other
    with ours (concurrency 1 both), and compare the queues key by key."""
    node_q, our_q = qname + "n", qname + "p"
    by_name = {name: how for name, _d, _o, how in jobs}
    for q in (node_q, our_q):
        node.run("addBulk", queue=q,
                 jobs=[{"name": n, "data": d, "opts": dict(o, timestamp=TWIN_TS)}
                       for n, d, o, _how in jobs])
    theirs = node.spawn("worker", queue=node_q,
                        workerOpts=dict({"drainDelay": 1, "concurrency": 1}, **(worker_opts or {})),
                        byName=by_name, stopAfter=len(jobs))
    theirs.wait_event("exit", timeout=30)
    node_limiter = r.get(QueueKeys(node_q, prefix).limiter)
    ours = node.python_worker(queue=our_q, byName=by_name, stopAfter=len(jobs),
                              workerOpts=dict({"drain_delay": 1, "concurrency": 1},
                                              **(py_worker_opts or {})))
    ours.wait_event("exit", timeout=30)
    assert r.get(QueueKeys(our_q, prefix).limiter) == node_limiter, "limiter counts differ"
    assert not ours.events("error") and not theirs.events("error"), ours.describe()

    node_dump = _normalised_dump(r, QueueKeys(node_q, prefix))
    our_dump = _normalised_dump(r, QueueKeys(our_q, prefix))
    # Per key first, so a difference names the key.
    for suffix in sorted(set(node_dump) | set(our_dump)):
        assert our_dump.get(suffix) == node_dump.get(suffix), f"key {suffix!r} differs"


def test_our_worker_leaves_the_same_redis_as_a_node_worker(node, r, prefix, qname):
    _twin_run(node, r, prefix, qname, TWIN_JOBS)


def test_manual_rate_limit_leaves_the_same_redis_as_node(node, r, prefix, qname):
    """worker.rate_limit + RateLimitError: the job goes back to the front and runs again
    after the limit, in Node as in ours."""
    jobs = [("limited", {"i": 1}, {}, {"rateLimitOnceMs": 300, "return": "again"}),
            ("next", {"i": 2}, {}, {"return": "next"})]
    _twin_run(node, r, prefix, qname, jobs)


def test_limiter_and_removal_policies_leave_the_same_redis_as_node(node, r, prefix, qname):
    """Worker-level keep policies (removeOnComplete/removeOnFail as worker options), a worker
    limiter and a worker name (stored as `pb`), each side with its own spelling of the
    options."""
    jobs = [("a", {"i": 1}, {}, {"return": 1}),
            ("b", {"i": 2}, {}, {"failTimes": 1, "failMessage": "b failed"}),
            ("c", {"i": 3}, {}, {"sleepMs": 5, "return": 3}),
            ("d", {"i": 4}, {"removeOnComplete": False}, {"return": 4}),
            ("e", {"i": 5}, {}, {"sleepMs": 5, "failTimes": 1})]
    _twin_run(node, r, prefix, qname, jobs,
              worker_opts={"removeOnComplete": {"count": 1}, "removeOnFail": {"count": 1},
                           "limiter": {"max": 10, "duration": 1000}, "name": "twin"},
              py_worker_opts={"remove_on_complete": {"count": 1}, "remove_on_fail": {"count": 1},
                              "limiter": {"max": 10, "duration": 1000}, "name": "twin"})


# ---------------------------------------------------------------------------------------
# Shared worker rate limiter and worker discovery
# ---------------------------------------------------------------------------------------

def test_idle_workers_of_both_kinds_wake_for_every_job_added_one_at_a_time(node, queue, r, prefix, qname,
                                                                            wait_for):
    """Jobs that come one by one into a queue whose workers (ours and Node's) are idle: each
    is taken within a moment of its add, never after a drain delay. A fetch that finds the
    queue empty removes the base marker the last pick-up left (docs/protocol.md); were it to
    remove one a job still needed, that job would wait for a worker's 10 s drain delay."""
    ours = node.python_worker(workerOpts={"concurrency": 1, "drain_delay": 10},
                              behaviour={"returnData": True})
    theirs = node.worker(workerOpts={"concurrency": 1, "drainDelay": 10},
                         behaviour={"returnData": True})
    wait_blocked_on_marker(r, prefix, qname, timeout=20, count=2)
    ids = []
    for i in range(30):
        ids.append(queue.add("one", {"i": i}).id)
        time.sleep(0.03 if i % 3 else 0.2)  # some jobs find both workers idle, some one busy
    keys = QueueKeys(qname, prefix)
    wait_for(lambda: r.zcard(keys.completed) == len(ids), timeout=30, what="every job to complete",
             details=lambda: str(dump_queue(r, keys)))
    ours.stop()
    theirs.stop()
    waits = {}
    for job_id in ids:
        created, started = r.hmget(keys.job(job_id), "timestamp", "processedOn")
        waits[job_id] = int(started) - int(created)
    assert max(waits.values()) < 3000, waits  # far from the 10 s a lost wake-up would cost
    by_us = [ln["jobId"] for ln in ours.events("process")]
    by_node = [ln["jobId"] for ln in theirs.events("process")]
    assert sorted(by_us + by_node, key=int) == sorted(ids, key=int)  # each ran once


def test_worker_limiter_is_shared_between_node_and_our_worker(node, queue):
    """Both workers limit to 2 jobs per 1000 ms through the one `limiter` key: 6 jobs need
    three windows, whoever takes them."""
    for i in range(6):
        queue.add("r", {"i": i})
    ours = node.python_worker(workerOpts={"drain_delay": 1, "concurrency": 3,
                                          "limiter": {"max": 2, "duration": 1000}})
    theirs = node.worker(workerOpts={"drainDelay": 1, "concurrency": 3,
                                     "limiter": {"max": 2, "duration": 1000}},
                         behaviour={"return": 1})
    deadline = time.monotonic() + 20
    while queue.get_job_counts("completed")["completed"] < 6:
        assert time.monotonic() < deadline, f"jobs left: {queue.get_job_counts()}"
        time.sleep(0.05)
    starts = sorted(job.processed_on for job in queue.get_jobs(["completed"]))
    # Jobs 1-2 in the first window, 3-4 in the second, 5-6 in the third (>= 2 s later).
    assert starts[4] - starts[0] >= 1900, f"the shared limiter let jobs through too fast: {starts}"
    assert ours.events("process") or theirs.events("process")


def test_workers_see_each_other_in_get_workers(node, queue, qname):
    node.python_worker(workerOpts={"drain_delay": 1, "name": "py-one"})
    node.worker(workerOpts={"drainDelay": 1, "name": "node-one"})
    seen_by_node = sorted(w["rawname"] for w in node.run("getWorkers"))
    seen_by_us = sorted(w["rawname"] for w in queue.get_workers())
    assert seen_by_node == seen_by_us
    assert any(n.endswith(":w:py-one") for n in seen_by_node), seen_by_node
    assert any(n.endswith(":w:node-one") for n in seen_by_node), seen_by_node


def test_jobs_our_worker_hands_back_at_shutdown_are_finished_by_node(node, queue):
    """Shutdown deadline passes with jobs in flight: ours hands them back to the front of
    `wait` (no attempt counted) and a Node worker completes them, once."""
    events = node.events()
    jobs = [queue.add("slow", {"i": i}) for i in range(2)]
    ours = node.python_worker(workerOpts={"drain_delay": 1, "concurrency": 2,
                                          "shutdown_timeout": 0.3},
                              behaviour={"sleepMs": 3000, "return": "ours"})
    for job in jobs:
        ours.wait_event("process", timeout=10, jobId=job.id)
    ours.send("stop")
    ours.wait_event("exit", timeout=15)
    assert sorted(ln["jobId"] for ln in ours.events("handed_back")) == sorted(j.id for j in jobs)
    assert not ours.events("completed")
    for job in jobs:
        assert node.run("getState", jobId=job.id) == "waiting"
    theirs = node.worker(workerOpts={"drainDelay": 1, "concurrency": 2}, stopAfter=2,
                         behaviour={"return": "node"})
    theirs.wait_event("exit", timeout=15)
    for job in jobs:
        back = queue.get_job(job.id)
        assert (back.returnvalue, back.attempts_made, back.attempts_started) == ("node", 1, 2)
        assert queue.get_job_state(job.id) == "completed"
    handed = [ln["args"] for ln in events.snapshot()
              if ln["event"] == "waiting" and ln["args"].get("prev") == "active"]
    assert sorted(a["jobId"] for a in handed) == sorted(j.id for j in jobs)
    assert "error" not in event_names(events.snapshot())


def test_deduplication_across_producers_and_our_worker(node, queue, r, prefix, qname):
    """Simple-mode deduplication: while a job owns the id, adds from either side are dropped;
    once our worker finishes it, the id is free again for Node."""
    keys = QueueKeys(qname, prefix)
    events = node.events()
    first = node.run("add", name="d", data={"n": 1}, opts={"deduplication": {"id": "dd"}})
    again = node.run("add", name="d", data={"n": 2}, opts={"deduplication": {"id": "dd"}})
    ours = queue.add("d", {"n": 3}, {"deduplication": {"id": "dd"}})
    assert again["id"] == first["id"] and ours.id == first["id"]
    assert r.get(keys.dedup("dd")) == first["id"]
    assert queue.get_job_counts("waiting") == {"waiting": 1}
    worker = node.python_worker(workerOpts={"drain_delay": 1}, stopAfter=1,
                                behaviour={"returnData": True})
    done = worker.wait_event("completed", timeout=10, jobId=first["id"])
    assert done["result"] == {"n": 1}
    worker.wait_event("exit", timeout=10)
    assert not r.exists(keys.dedup("dd")), "finishing the owner must free the deduplication id"
    later = node.run("add", name="d", data={"n": 4}, opts={"deduplication": {"id": "dd"}})
    assert later["id"] != first["id"]
    assert r.get(keys.dedup("dd")) == later["id"]
    events.wait_for(lambda ln: ln.get("event") == "added" and ln["args"]["jobId"] == later["id"],
                    timeout=10, what="the added event of the job after deduplication")
    dropped = [ln["args"] for ln in events.snapshot() if ln["event"] == "deduplicated"]
    assert [d["deduplicationId"] for d in dropped] == ["dd", "dd"]
    assert all(d["jobId"] == first["id"] for d in dropped)
    assert "error" not in event_names(events.snapshot())


def test_node_job_admin_on_our_jobs_then_our_worker(node, queue, r, prefix, qname):
    """Node's retry/changePriority/changeDelay rewrite our jobs with Node's own scripts; our
    worker then runs them correctly (and wakes for the changed delay marker)."""
    failing = queue.add("f", {"i": 1})
    ours = node.python_worker(workerOpts={"drain_delay": 8},
                              byName={"f": {"failTimes": 1, "failMessage": "first try"},
                                      "p": {"return": "p"}, "d": {"return": "d"}},
                              behaviour={"return": "other"})
    ours.wait_event("failed", timeout=10, jobId=failing.id)
    # Node retries the failed job: reprocessJob clears finishedOn/failedReason and requeues.
    node.run("retry", jobId=failing.id)
    ours.wait_event("completed", timeout=5, jobId=failing.id)
    # job.retry() keeps the attempt counters (no reset asked) and deletes failedReason.
    second = [ln["job"] for ln in ours.events("process") if ln["jobId"] == failing.id][1]
    assert (second["attemptsMade"], second["attemptsStarted"]) == (1, 2)
    assert second["failedReason"] is None and second["finishedOn"] is None
    back = queue.get_job(failing.id)
    assert (back.attempts_made, back.failed_reason, back.returnvalue) == (2, None, None)

    # Node moves a long-delayed job of ours to 1 s from now: our blocked worker takes the
    # new delay marker and runs it then, not at the old due time or a drain-delay boundary.
    delayed = queue.add("d", {}, {"delay": 120000})
    wait_blocked_on_marker(r, prefix, qname)
    changed_at = now_ms()
    node.run("changeDelay", jobId=delayed.id, delay=1000)
    line = ours.wait_event("process", timeout=8, jobId=delayed.id)
    early_late = line["job"]["processedOn"] - (changed_at + 1000)
    # Node computes the new due time when its command runs (after changed_at); a worker
    # that missed the marker would wait for its 8 s drain delay instead.
    assert -50 <= early_late < 4000, f"changed delayed job ran at due{early_late:+d} ms (drain delay 8000 ms)"

    # Node re-prioritises waiting jobs of ours while the worker is held by the queue pause.
    queue.pause()
    a = queue.add("p", {"n": "a"}, {"priority": 5})
    b = queue.add("p", {"n": "b"}, {"priority": 5})
    c = queue.add("p", {"n": "c"})
    node.run("changePriority", jobId=b.id, priority=1)
    node.run("changePriority", jobId=c.id, priority=9)
    start = ours.mark()
    queue.resume()
    for job in (b, a, c):
        ours.wait_event("completed", timeout=5, jobId=job.id, start=start)
    order = [ln["jobId"] for ln in ours.snapshot()[start:] if ln.get("event") == "process"]
    assert order == [b.id, a.id, c.id], f"priorities changed by Node not honoured: {order}"


# ---------------------------------------------------------------------------------------
# Flows made by Node's FlowProducer, processed by our worker
# ---------------------------------------------------------------------------------------

def _flow(qname, parent_opts=None, children=()):
    return {"name": "parent", "queueName": qname, "data": {"p": 1}, "opts": parent_opts or {},
            "children": [{"name": name, "queueName": qname, "data": data, "opts": opts}
                         for name, data, opts in children]}


def test_node_flow_runs_children_then_parent_on_our_worker(node, queue, qname):
    tree = node.run("flow", tree=_flow(qname, children=[("c1", {"c": 1}, {}),
                                                         ("c2", {"c": 2}, {"priority": 2})]))
    parent_id = tree["id"]
    child_ids = [c["id"] for c in tree["children"]]
    assert queue.get_job_state(parent_id) == "waiting-children"
    ours = node.python_worker(workerOpts={"drain_delay": 1}, stopAfter=3,
                              behaviour={"returnData": True})
    ours.wait_event("exit", timeout=20)
    order = [ln["jobId"] for ln in ours.events("process")]
    assert sorted(order[:2]) == sorted(child_ids) and order[2] == parent_id, order
    values = node.run("getChildrenValues", jobId=parent_id)
    assert values == {f"{node.prefix}:{qname}:{cid}": {"c": i + 1}
                      for i, cid in enumerate(child_ids)}
    assert node.run("getDependenciesCount", jobId=parent_id) == {
        "processed": 2, "unprocessed": 0, "failed": 0, "ignored": 0}
    assert queue.get_job_state(parent_id) == "completed"


@pytest.mark.parametrize("policy", ["failParentOnFailure", "ignoreDependencyOnFailure"])
def test_node_flow_child_failure_policies_on_our_worker(node, queue, qname, policy):
    tree = node.run("flow", tree=_flow(qname, children=[
        ("bad", {"c": 1}, {policy: True}), ("good", {"c": 2}, {})]))
    parent_id = tree["id"]
    bad_id, good_id = (c["id"] for c in tree["children"])
    bad_key = f"{node.prefix}:{qname}:{bad_id}"
    ours = node.python_worker(workerOpts={"drain_delay": 1}, stopAfter=3,
                              byName={"bad": {"failTimes": 9, "failMessage": "child broke"}},
                              behaviour={"return": "fine"})
    ours.wait_event("exit", timeout=20)
    parent = node.run("getJob", jobId=parent_id)
    ran_parent = [ln for ln in ours.events("process") if ln["jobId"] == parent_id]
    if policy == "failParentOnFailure":
        # The parent fails at once with the deferred reason; its processor never runs.
        assert node.run("getState", jobId=parent_id) == "failed"
        assert parent["failedReason"] == f"child {bad_key} failed"
        assert not ran_parent
    else:
        # The failure is recorded and the parent still runs once the other child is done.
        assert node.run("getState", jobId=parent_id) == "completed"
        assert parent["returnvalue"] == "fine" and len(ran_parent) == 1
        assert node.run("getFailedChildrenValues", jobId=parent_id) == {bad_key: "child broke"}
    assert node.run("getState", jobId=bad_id) == "failed"
    assert node.run("getState", jobId=good_id) == "completed"


def test_node_keep_last_if_active_job_is_created_when_our_worker_finishes(node, queue, r,
                                                                         prefix, qname):
    """A Node producer stores the "next" job of an active deduplication owner in `dn:<id>`;
    finishing the owner on our worker creates it, and our worker runs it."""
    # QueueKeys has no builder for the stored-next-job hash; BullMQ names it dn:<id>.
    next_key = QueueKeys(qname, prefix).base + "dn:kl"
    dedup = {"id": "kl", "keepLastIfActive": True}
    owner = node.run("add", name="o", data={"v": 1}, opts={"deduplication": dedup})
    ours = node.python_worker(workerOpts={"drain_delay": 1}, stopAfter=2,
                              byName={"o": {"sleepMs": 2500, "return": "owner"}},
                              behaviour={"returnData": True})
    ours.wait_event("process", timeout=10, jobId=owner["id"])
    node.batch({"cmd": "add", "name": "n", "data": {"v": 2}, "opts": {"deduplication": dedup}})
    last = node.run("add", name="n", data={"v": 3}, opts={"deduplication": dedup})
    assert queue.get_job_state(owner["id"]) == "active", "the owner finished too early"
    assert last["id"] == owner["id"]  # deduplicated while the owner runs
    assert r.hget(next_key, "data") == '{"v":3}', "Node stores the last one"
    ours.wait_event("exit", timeout=15)
    done = ours.events("completed")
    assert [d["result"] for d in done] == ["owner", {"v": 3}]
    assert done[1]["jobId"] != owner["id"]
    assert not r.exists(next_key)


# ---------------------------------------------------------------------------------------
# Locks: a long job keeps its lock against the other side's stall checks
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("how", [{"sleepMs": 3000}, {"busyMs": 3000}], ids=["sleeping", "hub-hog"])
def test_our_long_job_keeps_its_lock_against_node_stall_checks(node, queue, how):
    """lock_duration 1 s, job 3 s: our renewals (from a native thread, so even a job that
    hogs the hub) keep Node's frequent stall checks from taking it."""
    events = node.events()
    job = queue.add("long", {})
    ours = node.python_worker(workerOpts={"drain_delay": 1, "lock_duration": 1000},
                              stopAfter=1, behaviour=dict(how, **{"return": "kept"}))
    ours.wait_event("process", timeout=10, jobId=job.id)
    checker = node.worker(workerOpts={"stalledInterval": 300, "lockDuration": 1000,
                                      "drainDelay": 1}, behaviour={"return": "stolen"})
    ours.wait_event("completed", timeout=15, jobId=job.id)
    assert not checker.events("stalled") and not checker.events("process"), checker.describe()
    assert "stalled" not in event_names(events.snapshot())
    back = queue.get_job(job.id)
    assert (back.returnvalue, back.stalled_counter, back.attempts_started) == ("kept", 0, 1)
    assert not ours.events("lock_lost")


def test_node_long_job_keeps_its_lock_against_our_stall_checks(node, queue):
    job = queue.add("long", {})
    theirs = node.worker(workerOpts={"drainDelay": 1, "lockDuration": 1000}, stopAfter=1,
                         behaviour={"sleepMs": 3000, "return": "kept"})
    theirs.wait_event("process", timeout=10, jobId=job.id)
    ours = node.python_worker(workerOpts={"stalled_interval": 300, "lock_duration": 1000,
                                          "drain_delay": 1}, behaviour={"return": "stolen"})
    theirs.wait_event("completed", timeout=15, jobId=job.id)
    assert not ours.events("stalled") and not ours.events("process"), ours.describe()
    back = queue.get_job(job.id)
    assert (back.returnvalue, back.stalled_counter, back.attempts_started) == ("kept", 0, 1)


# ---------------------------------------------------------------------------------------
# Ordering, global limits on our worker, large payloads
# ---------------------------------------------------------------------------------------

def test_mixed_producers_priority_and_fifo_order(node, queue):
    """Standard jobs first (FIFO, LIFO in front), then priorities ascending, FIFO within one
    priority, whoever added them: the same order for a Node worker and ours."""
    plan = [("node", "p2-a", {"priority": 2}), ("ours", "std-1", {}),
            ("ours", "p2-b", {"priority": 2}), ("node", "p1-c", {"priority": 1}),
            ("node", "std-2", {}), ("ours", "p2-d", {"priority": 2}),
            ("ours", "lifo-3", {"lifo": True}), ("node", "p1-e", {"priority": 1})]
    expected = ["lifo-3", "std-1", "std-2", "p1-c", "p1-e", "p2-a", "p2-b", "p2-d"]

    def fill():
        for who, name, opts in plan:
            if who == "node":
                node.run("add", name=name, data={}, opts=opts)
            else:
                queue.add(name, {}, opts)

    queue.pause()
    fill()
    queue.resume()
    theirs = node.worker(workerOpts={"drainDelay": 1}, stopAfter=len(plan),
                         behaviour={"return": 1})
    theirs.wait_event("exit", timeout=20)
    assert [ln["job"]["name"] for ln in theirs.events("process")] == expected

    queue.pause()
    fill()
    queue.resume()
    ours = node.python_worker(workerOpts={"drain_delay": 1}, stopAfter=len(plan),
                              behaviour={"return": 1})
    ours.wait_event("exit", timeout=20)
    assert [ln["job"]["name"] for ln in ours.events("process")] == expected


def test_node_global_concurrency_and_rate_limit_bind_our_worker(node, queue):
    node.run("setGlobalConcurrency", concurrency=1)
    for i in range(4):
        node.run("add", name="g", data={"i": i})
    ours = node.python_worker(workerOpts={"drain_delay": 1, "concurrency": 4}, stopAfter=4,
                              behaviour={"sleepMs": 150, "return": 1})
    ours.wait_event("exit", timeout=20)
    spans = sorted((job.processed_on, job.finished_on) for job in queue.get_jobs(["completed"]))
    assert len(spans) == 4
    for (_s1, end1), (start2, _e2) in zip(spans, spans[1:]):
        assert start2 >= end1, f"our worker ran jobs at once under Node's concurrency 1: {spans}"

    node.run("setGlobalConcurrency", concurrency=10)
    node.run("setGlobalRateLimit", max=1, duration=1000)
    jobs = [node.run("add", name="r", data={"i": i}) for i in range(3)]
    ours = node.python_worker(workerOpts={"drain_delay": 1, "concurrency": 3}, stopAfter=3,
                              behaviour={"return": 1})
    ours.wait_event("exit", timeout=20)
    starts = sorted(queue.get_job(j["id"]).processed_on for j in jobs)
    assert starts[2] - starts[0] >= 1900, f"Node's global rate limit 1/s not honoured: {starts}"


def test_large_payloads_round_trip(node, queue):
    big = {"blob": "é" * 300_000, "list": list(range(20_000))}
    job = queue.add("big", big)
    theirs = node.worker(workerOpts={"drainDelay": 1}, stopAfter=1, behaviour={"returnData": True})
    theirs.wait_event("exit", timeout=20)
    assert queue.get_job(job.id).returnvalue == big
    back = node.run("add", name="big2", data=big)
    ours = node.python_worker(workerOpts={"drain_delay": 1}, stopAfter=1,
                              behaviour={"returnData": True})
    ours.wait_event("exit", timeout=20)
    assert node.run("getJob", jobId=back["id"])["returnvalue"] == big

"""Issue 2, "Prove it": our protocol core against the real Node ``bullmq@6.7.0``, both ways.

Node adds jobs that our ``Queue`` reads; our ``Queue`` adds jobs that a Node ``Worker``
processes; our job hashes are compared byte for byte with Node-added twins; markers wake a
blocked Node worker; pause/resume works across; a Node ``QueueEvents`` decodes every event
we write; both sides agree on counts and states.
"""
from __future__ import annotations

import json

import pytest

from echomq_gevent import Queue
from echomq_gevent.protocol.keys import QueueKeys
from interop_helpers import (
    COUNT_TYPES,
    assert_same_job,
    dump_queue,
    event_names,
    finish_opts,
    now_ms,
    take,
    wait_blocked_on_marker,
)

pytestmark = pytest.mark.interop


def _our_counts(queue):
    return queue.get_job_counts(*COUNT_TYPES)


# ---------------------------------------------------------------------------------------
# Node -> us: every kind of job Node adds reads back equal through our Queue
# ---------------------------------------------------------------------------------------

NODE_KINDS = [
    # (label, name, data, opts)
    ("standard", "std", {"k": "v", "n": [1, 2, 3], "nested": {"a": None}}, {}),
    ("lifo", "lifo", {"lifo": True}, {"lifo": True}),
    ("prioritized", "prio", {"p": 5}, {"priority": 5, "attempts": 2}),
    ("prioritized-high", "prio1", {"p": 1},
     {"priority": 1, "backoff": {"type": "exponential", "delay": 100}, "attempts": 3}),
    ("delayed", "later", {"d": 1}, {"delay": 60000, "removeOnComplete": 5}),
    ("delayed-prioritized", "later-prio", {}, {"delay": 60000, "priority": 3}),
    ("custom-id", "custom", {"c": "é✓/"},
     {"jobId": "custom-1", "removeOnComplete": True, "removeOnFail": {"age": 3600, "count": 10},
      "keepLogs": 3, "stackTraceLimit": 4}),
    # Options Node stores under short keys (de, fpof, kl, tm, omc) must decode back.
    ("short-keys", "shorts", {},
     {"deduplication": {"id": "d1", "ttl": 60000}, "failParentOnFailure": True, "keepLogs": 2,
      "telemetry": {"metadata": "abc", "omitContext": True}}),
]


def test_node_added_jobs_of_every_kind_read_back_equal(node, queue):
    steps = [{"cmd": "add", "name": name, "data": data, "opts": opts}
             for _label, name, data, opts in NODE_KINDS]
    # The duplicate: same custom id, other data; Node returns the existing id.
    steps.append({"cmd": "add", "name": "custom-again", "data": {"other": True},
                  "opts": {"jobId": "custom-1"}})
    added = node.batch(*steps)
    ids = [job["id"] for job in added]
    assert ids[-1] == "custom-1" and "custom-1" in ids[:-1]
    ids = ids[:-1]

    reads = node.batch(*(
        [{"cmd": "getJob", "jobId": i} for i in ids]
        + [{"cmd": "getState", "jobId": i} for i in ids]
        + [{"cmd": "counts", "types": COUNT_TYPES},
           {"cmd": "getJobs", "types": ["wait"]},
           {"cmd": "getJobs", "types": ["prioritized"]},
           {"cmd": "getJobs", "types": ["delayed"]}]
    ))
    node_jobs = reads[:len(ids)]
    node_states = reads[len(ids):2 * len(ids)]
    node_counts, node_wait, node_prio, node_delayed = reads[2 * len(ids):]

    for job_id, theirs, state in zip(ids, node_jobs, node_states):
        ours = queue.get_job(job_id)
        assert_same_job(ours, theirs)
        assert queue.get_job_state(job_id) == state, f"state of job {job_id}"

    # The duplicate add changed nothing: the first data survives on both sides.
    assert queue.get_job("custom-1").data == {"c": "é✓/"}
    assert _our_counts(queue) == node_counts
    assert node_counts["waiting"] == 4 and node_counts["prioritized"] == 2
    assert node_counts["delayed"] == 2

    # Same order in every list/set as Node reports it (LIFO job first in line, etc.).
    for types, theirs in ((["wait"], node_wait), (["prioritized"], node_prio),
                          (["delayed"], node_delayed)):
        ours = [job.id for job in queue.get_jobs(types)]
        assert ours == [job["id"] for job in theirs], f"get_jobs({types}) order"


def test_node_job_with_progress_logs_and_failure_reads_back_equal(node, queue):
    node.run("add", name="p", data={"x": 1}, opts={"attempts": 1})
    worker = node.worker(workerOpts={"drainDelay": 1}, stopAfter=1,
                         behaviour={"progress": [33, {"step": "two"}], "log": ["l1", "l2"],
                                    "failMessage": "it broke: café", "unrecoverable": True})
    worker.wait_event("failed", timeout=15)
    worker.wait_event("exit", timeout=15)
    theirs = node.run("getJob", jobId="1")
    ours = queue.get_job("1")
    assert_same_job(ours, theirs)
    assert ours.progress == {"step": "two"}
    assert ours.failed_reason == "it broke: café"
    assert ours.stacktrace and "UnrecoverableError" in ours.stacktrace[0]
    assert queue.get_job_state("1") == "failed"
    assert queue.get_job_logs("1") == node.run("getJobLogs", jobId="1")


# ---------------------------------------------------------------------------------------
# us -> Node: our jobs processed by a Node Worker that sees the same job
# ---------------------------------------------------------------------------------------

OUR_KINDS = [
    ("plain", {"hello": "world", "list": [1, 2]}, None),
    ("lifo", {"l": 1}, {"lifo": True}),
    ("prio", {"p": 2}, {"priority": 2}),
    ("custom", {"c": 1}, {"jobId": "ours-1", "keepLogs": 2, "removeOnFail": {"age": 60}}),
    ("flaky", {"f": 1}, {"attempts": 3, "backoff": {"type": "fixed", "delay": 50}}),
    ("soon", {"s": 1}, {"delay": 200, "removeOnComplete": 10}),
]


def test_our_jobs_processed_by_node_worker_with_equal_fields(node, queue, qname):
    twin_queue = qname + "twin"
    ours = [queue.add(name, data, opts) for name, data, opts in OUR_KINDS]
    # Node-added twins, to learn how Node itself decodes these options.
    twins = node.batch(*([{"cmd": "add", "queue": twin_queue, "name": name, "data": data,
                           "opts": opts or {}} for name, data, opts in OUR_KINDS]))
    twin_reads = node.batch(*[{"cmd": "getJob", "queue": twin_queue, "jobId": t["id"]}
                              for t in twins])

    worker = node.worker(workerOpts={"drainDelay": 1, "concurrency": 1},
                         stopAfter=len(ours),
                         behaviour={"returnData": True},
                         byName={"flaky": {"failTimes": 2, "return": {"third": "time"}}})
    worker.wait_event("exit", timeout=30)
    assert not worker.events("error"), worker.describe()

    first_seen = {}
    for line in worker.events("process"):
        first_seen.setdefault(line["jobId"], line["job"])
    for job, (name, data, _opts), twin in zip(ours, OUR_KINDS, twin_reads):
        seen = first_seen.get(job.id)
        assert seen is not None, f"the Node worker never processed our job {job.id} ({name})"
        assert seen["name"] == name
        assert seen["data"] == data, f"job {name}: Node sees other data"
        assert seen["opts"] == twin["opts"], f"job {name}: Node sees other opts than its twin's"
        assert seen["attemptsMade"] == 0 and seen["attemptsStarted"] == 1

    # The flaky job: two failed attempts then completed; attempts counters agree.
    flaky = ours[OUR_KINDS.index(next(k for k in OUR_KINDS if k[0] == "flaky"))]
    attempts_seen = [ln["job"]["attemptsMade"] for ln in worker.events("process")
                     if ln["jobId"] == flaky.id]
    assert attempts_seen == [0, 1, 2]

    # Node's order of processing honours our LIFO/priority placement: LIFO first, then the
    # FIFO ones, then the prioritized one (standard jobs run before prioritized ones).
    order = [ln["jobId"] for ln in worker.events("process")]
    assert order[0] == ours[1].id, f"LIFO job should run first, got order {order}"

    for job, (name, data, _opts) in zip(ours, OUR_KINDS):
        theirs = node.run("getJob", jobId=job.id)
        back = queue.get_job(job.id)
        assert_same_job(back, theirs)
        assert queue.get_job_state(job.id) == "completed"
        expected = {"third": "time"} if name == "flaky" else data
        assert back.returnvalue == expected
        assert back.finished_on and back.processed_on and back.finished_on >= back.processed_on
    assert queue.get_job(flaky.id).attempts_made == 3


# ---------------------------------------------------------------------------------------
# Our job hash and every queue key equal a Node-added twin's, byte for byte
# ---------------------------------------------------------------------------------------

TS = 1795965485578  # a fixed creation time, so even `timestamp` and delayed scores match

TWIN_CASES = [
    ("standard", "email", {"to": "a@b.c", "n": 1}, {}),
    ("attempts-backoff", "retry", {"x": [1, {"y": None}]},
     {"attempts": 3, "backoff": 1000, "removeOnComplete": 10}),
    ("backoff-object", "retry2", {}, {"attempts": 5, "backoff":
                                      {"type": "exponential", "delay": 250, "jitter": 0.5}}),
    ("custom-id-lifo", "cid", {"s": "a/b é ✓ \u2028 \"q\""},
     {"jobId": "custom/id-1", "lifo": True, "keepLogs": 5,
      "removeOnFail": {"age": 3600, "count": 100}}),
    ("prioritized", "prio", {"p": True}, {"priority": 7, "removeOnFail": False}),
    ("delayed", "later", {"d": 1}, {"delay": 5000, "stackTraceLimit": 3}),
    ("delayed-prioritized", "later-prio", {}, {"delay": 1234, "priority": 2}),
    ("big-number", "big", {"big": 12345678901234}, {"backoff": {"type": "fixed",
                                                                "delay": 1234567890123456}}),
    ("remove-true", "gone", {}, {"removeOnComplete": True, "removeOnFail": True}),
    ("empty-data", "empty", {}, {"attempts": 0}),
    # data need not be an object; JSON text must match JSON.stringify's (no spaces, no
    # \u escapes for non-ASCII, the same float forms)
    ("data-null", "null-data", None, {}),
    ("data-list", "list-data", [1, {"a": "é😀"}, None, 1.5, 1e21, 0.1, 2 ** 53], {}),
    ("data-string", "str-data", "plain \u2028 text", {"priority": 1}),
    ("short-keys", "shorts", {"x": 1},
     {"deduplication": {"id": "dd", "ttl": 60000}, "failParentOnFailure": True, "keepLogs": 3,
      "telemetry": {"metadata": "abc", "omitContext": True}, "sizeLimit": 1000}),
]


@pytest.mark.parametrize("label,name,data,opts", TWIN_CASES, ids=[c[0] for c in TWIN_CASES])
def test_our_job_hash_and_keys_equal_node_twin(node, r, redis_url, prefix, qname,
                                              label, name, data, opts):
    opts = dict(opts, timestamp=TS)
    node_q, our_q = qname + "n", qname + "p"
    node.run("add", queue=node_q, name=name, data=data, opts=opts)
    ours = Queue(our_q, connection=redis_url, prefix=prefix)
    try:
        job = ours.add(name, data, dict(opts))
    finally:
        ours.close()

    node_keys, our_keys = QueueKeys(node_q, prefix), QueueKeys(our_q, prefix)
    job_id = job.id
    node_hash = r.hgetall(node_keys.job(job_id))
    our_hash = r.hgetall(our_keys.job(job_id))
    assert node_hash, f"Node did not store job {job_id}"
    assert sorted(our_hash) == sorted(node_hash), "job hash field sets differ"
    # opts: the same options semantically, and the same cjson text (key order, escapes,
    # 14-digit numbers).
    assert json.loads(our_hash["opts"]) == json.loads(node_hash["opts"])
    assert our_hash["opts"] == node_hash["opts"], "opts JSON text differs from Node's"
    assert json.loads(our_hash["data"]) == json.loads(node_hash["data"])
    assert our_hash["data"] == node_hash["data"], "data JSON text differs from Node's"
    assert our_hash == node_hash

    # Every other key of the queue: wait/prioritized/delayed placement, marker, id, pc,
    # meta, and the events stream (fields; ids aside).
    assert dump_queue(r, our_keys) == dump_queue(r, node_keys)


def test_duplicate_custom_id_keys_equal_node_twin(node, r, redis_url, prefix, qname):
    node_q, our_q = qname + "n", qname + "p"
    opts = {"jobId": "same", "timestamp": TS}
    node.batch({"cmd": "add", "queue": node_q, "name": "a", "data": {"v": 1}, "opts": opts},
               {"cmd": "add", "queue": node_q, "name": "b", "data": {"v": 2}, "opts": opts})
    ours = Queue(our_q, connection=redis_url, prefix=prefix)
    try:
        first = ours.add("a", {"v": 1}, dict(opts))
        second = ours.add("b", {"v": 2}, dict(opts))
    finally:
        ours.close()
    assert first.id == second.id == "same"
    # Both counted the id key twice, emitted `duplicated`, kept the first job.
    assert dump_queue(r, QueueKeys(our_q, prefix)) == dump_queue(r, QueueKeys(node_q, prefix))


def test_node_adds_into_a_queue_we_started(node, queue, r, prefix, qname):
    """Mixed producers on one queue: the id counter, wait order and events stay coherent."""
    a = queue.add("ours", {"i": 1})
    theirs = node.run("add", name="theirs", data={"i": 2})
    b = queue.add("ours", {"i": 3})
    assert [a.id, theirs["id"], b.id] == ["1", "2", "3"]
    keys = QueueKeys(qname, prefix)
    assert r.lrange(keys.wait, 0, -1) == ["3", "2", "1"]
    events = [f["event"] for _id, f in r.xrange(keys.events)]
    assert events == ["added", "waiting"] * 3


# ---------------------------------------------------------------------------------------
# Markers: a Node worker blocked in BZPOPMIN wakes for our jobs
# ---------------------------------------------------------------------------------------

def test_blocked_node_worker_takes_our_job_at_once(node, queue, r, prefix, qname):
    # An 8 s drainDelay: a worker that wakes only when its BZPOPMIN times out would take
    # the job after up to 8 s; the marker our add writes must wake it well before that.
    drain_delay = 8
    worker = node.worker(workerOpts={"drainDelay": drain_delay}, stopAfter=1,
                         behaviour={"return": "ok"})
    worker.wait_event("drained")
    wait_blocked_on_marker(r, prefix, qname)
    added_at = now_ms()
    job = queue.add("wake", {"w": 1})
    line = worker.wait_event("process", timeout=drain_delay + 5, jobId=job.id)
    latency = line["t"] - added_at
    # Half the drain delay separates a marker wake-up from a time-out even on a loaded machine.
    assert latency < drain_delay * 1000 / 2, (
        f"Node worker took our job after {latency} ms (drainDelay {drain_delay}s): "
        f"it timed out instead of waking on the marker")


def test_blocked_node_worker_takes_our_delayed_job_at_its_due_time(node, queue, r, prefix, qname):
    worker = node.worker(workerOpts={"drainDelay": 8}, stopAfter=1, behaviour={"return": 1})
    worker.wait_event("drained")
    wait_blocked_on_marker(r, prefix, qname)
    job = queue.add("later", {"l": 1}, {"delay": 1500})
    due = job.timestamp + 1500
    line = worker.wait_event("process", timeout=12, jobId=job.id)
    processed_on = line["job"]["processedOn"]
    assert processed_on >= due - 2, f"delayed job ran {due - processed_on} ms early"
    assert processed_on - due < 700, (f"delayed job ran {processed_on - due} ms after its due "
                                      f"time (the drainDelay boundary is 8000 ms)")


def test_our_delayed_job_sets_the_same_marker_as_node(node, queue, r, prefix, qname):
    job = queue.add("later", {}, {"delay": 3000})
    keys = QueueKeys(qname, prefix)
    marker = r.zrange(keys.marker, 0, -1, withscores=True)
    assert marker == [("1", float(job.timestamp + 3000))]
    # A standard job adds the base marker next to it, as Node's add does.
    queue.add("now", {})
    assert r.zscore(keys.marker, "0") == 0.0


# ---------------------------------------------------------------------------------------
# Pause / resume from either side
# ---------------------------------------------------------------------------------------

def _assert_not_processed(worker, job_id, r, wait_for):
    """The Node worker went through two more rounds of its idle loop (BZPOPMIN, which times
    out after drainDelay, then a fetch) with ``job_id`` waiting, and did not start it."""
    def bzpopmin_calls() -> int:
        return int(r.info("commandstats").get("cmdstat_bzpopmin", {}).get("calls", 0))
    start = bzpopmin_calls()
    wait_for(lambda: bzpopmin_calls() >= start + 2, timeout=15, what="two idle rounds of the Node worker")
    assert not [ln for ln in worker.events("process") if ln["jobId"] == job_id], (
        f"the Node worker processed job {job_id} while the queue was paused")


def test_our_pause_stops_a_node_worker_and_resume_restarts_it(node, queue, r, prefix, qname, wait_for):
    worker = node.worker(workerOpts={"drainDelay": 1}, stopAfter=1, behaviour={"return": 1})
    worker.wait_event("drained")
    queue.pause()
    assert queue.is_paused() is True
    assert node.run("isPaused") is True
    job = queue.add("held", {})
    _assert_not_processed(worker, job.id, r, wait_for)
    assert node.run("getState", jobId=job.id) == "waiting"
    resumed_at = now_ms()
    queue.resume()
    assert node.run("isPaused") is False
    line = worker.wait_event("process", timeout=5, jobId=job.id)
    assert line["t"] - resumed_at < 1500


def test_node_pause_stops_our_fetch_and_node_resume_restarts_it(node, queue, r, prefix, qname):
    keys = QueueKeys(qname, prefix)
    node.run("pause")
    assert queue.is_paused() is True
    job = queue.add("held", {"h": 1})
    assert not r.exists(keys.marker), "no marker may wake workers of a paused queue"
    res = queue.scripts.move_to_active("tok:0", 30000, now_ms())
    assert res[1] in (0, "0", None), f"our fetch took job {res[1]} from a queue Node paused"
    assert queue.get_job_state(job.id) == "waiting"
    node.run("resume")
    assert queue.is_paused() is False
    assert r.zscore(keys.marker, "0") == 0.0, "Node's resume must leave a marker for our worker"
    job_id, _tok = take(queue, expect_id=job.id)
    assert node.run("getState", jobId=job_id) == "active"


def test_node_pause_leaves_a_node_worker_idle_until_our_resume(node, queue, r, wait_for):
    worker = node.worker(workerOpts={"drainDelay": 1}, stopAfter=1, behaviour={"return": 1})
    worker.wait_event("drained")
    node.run("pause")
    job = queue.add("held", {})
    _assert_not_processed(worker, job.id, r, wait_for)
    queue.resume()
    worker.wait_event("process", timeout=5, jobId=job.id)
    worker.wait_event("completed", timeout=5, jobId=job.id)


# ---------------------------------------------------------------------------------------
# A Node QueueEvents decodes everything we write
# ---------------------------------------------------------------------------------------

def test_node_queue_events_sees_our_events(node, queue):
    events = node.events()
    start = events.mark()

    j1 = queue.add("a", {"x": 1})                         # added, waiting
    j1.update_progress(42)                                 # progress 42
    j1.update_progress({"step": 2, "of": [1, 2, 3]})       # progress {...}
    delayed = queue.add("d", {}, {"delay": 60000})         # added, delayed
    c1 = queue.add("dup", {}, {"jobId": "c1"})             # added, waiting
    queue.add("dup", {"again": 1}, {"jobId": "c1"})        # duplicated
    queue.remove_job(delayed.id)                           # removed (prev delayed)
    queue.pause()                                          # paused
    queue.resume()                                         # resumed
    # j1 completes with a None return value ("null"), c1 fails with a plain-text reason.
    jid, tok = take(queue, expect_id=j1.id)                # active
    queue.scripts.move_to_finished(jid, now_ms(), "returnvalue", "null", "completed", False,
                                   finish_opts(tok))       # completed
    jid, tok = take(queue, expect_id=c1.id)                # active
    queue.scripts.move_to_finished(jid, now_ms(), "failedReason", "boom: not {json}", "failed",
                                   False, finish_opts(tok))  # failed, retries-exhausted, drained

    events.wait_event("drained", timeout=10, start=start)
    lines = [ln for ln in events.snapshot()[start:] if ln["event"] != "ready"]
    assert "error" not in event_names(lines), events.describe()
    got = [(ln["event"], ln.get("args")) for ln in lines]
    expected = [
        ("added", {"jobId": j1.id, "name": "a"}),
        ("waiting", {"jobId": j1.id}),
        ("progress", {"jobId": j1.id, "data": 42}),
        ("progress", {"jobId": j1.id, "data": {"step": 2, "of": [1, 2, 3]}}),
        ("added", {"jobId": delayed.id, "name": "d"}),
        ("delayed", {"jobId": delayed.id, "delay": delayed.timestamp + 60000}),
        ("added", {"jobId": "c1", "name": "dup"}),
        ("waiting", {"jobId": "c1"}),
        ("duplicated", {"jobId": "c1"}),
        ("removed", {"jobId": delayed.id, "prev": "delayed"}),
        ("paused", {}),
        ("resumed", {}),
        ("active", {"jobId": j1.id, "prev": "waiting"}),
        ("completed", {"jobId": j1.id, "returnvalue": None, "prev": "active"}),
        ("active", {"jobId": "c1", "prev": "waiting"}),
        ("failed", {"jobId": "c1", "failedReason": "boom: not {json}", "prev": "active"}),
        ("retries-exhausted", {"jobId": "c1", "attemptsMade": "1"}),
        ("drained", None),
    ]
    assert got == expected


def test_node_wait_until_finished_sees_our_completion(node, queue):
    job = queue.add("w", {"v": 1})
    # Node subscribes (QueueEvents) and waits while we take and complete the job.
    waiter = node.spawn("waitUntilFinished", jobId=job.id, ttl=10000)
    jid, tok = take(queue, expect_id=job.id)
    queue.scripts.move_to_finished(jid, now_ms(), "returnvalue", json.dumps({"done": [1, 2]}),
                                   "completed", False, finish_opts(tok))
    line = waiter.wait_for(lambda ln: "ok" in ln, timeout=15, what="waitUntilFinished's answer")
    assert line == dict(line, ok=True, result={"returnvalue": {"done": [1, 2]},
                                               "undefined": False}), waiter.describe()
    # A job that already failed: waitUntilFinished rejects with our plain-text reason.
    failing = queue.add("f", {})
    jid, tok = take(queue, expect_id=failing.id)
    queue.scripts.move_to_finished(jid, now_ms(), "failedReason", "bad input", "failed", False,
                                   finish_opts(tok))
    answer = node.run_line("waitUntilFinished", jobId=failing.id, ttl=5000)
    assert answer["ok"] is False and answer["error"] == "bad input"


# ---------------------------------------------------------------------------------------
# Counts and states agree across every state
# ---------------------------------------------------------------------------------------

def test_counts_and_states_agree_across_states(node, queue):
    # A mix of producers: Node adds half the jobs, we add the rest.
    node_added = node.batch(
        {"cmd": "add", "name": "n1", "data": {}, "opts": {}},
        {"cmd": "add", "name": "n2", "data": {}, "opts": {"priority": 4}},
        {"cmd": "add", "name": "n3", "data": {}, "opts": {"delay": 90000}},
        {"cmd": "add", "name": "n4", "data": {}, "opts": {}},
    )
    ours = [queue.add("o1", {}), queue.add("o2", {}, {"priority": 9}),
            queue.add("o3", {}, {"delay": 90000}), queue.add("o4", {})]
    # Standard jobs in FIFO order: n1, n4, o1, o4. Complete n1, fail n4, leave o1 active.
    jid, tok = take(queue, expect_id=node_added[0]["id"])
    queue.scripts.move_to_finished(jid, now_ms(), "returnvalue", '"ok"', "completed", False,
                                   finish_opts(tok))
    jid, tok = take(queue, expect_id=node_added[3]["id"])
    queue.scripts.move_to_finished(jid, now_ms(), "failedReason", "nope", "failed", False,
                                   finish_opts(tok))
    take(queue, expect_id=ours[0].id)

    ids = [j["id"] for j in node_added] + [j.id for j in ours]
    expected_states = ["completed", "prioritized", "delayed", "failed",
                       "active", "prioritized", "delayed", "waiting"]
    for paused in (False, True):
        if paused:
            node.run("pause")  # jobs of a paused v6 queue still count as waiting
        node_res = node.batch(*([{"cmd": "getState", "jobId": i} for i in ids]
                                + [{"cmd": "counts", "types": COUNT_TYPES},
                                   {"cmd": "counts", "types": ["paused", "wait"]}]))
        node_states, node_counts, node_paused = node_res[:-2], node_res[-2], node_res[-1]
        assert node_states == expected_states
        assert [queue.get_job_state(i) for i in ids] == node_states
        assert _our_counts(queue) == node_counts
        assert queue.get_job_counts("paused", "wait") == node_paused
        assert node_counts == {"active": 1, "completed": 1, "delayed": 2, "failed": 1,
                               "prioritized": 2, "waiting": 1, "waiting-children": 0}
    assert queue.get_job_state("no-such-job") == node.run("getState", jobId="no-such-job")


def test_node_queue_events_sees_our_worker_side_events(node, queue, r, prefix, qname):
    """Retry, backoff delay, hand-back and stall recovery, as written by our scripts."""
    keys = QueueKeys(qname, prefix)
    job = queue.add("w", {"n": 1}, {"attempts": 5})
    events = node.events()
    start = events.mark()

    # take -> active; retry -> waiting (prev active)
    jid, tok = take(queue, expect_id=job.id)
    fields = ["failedReason", "try again", "stacktrace", json.dumps(["Error: try again"])]
    queue.scripts.retry_job(jid, now_ms(), tok, fields_to_update=fields)
    # take -> active; backoff -> delayed (due); promote -> waiting (prev delayed)
    jid, tok = take(queue, expect_id=job.id)
    before = now_ms()
    queue.scripts.move_to_delayed(jid, before, tok, 60000, fields_to_update=fields)
    queue.promote_job(jid)
    # take -> active; hand back -> waiting (prev active)
    jid, tok = take(queue, expect_id=job.id)
    queue.scripts.move_job_from_active_to_wait(jid, tok)
    # take -> active; the lock "expires" (the worker died); two stall checks find it:
    # waiting (prev active), stalled
    jid, _tok = take(queue, expect_id=job.id)
    r.delete(keys.lock(jid))
    queue.scripts.move_stalled_jobs_to_wait(1, now_ms(), 30000)
    r.delete(keys.stalled_check)
    stalled = queue.scripts.move_stalled_jobs_to_wait(1, now_ms(), 30000)
    assert stalled == [jid]

    last = events.wait_event("stalled", timeout=10, start=start)
    lines = [ln for ln in events.snapshot()[start:] if ln["event"] != "ready"]
    assert "error" not in event_names(lines), events.describe()
    got = [(ln["event"], ln.get("args")) for ln in lines]
    delayed_args = got[3][1]
    assert before + 60000 <= delayed_args["delay"] <= now_ms() + 60000
    assert got == [
        ("active", {"jobId": jid, "prev": "waiting"}),
        ("waiting", {"jobId": jid, "prev": "active"}),
        ("active", {"jobId": jid, "prev": "waiting"}),
        ("delayed", {"jobId": jid, "delay": delayed_args["delay"]}),
        ("waiting", {"jobId": jid, "prev": "delayed"}),
        ("active", {"jobId": jid, "prev": "waiting"}),
        ("waiting", {"jobId": jid, "prev": "active"}),
        ("active", {"jobId": jid, "prev": "waiting"}),
        ("waiting", {"jobId": jid, "prev": "active"}),
        ("stalled", {"jobId": jid}),
    ], last
    # What Node's Job now sees of all this.
    theirs = node.run("getJob", jobId=jid)
    assert theirs["attemptsMade"] == 2 and theirs["attemptsStarted"] == 4
    assert theirs["stalledCounter"] == 1 and theirs["failedReason"] == "try again"
    assert theirs["stacktrace"] == ["Error: try again"]
    assert_same_job(queue.get_job(jid), theirs)


# ---------------------------------------------------------------------------------------
# Bulk adds, global concurrency and global rate limits across
# ---------------------------------------------------------------------------------------

def test_our_add_bulk_keys_equal_node_add_bulk(node, r, redis_url, prefix, qname):
    jobs = [("a", {"i": 1}, {"timestamp": TS}),
            ("b", {"i": 2}, {"timestamp": TS, "priority": 3}),
            ("c", {"i": 3}, {"timestamp": TS, "delay": 700}),
            ("d", {"i": 4}, {"timestamp": TS, "jobId": "bulk-d", "lifo": True}),
            ("e", {"i": 5}, {"timestamp": TS, "attempts": 2, "backoff": 10})]
    node_q, our_q = qname + "n", qname + "p"
    node.run("addBulk", queue=node_q,
             jobs=[{"name": n, "data": d, "opts": o} for n, d, o in jobs])
    ours = Queue(our_q, connection=redis_url, prefix=prefix)
    try:
        added = ours.add_bulk([(n, d, dict(o)) for n, d, o in jobs])
    finally:
        ours.close()
    assert [j.id for j in added] == ["1", "2", "3", "bulk-d", "5"]
    assert dump_queue(r, QueueKeys(our_q, prefix)) == dump_queue(r, QueueKeys(node_q, prefix))


def test_global_concurrency_set_by_node_limits_our_fetch(node, queue):
    node.run("setGlobalConcurrency", concurrency=1)
    assert queue.get_meta().get("concurrency") == "1"
    a, b = queue.add("a", {}), queue.add("b", {})
    take(queue, expect_id=a.id)
    res = queue.scripts.move_to_active("t:1", 30000, now_ms())
    assert res[1] in (0, "0", None), f"global concurrency 1 set by Node, but we took job {res[1]}"
    assert queue.get_job_state(b.id) == "waiting"


def test_global_concurrency_set_by_us_limits_a_node_worker(node, queue):
    queue.set_global_concurrency(1)
    meta = node.run("getMeta")
    assert meta.get("concurrency") == 1
    for i in range(4):
        queue.add("j", {"i": i})
    worker = node.worker(workerOpts={"drainDelay": 1, "concurrency": 4}, stopAfter=4,
                         behaviour={"sleepMs": 150, "return": 1})
    worker.wait_event("exit", timeout=20)
    # With global concurrency 1 the jobs run one after another: each was taken (processedOn)
    # no earlier than the previous one finished (finishedOn), although the worker itself
    # allows 4 at a time.
    done = node.run("getJobs", types=["completed"])
    spans = sorted((job["processedOn"], job["finishedOn"]) for job in done)
    assert len(spans) == 4
    for (_s1, end1), (start2, _e2) in zip(spans, spans[1:]):
        assert start2 >= end1, f"two jobs ran at once under global concurrency 1: {spans}"


def test_global_rate_limit_set_by_node_limits_our_fetch(node, queue):
    node.run("setGlobalRateLimit", max=1, duration=5000)
    meta = queue.get_meta()
    assert (meta.get("max"), meta.get("duration")) == ("1", "5000")
    a, b = queue.add("a", {}), queue.add("b", {})
    take(queue, expect_id=a.id)
    res = queue.scripts.move_to_active("t:1", 30000, now_ms())
    assert res[1] in (0, "0", None) and 0 < int(res[2]) <= 5000, (
        f"global rate limit 1/5s set by Node: expected [0, 0, ttl, 0], got {res!r}")
    assert queue.get_job_state(b.id) == "waiting"


def test_global_rate_limit_set_by_us_limits_a_node_worker(node, queue):
    queue.set_global_rate_limit(1, 1500)
    meta = node.run("getMeta")
    assert (meta.get("max"), meta.get("duration")) == (1, 1500)
    a, b = queue.add("a", {}), queue.add("b", {})
    worker = node.worker(workerOpts={"drainDelay": 1, "concurrency": 2}, stopAfter=2,
                         behaviour={"return": 1})
    first = worker.wait_event("process", timeout=10, jobId=a.id)
    second = worker.wait_event("process", timeout=10, jobId=b.id)
    gap = second["t"] - first["t"]
    assert gap >= 1300, f"the Node worker ran 2 jobs {gap} ms apart under our limit 1 per 1500 ms"


# ---------------------------------------------------------------------------------------
# Job and queue administration across
# ---------------------------------------------------------------------------------------

def test_we_update_node_jobs_and_node_updates_ours(node, queue):
    theirs = node.run("add", name="n", data={"v": 1}, opts={"keepLogs": 2, "delay": 60000})
    job = queue.get_job(theirs["id"])
    for line in ("one", "two", "three"):
        job.log(line)
    job.update_progress({"pct": 50})
    job.update_data({"v": 2, "s": "é"})
    logs, seen = node.batch({"cmd": "getJobLogs", "jobId": job.id},
                            {"cmd": "getJob", "jobId": job.id})
    assert logs == {"logs": ["two", "three"], "count": 2}
    assert seen["data"] == {"v": 2, "s": "é"} and seen["progress"] == {"pct": 50}
    queue.promote_job(job.id)
    state, seen = node.batch({"cmd": "getState", "jobId": job.id},
                             {"cmd": "getJob", "jobId": job.id})
    assert state == "waiting" and seen["delay"] == 0

    ours = queue.add("o", {"v": 1}, {"delay": 60000, "keepLogs": 1})
    node.batch({"cmd": "log", "jobId": ours.id, "line": "a"},
               {"cmd": "log", "jobId": ours.id, "line": "b"},
               {"cmd": "updateProgress", "jobId": ours.id, "progress": 7},
               {"cmd": "updateData", "jobId": ours.id, "data": {"v": 3}},
               {"cmd": "promote", "jobId": ours.id})
    back = queue.get_job(ours.id)
    assert (back.data, back.progress, back.delay) == ({"v": 3}, 7, 0)
    assert queue.get_job_logs(ours.id) == {"logs": ["b"], "count": 1}
    assert queue.get_job_state(ours.id) == "waiting"


def test_remove_drain_obliterate_across(node, queue, r, prefix, qname):
    keys = QueueKeys(qname, prefix)
    n1 = node.run("add", name="n1", data={}, opts={"keepLogs": 5})
    node.run("log", jobId=n1["id"], line="x")
    o1 = queue.add("o1", {})
    assert queue.remove_job(n1["id"]) == 1
    assert node.run("getJob", jobId=n1["id"]) is None
    assert not r.exists(keys.job(n1["id"]), keys.logs(n1["id"]))
    node.run("remove", jobId=o1.id)
    assert queue.get_job(o1.id) is None

    # Drain: we drain what Node added (waiting, prioritized; delayed only when asked).
    node.batch({"cmd": "add", "name": "w", "data": {}},
               {"cmd": "add", "name": "p", "data": {}, "opts": {"priority": 2}},
               {"cmd": "add", "name": "d", "data": {}, "opts": {"delay": 60000}})
    queue.drain()
    counts = node.run("counts", types=COUNT_TYPES)
    assert (counts["waiting"], counts["prioritized"], counts["delayed"]) == (0, 0, 1)
    queue.drain(delayed=True)
    assert node.run("counts", types=["delayed"]) == {"delayed": 0}

    # Node drains what we added.
    queue.add("w", {})
    queue.add("p", {}, {"priority": 2})
    node.run("drain")
    assert _our_counts(queue) == dict.fromkeys(COUNT_TYPES, 0)

    # Obliterate both ways: nothing of the queue is left.
    queue.add("a", {})
    node.run("add", name="b", data={})
    queue.obliterate()
    assert list(r.scan_iter(match=keys.base + "*")) == []
    queue.add("c", {}, {"delay": 1000})
    node.run("add", name="d", data={}, opts={"priority": 1})
    node.run("obliterate")
    leftover = list(r.scan_iter(match=keys.base + "*"))
    assert leftover == [], f"Node obliterate left keys of our jobs: {leftover}"


def test_node_flow_jobs_read_back_equal(node, queue, qname):
    """A FlowProducer tree: parent in waiting-children, children with parent references
    (one with failParentOnFailure in its parent JSON), as our Queue sees them."""
    tree = node.run("flow", tree={
        "name": "parent", "queueName": qname, "data": {"p": 1},
        "children": [{"name": "c1", "queueName": qname, "data": {"c": 1}},
                     {"name": "c2", "queueName": qname, "data": {"c": 2},
                      "opts": {"failParentOnFailure": True, "priority": 3}}]})
    ids = [tree["id"]] + [c["id"] for c in tree["children"]]
    reads = node.batch(*([{"cmd": "getJob", "jobId": i} for i in ids]
                         + [{"cmd": "getState", "jobId": i} for i in ids]
                         + [{"cmd": "counts", "types": COUNT_TYPES},
                            {"cmd": "getJobs", "types": ["waiting-children"]}]))
    jobs, states = reads[:3], reads[3:6]
    counts, waiting_children = reads[6], reads[7]
    assert states == ["waiting-children", "waiting", "prioritized"]
    for job_id, theirs, state in zip(ids, jobs, states):
        assert_same_job(queue.get_job(job_id), theirs)
        assert queue.get_job_state(job_id) == state
    assert jobs[2]["parent"]["fpof"] is True
    assert queue.get_job(ids[2]).parent == jobs[2]["parent"]
    assert _our_counts(queue) == counts
    assert [j.id for j in queue.get_jobs(["waiting-children"])] == [
        j["id"] for j in waiting_children]


def test_get_jobs_ranges_and_order_agree_with_node(node, queue):
    """Node's getJobs pages each type separately and de-duplicates types; ours must list
    the same ids in the same order for every combination."""
    for i in range(6):
        queue.add("a", {"i": i})
    for i in range(4):
        jid, tok = take(queue)
        ok = i % 2 == 1
        queue.scripts.move_to_finished(jid, now_ms() + i, "returnvalue" if ok else "failedReason",
                                       "1" if ok else "x", "completed" if ok else "failed",
                                       False, finish_opts(tok))
    for i in range(3):
        queue.add("d", {}, {"delay": 10000 * (i + 1)})
        queue.add("p", {}, {"priority": 3 - i})
    cases = [(["completed", "failed"], 0, 0, False), (["completed", "failed"], 0, 1, True),
             (["waiting", "delayed", "prioritized"], 1, 2, False), (["delayed"], 0, -1, True),
             (["prioritized"], 0, -1, False), (["active"], 0, -1, False),
             (["waiting", "completed", "failed", "delayed", "prioritized"], 0, 1, False),
             (["wait", "waiting"], 0, -1, False), (["failed"], 5, 10, False)]
    answers = node.batch(*[{"cmd": "getJobs", "types": t, "start": s, "end": e, "asc": a}
                           for t, s, e, a in cases])
    for (types, start, end, asc), theirs in zip(cases, answers):
        ours = [job.id for job in queue.get_jobs(types, start, end, asc)]
        assert ours == [job["id"] for job in theirs], f"get_jobs({types}, {start}, {end}, {asc})"


@pytest.mark.parametrize("policy", [None, "failParentOnFailure", "removeDependencyOnFailure",
                                    "ignoreDependencyOnFailure", "continueParentOnFailure"])
def test_child_added_with_a_parent_equals_node_twin(node, r, redis_url, prefix, qname, policy):
    """`opts.parent` (the way a child joins an existing parent): parentKey, the parent JSON with
    its policy flag, and the parent's dependencies set, byte-equal to Node's."""
    parent_q, node_q, our_q = qname + "x", qname + "n", qname + "p"
    node.run("add", queue=parent_q, name="parent", data={}, opts={"jobId": "P"})
    opts = {"parent": {"id": "P", "queue": f"{prefix}:{parent_q}"}, "timestamp": TS}
    if policy:
        opts[policy] = True
    node.run("add", queue=node_q, name="child", data={"c": 1}, opts=opts)
    ours = Queue(our_q, connection=redis_url, prefix=prefix)
    try:
        ours.add("child", {"c": 1}, dict(opts))
        missing = dict(opts, parent={"id": "nope", "queue": f"{prefix}:{parent_q}"})
        with pytest.raises(Exception) as info:
            ours.add("orphan", {}, missing)
        assert "nope" in str(info.value) or "parent" in str(info.value).lower()
    finally:
        ours.close()
    orphan = node.run_line("add", queue=node_q, name="orphan", data={}, opts=missing)
    assert orphan["ok"] is False  # Node refuses a missing parent too
    assert dump_queue(r, QueueKeys(our_q, prefix)) == dump_queue(r, QueueKeys(node_q, prefix))
    deps = r.smembers(QueueKeys(parent_q, prefix).dependencies("P"))
    assert deps == {QueueKeys(node_q, prefix).job("1"), QueueKeys(our_q, prefix).job("1")}

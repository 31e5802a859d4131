"""The BullMQ getters and admin calls beyond the basics, twinned with the real Node
``bullmq@6.7.0``: keepLastIfActive deduplication, and the getters Node and we answer alike."""
from __future__ import annotations

import json

import pytest

from echomq_gevent import Queue
from interop_helpers import dump_queue, take

pytestmark = pytest.mark.interop

TWIN_TS = 1_700_000_000_000
KEEP_LAST = {"id": "kl", "keepLastIfActive": True, "ttl": 60000}


def _comparable(r, keys):
    out = {}
    for suffix, (kind, value) in dump_queue(r, keys).items():
        if suffix.endswith(":lock"):
            continue  # the token differs
        if kind == "hash" and "processedOn" in value:
            value = dict(value, processedOn="<time>")
        out[suffix] = (kind, value)
    return out


def test_keep_last_if_active_twins_leave_the_same_redis(node, r, redis_url, prefix, qname):
    """Node's producer on one queue, ours on its twin: owner added, taken, two adds while it
    is active. Both leave the same keys: the owner, dn:<id> holding the last add, de:<id>
    without expiry, and the same events."""
    twins = {"node": qname + "n", "python": qname + "p"}
    queues = {side: Queue(name, connection=redis_url, prefix=prefix) for side, name in twins.items()}
    try:
        ids = {}
        for side, q in queues.items():
            steps = [("o", {"v": 1}), ("n", {"v": 2}), ("n", {"v": 3})]
            got = []
            for i, (name, data) in enumerate(steps):
                opts = {"deduplication": KEEP_LAST, "timestamp": TWIN_TS + i}
                if side == "node":
                    got.append(node.run("add", queue=twins[side], name=name, data=data, opts=opts)["id"])
                else:
                    got.append(q.add(name, data, opts).id)
                if i == 0:
                    take(q, expect_id=got[0])
            ids[side] = got
            assert r.pttl(q.keys.dedup("kl")) == -1, f"{side}: keepLastIfActive keys never expire"
            assert q.get_deduplication_job_id("kl") == got[0]
        assert ids["node"] == ids["python"] == ["1", "1", "1"]
        dumps = {side: _comparable(r, q.keys) for side, q in queues.items()}
        assert dumps["python"] == dumps["node"]
        parked = dumps["node"]["dn:kl"][1]
        assert parked["data"] == '{"v":3}' and parked["name"] == "n" and parked["jid"] == "3"
    finally:
        for q in queues.values():
            q.close()


def test_our_parked_add_is_created_when_a_node_worker_finishes_the_owner(node, queue, r):
    owner = queue.add("o", {"v": 1}, {"deduplication": KEEP_LAST})
    theirs = node.worker(workerOpts={"drainDelay": 1}, stopAfter=2,
                         byName={"o": {"sleepMs": 2000, "return": "owner"}}, behaviour={"returnData": True})
    theirs.wait_event("process", timeout=10, jobId=owner.id)
    assert queue.add("n", {"v": 2}, {"deduplication": KEEP_LAST}).id == owner.id
    assert queue.add("n", {"v": 3}, {"deduplication": KEEP_LAST}).id == owner.id
    assert queue.get_job_state(owner.id) == "active", "the owner finished too early"
    theirs.wait_event("exit", timeout=15)
    done = [ln for ln in theirs.events("completed")]
    assert [d["result"] for d in done] == ["owner", {"v": 3}], theirs.describe()
    assert not r.exists(queue.keys.base + "dn:kl")


def test_getters_answer_what_node_answers(node, queue, r):
    """One Redis state, read by Node's Queue getters and by ours."""
    queue.add_bulk([("a", {}), ("p", {}, {"priority": 3}), ("p", {}, {"priority": 3}),
                    ("q", {}, {"priority": 9}), ("d", {}, {"deduplication": {"id": "dd"}})])

    def both(method, *args, ours=None):
        theirs = node.run("queueCall", method=method, args=list(args))
        mine = (ours or getattr(queue, _snake(method)))(*args)
        assert mine == theirs, f"{method}{args}: ours {mine!r}, Node's {theirs!r}"
        return mine

    both("getGlobalConcurrency")
    both("getGlobalRateLimit")
    both("isMaxed")
    both("getRateLimitTtl")
    both("getCountsPerPriority", [0, 3, 9, 3, 4])
    both("getDeduplicationJobId", "dd")
    both("getDeduplicationJobId", "missing")
    node.run("setGlobalConcurrency", concurrency=1)
    node.run("setGlobalRateLimit", max=2, duration=5000)
    take(queue)
    assert both("isMaxed") is True
    assert both("getGlobalConcurrency") == 1
    assert both("getGlobalRateLimit") == {"max": 2, "duration": 5000}
    r.set(queue.keys.limiter, 2, px=5000)
    assert 0 < queue.get_rate_limit_ttl() <= 5000
    assert node.run("queueCall", method="getRateLimitTtl", args=[]) > 0
    assert queue.get_rate_limit_ttl(3) == node.run("queueCall", method="getRateLimitTtl", args=[3]) == 0
    both("getWorkersCount")
    assert node.run("queueCall", method="removeRateLimitKey", args=[]) == 1
    r.set(queue.keys.limiter, 2, px=5000)
    assert queue.remove_rate_limit_key() == 1 and not r.exists(queue.keys.limiter)


def test_remove_orphaned_jobs_twins(node, r, redis_url, prefix, qname):
    """The same orphans in twin queues: Node's removeOrphanedJobs and ours remove the same."""
    twins = {"node": qname + "n", "python": qname + "p"}
    queues = {side: Queue(name, connection=redis_url, prefix=prefix) for side, name in twins.items()}
    try:
        for q in queues.values():
            q.add_bulk([("live", {"i": i}, {"timestamp": TWIN_TS}) for i in range(3)])
            q.get_job("2").log("kept")
            for i in range(4):
                r.hset(q.keys.job(f"lost{i}"), mapping={"name": "lost", "data": "{}"})
                r.rpush(q.keys.logs(f"lost{i}"), "x")
            r.hset(q.keys.base + "dn:zz", "name", "parked")
        removed = {"node": node.run("queueCall", queue=twins["node"], method="removeOrphanedJobs", args=[]),
                   "python": queues["python"].remove_orphaned_jobs()}
        assert removed == {"node": 4, "python": 4}
        dumps = {side: _comparable(r, q.keys) for side, q in queues.items()}
        assert dumps["python"] == dumps["node"]
        assert "lost0" not in dumps["node"] and "dn:zz" in dumps["node"]
    finally:
        for q in queues.values():
            q.close()


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name)


def test_manual_processing_twins_leave_the_same_redis(node, r, redis_url, prefix, qname):
    """getNextJob + moveToCompleted/moveToFailed by Node on one queue, by our Worker on its
    twin: same ids taken, same keys left (times aside)."""
    from echomq_gevent import Worker

    twins = {"node": qname + "n", "python": qname + "p"}
    jobs = [{"name": "a", "data": {"n": 1}, "opts": {"timestamp": TWIN_TS}},
            {"name": "b", "data": {"n": 2}, "opts": {"timestamp": TWIN_TS, "attempts": 2}},
            {"name": "c", "data": {"n": 3}, "opts": {"timestamp": TWIN_TS, "removeOnFail": True}}]
    actions = [{"do": "complete", "value": {"ok": 1}}, {"do": "fail", "message": "first try"},
               {"do": "fail", "message": "gone"}, {"do": "fail", "message": "second try"},
               {"do": "complete", "value": "none left"}]
    for name in twins.values():
        node.run("addBulk", queue=name, jobs=jobs)
    taken = {"node": node.run("manualRun", queue=twins["node"], token="tok", actions=actions,
                              workerOpts={"removeOnComplete": {"count": 10}})}
    ours = Worker(twins["python"], None, connection=redis_url, prefix=prefix,
                  remove_on_complete={"count": 10})
    got = []
    for action in actions:
        job = ours.get_next_job("tok", block=False)
        got.append(job.id if job else None)
        if job is None:
            continue
        if action["do"] == "complete":
            job.move_to_completed(action["value"], "tok")
        else:
            job.move_to_failed(RuntimeError(action["message"]), "tok")
    ours.close(timeout=1)
    taken["python"] = got
    assert taken["python"] == taken["node"] == ["1", "2", "3", "2", None]
    dumps = {}
    for side, name in twins.items():
        q = Queue(name, connection=redis_url, prefix=prefix)
        dump = {}
        for suffix, (kind, value) in _comparable(r, q.keys).items():
            if kind == "hash" and "finishedOn" in value:
                value = dict(value, finishedOn="<time>")
            if kind == "hash" and "stacktrace" in value:
                value = dict(value, stacktrace=len(json.loads(value["stacktrace"])))
            if kind == "zset" and suffix in ("completed", "failed"):
                value = sorted(member for member, _score in value)
            if suffix in ("stalled-check", "marker"):
                continue
            dump[suffix] = (kind, value)
        dumps[side] = dump
        q.close()
    assert dumps["python"] == dumps["node"]


def test_prometheus_export_samples_equal_nodes(node, queue, r):
    queue.add_bulk([("a", {}), ("b", {}, {"delay": 60000}), ("c", {}, {"priority": 2})])
    r.hset(queue.keys.metrics("completed"), mapping={"count": 12, "prevTS": 1, "prevCount": 0})
    r.hset(queue.keys.metrics("failed"), "count", 3)
    labels = {"env": 'pro"d', "region": "eu\\1"}
    theirs = node.run("queueCall", method="exportPrometheusMetrics", args=[labels])
    ours = queue.export_prometheus_metrics(labels)

    def samples(text):
        return [line for line in text.split("\n") if not line.startswith("# HELP")]

    assert samples(ours) == samples(theirs)
    assert 'bullmq_job_completed_total{queue="%s", env="pro\\"d", region="eu\\\\1"} 12' % queue.name in ours
    with pytest.raises(ValueError, match="label name"):
        queue.export_prometheus_metrics({"bad-name": 1})


def test_one_state_shortcuts_answer_what_node_answers(node, queue, r):
    queue.add_bulk([("w1", {}), ("w2", {}), ("d", {}, {"delay": 60000}), ("p", {}, {"priority": 4}),
                    ("w3", {})])
    take(queue)
    due = int(queue.get_job("3").timestamp) + 60001
    for state in ("Waiting", "WaitingChildren", "Active", "Delayed", "Prioritized", "Completed", "Failed"):
        snake = _snake(state)[1:]
        assert getattr(queue, f"get_{snake}_count")() == node.run("queueCall", method=f"get{state}Count", args=[])
        ours = [j.id for j in getattr(queue, f"get_{snake}")(0, -1)]
        theirs = [j["id"] for j in node.run("queueCall", method=f"get{state}", args=[0, -1])]
        assert ours == theirs, state
    assert queue.get_delayed_count(due) == node.run("queueCall", method="getDelayedCount", args=[due]) == 1
    assert queue.get_delayed_count(due - 2) == 0
    queue.update_job_progress("2", {"p": 1})
    assert node.run("getJob", jobId="2")["progress"] == {"p": 1}
    assert queue.add_job_log("2", "one", 1) == 1 and queue.add_job_log("2", "two", 1) == 1
    assert node.run("getJobLogs", jobId="2") == {"logs": ["two"], "count": 1}
    node.run("counts")  # a Node Queue writes its version into meta
    assert queue.get_version() == node.run("queueCall", method="getVersion", args=[])


def test_job_remove_deduplication_key_like_node(node, queue, r):
    job = queue.add("a", {}, {"deduplication": {"id": "nd"}})
    key = queue.keys.dedup("nd")
    for side in ("node", "python"):
        r.set(key, "other")
        theirs = node.run("jobCall", jobId=job.id, method="removeDeduplicationKey", args=[])
        assert theirs is False and job.remove_deduplication_key() is False and r.get(key) == "other"
        r.set(key, job.id)
        done = (node.run("jobCall", jobId=job.id, method="removeDeduplicationKey", args=[]) if side == "node"
                else job.remove_deduplication_key())
        assert done is True and not r.exists(key), side

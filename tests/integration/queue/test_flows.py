"""Flows on a real Redis: FlowProducer (add, add_bulk, get_flow, bad trees), the flow
scripts' branches and return codes, and Job's parent/child calls."""
from __future__ import annotations

import json
from typing import Any, Dict

import pytest

from echomq_gevent import FlowProducer, Queue, WaitingChildrenError, Worker
from echomq_gevent.errors import (
    EchoMQError,
    InvalidOptionError,
    JobHasFailedChildren,
    JobLockMismatch,
    JobLockNotExist,
    JobNotExist,
    JobNotInState,
    ParentJobCannotBeReplaced,
    ParentJobNotExist,
)
from echomq_gevent.queue.flows import FlowError, parse_job_key

from integration.queue_helpers import TOKEN, now_ms, take
from integration.worker_scripts_helpers import finish_opts


@pytest.fixture
def flows(redis_url, prefix):
    producer = FlowProducer(connection=redis_url, prefix=prefix)
    yield producer
    producer.close()


@pytest.fixture
def kids(redis_url, prefix, qname):
    q = Queue(qname + "kids", connection=redis_url, prefix=prefix)
    yield q
    q.close()


def _tree(parent_q: str, child_q: str, n: int = 2, **child_opts: Any) -> Dict[str, Any]:
    return {"name": "parent", "queueName": parent_q, "data": {"p": 1},
            "children": [{"name": f"c{i}", "queueName": child_q, "data": {"c": i}, "opts": dict(child_opts)}
                         for i in range(n)]}


def _finish(q: Queue, job_id: str, value: Any) -> None:
    """Complete the job (taken with TOKEN) the way a worker does."""
    q.scripts.move_to_finished(job_id, now_ms(), "returnvalue", json.dumps(value), "completed", False,
                               finish_opts(TOKEN))


def _job_keys(r, prefix: str):
    return sorted(k for k in r.scan_iter(match=f"{prefix}:*")
                  if k.rsplit(":", 1)[-1] not in ("id", "meta", "events"))


# -- FlowProducer.add ------------------------------------------------------------------

def test_add_writes_parent_waiting_and_children_in_their_queue(flows, queue, kids, r):
    tree = flows.add(_tree(queue.name, kids.name))
    parent, children = tree["job"], [c["job"] for c in tree["children"]]
    assert set(tree) == {"job", "children"} and all(set(c) == {"job"} for c in tree["children"])
    assert queue.get_job_state(parent.id) == "waiting-children"
    assert [kids.get_job_state(c.id) for c in children] == ["waiting", "waiting"]
    child_keys = {kids.keys.job(c.id) for c in children}
    assert r.smembers(queue.keys.dependencies(parent.id)) == child_keys
    for child in children:
        stored = kids.get_job(child.id)
        assert stored.parent_key == queue.keys.job(parent.id) == child.parent_key
        assert stored.parent == {"id": parent.id, "queueKey": queue.qualified_name} == child.parent
        assert stored.opts["parent"] == {"id": parent.id, "queue": queue.qualified_name}
    assert queue.get_job(parent.id).data == {"p": 1} and parent.parent_key is None
    events = [f["event"] for _id, f in r.xrange(queue.keys.events)]
    assert events == ["added", "waiting-children"]


def test_ids_options_and_missing_data_as_node(flows, queue, kids):
    tree = flows.add({"name": "p", "queueName": queue.name, "opts": {"jobId": "top"},
                      "children": [{"name": "late", "queueName": kids.name, "opts": {"delay": 60000}},
                                   {"name": "prio", "queueName": kids.name, "data": None,
                                    "opts": {"priority": 4, "jobId": "kid-1"}}]})
    assert tree["job"].id == "top"
    late, prio = (c["job"] for c in tree["children"])
    assert len(late.id) == 36 and late.id.count("-") == 4, "generated ids are UUIDs, as Node's"
    assert prio.id == "kid-1"
    assert kids.get_job_state(late.id) == "delayed" and kids.get_job_state("kid-1") == "prioritized"
    assert queue.get_job("top").data == {} and kids.get_job("kid-1").data is None


def test_grandchildren_across_three_queues_and_queue_defaults(flows, queue, kids, redis_url, prefix, qname):
    tree = flows.add({"name": "a", "queueName": queue.name, "children": [
        {"name": "b", "queueName": kids.name, "children": [
            {"name": "c", "queueName": qname + "leaf", "data": {"deep": True}}]}]},
        queues_options={qname + "leaf": {"defaultJobOptions": {"attempts": 4, "jobId": "ignored"}}})
    b = tree["children"][0]["job"]
    c = tree["children"][0]["children"][0]["job"]
    assert kids.get_job_state(b.id) == "waiting-children"
    assert c.opts["attempts"] == 4 and c.id != "ignored"
    with Queue(qname + "leaf", connection=redis_url, prefix=prefix) as leaf:
        assert leaf.get_job(c.id).parent_key == kids.keys.job(b.id)


def test_add_bulk_is_one_transaction_for_many_flows(flows, queue, kids, r):
    trees = flows.add_bulk([_tree(queue.name, kids.name, n=1), _tree(queue.name, kids.name, n=3)])
    assert [len(t["children"]) for t in trees] == [1, 3]
    assert queue.get_job_counts("waiting-children") == {"waiting-children": 2}
    assert kids.get_job_counts("waiting") == {"waiting": 4}
    assert flows.add_bulk([]) == []


def test_existing_completed_child_releases_its_parent_at_the_end(flows, queue, kids, r):
    """A child id that already completed counts as processed; the parent, left with no
    pending child once the whole flow is in, goes to wait in the same transaction."""
    kids.add("early", {}, {"jobId": "early"})
    job_id = take(kids)
    _finish(kids, job_id, {"v": 42})
    tree = flows.add({"name": "p", "queueName": queue.name, "children": [
        {"name": "early", "queueName": kids.name, "opts": {"jobId": "early"}}]})
    parent = tree["job"]
    assert queue.get_job_state(parent.id) == "waiting"
    assert parent.get_children_values() == {kids.keys.job("early"): {"v": 42}}
    events = [f["event"] for _id, f in r.xrange(queue.keys.events)]
    assert events == ["added", "waiting-children", "waiting"]


def test_child_owned_by_another_parent_is_refused_and_its_new_parent_keeps_waiting(flows, queue, kids, r):
    first = flows.add({"name": "p1", "queueName": queue.name, "children": [
        {"name": "shared", "queueName": kids.name, "opts": {"jobId": "shared"}}]})
    with pytest.raises(ParentJobCannotBeReplaced) as info:
        flows.add({"name": "p2", "queueName": queue.name, "children": [
            {"name": "shared", "queueName": kids.name, "opts": {"jobId": "shared"}}]})
    assert "root.children[0]" in str(info.value) and "'shared'" in str(info.value)
    (p2,) = [i for i in r.zrange(queue.keys.waiting_children, 0, -1) if i != first["job"].id]
    assert queue.get_job_state(p2) == "waiting-children"
    assert r.hget(queue.keys.job(p2), "flowAttachmentFailed") is None, "the mark is taken back"
    assert kids.get_job("shared").parent_key == queue.keys.job(first["job"].id)


# -- bad trees -----------------------------------------------------------------------

@pytest.mark.parametrize("tree, error, words", [
    ({"name": "p", "data": {}}, FlowError, ["root", "'queueName' is missing"]),
    ({"name": "p", "queueName": "a", "children": [{"name": "c"}]}, FlowError,
     ["root.children[0]", "'queueName' is missing"]),
    ({"name": "p", "queueName": "a", "children": [{"name": "c", "queueName": "b:c"}]}, FlowError,
     ["root.children[0]", "'queueName'", "':'"]),
    ({"name": 3, "queueName": "a"}, FlowError, ["root", "'name'"]),
    ({"name": "p", "queueName": "a", "opts": [1]}, FlowError, ["root", "'opts'"]),
    ({"name": "p", "queueName": "a", "children": {"name": "c"}}, FlowError, ["root", "'children'"]),
    ({"name": "p", "queueName": "a", "child": []}, FlowError, ["root", "unknown field", "'child'"]),
    ("not a tree", FlowError, ["root", "mapping"]),
    ({"name": "p", "queueName": "a", "opts": {"deduplication": {"id": "d"}},
      "children": [{"name": "c", "queueName": "b"}]}, FlowError, ["root", "deduplication"]),
    ({"name": "p", "queueName": "a", "children": [
        {"name": "c", "queueName": "b", "opts": {"parent": {"id": "x", "queue": "bull:a"}}}]},
     FlowError, ["root.children[0]", "'opts.parent'"]),
    ({"name": "p", "queueName": "a", "children": [{"name": "c", "queueName": "b", "opts": {"atempts": 2}}]},
     InvalidOptionError, ["root.children[0]", "atempts", "attempts"]),
    ({"name": "p", "queueName": "a", "children": [{"name": "c", "queueName": "b", "data": {1, 2}}]},
     EchoMQError, ["root.children[0]", "JSON"]),
])
def test_bad_trees_are_refused_before_anything_is_written(flows, r, prefix, tree, error, words):
    with pytest.raises(error) as info:
        flows.add(tree)
    for word in words:
        assert word in str(info.value), str(info.value)
    assert not list(r.scan_iter(match=f"{prefix}:*"))


def test_root_on_a_missing_parent_names_the_field_and_writes_nothing(flows, queue, kids, r, prefix):
    tree = _tree(kids.name, kids.name)
    tree["opts"] = {"parent": {"id": "gone", "queue": queue.qualified_name}}
    with pytest.raises(ParentJobNotExist) as info:
        flows.add(tree)
    text = str(info.value)
    assert "opts.parent" in text and queue.keys.job("gone") in text and "root" in text
    assert _job_keys(r, prefix) == []


def test_add_bulk_names_the_flow_that_failed(flows, queue, kids):
    good = _tree(queue.name, kids.name, n=1)
    bad = _tree(queue.name, kids.name, n=1)
    bad["opts"] = {"parent": {"id": "gone", "queue": queue.qualified_name}}
    with pytest.raises(ParentJobNotExist, match=r"flows\[1\]"):
        flows.add_bulk([good, bad])
    assert queue.get_job_counts("waiting-children") == {"waiting-children": 1}
    with pytest.raises(FlowError, match="list of flow trees"):
        flows.add_bulk(good)


def test_root_under_an_existing_parent(flows, queue, kids):
    top = queue.add("top", {}, {"jobId": "top"})
    tree = _tree(kids.name, kids.name, n=1)
    tree["opts"] = {"parent": {"id": top.id, "queue": queue.qualified_name}}
    added = flows.add(tree)
    assert added["job"].parent_key == queue.keys.job("top")
    assert queue.get_job("top").get_dependencies_count(unprocessed=True) == {"unprocessed": 1}


# -- get_flow --------------------------------------------------------------------------

def test_get_flow_depth_and_max_children(flows, queue, kids, qname):
    tree = _tree(queue.name, kids.name, n=3)
    tree["children"][0]["children"] = [{"name": "g", "queueName": kids.name}]
    added = flows.add(tree)
    full = flows.get_flow(added["job"].id, queue.name)
    assert full["job"].id == added["job"].id and len(full["children"]) == 3
    with_grandchild = [c for c in full["children"] if "children" in c]
    assert len(with_grandchild) == 1 and with_grandchild[0]["children"][0]["job"].name == "g"
    assert set(flows.get_flow(added["job"].id, queue.name, depth=1)) == {"job"}
    shallow = flows.get_flow(added["job"].id, queue.name, depth=2, max_children=1)
    # max_children is a scan COUNT for sets and hashes (a hint to Redis, as in Node)
    assert 1 <= len(shallow["children"]) <= 3
    assert all(set(child) == {"job"} for child in shallow["children"])
    assert flows.get_flow("missing", queue.name) is None
    with pytest.raises(EchoMQError, match="depth"):
        flows.get_flow(added["job"].id, queue.name, depth=0)


def test_parse_job_key():
    assert parse_job_key("bull:q:42") == ("bull", "q", "42")
    assert parse_job_key("{a:b}:q:x-1") == ("{a:b}", "q", "x-1")
    with pytest.raises(EchoMQError):
        parse_job_key("nokey")


# -- moveToWaitingChildren -------------------------------------------------------------

def _active_parent(flows, queue, kids, n=2, **child_opts):
    """A flow whose parent was made runnable and taken (active, lock TOKEN) while children
    are still pending: children added with the parent already active, as a step-pattern
    processor does."""
    parent = queue.add("boss", {})
    assert take(queue) == parent.id
    for i in range(n):
        kids.add(f"c{i}", {}, dict(child_opts, parent={"id": parent.id, "queue": queue.qualified_name}))
    return queue.get_job(parent.id)


def test_move_to_waiting_children_moves_only_with_pending_children(flows, queue, kids, r):
    parent = _active_parent(flows, queue, kids)
    parent.token = TOKEN
    pending = sorted(r.smembers(queue.keys.dependencies(parent.id)))
    other = {"id": "nope", "queue": kids.qualified_name}
    assert parent.move_to_waiting_children(child=other) is False, "that child is not pending"
    assert queue.get_job_state(parent.id) == "active"
    assert parent.move_to_waiting_children(child={"id": pending[0].rsplit(":", 1)[1],
                                                  "queue": kids.qualified_name}) is True
    assert queue.get_job_state(parent.id) == "waiting-children"
    assert not r.exists(queue.keys.lock(parent.id))
    last = [f for _id, f in r.xrange(queue.keys.events)][-1]
    assert last == {"event": "waiting-children", "jobId": parent.id, "prev": "active"}


def test_move_to_waiting_children_without_pending_children_stays_active(queue):
    job = queue.add("alone", {})
    take(queue)
    job.token = TOKEN
    assert job.move_to_waiting_children() is False
    assert queue.get_job_state(job.id) == "active"
    assert queue.client.get(queue.keys.lock(job.id)) == TOKEN, "the lock is not touched"


def test_move_to_waiting_children_errors(flows, queue, kids, r):
    parent = _active_parent(flows, queue, kids)
    with pytest.raises(JobLockMismatch, match="waiting-children"):
        parent.move_to_waiting_children("someone-else")
    with pytest.raises(EchoMQError, match="no lock token"):
        parent.move_to_waiting_children()
    r.delete(queue.keys.lock(parent.id))
    with pytest.raises(JobLockNotExist):
        parent.move_to_waiting_children(TOKEN)
    assert parent.move_to_waiting_children("0") is True  # token "0" skips the lock check
    with pytest.raises(JobNotInState, match="waiting-children, not active"):
        parent.move_to_waiting_children("0")
    r.zadd(queue.keys.unsuccessful(parent.id), {"bull:x:1": 1})
    with pytest.raises(JobHasFailedChildren):
        parent.move_to_waiting_children("0")
    ghost = queue.add("g", {})
    ghost.remove()
    with pytest.raises(JobNotExist):
        ghost.move_to_waiting_children("0")
    with pytest.raises(EchoMQError, match="child must be"):
        parent.move_to_waiting_children("0", child={"id": "1"})


def test_worker_step_pattern_waits_then_reads_children(redis_url, prefix, queue, kids):
    """In-process: our Worker runs a parent that adds children and waits for them, and
    the same Worker class runs the children; the parent's second run returns their values."""
    import gevent

    runs = []

    def parent_processor(job):
        runs.append(job.data.get("step"))
        if job.data.get("step") is None:
            job.update_data({"step": "waiting"})
            for i in range(2):
                kids.add("k", {"i": i}, {"parent": {"id": job.id, "queue": job.queue_qualified_name}})
            assert job.token, "the processor can read its lock token"
            if job.move_to_waiting_children(job.token):
                raise WaitingChildrenError()
        return job.get_children_values()

    parent = queue.add("boss", {})
    parents = Worker(queue.name, parent_processor, connection=redis_url, prefix=prefix, drain_delay=1)
    children = Worker(kids.name, lambda job: job.data["i"] * 10, connection=redis_url, prefix=prefix,
                      drain_delay=1)
    parents.start()
    children.start()
    try:
        deadline = gevent.Timeout(15)
        deadline.start()
        try:
            while queue.get_job_state(parent.id) != "completed":
                gevent.sleep(0.05)
        finally:
            deadline.cancel()
    finally:
        parents.close(timeout=5)
        children.close(timeout=5)
    done = queue.get_job(parent.id)
    assert sorted(done.returnvalue.values()) == [0, 10]
    assert runs == [None, "waiting"]
    assert done.attempts_made == 1


# -- getters ---------------------------------------------------------------------------

def test_dependency_getters_on_every_group(flows, queue, kids, r):
    tree = flows.add(_tree(queue.name, kids.name, n=4))
    parent = queue.get_job(tree["job"].id)
    keys = [kids.keys.job(c["job"].id) for c in tree["children"]]
    # c0 completed, c1 failed and ignored, c2 failed with fpof, c3 pending
    r.srem(queue.keys.dependencies(parent.id), *keys[:3])
    r.hset(queue.keys.processed(parent.id), keys[0], json.dumps({"ok": 1}))
    r.hset(queue.keys.failed_children(parent.id), keys[1], "boom")
    r.zadd(queue.keys.unsuccessful(parent.id), {keys[2]: 5})
    assert parent.get_dependencies() == {"processed": {keys[0]: {"ok": 1}}, "unprocessed": [keys[3]],
                                         "ignored": {keys[1]: "boom"}, "failed": [keys[2]]}
    assert parent.get_dependencies_count() == {"processed": 1, "unprocessed": 1, "ignored": 1, "failed": 1}
    assert parent.get_dependencies_count(failed=True) == {"failed": 1}
    paged = parent.get_dependencies(processed=True, failed={"cursor": 0, "count": 1})
    assert paged == {"processed": {keys[0]: {"ok": 1}}, "nextProcessedCursor": 0,
                     "failed": [keys[2]], "nextFailedCursor": 1}
    assert parent.get_children_values() == {keys[0]: {"ok": 1}}
    assert parent.get_ignored_children_failures() == parent.get_failed_children_values() == {keys[1]: "boom"}
    with pytest.raises(EchoMQError, match="processed.count"):
        parent.get_dependencies(processed={"count": -1})
    with pytest.raises(EchoMQError, match="only 'cursor' and 'count'"):
        parent.get_dependencies(unprocessed={"size": 1})
    r.hset(queue.keys.processed(parent.id), keys[0], "{not json")
    with pytest.raises(EchoMQError, match="not valid JSON"):
        parent.get_children_values()


def test_queue_get_dependencies_pages_through_many_children(queue, kids, r):
    """paginate-1 over more children than one scan returns (100): every child once, in
    pages, with totals and their jobs; processed children with their values."""
    parent = queue.add("p", {}, {"jobId": "big"})
    ids = [kids.add("k", {"n": i}).id for i in range(250)]
    deps = queue.keys.dependencies("big")
    r.sadd(deps, *[kids.keys.job(i) for i in ids])
    seen = []
    for start in range(0, 250, 60):
        page = queue.get_dependencies(parent.id, "pending", start, start + 59)
        assert page["total"] == 250
        assert len(page["items"]) == min(60, 250 - start)
        assert [j.id for j in page["jobs"]] == [parse_job_key(i["id"])[2] for i in page["items"]]
        seen += [i["id"] for i in page["items"]]
    assert sorted(seen) == sorted(kids.keys.job(i) for i in ids)
    everything = queue.get_dependencies(parent.id, "pending")
    assert len(everything["items"]) == 250
    r.hset(queue.keys.processed("big"), mapping={kids.keys.job(ids[0]): "7", kids.keys.job(ids[1]): "{bad"})
    done = queue.get_dependencies(parent.id, "processed")
    by_id = {i["id"]: i for i in done["items"]}
    assert by_id[kids.keys.job(ids[0])] == {"id": kids.keys.job(ids[0]), "v": 7}
    assert "err" in by_id[kids.keys.job(ids[1])]
    assert queue.get_dependencies("nobody", "processed") == {"items": [], "total": 0, "jobs": []}
    with pytest.raises(EchoMQError, match="kind"):
        queue.get_dependencies(parent.id, "done")
    r.set(queue.keys.base + "str", "x")
    with pytest.raises(Exception, match="only supported for sets and hashes"):
        queue.scripts.flows.paginate(queue.keys.base + "str", 0, -1)


# -- removing links and children ---------------------------------------------------------

def test_remove_child_dependency(flows, queue, kids, r):
    tree = flows.add(_tree(queue.name, kids.name, n=2))
    parent_id = tree["job"].id
    c0, c1 = (kids.get_job(c["job"].id) for c in tree["children"])
    assert c0.remove_child_dependency() is True
    assert c0.parent_key is None and kids.get_job(c0.id).parent_key is None
    assert queue.get_job_state(parent_id) == "waiting-children"
    with pytest.raises(EchoMQError, match="has no parent"):
        c0.remove_child_dependency()
    assert c1.remove_child_dependency() is True
    assert queue.get_job_state(parent_id) == "waiting", "released: no pending child left"
    stale = kids.get_job(c1.id)
    stale.parent_key = queue.keys.job(parent_id)
    assert stale.remove_child_dependency() is False, "no longer listed"
    stale.parent_key = queue.keys.job("gone")
    with pytest.raises(ParentJobNotExist):
        stale.remove_child_dependency()
    kids.remove_job(c1.id)
    stale.parent_key = queue.keys.job(parent_id)
    with pytest.raises(JobNotExist):
        stale.remove_child_dependency()


def test_remove_unprocessed_children_keeps_locked_and_failed_ones(flows, queue, kids, r):
    tree = _tree(queue.name, kids.name, n=4)
    tree["children"][3]["children"] = [{"name": "g", "queueName": kids.name}]
    added = flows.add(tree)
    parent = queue.get_job(added["job"].id)
    c = [ch["job"].id for ch in added["children"]]
    g = added["children"][3]["children"][0]["job"].id
    r.set(kids.keys.lock(c[0]), "someone")          # held by a worker
    r.zadd(kids.keys.failed, {c[1]: 1})              # failed (without a policy: still pending)
    parent.remove_unprocessed_children()
    assert sorted(r.smembers(queue.keys.dependencies(parent.id))) == sorted(
        kids.keys.job(i) for i in c[:2])
    for gone in (c[2], c[3], g):
        assert kids.get_job(gone) is None
    removed = [f["jobId"] for _id, f in r.xrange(kids.keys.events) if f["event"] == "removed"]
    assert sorted(removed) == sorted([c[2], c[3], g])
    assert queue.get_job_state(parent.id) == "waiting-children"
    r.delete(kids.keys.lock(c[0]))
    r.zrem(kids.keys.failed, c[1])
    parent.remove_unprocessed_children()
    assert queue.get_job_state(parent.id) == "waiting", "released when the last pending child goes"
    assert not r.exists(queue.keys.dependencies(parent.id))


"""Flows across runtimes: our FlowProducer against Node's, on one Redis.

A Python-built flow over two queues is run by Node children and a Python parent (and the
reverse); each failure policy on a Python-built flow leaves the same keys as the same
flow built by Node's FlowProducer; get_flow, the dependency getters and the link
changes answer as Node's do on the same jobs.
"""
from __future__ import annotations

import json
import re
from typing import Any, Dict, List

import pytest

from echomq_gevent import FlowProducer, Queue
from echomq_gevent.protocol.keys import QueueKeys

from interop_helpers import dump_queue


@pytest.fixture
def flows(redis_url, prefix):
    producer = FlowProducer(connection=redis_url, prefix=prefix)
    yield producer
    producer.close()


def _tree(parent_q: str, child_q: str, child_opts=None, n: int = 2) -> Dict[str, Any]:
    return {"name": "parent", "queueName": parent_q, "data": {"p": 1},
            "children": [{"name": f"c{i}", "queueName": child_q, "data": {"c": i},
                          "opts": dict((child_opts or {}).get(i, {}))} for i in range(n)]}


def _ids(tree: Dict[str, Any]) -> Dict[str, Any]:
    """Our add() answer in the Node tool's {id, queue, children} shape."""
    return {"id": tree["job"].id, "queue": tree["job"].queue_name,
            "children": [_ids(c) for c in tree.get("children", [])]}


def test_python_flow_runs_on_node_children_and_a_python_parent(node, flows, redis_url, prefix, qname):
    parent_q, child_q = qname + "p", qname + "c"
    tree = flows.add(_tree(parent_q, child_q))
    parent = tree["job"]
    child_keys = [f"{prefix}:{child_q}:{c['job'].id}" for c in tree["children"]]
    assert node.run("getState", queue=parent_q, jobId=parent.id) == "waiting-children"
    assert node.run("getDependenciesCount", queue=parent_q, jobId=parent.id) == {
        "processed": 0, "unprocessed": 2, "ignored": 0, "failed": 0}

    theirs = node.worker(queue=child_q, workerOpts={"drainDelay": 1}, stopAfter=2,
                         behaviour={"returnData": True})
    ours = node.python_worker(queue=parent_q, workerOpts={"drain_delay": 1}, stopAfter=1,
                              behaviour={"returnChildrenValues": True})
    done = ours.wait_event("completed", timeout=20, jobId=parent.id)
    theirs.wait_event("exit", timeout=10)
    assert done["result"] == {key: {"c": i} for i, key in enumerate(child_keys)}
    assert node.run("getJob", queue=parent_q, jobId=parent.id)["returnvalue"] == done["result"]
    assert node.run("getChildrenValues", queue=parent_q, jobId=parent.id) == done["result"]


def test_node_flow_runs_on_our_workers_in_two_queues(node, redis_url, prefix, qname):
    parent_q, child_q = qname + "p", qname + "c"
    added = node.run("flow", tree=_tree(parent_q, child_q, n=3))
    kids = node.python_worker(queue=child_q, workerOpts={"drain_delay": 1}, stopAfter=3,
                              behaviour={"returnData": True})
    parents = node.python_worker(queue=parent_q, workerOpts={"drain_delay": 1}, stopAfter=1,
                                 behaviour={"returnChildrenValues": True})
    done = parents.wait_event("completed", timeout=20, jobId=added["id"])
    kids.wait_event("exit", timeout=10)
    assert done["result"] == {f"{prefix}:{child_q}:{c['id']}": {"c": i}
                              for i, c in enumerate(added["children"])}
    with Queue(parent_q, connection=redis_url, prefix=prefix) as q:
        job = q.get_job(added["id"])
        assert job.get_children_values() == done["result"]
        assert job.get_dependencies_count() == {"processed": 3, "unprocessed": 0, "ignored": 0,
                                                "failed": 0}


def test_our_parent_adds_children_and_waits_for_them(node, qname, prefix):
    """The step pattern in our processor: add children (run by a Node worker), then
    move_to_waiting_children + WaitingChildrenError; the parent runs again when they are done."""
    parent_q, child_q = qname + "p", qname + "c"
    parent = node.run("add", queue=parent_q, name="boss", data={"n": 1})
    ours = node.python_worker(queue=parent_q, workerOpts={"drain_delay": 1}, stopAfter=1,
                              behaviour={"waitChildren": True,
                                         "spawnChildren": {"queue": child_q, "n": 3}})
    ours.wait_event("process", timeout=10, jobId=parent["id"])
    theirs = node.worker(queue=child_q, workerOpts={"drainDelay": 1}, stopAfter=3,
                         behaviour={"returnData": True})
    done = ours.wait_event("completed", timeout=20, jobId=parent["id"])
    theirs.wait_event("exit", timeout=10)
    assert sorted(done["result"].values(), key=lambda v: v["i"]) == [{"i": i} for i in range(3)]
    runs = ours.events("process")
    assert [r["jobId"] for r in runs] == [parent["id"]] * 2, "the parent runs twice: before and after"
    assert not ours.events("failed") and not ours.events("error")
    back = node.run("getJob", queue=parent_q, jobId=parent["id"])
    assert back["data"] == {"n": 1, "waited": True}
    assert back["attemptsMade"] == 1, "waiting for children is not a failed attempt"


def test_node_parent_waits_for_children_our_worker_runs(node, qname):
    """The reverse: Node's processor adds children and waits; our worker runs the children."""
    parent_q, child_q = qname + "p", qname + "c"
    parent = node.run("add", queue=parent_q, name="boss", data={})
    theirs = node.worker(queue=parent_q, workerOpts={"drainDelay": 1}, stopAfter=1,
                         behaviour={"waitChildren": True, "spawnChildren": {"queue": child_q, "n": 2}})
    theirs.wait_event("process", timeout=10, jobId=parent["id"])
    ours = node.python_worker(queue=child_q, workerOpts={"drain_delay": 1}, stopAfter=2,
                              behaviour={"returnData": True})
    done = theirs.wait_event("completed", timeout=20, jobId=parent["id"])
    ours.wait_event("exit", timeout=10)
    assert sorted(v["i"] for v in done["result"].values()) == [0, 1]


# ---------------------------------------------------------------------------------------
# Twins: the same flow built by Node and by us, the same failures, the same keys
# ---------------------------------------------------------------------------------------

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_JSON_FIELDS = ("data", "opts", "parent", "returnvalue")


def _labels(tree: Dict[str, Any], path: str = "root") -> Dict[str, str]:
    out = {tree["id"]: path}
    for i, child in enumerate(tree["children"]):
        out.update(_labels(child, f"{path}.{i}"))
    return out


def _normalise(value: Any, labels: Dict[str, str], queues: Dict[str, str]) -> Any:
    """Ids -> tree positions, queue names -> roles, JSON text -> values; recursively."""
    if isinstance(value, str):
        for name, role in queues.items():
            value = value.replace(name, role)
        return _UUID.sub(lambda m: labels.get(m.group(0), "<unknown id>"), value)
    if isinstance(value, dict):
        return {_normalise(k, labels, queues): _normalise(v, labels, queues) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalise(v, labels, queues) for v in value]
    return value


def _flow_dump(r, prefix: str, queue: str, labels: Dict[str, str], queues: Dict[str, str]) -> Dict[str, Any]:
    """A queue's keys without times and run-dependent bookkeeping, ids by tree position."""
    out = {}
    for suffix, (kind, value) in dump_queue(r, QueueKeys(queue, prefix)).items():
        if suffix in ("stalled-check", "stalled", "marker") or suffix.startswith("metrics"):
            continue
        if kind == "hash" and "name" in value:
            value = {k: (json.loads(v) if k in _JSON_FIELDS else v) for k, v in value.items()
                     if k not in ("timestamp", "processedOn", "finishedOn", "stacktrace", "pb")}
        elif kind == "zset":
            value = sorted(member for member, _score in value)
        elif kind == "stream":
            # "delay" of a "delayed" event is the due time
            value = [{k: v for k, v in f.items() if k not in ("returnvalue", "failedReason", "delay")}
                     for f in value if f.get("event") != "drained"]
        elif kind == "set":
            value = sorted(value)
        out[_normalise(suffix, labels, queues)] = (kind, _normalise(value, labels, queues))
    return out


POLICIES = ["failParentOnFailure", "continueParentOnFailure", "ignoreDependencyOnFailure",
            "removeDependencyOnFailure", None]


def _serve(node, worker: str, queue: str, stop_after: int, **how: Any) -> None:
    """Run a worker (Node's or ours, concurrency 1) on ``queue`` until ``stop_after`` outcomes."""
    if worker == "node":
        proc = node.worker(queue=queue, workerOpts={"drainDelay": 1, "concurrency": 1},
                           stopAfter=stop_after, **how)
    else:
        proc = node.python_worker(queue=queue, workerOpts={"drain_delay": 1, "concurrency": 1},
                                  stopAfter=stop_after, **how)
    proc.wait_event("exit", timeout=20)
    assert not proc.events("error"), proc.describe()


@pytest.mark.parametrize("worker", ["node", "ours"], ids=["node-workers", "our-workers"])
@pytest.mark.parametrize("policy", POLICIES, ids=[p or "no-policy" for p in POLICIES])
def test_failure_policy_twin_leaves_the_same_keys_as_node(node, flows, r, prefix, qname, policy, worker):
    """Child c0 fails for good (with ``policy``), c1 completes, then the parent's queue is
    served, by the same kind of worker on both sides; the flow built by Node and the one
    built by us end in the same keys."""
    child_opts = {0: {policy: True} if policy else {}}
    sides = {}
    for side in ("node", "ours"):
        parent_q, child_q = f"{qname}{side}p", f"{qname}{side}c"
        tree = _tree(parent_q, child_q, child_opts)
        added = node.run("flow", tree=tree) if side == "node" else _ids(flows.add(tree))
        _serve(node, worker, child_q, 2, byName={"c0": {"failTimes": 9, "failMessage": "c0 broke"},
                                                 "c1": {"returnData": True}})
        state = node.run("getState", queue=parent_q, jobId=added["id"])
        if state != "waiting-children":
            _serve(node, worker, parent_q, 1, behaviour={"returnChildrenValues": True})
        sides[side] = (added, state, parent_q, child_q)

    expected_state = "waiting" if policy else "waiting-children"
    dumps = {}
    for side, (added, state, parent_q, child_q) in sides.items():
        assert state == expected_state, f"{side}: parent state {state} after the children ran"
        labels = _labels(added)
        queues = {parent_q: "<parents>", child_q: "<children>"}
        dumps[side] = {role: _flow_dump(r, prefix, q, labels, queues)
                       for role, q in (("parents", parent_q), ("children", child_q))}
    for role in ("parents", "children"):
        ours, theirs = dumps["ours"][role], dumps["node"][role]
        for suffix in sorted(set(ours) | set(theirs)):
            assert ours.get(suffix) == theirs.get(suffix), f"{role} queue: key {suffix!r} differs"


def test_flow_with_custom_ids_grandchildren_and_options_twin(node, flows, r, prefix, qname):
    """Custom ids, a delayed and a prioritized child, a grandchild in a third queue, and a
    child that already exists and completed: the same keys right after the add."""
    sides = {}
    for side in ("node", "ours"):
        a, b, c = (f"{qname}{side}{x}" for x in "abc")
        node.run("add", queue=b, name="done-before", data={}, opts={"jobId": "early"})
        early = node.worker(queue=b, workerOpts={"drainDelay": 1}, stopAfter=1, behaviour={"return": 42})
        early.wait_event("exit", timeout=15)
        tree = {"name": "top", "queueName": a, "data": {"t": 1}, "opts": {"jobId": "top-1", "priority": 3},
                "children": [
                    {"name": "mid", "queueName": b, "data": {"m": 1}, "opts": {"jobId": "mid-1"},
                     "children": [{"name": "leaf", "queueName": c, "data": None,
                                   "opts": {"delay": 60000, "failParentOnFailure": True}}]},
                    {"name": "prio", "queueName": b, "opts": {"priority": 5, "attempts": 3}},
                    {"name": "done-before", "queueName": b, "data": {}, "opts": {"jobId": "early"}},
                ]}
        added = node.run("flow", tree=tree) if side == "node" else _ids(flows.add(tree))
        sides[side] = (added, {a: "<a>", b: "<b>", c: "<c>"})
    dumps = {}
    for side, (added, queues) in sides.items():
        labels = _labels(added)
        dumps[side] = {role: _flow_dump(r, prefix, q, labels, queues) for q, role in queues.items()}
    for role in ("<a>", "<b>", "<c>"):
        ours, theirs = dumps["ours"][role], dumps["node"][role]
        for suffix in sorted(set(ours) | set(theirs)):
            assert ours.get(suffix) == theirs.get(suffix), f"queue {role}: key {suffix!r} differs"


# ---------------------------------------------------------------------------------------
# Getters and link changes answer as Node's
# ---------------------------------------------------------------------------------------

def _view(tree: Dict[str, Any]) -> Dict[str, Any]:
    """Our get_flow answer in the Node tool's {job: view, children} shape (fields that
    both decode alike)."""
    if tree is None:
        return None
    job = tree["job"]
    out: Dict[str, Any] = {"job": {"id": job.id, "name": job.name, "data": job.data,
                                   "parentKey": job.parent_key, "returnvalue": job.returnvalue,
                                   "failedReason": job.failed_reason}}
    if "children" in tree:
        out["children"] = [_view(c) for c in tree["children"]]
    return out


def _node_view(tree: Dict[str, Any]) -> Dict[str, Any]:
    if tree is None:
        return None
    job = tree["job"]
    out: Dict[str, Any] = {"job": {k: job.get(k) for k in ("id", "name", "data", "parentKey",
                                                           "returnvalue", "failedReason")}}
    if "children" in tree:
        out["children"] = [_node_view(c) for c in tree["children"]]
    return out


def test_get_flow_and_dependency_getters_equal_node(node, flows, redis_url, prefix, qname):
    parent_q, child_q, leaf_q = qname + "p", qname + "c", qname + "l"
    tree = _tree(parent_q, child_q, {0: {"ignoreDependencyOnFailure": True},
                                     1: {"failParentOnFailure": True}}, n=5)
    tree["children"][4]["children"] = [{"name": "leaf", "queueName": leaf_q, "data": {"l": 1}}]
    tree["children"][3]["opts"] = {"delay": 600000}  # stays pending
    added = flows.add(tree)
    parent_id = added["job"].id
    kids = node.worker(queue=child_q, workerOpts={"drainDelay": 1, "concurrency": 1}, stopAfter=3,
                       byName={"c0": {"failTimes": 9, "failMessage": "c0 broke"},
                               "c1": {"failTimes": 9, "failMessage": "c1 broke"},
                               "c2": {"returnData": True}})
    kids.wait_event("exit", timeout=20)

    for depth, max_children in ((10, 20), (1, 20), (2, 2), (3, 1)):
        ours = _view(flows.get_flow(parent_id, parent_q, depth=depth, max_children=max_children))
        theirs = _node_view(node.run("getFlow", queue=parent_q, jobId=parent_id, depth=depth,
                                     maxChildren=max_children))
        assert ours == theirs, f"get_flow depth={depth} max_children={max_children}"
    assert flows.get_flow("nope", parent_q) is None
    assert node.run("getFlow", queue=parent_q, jobId="nope") is None

    with Queue(parent_q, connection=redis_url, prefix=prefix) as q:
        job = q.get_job(parent_id)
        assert job.get_dependencies() == _sorted_unprocessed(
            node.run("getDependencies", queue=parent_q, jobId=parent_id))
        paged = {"processed": {"count": 10}, "unprocessed": {"cursor": 0, "count": 10},
                 "ignored": {}, "failed": {"cursor": 0, "count": 1}}
        assert job.get_dependencies(**paged) == node.run("getDependencies", queue=parent_q,
                                                         jobId=parent_id, opts=paged)
        assert job.get_dependencies(failed={"cursor": 1, "count": 5}) == node.run(
            "getDependencies", queue=parent_q, jobId=parent_id, opts={"failed": {"cursor": 1, "count": 5}})
        for opts in ({}, {"processed": True}, {"unprocessed": True, "failed": True}):
            assert job.get_dependencies_count(**opts) == node.run(
                "getDependenciesCount", queue=parent_q, jobId=parent_id, opts=opts)
        assert job.get_children_values() == node.run("getChildrenValues", queue=parent_q, jobId=parent_id)
        assert job.get_ignored_children_failures() == node.run(
            "getIgnoredChildrenFailures", queue=parent_q, jobId=parent_id)
        assert job.get_failed_children_values() == node.run(
            "getFailedChildrenValues", queue=parent_q, jobId=parent_id)
        for kind in ("processed", "pending"):
            for start, end in ((0, -1), (0, 0), (1, 3)):
                mine = q.get_dependencies(parent_id, kind, start, end)
                theirs = node.run("queueGetDependencies", queue=parent_q, parentId=parent_id,
                                  type=kind, start=start, end=end)
                assert {"items": mine["items"], "total": mine["total"],
                        "jobs": [{"name": j.name, "data": json.dumps(j.data, separators=(",", ":"))}
                                 for j in mine["jobs"]]} == theirs, (kind, start, end)


def _sorted_unprocessed(deps: Dict[str, Any]) -> Dict[str, Any]:
    return dict(deps, unprocessed=sorted(deps["unprocessed"]))


def test_remove_child_dependency_and_unprocessed_children_twin(node, flows, r, redis_url, prefix, qname):
    """Node's removeChildDependency / removeUnprocessedChildren and ours, on twin flows
    built by us: the same answers and the same keys (the parent is released when its last
    pending child goes)."""
    sides = {}
    for side in ("node", "ours"):
        parent_q, child_q = f"{qname}{side}p", f"{qname}{side}c"
        tree = _tree(parent_q, child_q, n=4)
        added = _ids(flows.add(tree))
        c0, c1 = added["children"][0]["id"], added["children"][1]["id"]
        if side == "node":
            first = node.run("removeChildDependency", queue=child_q, jobId=c0)
            again = node.run("removeChildDependency", queue=child_q, jobId=c1)
            node.run("removeUnprocessedChildren", queue=parent_q, jobId=added["id"])
        else:
            with Queue(child_q, connection=redis_url, prefix=prefix) as q:
                first = q.get_job(c0).remove_child_dependency()
                again = q.get_job(c1).remove_child_dependency()
            with Queue(parent_q, connection=redis_url, prefix=prefix) as q:
                q.get_job(added["id"]).remove_unprocessed_children()
        assert (first, again) == (True, True)
        sides[side] = (added, {parent_q: "<parents>", child_q: "<children>"})
    dumps = {}
    for side, (added, queues) in sides.items():
        labels = _labels(added)
        dumps[side] = {role: _flow_dump(r, prefix, q, labels, queues) for q, role in queues.items()}
        # children are removed in the set's order, which depends on their (random) ids
        kind, events = dumps[side]["<children>"]["events"]
        dumps[side]["<children>"]["events"] = (kind, sorted(events, key=lambda e: json.dumps(e, sort_keys=True)))
    for role in ("<parents>", "<children>"):
        ours, theirs = dumps["ours"][role], dumps["node"][role]
        for suffix in sorted(set(ours) | set(theirs)):
            assert ours.get(suffix) == theirs.get(suffix), f"queue {role}: key {suffix!r} differs"

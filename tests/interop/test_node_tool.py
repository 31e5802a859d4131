"""The Node harness itself, against Node alone: if these fail, the interop tests prove nothing."""
from __future__ import annotations

import pytest

from interop_node import NodeToolError

pytestmark = pytest.mark.interop


def test_add_and_read_back_through_node(node, r, prefix, qname):
    added = node.run("add", name="hello", data={"a": 1},
                     opts={"attempts": 3, "backoff": 500, "keepLogs": 4})
    assert added["id"] == "1"
    job, state, counts = node.batch(
        {"cmd": "getJob", "jobId": "1"},
        {"cmd": "getState", "jobId": "1"},
        {"cmd": "counts"},
    )
    assert job["data"] == {"a": 1}
    assert job["opts"] == {"attempts": 3, "backoff": {"type": "fixed", "delay": 500}, "keepLogs": 4}
    assert state == "waiting"
    assert counts["waiting"] == 1
    # The hash the tool wrote really is in our test's Redis under our prefix.
    assert r.hget(f"{prefix}:{qname}:1", "name") == "hello"


def test_failed_command_is_reported_not_swallowed(node):
    with pytest.raises(NodeToolError) as info:
        node.run("add", name="x", data={}, opts={"jobId": "123"})  # integer ids are refused
    assert "integer" in str(info.value).lower() or "custom id" in str(info.value).lower()


def test_worker_and_queue_events_stream_lines(node):
    events = node.events()
    worker = node.worker(workerOpts={"drainDelay": 1}, stopAfter=1,
                         behaviour={"failTimes": 1, "progress": [7], "return": {"r": 2}})
    node.run("add", name="w", data={"n": 1}, opts={"attempts": 2})
    done = worker.wait_event("completed", timeout=10)
    assert done["result"] == {"r": 2}
    assert done["job"]["attemptsMade"] == 2
    failed = worker.events("failed")
    assert [f["final"] for f in failed] == [False]
    assert failed[0]["error"] == "planned failure 1"
    worker.wait_event("exit", timeout=10)
    completed = events.wait_event("completed", timeout=10)
    assert completed["args"]["returnvalue"] == {"r": 2}
    names = [line["event"] for line in events.snapshot()]
    assert names[:3] == ["ready", "added", "waiting"]
    assert "progress" in names and "error" not in names


def test_missing_node_packages_fail_with_the_fix(monkeypatch, tmp_path):
    """Without tests/node_modules the interop tests fail (never skip) and say what to run."""
    import interop_node

    monkeypatch.setattr(interop_node, "BULLMQ_DIR", str(tmp_path / "node_modules" / "bullmq"))
    with pytest.raises(pytest.fail.Exception) as info:
        interop_node.NodeTool("redis://127.0.0.1:1/0", "p", "q")
    assert "run `make test` (npm ci in tests/)" in str(info.value)


def test_queue_override_and_batch_errors(node, r, prefix, qname):
    """Batch steps may target other queues; a failing step is reported in place."""
    other = qname + "other"
    results = node.run("batch", steps=[
        {"cmd": "add", "queue": other, "name": "x", "data": {}},
        {"cmd": "add", "name": "y", "data": {}, "opts": {"jobId": "0"}},
        {"cmd": "counts", "queue": other, "types": ["waiting"]},
    ])
    assert results[0]["ok"] and results[2] == {"ok": True, "result": {"waiting": 1}}
    assert results[1]["ok"] is False and results[1]["error"]
    assert r.exists(f"{prefix}:{other}:1") and not r.exists(f"{prefix}:{qname}:1")

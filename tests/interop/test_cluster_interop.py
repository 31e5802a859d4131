"""Node BullMQ (ioredis's Cluster client) and our code on one queue of a Redis Cluster:
Node adds and we process, we add and Node processes, both workers share a queue."""
from __future__ import annotations

import time

import gevent
import pytest

from echomq_gevent import Queue, Worker
from interop_node import NodeTool


@pytest.fixture
def cnode(cluster, qname):
    tool = NodeTool(cluster.url, "{i%s}" % qname, qname)
    try:
        yield tool
    finally:
        tool.close()


def _wait_completed(queue, total, timeout=120.0):
    deadline = time.monotonic() + timeout
    counts = {}
    while time.monotonic() < deadline:
        counts = queue.get_job_counts("completed", "waiting", "active", "failed")
        if counts["completed"] == total:
            return counts
        gevent.sleep(0.1)  # our in-process worker runs meanwhile
    raise AssertionError(f"not all {total} jobs completed in time: {counts}")


def test_node_adds_and_our_worker_processes(cluster, cnode, qname, wait_for):
    added = cnode.run("addBulk", jobs=[{"name": "n", "data": {"i": i}} for i in range(100)])
    queue = Queue(qname, connection=cluster.url, prefix=cnode.prefix)
    worker = Worker(qname, lambda job: {"double": job.data["i"] * 2}, connection=cluster.url,
                    prefix=cnode.prefix, concurrency=8, drain_delay=1)
    worker.start()
    try:
        _wait_completed(queue, 100)
        job = cnode.run("getJob", jobId=added[7]["id"])  # Node reads our result back
        assert job["returnvalue"] == {"double": 14} and job["finishedOn"]
    finally:
        worker.close(timeout=10)
        queue.close()


def test_we_add_and_a_node_worker_processes(cluster, cnode, qname):
    queue = Queue(qname, connection=cluster.url, prefix=cnode.prefix)
    try:
        ids = [j.id for j in queue.add_bulk([{"name": "p", "data": {"i": i}} for i in range(100)])]
        theirs = cnode.worker(workerOpts={"concurrency": 8, "drainDelay": 1}, stopAfter=100,
                              behaviour={"returnData": True})
        theirs.wait_for(lambda ln: ln.get("event") == "exit", timeout=120)
        assert sorted(ln["jobId"] for ln in theirs.events("completed")) == sorted(ids)
        _wait_completed(queue, 100)
        assert queue.get_job(ids[3]).returnvalue == {"i": 3}
    finally:
        queue.close()


def test_our_worker_and_a_node_worker_share_a_queue_exactly_once(cluster, cnode, qname):
    total = 600
    queue = Queue(qname, connection=cluster.url, prefix=cnode.prefix)
    # both workers are up (ready lines) before the first job arrives
    theirs = cnode.worker(workerOpts={"concurrency": 20, "drainDelay": 1},
                          behaviour={"returnData": True, "sleepMs": 5})
    ours = cnode.python_worker(workerOpts={"concurrency": 20, "drain_delay": 1},
                               behaviour={"returnData": True, "sleepMs": 5})
    cnode.run("addBulk", jobs=[{"name": "n", "data": {"i": i}} for i in range(total // 2)])
    queue.add_bulk([{"name": "p", "data": {"i": i}} for i in range(total // 2, total)])
    try:
        _wait_completed(queue, total)
        ours.stop()
        theirs.stop()
        by_us = [ln["jobId"] for ln in ours.events("process")]
        by_node = [ln["jobId"] for ln in theirs.events("process")]
        assert len(set(by_us)) == len(by_us) and len(set(by_node)) == len(by_node)
        assert not set(by_us) & set(by_node), "a job ran in both workers"
        assert len(by_us) + len(by_node) == total
        assert by_us and by_node, f"one worker got nothing: ours {len(by_us)}, Node {len(by_node)}"
    finally:
        queue.close()

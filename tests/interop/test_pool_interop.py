"""A pool of our queues fed by Node's ``bullmq@6.7.0``: a Node producer adds to each
pooled queue (plain, prioritized and delayed jobs), the pool runs them all from its one
budget, and Node reads every job back as completed with its return value."""
from __future__ import annotations

import collections

import gevent

from echomq_gevent import Pool
from interop_pool_helpers import tenant_runner


def test_node_producer_feeds_a_pool(node, redis_url, prefix, qname, wait_for):
    names = [f"{qname}-a", f"{qname}-b", f"{qname}-c"]
    added = {}
    for name in names:
        jobs = [{"name": "n", "data": {"i": i}} for i in range(20)]
        jobs.append({"name": "n", "data": {"i": "prio"}, "opts": {"priority": 3}})
        jobs.append({"name": "n", "data": {"i": "late"}, "opts": {"delay": 200}})
        added[name] = [job["id"] for job in node.run("addBulk", queue=name, jobs=jobs)]
    ran = collections.Counter()
    in_flight = [0, 0]

    def proc(job):
        in_flight[0] += 1
        in_flight[1] = max(in_flight[1], in_flight[0])
        try:
            gevent.sleep(0.005)
        finally:
            in_flight[0] -= 1
        ran[job.queue_name] += 1
        return {"queue": job.queue_name, "i": job.data["i"]}

    pool = Pool(names, concurrency=4, order="weighted", weights={names[0]: 2}, connection=redis_url,
                prefix=prefix, processor=proc, drain_delay=0.5)
    pool.start()
    try:
        wait_for(lambda: sum(ran.values()) == 66, timeout=30, what="every Node job run by the pool")
    finally:
        pool.close(5)
    assert ran == {name: 22 for name in names}
    assert in_flight[1] <= 4
    for name in names:
        counts = node.run("counts", queue=name)
        assert counts["completed"] == 22 and counts["waiting"] == 0 and counts["delayed"] == 0, counts
        job = node.run("getJob", queue=name, jobId=added[name][-2])
        assert job["returnvalue"] == {"queue": name, "i": "prio"}
        assert job["finishedOn"] and job["processedOn"]


def test_node_producers_make_tenant_queues_a_pattern_pool_finds(node, redis_url, prefix, qname, wait_for):
    """Each tenant's queue is made by a Node ``Queue`` (its meta key) or a Node add (its id
    key): the pool's pattern finds both and runs their jobs; Node reads them completed."""
    tenants = [f"{qname}-tenant-{i}" for i in range(3)]
    runner = tenant_runner(redis_url, prefix, qname, 4, order="round_robin", declared=[f"{qname}-unused"])
    runner.start()
    try:
        added = {t: [j["id"] for j in node.run("addBulk", queue=t, jobs=[{"name": "n", "data": {"t": t}}] * 5)]
                 for t in tenants}
        family = runner.families[0]
        wait_for(lambda: set(family.members) == set(tenants), timeout=10, what="every tenant queue found")
        wait_for(lambda: all(node.run("counts", queue=t)["completed"] == 5 for t in tenants), timeout=30,
                 what="every tenant's jobs completed")
        for t in tenants:
            assert node.run("getJob", queue=t, jobId=added[t][0])["returnvalue"] == {"t": t}
    finally:
        runner.drain(5).join()


def test_bull_board_shows_the_tenant_queues_a_pool_serves(node, redis_url, prefix, qname, wait_for):
    """bull-board (Node) over two tenant queues: its Queues make them (their meta), the
    pool's pattern finds them, runs the jobs Node adds, and bull-board counts them completed."""
    import json
    import os
    import subprocess
    import urllib.request

    from interop_node import _node_binary

    tenants = [f"{qname}-tenant-a", f"{qname}-tenant-b"]
    board = subprocess.Popen([_node_binary(), os.path.join(os.path.dirname(__file__), "node", "bull_board.js")],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    board.stdin.write(json.dumps({"redis": redis_url, "prefix": prefix, "queues": tenants}) + "\n")
    board.stdin.flush()
    line = board.stdout.readline()
    assert line, board.stderr.read()[-2000:]
    base = f"http://127.0.0.1:{json.loads(line)['port']}/ui"

    def counts(name):
        with urllib.request.urlopen(f"{base}/api/queues?activeQueue={name}&status=completed&page=1",
                                    timeout=15) as resp:
            return next(q for q in json.load(resp)["queues"] if q["name"] == name)["counts"]

    runner = tenant_runner(redis_url, prefix, qname, 2)
    runner.start()
    try:
        family = runner.families[0]
        # bull-board's Queues wrote the queues' meta: found before any job
        wait_for(lambda: set(family.members) == set(tenants), timeout=10, what="the tenant queues found")
        for t in tenants:
            node.run("addBulk", queue=t, jobs=[{"name": "n", "data": {"t": t}}] * 3)
        wait_for(lambda: all(counts(t).get("completed") == 3 for t in tenants), timeout=30,
                 what="bull-board counting the jobs completed")
    finally:
        runner.drain(5).join()
        board.stdin.close()
        try:
            board.wait(15)
        except subprocess.TimeoutExpired:
            board.kill()


def test_tenant_queues_whose_jobs_all_have_ids_of_their_own_are_found(node, r, redis_url, prefix, qname, wait_for):
    """A Node producer that gives every job an id of its own (``jobId``): each add still
    writes the queue's ``events`` stream (and, in bullmq 6.7.0, counts in ``id`` and sets
    ``meta``); the pattern finds the queues by any of them, also one whose ``id`` and
    ``meta`` are gone (deleted by hand, or never written by another producer), and runs
    their jobs."""

    tenants = [f"{qname}-tenant-{i}" for i in range(3)]
    for t in tenants:
        node.run("addBulk", queue=t, jobs=[{"name": "n", "data": {"t": t}, "opts": {"jobId": f"{t}-job-{i}"}}
                                           for i in range(4)])
    # the third tenant keeps nothing but its events stream among the marks of a queue
    r.delete(f"{prefix}:{tenants[2]}:id", f"{prefix}:{tenants[2]}:meta")
    assert r.exists(f"{prefix}:{tenants[2]}:events")
    runner = tenant_runner(redis_url, prefix, qname, 3, order="round_robin")
    runner.start()
    try:
        family = runner.families[0]
        wait_for(lambda: set(family.members) == set(tenants), timeout=10, what="every tenant queue found")
        wait_for(lambda: all(node.run("counts", queue=t)["completed"] == 4 for t in tenants), timeout=30,
                 what="every tenant's jobs completed")
        for t in tenants:
            assert node.run("getJob", queue=t, jobId=f"{t}-job-0")["returnvalue"] == {"t": t}
    finally:
        runner.drain(5).join()


def test_a_pool_and_node_workers_share_its_queues_exactly_once(node, r, redis_url, prefix, qname, wait_for):
    """Node workers on two of a pool's queues beside the pool (its finishes of both queues
    going together, moveToFinishedQueues-0): every job runs once, in one of them, and Node
    reads each back completed with its return value."""
    from echomq_gevent import Queue

    names = [f"{qname}-a", f"{qname}-b"]
    total = 300
    ran = collections.Counter()

    def proc(job):
        ran[(job.queue_name, job.id)] += 1
        gevent.sleep(0.01)
        return job.data

    theirs = [node.worker(queue=name, workerOpts={"concurrency": 10, "drainDelay": 1},
                          behaviour={"returnData": True, "sleepMs": 10}) for name in names]
    pool = Pool(names, concurrency=40, order="round_robin", connection=redis_url, prefix=prefix, processor=proc,
                drain_delay=1)
    pool.start()
    try:
        for name in names:
            q = Queue(name, connection=redis_url, prefix=prefix)
            q.add_bulk([("n", {"i": i}) for i in range(total)])
            q.close()
        # polled on Redis here: a Node command would hold this hub (and the pool) while it runs
        wait_for(lambda: all(r.zcard(f"{prefix}:{n}:completed") == total for n in names), timeout=60,
                 what="every job completed")
    finally:
        pool.close(5)
        for proc_ in theirs:
            proc_.stop()
    by_node = collections.Counter()
    for name, proc_ in zip(names, theirs):
        for line in proc_.events("process"):
            by_node[(name, line["jobId"])] += 1
    assert set(ran.values()) <= {1} and set(by_node.values()) <= {1}
    assert not set(ran) & set(by_node), "a job ran in both"
    assert len(ran) + len(by_node) == 2 * total and ran and by_node, (len(ran), len(by_node))
    assert pool.budget.finish_batcher is not None and pool.budget.finish_batcher.calls == len(ran)
    for name in names:
        counts = node.run("counts", queue=name)
        assert counts["failed"] == 0 and counts["active"] == 0 and counts["completed"] == total, counts
        assert node.run("getJob", queue=name, jobId="7")["returnvalue"] == {"i": 6}

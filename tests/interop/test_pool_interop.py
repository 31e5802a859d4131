"""A pool of our queues fed by Node's ``bullmq@6.7.0``: a Node producer adds to each
pooled queue (plain, prioritized and delayed jobs), the pool runs them all from its one
budget, and Node reads every job back as completed with its return value."""
from __future__ import annotations

import collections

import gevent

from echomq_gevent import Pool


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

"""Redis behind Sentinel: a primary, a replica and three sentinels on free ports; the
primary is killed mid-run and the worker goes on on the promoted replica."""
from __future__ import annotations

import time
from collections import Counter

import gevent
import redis
from redis.sentinel import SentinelConnectionPool

from echomq_gevent import Queue, Worker
from echomq_gevent.queue.events import QueueEvents


def test_worker_follows_a_failover_to_the_promoted_replica(sentinels, prefix, qname, wait_for):
    queue = Queue(qname, connection=sentinels.url, prefix=prefix)
    ids = [queue.add("job", {"i": i}).id for i in range(300)]
    primary = redis.Redis(port=sentinels.primary.port, decode_responses=True)
    assert primary.execute_command("WAIT", 1, 5000) == 1  # the replica has every job
    primary.close()

    done: Counter = Counter()

    def process(job):
        gevent.sleep(0.005)
        done[job.id] += 1
        return job.data["i"]

    worker = Worker(qname, process, connection=sentinels.url, prefix=prefix, concurrency=4,
                    drain_delay=0.5, lock_duration=2000, stalled_interval=1000)
    heard = set()
    listener = QueueEvents(qname, connection=sentinels.url, prefix=prefix)
    listener.on("completed", lambda args, _id: heard.add(args.get("jobId")))
    assert listener.wait_until_ready(10)
    worker.start()
    try:
        wait_for(lambda: worker._ctx.locks is not None, what="the worker to set up its clients")
        # every client the worker made asks the sentinels where the primary is
        for client in (worker.client, worker._fetch.blocking, worker._ctx.locks.scripts.client, queue.client,
                       listener.client):
            assert isinstance(client.connection_pool, SentinelConnectionPool), client
        wait_for(lambda: len(done) >= 50, what="50 jobs done before the kill")
        before = sum(done.values())
        killed = time.monotonic()
        sentinels.primary.kill()
        sentinels.wait_promoted(wait_for)
        promoted = time.monotonic()
        wait_for(lambda: sum(done.values()) > before + 20, timeout=60, what="jobs done after the failover")
        resumed = time.monotonic()
        late = queue.add("after-failover", {"i": -1})  # the queue's own client followed too
        wait_for(lambda: late.id in done, timeout=60, what="a job added after the failover")
        wait_for(lambda: late.id in heard, timeout=60, what="QueueEvents to hear it complete")
        new_primary = redis.Redis(port=sentinels.replica.port, decode_responses=True)
        wait_for(lambda: new_primary.zcard(f"{prefix}:{qname}:completed") == len(ids) + 1, timeout=90,
                 what="every job completed on the new primary",
                 details=lambda: f"done {len(done)} of {len(ids) + 1}")
        assert set(done) == set(ids) | {late.id}
        redone = sum(1 for n in done.values() if n > 1)
        print(f"\nsentinel failover: promoted {promoted - killed:.2f} s after the kill, jobs ran again "
              f"{resumed - killed:.2f} s after it; {redone} job(s) ran twice (in flight at the kill, or "
              f"completed on the old primary before the replica had it)")
        new_primary.close()
    finally:
        worker.close(timeout=10)
        listener.close()
        queue.close()


def test_what_a_failover_loses_of_acknowledged_adds(sentinels, prefix, qname, wait_for):
    """Redis replicates asynchronously: an add the old primary acknowledged in the last
    moments before it died may never reach the replica. Measure how many, and check that
    every add acknowledged after the promotion is kept."""
    queue = Queue(qname, connection=sentinels.url, prefix=prefix)
    acked = []  # (seq, job id, acknowledged after the promotion)
    errors = []
    state = {"stop": False, "promoted": False}

    def add_forever():
        seq = 0
        while not state["stop"]:
            seq += 1
            try:
                job = queue.add("job", {"seq": seq})
            except redis.RedisError as exc:
                errors.append(type(exc).__name__)
                gevent.sleep(0.05)
                continue
            acked.append((seq, job.id, state["promoted"]))
            gevent.sleep(0)  # let the test's greenlet look

    adder = gevent.spawn(add_forever)
    try:
        wait_for(lambda: len(acked) >= 300, what="300 adds before the kill")
        at_kill = len(acked)
        killed = time.monotonic()
        sentinels.primary.kill()
        sentinels.wait_promoted(wait_for)
        state["promoted"] = True
        wait_for(lambda: sum(1 for a in acked if a[2]) >= 100, timeout=60, what="100 adds after the promotion")
        first_after = next(i for i, a in enumerate(acked) if i >= at_kill and a[2])
        outage = time.monotonic() - killed
    finally:
        state["stop"] = True
        adder.join(10)
    new_primary = redis.Redis(port=sentinels.replica.port, decode_responses=True)
    pipe = new_primary.pipeline(transaction=False)
    for _seq, job_id, _after in acked:
        pipe.hget(f"{prefix}:{qname}:{job_id}", "data")
    stored = pipe.execute()
    lost = [(seq, job_id, after) for (seq, job_id, after), data in zip(acked, stored)
            if data is None or f'"seq":{seq}' not in data.replace(" ", "")]
    assert not [a for a in lost if a[2]], f"adds acknowledged after the promotion were lost: {lost}"
    reissued = sum(1 for seq, job_id, after in lost
                   if any(a[1] == job_id and a[2] for a in acked))
    print(f"\nsentinel failover under adds: {len(acked)} adds acknowledged, {len(lost)} of them lost "
          f"(acknowledged by the old primary, never replicated), {reissued} of their ids given again "
          f"to new jobs; {len(errors)} adds refused during the {outage:.2f} s outage "
          f"({first_after - at_kill} acknowledged between the kill and the promotion)")
    new_primary.close()
    queue.close()

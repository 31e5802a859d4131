"""Redis Cluster under change: the slot of a busy queue migrated to another primary
mid-run, a replica promoted by ``CLUSTER FAILOVER``, and a primary killed. Every job
ends, none is lost, the worker goes on serving."""
from __future__ import annotations

import time
from collections import Counter

import gevent
import pytest
import redis

from echomq_gevent import Queue, Worker
from echomq_gevent.connection.cluster import key_slot
from echomq_gevent.connection.clients import ReadinessProbe
from redis_server import ClusterGroup


@pytest.fixture
def cluster():
    """A cluster of its own per test: each changes the layout."""
    with ClusterGroup(node_timeout_ms=2000) as group:
        yield group


class Run:
    """A worker on one queue of the cluster, with a count of every job's runs."""

    def __init__(self, cluster, qname, concurrency=4, job_ms=5):
        self.cluster = cluster
        self.prefix = "{c%s}" % qname
        self.name = qname
        self.slot = key_slot(f"{self.prefix}:{qname}:wait")
        self.queue = Queue(qname, connection=cluster.url, prefix=self.prefix)
        self.done: Counter = Counter()
        self.ids = []

        def process(job):
            gevent.sleep(job_ms / 1000.0)
            self.done[job.id] += 1
            return job.data["i"]

        self.worker = Worker(qname, process, connection=cluster.url, prefix=self.prefix, concurrency=concurrency,
                             drain_delay=1, lock_duration=5000, stalled_interval=1000)

    def add(self, n):
        base = len(self.ids)
        self.ids += [j.id for j in self.queue.add_bulk([{"name": "job", "data": {"i": base + i}}
                                                        for i in range(n)])]

    def owner(self):
        """The port of the slot's primary, ``None`` while no live primary serves it."""
        try:
            return self.cluster.owner_of(self.slot, self.cluster.live_ports()[0])
        except RuntimeError:
            return None

    def replicate(self):
        """Wait until the owner's replica has every write (a killed primary loses nothing)."""
        primary = redis.Redis(port=self.owner())
        try:
            assert primary.execute_command("WAIT", 1, 10000) == 1
        finally:
            primary.close()

    def finish(self, wait_for, what):
        late = self.queue.add("late", {"i": -1})  # the worker still serves
        self.ids.append(late.id)
        wait_for(lambda: set(self.done) >= set(self.ids), timeout=120, what=what,
                 details=lambda: f"done {len(set(self.done) & set(self.ids))} of {len(self.ids)}; "
                                 f"counts {self.safe_counts()}")
        wait_for(lambda: self.safe_counts().get("completed") == len(self.ids), timeout=60,
                 what="every job completed in Redis", details=lambda: str(self.safe_counts()))
        return sum(1 for n in self.done.values() if n > 1)

    def safe_counts(self):
        try:
            return self.queue.get_job_counts()
        except redis.RedisError as exc:
            return {"error": str(exc)}

    def close(self):
        self.worker.close(timeout=10)
        self.queue.close()


def test_a_busy_queue_s_slot_is_migrated_mid_run(cluster, qname, wait_for):
    run = Run(cluster, qname)
    run.add(400)
    source = run.owner()
    target = next(p for p in cluster.primary_ports() if p != source)
    adds = {"n": 0, "stop": False}

    def add_during():
        while not adds["stop"]:
            run.add(5)  # adds during the migration follow it (TRYAGAIN, ASK), none is refused
            adds["n"] += 5
            gevent.sleep(0.01)

    run.worker.start()
    try:
        wait_for(lambda: len(run.done) >= 50, timeout=60, what="50 jobs done before the migration")
        adder = gevent.spawn(add_during)
        started = time.monotonic()
        # the migration runs on a native thread with its own connections, as redis-cli would
        moved = gevent.get_hub().threadpool.spawn(
            cluster.migrate_slot, run.slot, target, 5, lambda: time.sleep(0.02)).get()
        took = time.monotonic() - started
        done_during = len(run.done)
        adds["stop"] = True
        adder.join(30)
        assert run.owner() == target
        redone = run.finish(wait_for, "every job done after the migration")
        router = run.worker.scripts._cluster
        print(f"\ncluster migration: {moved} keys of slot {run.slot} moved in {took:.2f} s, "
              f"{adds['n']} jobs added meanwhile, redirects followed {router.redirects}; "
              f"{len(run.ids)} jobs, all done, {redone} ran twice; {done_during} done by the end of the migration")
        assert moved > 400 and adds["n"] > 0
        assert router.redirects["moved"] + router.redirects["ask"] > 0  # the worker followed the slot
        target_client = redis.Redis(port=target, decode_responses=True)
        assert target_client.zcard(f"{run.prefix}:{qname}:completed") == len(run.ids)
        target_client.close()
    finally:
        adds["stop"] = True
        run.close()


def test_a_manual_failover_then_a_killed_primary(cluster, qname, wait_for):
    run = Run(cluster, qname)
    probe = ReadinessProbe(cluster.url)  # what gunicorn's /_echomq/ready asks
    assert probe.check() is None
    run.add(300)
    run.replicate()
    first = run.owner()
    replica = cluster.replica_of(first)
    run.worker.start()
    try:
        wait_for(lambda: len(run.done) >= 50, timeout=60, what="50 jobs done before the failover")
        # 1. CLUSTER FAILOVER on the replica: the primaries swap roles without losing a write
        started = time.monotonic()
        cluster.ask(replica, "CLUSTER", "FAILOVER")
        wait_for(lambda: run.owner() == replica, timeout=60, what="the replica to take the slot over")
        swapped = time.monotonic() - started
        before = len(run.done)
        wait_for(lambda: len(run.done) >= before + 30, timeout=60, what="jobs done after the manual failover")
        resumed_manual = time.monotonic() - started
        run.add(200)
        run.replicate()
        wait_for(lambda: cluster.healthy(), timeout=60, what="the old primary to follow as a replica")
        # 2. SIGKILL the new primary: its replica (the first primary) is promoted after the node timeout
        before = len(run.done)
        killed = time.monotonic()
        cluster.node(replica).kill()
        # (a readiness check made now may pass: redis-py's cluster client retries a node that
        # refuses the connection on a fresh map and may answer only once the replica is
        # promoted. It failed 3 of 6 and 4 of 6 runs on a loaded machine, so this test holds
        # the probe to being ready again after the promotion, not to the moment before it)
        wait_for(lambda: run.owner() == first, timeout=90, what="the old primary to be promoted again")
        promoted = time.monotonic() - killed
        # ready again once the replica serves the slots: the probe finds the new map of primaries
        wait_for(lambda: probe.check() is None, timeout=30, what="readiness after the promotion")
        wait_for(lambda: len(run.done) >= min(before + 30, len(run.ids)), timeout=90,
                 what="jobs done after the kill")
        resumed_kill = time.monotonic() - killed
        redone = run.finish(wait_for, "every job done after both failovers")
        router = run.worker.scripts._cluster
        print(f"\ncluster failover: CLUSTER FAILOVER took the slot over in {swapped:.2f} s, jobs ran again "
              f"{resumed_manual:.2f} s after it; primary SIGKILLed: promotion after {promoted:.2f} s, jobs ran "
              f"again {resumed_kill:.2f} s after the kill; {len(run.ids)} jobs, all done, {redone} ran twice; "
              f"redirects {router.redirects}")
    finally:
        probe.close()
        run.close()

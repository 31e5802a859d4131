"""Pools on a real Redis with real jobs: the three orders' shares measured on backlogs, a
queue's cap and the pool's budget never exceeded (as seen by the processors), per-queue
options kept, and a queue obliterated while the pool serves it."""
from __future__ import annotations

import collections
import logging

import gevent
import pytest

from echomq_gevent import Pool, Queue
from waiting import wait_until

BACKLOG = 300


class Recorder:
    """A processor that records the order jobs ran in and the most in flight, per queue
    and in all."""

    def __init__(self, hold: float = 0.002) -> None:
        self.hold = hold
        self.order = []
        self.in_flight = collections.Counter()
        self.peak = collections.Counter()
        self.total = 0
        self.peak_total = 0

    def __call__(self, job):
        q = job.queue_name
        self.in_flight[q] += 1
        self.total += 1
        self.peak[q] = max(self.peak[q], self.in_flight[q])
        self.peak_total = max(self.peak_total, self.total)
        try:
            gevent.sleep(self.hold)
        finally:
            self.in_flight[q] -= 1
            self.total -= 1
        self.order.append(q)
        return job.data


def backlogs(redis_url, prefix, names, count=BACKLOG):
    for name in names:
        q = Queue(name, connection=redis_url, prefix=prefix)
        try:
            q.add_bulk([("j", {"i": i}) for i in range(count)])
        finally:
            q.close()


def make_pool(redis_url, prefix, names, rec, **kwargs):
    kwargs.setdefault("drain_delay", 0.5)
    kwargs.setdefault("lock_duration", 5000)
    return Pool(names, connection=redis_url, prefix=prefix, processor=rec, **kwargs)


def shares_of(redis_url, prefix, names, jobs, **kwargs):
    """Run a pool over backlogs on ``names`` until ``jobs`` jobs ran; the share of each
    queue among them (while every queue still had a backlog) and the recorder."""
    backlogs(redis_url, prefix, names)
    rec = Recorder()
    pool = make_pool(redis_url, prefix, names, rec, **kwargs)
    pool.start()
    try:
        wait_until(lambda: len(rec.order) >= jobs, timeout=60, what=f"{jobs} jobs run")
    finally:
        pool.close(5)
    counts = collections.Counter(rec.order[:jobs])
    return {name: counts[name] / jobs for name in names}, rec


def test_weighted_shares_follow_the_weights(redis_url, prefix, qname):
    names = [f"{qname}-a", f"{qname}-b", f"{qname}-c"]
    # 400 jobs: all three queues keep a backlog (the first queue's 300 last about 480 jobs)
    shares, rec = shares_of(redis_url, prefix, names, 400, concurrency=8, order="weighted",
                            weights={names[0]: 5, names[1]: 1, names[2]: 2})
    for name, expected in zip(names, (5 / 8, 1 / 8, 2 / 8)):
        assert abs(shares[name] - expected) < 0.05, shares
    assert rec.peak_total <= 8


def test_round_robin_gives_equal_shares(redis_url, prefix, qname):
    names = [f"{qname}-{i}" for i in range(3)]
    shares, rec = shares_of(redis_url, prefix, names, 600, concurrency=6, order="round_robin")
    for name in names:
        assert abs(shares[name] - 1 / 3) < 0.05, shares
    assert rec.peak_total <= 6


def test_strict_drains_the_first_queue_first(redis_url, prefix, qname, wait_for):
    names = [f"{qname}-{i}" for i in range(3)]
    backlogs(redis_url, prefix, names)
    rec = Recorder()
    pool = make_pool(redis_url, prefix, names, rec, concurrency=6, order="strict")
    pool.start()
    try:
        wait_for(lambda: len(rec.order) >= 2 * BACKLOG + 50, timeout=60, what="the first two queues run")
    finally:
        pool.close(5)
    first = [i for i, q in enumerate(rec.order) if q == names[0]]
    assert len(first) == BACKLOG
    # the first queue's jobs all ran before the second's (bar the few slots the second
    # took while the first queue's worker was still starting), and the second's before the third's
    assert first[-1] < BACKLOG + 2 * 6, first[-1]
    assert sum(1 for q in rec.order[:2 * BACKLOG] if q == names[2]) <= 2 * 6
    assert rec.peak_total <= 6


def test_caps_and_the_budget_are_never_exceeded(redis_url, prefix, qname, wait_for):
    names = [f"{qname}-capped", f"{qname}-free"]
    backlogs(redis_url, prefix, names, 200)
    rec = Recorder(hold=0.005)
    pool = Pool({names[0]: {"concurrency": 2}, names[1]: None}, concurrency=7, order="round_robin",
                connection=redis_url, prefix=prefix, processor=rec, drain_delay=0.5, lock_duration=5000)
    pool.start()
    try:
        wait_for(lambda: len(rec.order) == 400, timeout=60, what="every job run")
        usage = pool.usage()
        assert usage["concurrency"] == 7 and [q["cap"] for q in usage["queues"]] == [2, 7]
    finally:
        pool.close(5)
    assert rec.peak[names[0]] == 2, rec.peak  # its cap, reached
    assert rec.peak_total == 7, rec.peak_total  # the pool's budget, reached and never passed
    assert pool.budget.peak <= 7


def test_per_queue_options_stay_per_queue(redis_url, prefix, qname, wait_for):
    """Each queue keeps its own processor and its own rate limit inside the pool; the
    slots a limited queue cannot use go to the other."""
    fast, limited = f"{qname}-fast", f"{qname}-limited"
    backlogs(redis_url, prefix, [fast], 200)
    backlogs(redis_url, prefix, [limited], 20)
    runs = collections.Counter()

    def own(tag):
        def proc(job):
            runs[(job.queue_name, tag)] += 1
        return proc

    pool = Pool({fast: {"processor": own("fast")},
                 limited: {"processor": own("limited"), "limiter": {"max": 5, "duration": 1000}}},
                concurrency=4, order="round_robin", connection=redis_url, prefix=prefix,
                drain_delay=0.5, lock_duration=5000)
    pool.start()
    try:
        wait_for(lambda: runs[(fast, "fast")] == 200, timeout=60, what="the fast queue's jobs run")
        # the limited queue ran at most its rate meanwhile (5 a second, the first window at once)
        assert runs[(limited, "limited")] <= 5 * 60
        wait_for(lambda: runs[(limited, "limited")] == 20, timeout=30, what="the limited queue's jobs run")
    finally:
        pool.close(5)
    assert set(runs) == {(fast, "fast"), (limited, "limited")}


def test_a_queue_obliterated_while_served_stops_nothing_else(r, redis_url, prefix, qname, wait_for, caplog):
    names = [f"{qname}-{i}" for i in range(3)]
    backlogs(redis_url, prefix, names, 200)
    rec = Recorder(hold=0.01)
    pool = make_pool(redis_url, prefix, names, rec, concurrency=6, order="round_robin", discover_every=0.2)
    pool.start()
    gone = Queue(names[1], connection=redis_url, prefix=prefix)
    first = pool.workers[names[1]]
    try:
        wait_for(lambda: len(rec.order) >= 60, timeout=30, what="the pool serving all three")
        with caplog.at_level(logging.INFO, logger="echomq_gevent"):
            gone.obliterate(force=True)
            wait_for(lambda: names[1] not in pool.workers, timeout=30, what="the obliterated queue dropped")
            wait_for(lambda: rec.order.count(names[0]) == 200 and rec.order.count(names[2]) == 200,
                     timeout=60, what="the other queues' jobs all run")
            assert rec.order.count(names[1]) < 200
            assert [m.name for m in pool.budget.members] == [names[0], names[2]]
            wait_for(lambda: pool.budget.used == 0, timeout=10, what="every slot back in the pool")
            # dropping it wrote none of a queue's marks back (it would be served again)
            assert not r.exists(*(f"{prefix}:{names[1]}:{mark}" for mark in ("events", "meta", "id")))
            # the queue made again (a producer adds to it) is served again, by a new worker
            before = rec.order.count(names[1])
            gone.add("j", {"again": True})
            wait_for(lambda: rec.order.count(names[1]) == before + 1, timeout=10, what="the new job run")
        assert pool.workers[names[1]] is not first and first.closed
        assert all(w.fetch_loop_alive() for w in pool.workers.values())
        said = [rec_.getMessage() for rec_ in caplog.records]
        assert any(f"queue {names[1]!r} is gone" in m and "dropped from the pool" in m for m in said), said
        assert any(f"queue {names[1]!r} has jobs again" in m for m in said), said
    finally:
        gone.close()
        pool.close(5)


def test_the_finishes_of_all_the_queues_share_script_calls(r, redis_url, prefix, qname, wait_for):
    """One batcher for the pool's queues: with one job of each of 30 queues finishing in a
    turn, their finishes go in a few moveToFinishedQueues-0 calls, not one a queue, and
    every job ends completed with its return value."""
    names = [f"{qname}-{i}" for i in range(30)]
    backlogs(redis_url, prefix, names, 10)
    rec = Recorder(hold=0.005)
    pool = make_pool(redis_url, prefix, names, rec, concurrency=30, order="round_robin")
    batcher = pool.budget.finish_batcher
    assert batcher is not None and batcher.across_queues
    assert all(w._settler.batcher is batcher for w in pool.workers.values())
    pool.start()
    try:
        wait_for(lambda: len(rec.order) == 300, timeout=60, what="every job run")
        wait_for(lambda: sum(r.zcard(f"{prefix}:{n}:completed") for n in names) == 300, timeout=10,
                 what="every finish written")
    finally:
        pool.close(5)
    assert batcher.calls >= 250, batcher.calls  # the first finish of a turn goes alone
    assert batcher.batches * 3 < batcher.calls, (batcher.batches, batcher.calls)
    assert r.hget(f"{prefix}:{names[7]}:3", "returnvalue") == '{"i":2}'


def test_turns_keep_tenants_equal_with_a_pick_up_a_turn(redis_url, prefix, qname):
    """24 queues with work and 4 slots, ``turn=8``: a slot runs 8 jobs of its queue by
    fetch-next before the order moves it, so the slots are handed out (a pick-up each)
    about once every 8 jobs, not at every job, and the queues still share alike."""
    names = [f"{qname}-{i}" for i in range(24)]
    backlogs(redis_url, prefix, names, 40)
    rec = Recorder(hold=0.001)
    pool = make_pool(redis_url, prefix, names, rec, concurrency=4, order="round_robin", turn=8)
    pool.start()
    try:
        wait_until(lambda: len(rec.order) >= 480, timeout=60, what="480 jobs run")
        handed = sum(m.served for m in pool.budget.members)
    finally:
        pool.close(5)
    counts = sorted(collections.Counter(rec.order[:480]).values())
    # apart from the queue that asked first (every slot was its own then), within a turn
    assert len(counts) == 24 and counts[-2] - counts[0] <= 8, counts
    assert handed <= 480 / 8 * 1.5, handed  # with turn=1: about one a job
    assert rec.peak_total <= 4


def test_a_pattern_serves_the_queues_it_finds_with_its_options_and_weight(redis_url, prefix, qname, wait_for):
    """``Pool`` takes patterns as the YAML does: the queues that exist at start and one
    made later are served with the pattern's options (its concurrency: each one's cap) and
    the weight given to the pattern; a queue named in the pool is never the pattern's."""
    named, t1, t2, later = (f"{qname}-t-{n}" for n in ("named", "1", "2", "later"))
    backlogs(redis_url, prefix, [named, t1, t2], 40)
    rec = Recorder(hold=0.005)
    pool = Pool({named: None, f"{qname}-t-*": {"concurrency": 2}}, concurrency=8, order="weighted",
                weights={f"{qname}-t-*": 3, named: 1}, connection=redis_url, prefix=prefix, processor=rec,
                drain_delay=0.5, lock_duration=5000, discover_every=0.2)
    pool.start()
    try:
        wait_for(lambda: {t1, t2} <= set(pool.workers), timeout=10, what="the existing queues found")
        backlogs(redis_url, prefix, [later], 10)
        wait_for(lambda: len(rec.order) == 130, timeout=60, what="every job run, the later queue's too")
        assert [pool.workers[n].concurrency for n in (named, t1, t2, later)] == [8, 2, 2, 2]
        assert {m.name: m.weight for m in pool.budget.members} == {named: 1, t1: 3, t2: 3, later: 3}
        assert set(pool.watcher.members) == {t1, t2, later}  # the named queue stays the pool's own
    finally:
        pool.close(5)
    assert all(rec.peak[n] <= 2 for n in (t1, t2, later)), rec.peak
    with pytest.raises(ValueError, match="add takes a queue name"):
        pool.add("x-*")


def test_pool_settings_are_checked(redis_url, prefix):
    with pytest.raises(ValueError, match="order must be one of"):
        Pool(["a"], concurrency=2, order="fair", connection=redis_url, prefix=prefix)
    pool = Pool(["a"], concurrency=2, connection=redis_url, prefix=prefix)
    try:
        with pytest.raises(ValueError, match="is in the pool already"):
            pool.add("a")
        with pytest.raises(ValueError, match="weight of 'b' must be a whole number"):
            pool.add("b", weight=0)
    finally:
        pool.close(1)

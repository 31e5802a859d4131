"""The age of a queue's oldest ready job (``getOldestJobTimestamp-1``) and the stats read
for many queues in one round trip, against a real Redis."""
from __future__ import annotations

from echomq_gevent import Queue
from echomq_gevent.protocol.clock import now_ms
from echomq_gevent.queue.stats import read_queue_stats

from integration.queue_helpers import take

T0 = 1_700_000_000_000  # a fixed past timestamp: the jobs' own, so the answers are exact


def _add(queue, name, ts, **opts):
    return queue.add(name, {}, {"timestamp": ts, **opts}).id


def test_an_empty_queue_has_no_oldest_job_and_age_zero(queue):
    assert queue.get_oldest_job_timestamp() is None
    age = queue.get_queue_age()
    assert (age.oldest_timestamp, age.job_id, age.state, age.paused) == (None, None, None, False)
    assert age.age_seconds == 0.0


def test_fifo_jobs_the_oldest_is_at_the_running_end(queue):
    first = _add(queue, "a", T0)
    for i in range(1, 30):
        _add(queue, "b", T0 + i)
    age = queue.get_queue_age()
    assert (age.oldest_timestamp, age.job_id, age.state) == (T0, first, "wait")
    assert age.age_seconds >= (now_ms() - T0) / 1000 - 1
    take(queue)  # the oldest runs: the next one is the oldest now
    assert queue.get_oldest_job_timestamp() == T0 + 1


def test_lifo_jobs_the_oldest_is_at_the_far_end(queue):
    oldest = _add(queue, "a", T0, lifo=True)
    for i in range(1, 30):
        _add(queue, "b", T0 + i, lifo=True)
    age = queue.get_queue_age()
    assert (age.oldest_timestamp, age.job_id) == (T0, oldest)
    assert take(queue) != oldest  # LIFO: the newest runs first; the age is still the oldest's


def test_fifo_and_lifo_mixed_gives_a_lower_bound_from_the_two_ends(queue):
    for i in range(20):
        _add(queue, "fifo", T0 + 100 + i)          # left part, oldest (T0+100) deep inside
    for i in range(20):
        _add(queue, "lifo", T0 + 200 + i, lifo=True)  # right part, oldest (T0+200) deep inside
    # the ends hold T0+119..T0+112 (left) and T0+212..T0+219 (right): the answer is the
    # oldest of those, younger than the true oldest (documented as a lower bound on the age)
    assert queue.get_oldest_job_timestamp() == T0 + 112


def test_prioritized_the_oldest_of_every_priority_level_counts(queue):
    _add(queue, "p1", T0 + 500, priority=1)
    old_low = _add(queue, "p9", T0 + 10, priority=9)  # runs last, waits longest
    _add(queue, "p9b", T0 + 5, priority=9)             # same level, added later: not its head
    for i in range(10):
        _add(queue, "p1", T0 + 600 + i, priority=1)
    age = queue.get_queue_age()
    assert (age.oldest_timestamp, age.job_id, age.state) == (T0 + 10, old_low, "prioritized")
    _add(queue, "w", T0 + 1)
    assert queue.get_queue_age().state == "wait"


def test_delayed_jobs_count_once_due_and_by_their_due_time(queue, r):
    later = queue.add("later", {}, {"delay": 3_600_000})
    assert queue.get_oldest_job_timestamp() is None, "a delayed job not yet due is not ready"
    # make it due 5 s ago without a worker promoting it (as when no worker runs)
    due = now_ms() - 5000
    r.zadd(queue.keys.delayed, {later.id: due * 4096})
    age = queue.get_queue_age()
    assert (age.oldest_timestamp, age.job_id, age.state) == (due, later.id, "delayed")
    assert 4.5 <= age.age_seconds < 60
    # a waiting job added after it became due is younger
    queue.add("w", {})
    assert queue.get_queue_age().job_id == later.id


def test_a_paused_queue_says_so_and_its_jobs_keep_their_age(queue):
    first = _add(queue, "a", T0)
    queue.pause()
    age = queue.get_queue_age()
    assert age.paused and age.job_id == first
    queue.resume()
    assert not queue.get_queue_age().paused


def test_ids_without_a_job_hash_and_legacy_markers_are_passed_over(queue, r):
    real = _add(queue, "a", T0 + 50)
    r.rpush(queue.keys.wait, "ghost", "0:legacy")   # at the running end, no hash
    r.hset(queue.keys.job("junk"), mapping={"timestamp": "not a number"})
    r.rpush(queue.keys.wait, "junk")
    r.zadd(queue.keys.prioritized, {"ghost-p": 3 * 2 ** 32 + 1})
    r.zadd(queue.keys.delayed, {"ghost-d": (now_ms() - 1000) * 4096})
    assert queue.get_queue_age().job_id == real
    r.lrem(queue.keys.wait, 0, real)
    age = queue.get_queue_age()
    assert age.oldest_timestamp is None and age.job_id is None


def test_read_queue_stats_reads_many_queues_in_one_round_trip(redis_url, prefix, r):
    a, b = Queue("qa", connection=redis_url, prefix=prefix), Queue("qb", connection=redis_url, prefix=prefix)
    try:
        _add(a, "x", T0)
        _add(a, "y", T0 + 1, priority=2)
        d = a.add("d", {}, {"delay": 60_000})
        r.zadd(a.keys.delayed, {d.id: (now_ms() - 2000) * 4096})
        a.add("future", {}, {"delay": 60_000})
        b.pause()
        a.upsert_job_scheduler("every-min", {"every": 60_000})
        r.zadd(a.keys.repeat, {"every-min": now_ms() - 90_000})  # its run should have run 90 s ago
        stats = read_queue_stats(a.client, [a.keys, b.keys])
        sa, sb = stats["qa"], stats["qb"]
        # an `every` scheduler's first run waits at once
        assert sa.counts["waiting"] == 2 and sa.counts["prioritized"] == 1
        assert sa.counts["delayed"] == 2 and sa.due_delayed == 1
        assert sa.ready == 4
        assert sa.age.oldest_timestamp == T0 and not sa.age.paused
        (late,) = sa.schedulers
        assert late.scheduler_id == "every-min" and 89 < late.overdue_seconds < 120
        assert sb.age.paused and sb.age.oldest_timestamp is None and sb.ready == 0
    finally:
        a.close()
        b.close()


def test_with_many_priority_levels_both_ends_are_read(queue, r):
    pipe = r.pipeline(transaction=False)
    for level in range(1, 101):  # 100 levels in use, one job each, all added at T0 + 1000
        pipe.hset(queue.keys.job(f"p{level}"), mapping={"timestamp": T0 + 1000, "delay": 0, "priority": level})
        pipe.zadd(queue.keys.prioritized, {f"p{level}": level * 2 ** 32 + level})
    pipe.execute()
    r.hset(queue.keys.job("p100"), "timestamp", T0 + 1)  # the least urgent level: the one that starves
    assert queue.get_queue_age().job_id == "p100"
    r.hset(queue.keys.job("p100"), "timestamp", T0 + 1000)
    r.hset(queue.keys.job("p50"), "timestamp", T0 + 1)   # the middle is not read past 64 levels
    assert queue.get_oldest_job_timestamp() == T0 + 1000

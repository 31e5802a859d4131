"""The queues' Prometheus gauges, read at scrape time in one round trip, against a real Redis."""
from __future__ import annotations

import logging

import gevent
import pytest
import redis

from echomq_gevent import Queue
from echomq_gevent.host.queue_gauges import QueueGauges, late_after_from_env
from echomq_gevent.protocol.clock import now_ms
from echomq_gevent.protocol.keys import QueueKeys

prometheus_client = pytest.importorskip("prometheus_client")


def _samples(gauges):
    registry = prometheus_client.CollectorRegistry()
    registry.register(gauges)
    out = {}
    for family in registry.collect():
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_one_scrape_reads_every_queue_in_one_round_trip(redis_url, prefix, r, caplog):
    a = Queue("ga", connection=redis_url, prefix=prefix)
    b = Queue("gb", connection=redis_url, prefix=prefix)
    try:
        a.add("x", {}, {"timestamp": now_ms() - 30_000})
        a.add("p", {}, {"priority": 3})
        b.pause()
        b.add("y", {})
        a.upsert_job_scheduler("tick", {"every": 3_600_000})
        r.zadd(a.keys.repeat, {"tick": now_ms() - 120_000})
        client = redis.Redis.from_url(redis_url, decode_responses=True)
        pipelines = []
        real = client.pipeline
        client.pipeline = lambda *a, **k: pipelines.append(1) or real(*a, **k)  # type: ignore[method-assign]
        gauges = QueueGauges(lambda: client, [QueueKeys("ga", prefix), QueueKeys("gb", prefix)], late_after=60)
        with caplog.at_level(logging.WARNING, logger="echomq_gevent.queue_gauges"):
            s = _samples(gauges)
            _samples(gauges)  # a second scrape: the same late run is not logged again
        assert len(pipelines) == 2, "one pipeline per scrape"
        assert s[("echomq_queue_stats_up", ())] == 1
        # the scheduler's first run waits too
        assert s[("echomq_queue_jobs", (("queue", "ga"), ("state", "waiting")))] == 2
        assert s[("echomq_queue_jobs", (("queue", "ga"), ("state", "prioritized")))] == 1
        assert s[("echomq_queue_ready_jobs", (("queue", "ga"),))] == 3
        assert 29 <= s[("echomq_queue_oldest_age_seconds", (("queue", "ga"),))] < 120
        assert s[("echomq_queue_paused", (("queue", "ga"),))] == 0
        assert s[("echomq_queue_paused", (("queue", "gb"),))] == 1
        assert s[("echomq_queue_ready_jobs", (("queue", "gb"),))] == 1
        assert 119 <= s[("echomq_scheduler_overdue_seconds", (("queue", "ga"), ("scheduler", "tick")))] < 200
        late = [rec for rec in caplog.records if "tick" in rec.getMessage()]
        assert len(late) == 1 and "has not started" in late[0].getMessage()
        client.close()
    finally:
        a.close()
        b.close()


def test_a_scrape_without_redis_answers_up_0(prefix):
    gauges = QueueGauges(lambda: redis.Redis(port=1, socket_connect_timeout=0.5), [QueueKeys("q", prefix)])
    s = _samples(gauges)
    assert s == {("echomq_queue_stats_up", ()): 0}


def test_watch_groups_queues_by_client_and_the_late_margin_comes_from_the_environment(r, prefix):
    gauges = QueueGauges()
    gauges.watch(r, QueueKeys("a", prefix))
    gauges.watch(r, QueueKeys("a", prefix))
    gauges.watch(r, QueueKeys("b", prefix))
    assert [k.name for k in gauges.queues] == ["a", "b"]
    assert set(gauges.read()) == {"a", "b"}
    assert late_after_from_env({}) == 60.0
    assert late_after_from_env({"ECHOMQ_SCHEDULER_LATE_AFTER": "5"}) == 5.0
    assert late_after_from_env({"ECHOMQ_SCHEDULER_LATE_AFTER": "soon"}) == 60.0


def test_late_schedulers_are_logged_without_any_scrape_once_per_late_run(redis_url, prefix, r, caplog):
    q = Queue("gl", connection=redis_url, prefix=prefix)
    try:
        q.upsert_job_scheduler("late", {"every": 3_600_000})
        q.upsert_job_scheduler("fine", {"every": 3_600_000})
        r.zadd(q.keys.repeat, {"late": now_ms() - 120_000})
        client = redis.Redis.from_url(redis_url, decode_responses=True)
        gauges = QueueGauges(lambda: client, [QueueKeys("gl", prefix)], late_after=60)
        with caplog.at_level(logging.WARNING, logger="echomq_gevent.queue_gauges"):
            assert gauges.check_late() == 1
            watcher = gauges.watch_late(interval=0.02)
            try:
                gevent.sleep(0.2)  # several looks: the same late run is logged once
            finally:
                watcher.kill()
        lines = [rec.getMessage() for rec in caplog.records]
        assert len([m for m in lines if "'late'" in m]) == 1, lines
        assert not [m for m in lines if "'fine'" in m], lines
        client.close()
    finally:
        q.close()


def test_the_late_watch_survives_an_unreachable_redis_and_says_so_once(prefix, caplog):
    from redis_server import free_port

    client = redis.Redis(port=free_port(), socket_connect_timeout=0.2)
    gauges = QueueGauges(lambda: client, [QueueKeys("gx", prefix)], late_after=60)
    with caplog.at_level(logging.WARNING, logger="echomq_gevent.queue_gauges"):
        watcher = gauges.watch_late(interval=0.02)
        try:
            gevent.sleep(0.3)
            assert not watcher.dead
        finally:
            watcher.kill()
    failures = [rec for rec in caplog.records if "cannot look for late job schedulers" in rec.getMessage()]
    assert len(failures) == 1


@pytest.mark.parametrize("late_after, every", [(60, 30), (1, 5), (1000, 60)])
def test_the_late_watch_looks_at_half_the_margin_within_bounds(late_after, every):
    from echomq_gevent.host.queue_gauges import late_check_interval

    assert late_check_interval(late_after) == every

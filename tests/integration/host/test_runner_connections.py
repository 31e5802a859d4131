"""The connections the workers of one runner hold (``CLIENT LIST``): 50 queues share one
command connection, each keeps its own named blocking connection (``getWorkers()``), or
with ``marker_wait: shared`` they all wait on one; jobs on any queue are picked up, once
each; the runner closes what they share once they have all closed."""
from __future__ import annotations

import collections

import gevent
import pytest

from echomq_gevent import Queue
from echomq_gevent.host.config import parse_config
from echomq_gevent.host.runner import Runner
from echomq_gevent.worker.remote_cancel import SUBSCRIBER_NAME
from echomq_gevent.worker.shared_wait import SHARED_WAIT_NAME
from integration.runner_helpers import Counting, opened_since

QUEUES = 50


def _subscriptions(r):
    return [c for c in r.client_list() if c.get("name") == SUBSCRIBER_NAME and c["cmd"] in ("subscribe", "ping")]


@pytest.mark.parametrize("mode", ["per_queue", "shared"])
def test_fifty_queues_hold_the_expected_connections_and_take_jobs_on_any(redis_url, prefix, qname, r, wait_for,
                                                                         monkeypatch, mode):
    names = [f"{qname}{i}" for i in range(QUEUES)]
    queues_yaml = "\n".join(f"  {n}: {{concurrency: 1, drain_delay: 10, shutdown_timeout: 5}}" for n in names)
    cfg = parse_config(f"""
redis: {{url: "{redis_url}"}}
prefix: {prefix}
entry_points: false
marker_wait: {mode}
queues:
{queues_yaml}
""")
    # unpatched (as here), each marker wait blocks a thread of the hub's pool (10 by default)
    pool = gevent.get_hub().threadpool
    monkeypatch.setattr(pool, "maxsize", max(pool.maxsize, QUEUES + 10))
    counting = Counting(names)
    before = {int(c["id"]) for c in r.client_list()}
    runner = Runner(cfg, redis_url, extra_plugins=[counting])
    runner.start()
    try:
        if mode == "per_queue":
            # one blocking connection per queue, named as BullMQ names its workers ...
            wait_for(lambda: sum(1 for c in opened_since(r, before) if c["cmd"] == "bzpopmin") == QUEUES,
                     timeout=30, what="every queue blocked on its marker")
            expected = QUEUES + 1
            named = {c["name"] for c in opened_since(r, before) if c["cmd"] == "bzpopmin"}
            assert named == {w._fetch.blocking_client_name() for w in runner.workers}
        else:
            wait_for(lambda: all(w._fetch.marker is not None and w._fetch.marker.waiting for w in runner.workers)
                     and any(c.get("name") == SHARED_WAIT_NAME and "b" in c["flags"] for c in opened_since(r, before)),
                     timeout=30, what="every queue in the shared wait")
            expected = 2
        # ... and one command connection for all of them (their stalled checks ran on it)
        gevent.sleep(0.5)
        conns = opened_since(r, before)
        assert len(conns) == expected, [(c["name"], c["cmd"]) for c in conns]
        # ... and one subscription to the cancellation channels of all of them
        wait_for(lambda: len(_subscriptions(r)) == 1, timeout=10, what="one cancellation subscription")
        assert len({id(w.client) for w in runner.workers}) == 1

        producers = [Queue(n, connection=redis_url, prefix=prefix) for n in names]
        try:
            added = []
            for rnd in range(3):
                for i in range(rnd, QUEUES, 3):
                    added.append((names[i], producers[i].add("j", {"i": i}).id))
                    added.append((names[i], producers[i].add("j", {"i": i}).id))
            wait_for(lambda: len(counting.runs) == len(added), timeout=30, what="every job run")
            assert set(counting.runs) == set(added)
            assert set(counting.runs.values()) == {1}
        finally:
            for q in producers:
                q.close()
    finally:
        runner.drain(5).join()
    assert runner.state == "stopped"
    # the shared client and wait were closed with the last worker
    wait_for(lambda: not [c for c in opened_since(r, before) if c["cmd"] in ("bzpopmin", "evalsha")],
             what="the runner's connections closed")

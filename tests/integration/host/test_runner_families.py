"""Queue families run by the Runner: a pool whose ``queues`` hold a pattern serves every
queue matching it, found by a SCAN at start and every ``discover_every`` seconds (none at
start is allowed, with a log line), round-robin so a small tenant does not wait behind a
big one's flood, each found queue under ``max_per_queue``; a declared queue is never taken
by a pattern; an obliterated queue is dropped with a log line and nothing else stops."""
from __future__ import annotations

import collections
import importlib
import io
import logging

import gevent

from echomq_gevent import Queue
from echomq_gevent.contrib.dashboard import Dashboard
from echomq_gevent.host.pools import describe_pools
from echomq_gevent.host.runner import Runner
from echomq_gevent.host.status import print_status

from integration.contrib.test_dashboard_metrics import _get
from integration.runner_helpers import pools_config

FLOOD = 300
SMALL = 10


class Tenants:
    """The processor of the found queues: records the order jobs finish in and the most
    in flight per queue."""

    def __init__(self):
        self.order = []
        self.in_flight = collections.Counter()
        self.peak = collections.Counter()

    def __call__(self, job):
        q = job.queue_name
        self.in_flight[q] += 1
        self.peak[q] = max(self.peak[q], self.in_flight[q])
        try:
            gevent.sleep(0.005)
        finally:
            self.in_flight[q] -= 1
        self.order.append(q)


RECORDER = Tenants()


def test_a_pattern_serves_tenant_queues_fairly_and_drops_an_obliterated_one(redis_url, prefix, qname, wait_for,
                                                                            caplog):
    # the recorder the file's processor spec names (this module imported by that name)
    recorder = importlib.import_module("integration.host.test_runner_families").RECORDER
    recorder.order.clear()
    recorder.peak.clear()
    declared = f"{qname}-t-declared"
    cfg = pools_config(redis_url, prefix, f"""
queues:
  {declared}: {{processor: "integration.host.test_runner_families:RECORDER"}}
pools:
  tenants:
    concurrency: 4
    queues: ["{qname}-t-*"]
    order: round_robin
    max_per_queue: 2
    processor: "integration.host.test_runner_families:RECORDER"
    discover_every: 0.2
""")
    big, small1, small2 = (f"{qname}-t-{n}" for n in ("big", "s1", "s2"))
    runner = Runner(cfg, redis_url)
    with caplog.at_level(logging.INFO, logger="echomq_gevent"):
        runner.start()
        try:
            family = runner.families[0]
            wait_for(lambda: family.looks >= 1, timeout=10, what="the first look")
            assert "no queue matches" in caplog.text  # nothing at start: allowed, and said
            producers = {n: Queue(n, connection=redis_url, prefix=prefix) for n in (big, small1, small2, declared)}
            producers[big].add_bulk([("j", {"i": i}) for i in range(FLOOD)])
            wait_for(lambda: recorder.order.count(big) >= 20, timeout=20, what="the big tenant served",
                     details=lambda: (family.looks, family.members, caplog.text[-2000:]))
            # two small tenants appear while the flood runs
            producers[small1].add_bulk([("j", {})] * SMALL)
            producers[small2].add_bulk([("j", {})] * SMALL)
            producers[declared].add("j", {})
            wait_for(lambda: recorder.order.count(small1) == SMALL and recorder.order.count(small2) == SMALL,
                     timeout=30, what="the small tenants' jobs run")
            # they did not wait for the flood: most of it is still to run
            assert recorder.order.count(big) < FLOOD - 3 * SMALL, recorder.order.count(big)
            assert max(recorder.peak[n] for n in (big, small1, small2)) <= 2  # max_per_queue
            assert set(family.members) == {big, small1, small2}  # the declared one runs as declared
            # the found queues wait in the pool's one marker wait (the declared one on its own)
            assert {w._fetch.shared_wait for w in family.members.values()} == {runner.shared.marker_wait}
            assert runner.shared.marker_wait is not None
            wait_for(lambda: recorder.order.count(declared) == 1, timeout=10, what="the declared queue's job")
            assert sum(1 for w in runner.workers if w.queue_name == declared) == 1

            # status and the dashboard show the queues the pattern found, in the pool
            out = io.StringIO()
            print_status(redis_url, [declared], prefix, out=out, pools=describe_pools(cfg, [declared]))
            text = out.getvalue()
            assert f"patterns {qname}-t-*: 3 queue(s) found, at most 2 slots each" in text, text
            assert f"  {small1}   cap 2  active 0  ready 0" in text, text
            ui = Dashboard(redis_url, prefix=prefix, queues=[declared, big, small1, small2], pools=describe_pools(cfg))
            try:
                _status, body = _get(ui, "/")
                assert "3 queue(s) found" in body and f'<tr data-pool-queue="{big}">' in body
            finally:
                ui.close()

            # small2 obliterated: dropped with a log line; the flood goes on to its end
            producers[small2].obliterate(force=True)
            wait_for(lambda: small2 not in family.members, timeout=10, what="the obliterated queue dropped")
            assert f"queue {small2!r} is gone" in caplog.text
            assert small2 not in {w.queue_name for w in runner.workers}
            wait_for(lambda: recorder.order.count(big) == FLOOD, timeout=60, what="the whole flood run")
            assert all(w.fetch_loop_alive() for w in runner.workers)
            for q in producers.values():
                q.close()
        finally:
            runner.drain(5).join()
    assert runner.state == "stopped"

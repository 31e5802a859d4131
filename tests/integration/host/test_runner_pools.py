"""``pools:`` run by the Runner (the command, gunicorn and the framework commands all build
on it): the connections of a process serving a pool do not grow with its queues (3 and
100 queues, counted with CLIENT LIST after jobs ran on every queue), and the file's pool
is the one the workers share."""
from __future__ import annotations

import collections

import gevent
import pytest

from echomq_gevent import Queue
from echomq_gevent.host.config import parse_config
from echomq_gevent.host.runner import Runner
from echomq_gevent.worker.shared_wait import SHARED_WAIT_NAME
from integration.runner_helpers import Counting, opened_since, pools_config


def _hold():
    gevent.sleep(0.6)  # over two lock-renewal ticks (lock_duration 1000: a tick every 250 ms)


def _serve_pool(redis_url, prefix, qname, r, wait_for, queues):
    """Run a pool of ``queues`` queues, two jobs on each (each held over a lock-renewal
    tick), and return the runner's connections once every job ran (the producers' closed)."""
    names = [f"{qname}{i}" for i in range(queues)]
    queues_yaml = "\n".join(f"  {n}: {{drain_delay: 10, shutdown_timeout: 5, lock_duration: 1000}}" for n in names)
    cfg = parse_config(f"""
redis: {{url: "{redis_url}"}}
prefix: {prefix}
entry_points: false
queues:
{queues_yaml}
pools:
  everything:
    concurrency: 40
    order: round_robin
    queues: [{", ".join(names)}]
""")
    counting = Counting(names, work=_hold)
    before = {int(c["id"]) for c in r.client_list()}
    runner = Runner(cfg, redis_url, extra_plugins=[counting])
    assert len({id(w.pool) for w in runner.workers}) == 1 and runner.workers[0].pool.concurrency == 40
    runner.start()
    try:
        wait_for(lambda: all(w._fetch.marker is not None and w._fetch.marker.waiting for w in runner.workers)
                 and any(c.get("name") == SHARED_WAIT_NAME and "b" in c["flags"] for c in opened_since(r, before)),
                 timeout=30, what="every queue in the shared wait")
        added = []
        for i, name in enumerate(names):
            q = Queue(name, connection=redis_url, prefix=prefix)
            try:
                added += [(name, job.id) for job in q.add_bulk([("j", {"i": i}), ("j", {"i": i})])]
            finally:
                q.close()
        wait_for(lambda: len(counting.runs) == len(added), timeout=60, what="every job run")
        assert set(counting.runs.values()) == {1}
        wait_for(lambda: all(w.counters["completed"] == 2 for w in runner.workers), timeout=10,
                 what="every finish written")
        # every queue's locks were renewed, all on one thread and connection
        renewals = {w._ctx.locks.shared for w in runner.workers}
        assert len(renewals) == 1 and None not in renewals and renewals.pop().alive()
        assert all(w._ctx.locks.renewals > 0 for w in runner.workers), [(w.queue_name, w._ctx.locks.renewals, w._ctx.locks.errors, w._ctx.locks.interval_s) for w in runner.workers]
        gevent.sleep(0.5)
        return [(c.get("name") or "", c["cmd"]) for c in opened_since(r, before)]
    finally:
        runner.drain(5).join()
        assert runner.state == "stopped"
        wait_for(lambda: not opened_since(r, before), timeout=10, what="the runner's connections closed")


def test_a_pools_connections_stay_flat_in_the_number_of_queues(redis_url, prefix, qname, r, wait_for):
    few = _serve_pool(redis_url, prefix, qname + "f", r, wait_for, 3)
    many = _serve_pool(redis_url, prefix, qname + "m", r, wait_for, 100)
    # the command connection (and now and then one more of its client's pool), one marker
    # wait, one lock renewal: the same for 3 queues as for 100
    assert len(many) <= len(few) <= 4, (few, many)
    for conns in (few, many):
        assert sum(1 for name, _cmd in conns if name == SHARED_WAIT_NAME) == 1
        assert sum(1 for _name, cmd in conns if cmd == "bzpopmin") == 1


def test_a_declared_queue_obliterated_is_dropped_and_served_again_when_it_has_jobs(redis_url, prefix, qname, r,
                                                                                   wait_for, caplog):
    """A queue named under ``pools:`` and obliterated while the pool serves it: dropped from
    the pool with a log line (its worker closed, the other queue served on); a job added
    to it again is run by a new worker of the pool."""
    import logging

    kept, gone = f"{qname}-kept", f"{qname}-gone"
    cfg = pools_config(redis_url, prefix, f"""
queues:
  {kept}: {{processor: "integration.runner_helpers:echo"}}
  {gone}: {{processor: "integration.runner_helpers:echo"}}
pools:
  both:
    concurrency: 4
    queues: [{kept}, {gone}]
    order: round_robin
""")
    for name in (kept, gone):
        q = Queue(name, connection=redis_url, prefix=prefix)
        q.add("j", {"n": 1})
        q.close()
    runner = Runner(cfg, redis_url)
    watcher = runner.families[0]
    watcher.every = 0.2
    with caplog.at_level(logging.INFO, logger="echomq_gevent"):
        runner.start()
        try:
            wait_for(lambda: all(r.zcard(f"{prefix}:{n}:completed") == 1 for n in (kept, gone)), timeout=20,
                     what="a job of each queue run")
            first = next(w for w in runner.workers if w.queue_name == gone)
            q = Queue(gone, connection=redis_url, prefix=prefix)
            try:
                q.obliterate(force=True)
                wait_for(lambda: watcher.declared[gone] is None, timeout=10, what="the obliterated queue dropped")
                wait_for(lambda: first.closed, timeout=10, what="its worker closed")
                assert [w.queue_name for w in runner.workers] == [kept]
                other = Queue(kept, connection=redis_url, prefix=prefix)
                other.add("j", {"n": 2})
                other.close()
                wait_for(lambda: r.zcard(f"{prefix}:{kept}:completed") == 2, timeout=10, what="the other queue served")
                q.add("j", {"n": 3})
                wait_for(lambda: r.zcard(f"{prefix}:{gone}:completed") == 1, timeout=10,
                         what="the queue served again")
            finally:
                q.close()
            assert watcher.declared[gone] is not first and watcher.declared[gone] in runner.workers
        finally:
            runner.drain(5).join()
    said = [rec.getMessage() for rec in caplog.records]
    assert any(f"queue {gone!r} is gone" in m and "until a job is added to it again" in m for m in said), said
    assert any(f"queue {gone!r} has jobs again" in m for m in said), said

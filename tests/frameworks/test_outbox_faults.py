"""The outbox's faults, on SQLite and PostgreSQL, with relays running as processes of
their own (``outbox_relay_proc.py``, patched by gevent as the worker commands are):
Redis stopped for 10 s while the app commits, a relay SIGKILLed between its add and the
rows' delete, two relays at once. Every job is counted: none missing, none twice."""
from __future__ import annotations

import json
import os
import sys
import time

import pytest

sqlalchemy = pytest.importorskip("sqlalchemy")

HERE = os.path.dirname(os.path.abspath(__file__))
RELAY = os.path.join(HERE, "outbox_relay_proc.py")

pytestmark = pytest.mark.slow


def _write_committed(engine, queue, items):
    """One transaction per item; returns the job ids in commit order."""
    from sqlalchemy.orm import Session

    from echomq_gevent.contrib.outbox.rows import encode_row
    from echomq_gevent.contrib.outbox.sqlalchemy import write_row

    ids = []
    for data in items:
        with Session(engine) as s:
            params = encode_row(queue, "job", json.dumps(data), None)
            write_row(s, params)
            s.commit()
        ids.append(params[4])
    return ids


def _relay(command, engine, redis_url, prefix, *extra):
    url = engine.url.render_as_string(hide_password=False)
    proc = command([sys.executable, RELAY, url, redis_url, prefix, "orders", *extra], HERE, {})
    return proc


def _pending(engine):
    with engine.connect() as conn:
        return conn.exec_driver_sql("SELECT COUNT(*) FROM echomq_outbox WHERE state = 0").scalar()


def _waiting_data(queue):
    return [j.data["n"] for j in queue.get_jobs(["waiting"], asc=True)]


@pytest.fixture
def own_redis():
    """A Redis of the test's own, since the test stops it."""
    from redis_server import RedisServer

    server = RedisServer().start()
    yield server
    server.stop()


def test_redis_stopped_before_the_commits_and_back_10_s_later(outbox_engine, own_redis, prefix, command, wait_for):
    from echomq_gevent import Queue

    relay = _relay(command, outbox_engine, own_redis.url, prefix)
    wait_for(lambda: relay.saw("relay ready"), what="the relay to start", details=relay.output, give_up=relay.exited)
    own_redis.kill()
    started = time.monotonic()
    ids = _write_committed(outbox_engine, "orders", [{"n": n} for n in range(20)])  # no error: no Redis call
    assert time.monotonic() - started < 5
    wait_for(lambda: relay.saw("Redis does not take jobs"), what="the relay to notice Redis is gone",
             details=relay.output, give_up=relay.exited)
    remaining = 10 - (time.monotonic() - started)
    if remaining > 0:
        time.sleep(remaining)
    assert _pending(outbox_engine) == 20
    own_redis.start()
    queue = Queue("orders", connection=own_redis.url, prefix=prefix)
    try:
        wait_for(lambda: _pending(outbox_engine) == 0, timeout=30, what="the rows to go out",
                 details=relay.output, give_up=relay.exited)
        assert _waiting_data(queue) == list(range(20)), relay.output()
        assert sorted(j.id for j in queue.get_jobs(["waiting"])) == sorted(ids)
    finally:
        queue.close()
    assert relay.stop() == 0, relay.output()


def test_relay_killed_between_add_and_delete_adds_nothing_twice(outbox_engine, redis_url, prefix, command,
                                                               wait_for, events):
    from echomq_gevent import Queue

    ids = _write_committed(outbox_engine, "orders", [{"n": n} for n in range(30)])
    doomed = _relay(command, outbox_engine, redis_url, prefix, "--kill-after-adds", "1", "--batch-size", "10",
                    "--lease", "1")
    assert doomed.finish(60) == -9, doomed.output()
    assert doomed.saw("killing myself after 1"), doomed.output()
    queue = Queue("orders", connection=redis_url, prefix=prefix)
    try:
        assert queue.count() == 10  # the first batch went out...
        assert _pending(outbox_engine) == 30  # ...and its rows are still there
        relay = _relay(command, outbox_engine, redis_url, prefix, "--batch-size", "10", "--lease", "1")
        wait_for(lambda: _pending(outbox_engine) == 0, timeout=30, what="the restarted relay to move every row",
                 details=relay.output, give_up=relay.exited)
        assert relay.stop() == 0, relay.output()
        assert queue.count() == 30
        assert _waiting_data(queue) == list(range(30))
        assert sorted(j.id for j in queue.get_jobs(["waiting"])) == sorted(ids)
        names = events(queue)
        assert sum(1 for e in names if e["event"] == "added") == 30
        assert sum(1 for e in names if e["event"] == "duplicated") == 10  # the first batch, sent again
    finally:
        queue.close()


def test_two_relays_at_once_add_each_row_once(outbox_engine, redis_url, prefix, command, wait_for, events):
    from echomq_gevent import Queue

    relays = [_relay(command, outbox_engine, redis_url, prefix, "--batch-size", "5", "--poll-interval", "0.05",
                     "--lease", "1") for _ in range(2)]
    for r in relays:
        wait_for(lambda: r.saw("relay ready"), what="a relay to start", details=r.output, give_up=r.exited)
    ids = _write_committed(outbox_engine, "orders", [{"n": n} for n in range(60)])
    queue = Queue("orders", connection=redis_url, prefix=prefix)
    try:
        wait_for(lambda: _pending(outbox_engine) == 0, timeout=30, what="the relays to move every row",
                 details=lambda: relays[0].output() + "\n---\n" + relays[1].output())
        for r in relays:
            assert r.stop() == 0, r.output()
        assert queue.count() == 60
        assert sorted(j.id for j in queue.get_jobs(["waiting"])) == sorted(ids)
        assert _waiting_data(queue) == list(range(60))
        stream = events(queue)
        assert sum(1 for e in stream if e["event"] == "added") == 60
        assert not [e for e in stream if e["event"] == "duplicated"], "a row was sent by both relays"
    finally:
        queue.close()

"""The outbox on each PostgreSQL driver (psycopg2 and psycopg 3) against a throwaway
PostgreSQL and a real Redis: a commit in another process wakes the relay through LISTEN
long before its poll; Django's outbox writes, listens and keeps commit order on either
driver; and psycopg 3's queries let a patched gevent hub run."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVERS = ["psycopg2", "psycopg"]
#: the relays here poll this seldom: a job that comes sooner was woken by NOTIFY
SLOW_POLL = 30.0


@pytest.fixture
def engine_of(request):
    """``outbox_engine_of`` when SQLAlchemy is installed (the Django cases here need none)."""
    pytest.importorskip("sqlalchemy")
    return request.getfixturevalue("outbox_engine_of")


@pytest.fixture
def orders(redis_url, prefix):
    """``queue_for`` of the relays here (one queue, ``orders``) and that queue."""
    from echomq_gevent import Queue
    from echomq_gevent.errors import ConfigError

    queue = Queue("orders", connection=redis_url, prefix=prefix)

    def queue_for(name):
        if name != "orders":
            raise ConfigError(f"queue {name!r} is not declared (declared: orders)")
        return queue
    yield queue_for, queue
    queue.close()


def _write_committed(engine, names):
    """One transaction writing a row per name (in its own session, as another request would)."""
    from sqlalchemy.orm import Session

    from echomq_gevent.contrib.outbox.rows import encode_row
    from echomq_gevent.contrib.outbox.sqlalchemy import write_row

    with Session(engine) as s:
        for name in names:
            write_row(s, encode_row("orders", name, "{}", None))
        s.commit()


def _listening(engine):
    """True once a session of the database is LISTENing (its last statement)."""
    with engine.connect() as conn:
        return conn.exec_driver_sql("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                    "AND query LIKE 'LISTEN %%'").scalar() > 0


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_commit_wakes_the_relay_through_listen_long_before_its_poll(engine_of, orders, driver, wait_for):
    from echomq_gevent.contrib.outbox import OutboxSettings
    from echomq_gevent.contrib.outbox.relay import Relay
    from echomq_gevent.contrib.outbox.sqlalchemy import SqlAlchemyDb

    engine = engine_of(driver)
    queue_for, queue = orders
    relay = Relay(SqlAlchemyDb(engine), queue_for, OutboxSettings(enabled=True, poll_interval=SLOW_POLL), "test")
    relay.start()
    try:
        wait_for(lambda: relay.listener is not None and relay.listener.is_open and relay.counts["passes"] >= 1,
                 timeout=10, what="the relay to listen and run its first pass")
        assert type(relay.listener.conn).__module__.split(".")[0] == driver
        started = time.monotonic()
        _write_committed(engine, ["woken"])
        wait_for(lambda: queue.count() == 1, timeout=SLOW_POLL / 3, what="the job woken by NOTIFY")
        assert time.monotonic() - started < 3.0
        _write_committed(engine, ["again-1", "again-2"])  # and again: the listener keeps listening
        wait_for(lambda: queue.count() == 3, timeout=SLOW_POLL / 3, what="the next jobs woken by NOTIFY")
        assert relay.listening and relay.counts["added"] == 3
        # the listening connection is cut: the driver's error reaches the relay, which listens again
        lost = relay.listener.conn
        with engine.begin() as conn:
            assert conn.exec_driver_sql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                                        "datname = current_database() AND query LIKE 'LISTEN %%'").scalar() == 1
        wait_for(lambda: relay.listener is not None and relay.listener.conn is not lost and relay.listener.is_open,
                 timeout=10, what="the relay to open another listening connection")
        started = time.monotonic()
        _write_committed(engine, ["after-the-cut"])
        wait_for(lambda: queue.count() == 4, timeout=SLOW_POLL / 3, what="the job woken by the new LISTEN")
        assert time.monotonic() - started < 3.0
    finally:
        relay.stop()
    assert [j.name for j in queue.get_jobs(["waiting"], asc=True)] == ["woken", "again-1", "again-2", "after-the-cut"]


def test_a_patched_relay_process_on_psycopg3_is_woken_by_listen(engine_of, redis_url, prefix, command, wait_for):
    """The relay as the worker commands run it (gevent patched first) on
    ``postgresql+psycopg``: commits of this process reach Redis through its LISTEN."""
    from echomq_gevent import Queue

    engine = engine_of("psycopg")
    url = engine.url.render_as_string(hide_password=False)
    relay = command([sys.executable, os.path.join(HERE, "outbox_relay_proc.py"), url, redis_url, prefix, "orders",
                     "--poll-interval", str(SLOW_POLL)], HERE, {})
    queue = Queue("orders", connection=redis_url, prefix=prefix)
    try:
        wait_for(lambda: relay.saw("relay ready") and _listening(engine), timeout=20,
                 what="the relay process to listen", details=relay.output, give_up=relay.exited)
        started = time.monotonic()
        _write_committed(engine, ["one", "two"])
        wait_for(lambda: queue.count() == 2, timeout=SLOW_POLL / 3, what="the relay process to add both jobs",
                 details=relay.output, give_up=relay.exited)
        assert time.monotonic() - started < 3.0, relay.output()
        assert [j.name for j in queue.get_jobs(["waiting"], asc=True)] == ["one", "two"]
        assert "LISTEN connection failed" not in relay.output() and "relay polls" not in relay.output()
    finally:
        queue.close()


@pytest.mark.parametrize("driver", DRIVERS)
def test_django_outbox_on_each_driver(pg_server, redis_url, prefix, driver):
    """Django on ``driver`` (the other one hidden in a process of its own): the row is
    written in the view's transaction with its NOTIFY, the relay listens on a connection of
    Django's settings, and jobs go out in commit order."""
    pytest.importorskip(driver)
    django = pytest.importorskip("django")
    if driver == "psycopg" and django.VERSION < (4, 2):
        pytest.skip(f"Django {django.get_version()} runs on psycopg2 only (psycopg 3 came with 4.2)")
    name = f"dj{driver}{os.getpid()}"
    pg_server.create_database(name)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (os.path.dirname(os.path.dirname(HERE)),
                                                                  os.environ.get("PYTHONPATH", "")) if p))
    env.pop("DJANGO_SETTINGS_MODULE", None)
    proc = subprocess.run([sys.executable, os.path.join(HERE, "outbox_django_proc.py"), driver, "127.0.0.1",
                           str(pg_server.port), pg_server.user, name, redis_url, prefix],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120, env=env, cwd=HERE)
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0, out
    doc = json.loads(out.strip().splitlines()[-1])
    assert doc["django_driver"] == driver and doc["listener_driver"] == driver, doc
    assert len(doc["heard"]) == 2 and doc["took"] < 3.0, doc
    assert doc["added"] == 2, doc
    assert doc["names"] == ["inserted-second", "inserted-first"], doc  # commit order, not insert order
    assert doc["job"] == [{"n": 2}, 2], doc


@pytest.mark.parametrize("order", ["patched-first", "imported-first", "imported-first-fixed"])
def test_psycopg3_queries_let_a_patched_hub_run(pg_server, order):
    """psycopg picks its wait function when it is imported: gevent patched first, it
    skips its C wait and a 0.5 s query lets a ticker greenlet run; imported before the
    patch, the C wait holds the hub for the whole query, until the outbox switches it."""
    pytest.importorskip("psycopg")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (os.path.dirname(os.path.dirname(HERE)),
                                                                  os.environ.get("PYTHONPATH", "")) if p))
    env.pop("PSYCOPG_WAIT_FUNC", None)
    proc = subprocess.run([sys.executable, os.path.join(HERE, "pg_hub_proc.py"), pg_server.dsn, order],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60, env=env, cwd=HERE)
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0, out
    doc = json.loads(out.strip().splitlines()[-1])
    if order == "imported-first" and doc["wait"] == "wait_c":
        assert doc["ticks"] <= 5, doc  # the hub was held: what the switch is for
    else:
        assert doc["wait"] != "wait_c", doc
        assert doc["ticks"] >= 20, doc  # about 50 ticks of 10 ms in 0.5 s
    if order == "imported-first-fixed" and doc["switched"]:
        assert "psycopg was imported before gevent patched this process" in out, out  # said once, in the log

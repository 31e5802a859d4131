"""The relay's ``linger``: once busy (its last pass took more than one row), the rows
committed while a pass runs or just after go out together in the next pass, in commit
order; rows that come one at a time and a commit after a quiet spell are not delayed;
a pass that took a whole batch is followed at once."""
from __future__ import annotations

import json
import time

import gevent
import pytest

sqlalchemy = pytest.importorskip("sqlalchemy")


@pytest.fixture
def orders(redis_url, prefix):
    """``queue_for`` of a relay that knows queue ``orders`` only, and that queue."""
    from echomq_gevent import Queue

    queue = Queue("orders", connection=redis_url, prefix=prefix)
    yield (lambda name: queue), queue
    queue.close()


def _relay(engine, queue_for, **opts):
    from echomq_gevent.contrib.outbox import OutboxSettings
    from echomq_gevent.contrib.outbox.relay import Relay
    from echomq_gevent.contrib.outbox.sqlalchemy import SqlAlchemyDb

    return Relay(SqlAlchemyDb(engine), queue_for, OutboxSettings(enabled=True, **opts), "test")


def _write(session, name, n):
    from echomq_gevent.contrib.outbox.rows import encode_row
    from echomq_gevent.contrib.outbox.sqlalchemy import write_row

    write_row(session, encode_row("orders", name, json.dumps({"n": n}), None))


def _commit_one(engine, name, n):
    from sqlalchemy.orm import Session

    with Session(engine) as s:
        _write(s, name, n)
        s.commit()


def _names(queue):
    return [j.name for j in queue.get_jobs(["waiting"], asc=True)]


def test_a_burst_goes_out_in_one_pass_in_commit_order_and_lone_rows_at_once(pg_server, orders, wait_for):
    """PostgreSQL, woken by NOTIFY, linger 1 s. Lone commits reach Redis well within the
    linger, one pass each. A transaction of two rows makes the relay busy: six
    transactions committed right after it (two of them overlapping, the one that
    inserted first committing last) go out in one pass once the linger ran out, in commit
    order; without the linger each notification would run a pass of its own. After a
    quiet spell a commit goes out at once again."""
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from echomq_gevent.contrib.outbox.sqlalchemy import metadata

    queue_for, queue = orders
    engine = create_engine(pg_server.create_database(f"linger{time.monotonic_ns()}"))
    metadata.create_all(engine)
    relay = _relay(engine, queue_for, linger=1.0, poll_interval=60.0).start()

    def at_once(name, n):
        started = time.monotonic()
        _commit_one(engine, name, n)
        wait_for(lambda: queue.count() == n + 1, timeout=5, what=f"the job of {name}")
        assert time.monotonic() - started < 0.8, f"{name} waited for the linger"

    try:
        wait_for(lambda: relay.listener is not None and relay.listener.is_open and relay.counts["passes"] >= 1,
                 timeout=10, what="the relay to listen and run its first pass")
        passes = relay.counts["passes"]
        at_once("lone0", 0)
        at_once("lone1", 1)
        assert relay.counts["passes"] - passes == 2, relay.counts
        with Session(engine) as s:
            _write(s, "pair-a", 2)
            _write(s, "pair-b", 3)
            s.commit()
        wait_for(lambda: queue.count() == 4, timeout=5, what="the pair's jobs")
        passes = relay.counts["passes"]
        early, late = Session(engine), Session(engine)
        _write(early, "inserted-first", 4)
        _write(late, "inserted-second", 5)
        # the test's database calls block the hub: the relay runs in the sleeps between
        for commit in (lambda: _commit_one(engine, "b6", 6), late.commit, lambda: _commit_one(engine, "b7", 7),
                       early.commit, lambda: _commit_one(engine, "b8", 8), lambda: _commit_one(engine, "b9", 9)):
            commit()
            gevent.sleep(0.03)
        early.close()
        late.close()
        wait_for(lambda: queue.count() == 10, timeout=10, what="the burst's six jobs")
        assert relay.counts["passes"] - passes == 1, relay.counts
        assert _names(queue) == ["lone0", "lone1", "pair-a", "pair-b", "b6", "inserted-second", "b7",
                                 "inserted-first", "b8", "b9"]
        gevent.sleep(1.1)  # a quiet spell longer than the linger
        at_once("after-quiet", 10)
    finally:
        relay.stop()
        engine.dispose()


def test_a_full_pass_is_followed_at_once_and_wakes_during_a_linger_coalesce(tmp_path, orders, wait_for):
    """SQLite (woken by the app's commits in this process), linger 1 s, batch_size 2.
    Eight rows waiting go out in four full passes back to back (and a fifth that finds
    none), well within the three lingers they would take if each waited; then, the relay
    busy, wake-ups for three commits in quick succession wait for the linger and go out
    together: a full batch of two and the last row (a pass each without the linger)."""
    from sqlalchemy import create_engine

    from echomq_gevent.contrib.outbox.sqlalchemy import metadata

    queue_for, queue = orders
    engine = create_engine(f"sqlite:///{tmp_path / 'outbox.sqlite3'}")
    metadata.create_all(engine)
    for n in range(8):
        _commit_one(engine, f"r{n}", n)
    relay = _relay(engine, queue_for, linger=1.0, batch_size=2, poll_interval=60.0)
    started = time.monotonic()
    relay.start()
    try:
        wait_for(lambda: queue.count() == 8, timeout=5, what="the eight waiting rows")
        assert time.monotonic() - started < 2.0, "the passes after a full batch waited for the linger"
        assert _names(queue) == [f"r{n}" for n in range(8)]
        wait_for(lambda: relay.counts["passes"] >= 5, timeout=5, what="the fifth pass")
        gevent.sleep(0.1)
        passes = relay.counts["passes"]
        for n in range(8, 11):
            _commit_one(engine, f"r{n}", n)
            relay.wake()
            gevent.sleep(0.05)  # the relay runs meanwhile
        wait_for(lambda: queue.count() == 11, timeout=5, what="the three later rows")
        gevent.sleep(0.2)
        assert relay.counts["passes"] - passes == 2, relay.counts
        assert _names(queue) == [f"r{n}" for n in range(11)]
    finally:
        relay.stop()
        engine.dispose()


def test_order_id_on_postgresql_goes_by_id_without_listening_and_looks_again_while_busy(pg_server, orders,
                                                                                       wait_for):
    """``order: "id"``: rows written without their NOTIFY; the relay opens no listening
    connection and adds them by id (two overlapping transactions come out in insert
    order, not commit order). It finds rows by polling (here every 60 s: the first
    pass, then a wake-up of its own process); while passes find rows it looks again
    after its linger, so rows of other processes committed meanwhile need no wake-up.
    A rollback adds nothing."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.orm import Session

    from echomq_gevent.contrib.outbox.rows import encode_row
    from echomq_gevent.contrib.outbox.sqlalchemy import metadata, write_row

    def write(session, name, n):
        write_row(session, encode_row("orders", name, json.dumps({"n": n}), None), notify=False)

    def commit_one(name, n):
        with Session(engine) as s:
            write(s, name, n)
            s.commit()

    queue_for, queue = orders
    engine = create_engine(pg_server.create_database(f"idorder{time.monotonic_ns()}"))
    metadata.create_all(engine)
    with engine.connect() as conn:
        conn.exec_driver_sql("LISTEN echomq_outbox")  # nothing is notified
        conn.commit()
        early, late = Session(engine), Session(engine)
        write(early, "inserted-first", 0)
        write(late, "inserted-second", 1)
        late.commit()
        early.commit()
        with Session(engine) as s:
            write(s, "rolled-back", 9)
            s.rollback()
        raw = conn.connection.driver_connection
        if hasattr(raw, "poll"):  # psycopg2
            raw.poll()
            assert raw.notifies == []
        else:
            assert list(raw.notifies(timeout=0.2, stop_after=1)) == []
    relay = _relay(engine, queue_for, order="id", linger=0.5, poll_interval=60.0).start()
    try:
        assert relay.listening is False
        wait_for(lambda: queue.count() == 2, timeout=10, what="the first pass")
        assert _names(queue) == ["inserted-first", "inserted-second"]
        commit_one("a", 2)
        commit_one("b", 3)
        relay.wake()  # as a commit of the relay's own process does
        wait_for(lambda: queue.count() == 4, timeout=5, what="the woken pass")
        # busy: a row committed within the linger goes out without a wake-up
        commit_one("c", 4)
        wait_for(lambda: queue.count() == 5, timeout=5, what="the next look after the linger")
        assert relay.listener is None
        assert _names(queue) == ["inserted-first", "inserted-second", "a", "b", "c"]
        with engine.connect() as conn:
            assert conn.execute(text("SELECT COUNT(*) FROM echomq_outbox")).scalar() == 0
    finally:
        relay.stop()
        engine.dispose()

"""The outbox relay against real databases (SQLite and a throwaway PostgreSQL, through
psycopg2 and through psycopg 3) and a real Redis: committed rows become jobs once, in
commit order; rolled-back rows and savepoints add nothing; bad rows are parked with the
reason while the rest flow."""
from __future__ import annotations

import json
import select

import pytest

sqlalchemy = pytest.importorskip("sqlalchemy")


@pytest.fixture(params=["sqlite", "psycopg2", "psycopg"])
def outbox_engine(request, outbox_engine_of):
    """Every test here on SQLite and on PostgreSQL through each driver."""
    return outbox_engine_of(request.param)


@pytest.fixture
def declared(redis_url, prefix):
    """Queues ``orders`` and ``mails`` of the test's prefix; another name is refused as
    the framework integrations refuse it."""
    from echomq_gevent import Queue
    from echomq_gevent.errors import ConfigError

    made = {}

    def queue_for(name):
        if name not in ("orders", "mails"):
            raise ConfigError(f"queue {name!r} is not declared (declared: orders, mails)")
        if name not in made:
            made[name] = Queue(name, connection=redis_url, prefix=prefix)
        return made[name]
    yield queue_for
    for q in made.values():
        q.close()


def _relay(engine, queue_for, **opts):
    from echomq_gevent.contrib.outbox import OutboxSettings
    from echomq_gevent.contrib.outbox.relay import Relay
    from echomq_gevent.contrib.outbox.sqlalchemy import SqlAlchemyDb

    return Relay(SqlAlchemyDb(engine), queue_for, OutboxSettings(enabled=True, **opts), "test")


def _write(session, queue, name, data, opts=None):
    from echomq_gevent.contrib.outbox.rows import encode_row
    from echomq_gevent.contrib.outbox.sqlalchemy import write_row

    params = encode_row(queue, name, json.dumps(data), opts)
    write_row(session, params)
    return params[4]


def _rows(engine):
    with engine.connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(
            "SELECT id, state, job_id, last_error FROM echomq_outbox ORDER BY id").fetchall()]


def _waiting(queue):
    """(job id, data) of the queue's waiting jobs, oldest first."""
    return [(j.id, j.data) for j in queue.get_jobs(["waiting"], asc=True)]


def test_committed_rows_become_jobs_with_their_ids_and_are_deleted(outbox_engine, declared):
    from sqlalchemy.orm import Session

    with Session(outbox_engine) as s:
        first = _write(s, "orders", "confirm", {"n": 1})
        own = _write(s, "orders", "confirm", {"n": 2}, {"jobId": "order-2", "attempts": 3})
        assert own == "order-2"
        s.commit()
    relay = _relay(outbox_engine, declared)
    result = relay.run_once()
    assert (result.leader, result.added, result.parked) == (True, 2, 0)
    assert first.startswith("outbox-") and len(first) == len("outbox-") + 32
    assert _waiting(declared("orders")) == [(first, {"n": 1}), ("order-2", {"n": 2})]
    assert declared("orders").get_job("order-2").opts["attempts"] == 3
    assert _rows(outbox_engine) == []


def test_rollback_adds_nothing_and_a_rolled_back_savepoint_only_its_rows(outbox_engine, declared):
    from sqlalchemy.orm import Session

    with Session(outbox_engine) as s:
        _write(s, "orders", "gone", {})
        s.rollback()
    with Session(outbox_engine) as s:
        _write(s, "orders", "outer", {})
        nested = s.begin_nested()
        _write(s, "orders", "inner", {})
        nested.rollback()
        _write(s, "orders", "after", {})
        s.commit()
    assert _relay(outbox_engine, declared).run_once().added == 2
    assert [j.name for j in declared("orders").get_jobs(["waiting"], asc=True)] == ["outer", "after"]


def test_a_row_added_again_adds_nothing_twice(outbox_engine, declared, events):
    """The relay died after the add, before the delete: the same row goes again and
    BullMQ refuses the second add of its id."""
    from sqlalchemy.orm import Session

    from echomq_gevent.contrib.outbox import rows as sql
    from echomq_gevent.contrib.outbox.adding import add_rows

    with Session(outbox_engine) as s:
        job_id = _write(s, "orders", "once", {"x": 1})
        s.commit()
    with outbox_engine.connect() as conn:
        row = sql.Row(*conn.exec_driver_sql(f"SELECT {', '.join(sql.COLUMNS)} FROM echomq_outbox").fetchone())
    assert [o.kind for o in add_rows([row], declared)] == ["added"]  # the add of the crashed pass
    assert _relay(outbox_engine, declared).run_once().added == 1  # the pass that retries it
    assert _waiting(declared("orders")) == [(job_id, {"x": 1})]
    assert declared("orders").count() == 1
    assert _rows(outbox_engine) == []


def test_bad_rows_are_parked_with_the_reason_and_the_others_flow(outbox_engine, declared):
    from sqlalchemy.orm import Session

    with Session(outbox_engine) as s:
        ok1 = _write(s, "orders", "ok", {"n": 1})
        _write(s, "nowhere", "lost", {})
        _write(s, "orders", "bad-opts", {}, {"attempts": -4})
        _write(s, "orders", "orphan", {}, {"parent": {"id": "nope", "queue": "bull:missing"}})
        ok2 = _write(s, "mails", "ok", {"n": 2})
        s.commit()
    with outbox_engine.begin() as conn:  # a row an app of another version wrote badly
        conn.exec_driver_sql("UPDATE echomq_outbox SET data = '{not json' WHERE name = 'lost'")
    result = _relay(outbox_engine, declared).run_once()
    assert (result.added, result.parked) == (2, 3)
    assert _waiting(declared("orders")) == [(ok1, {"n": 1})]
    assert _waiting(declared("mails")) == [(ok2, {"n": 2})]
    parked = {r[2]: r[3] for r in _rows(outbox_engine)}
    assert [r[1] for r in _rows(outbox_engine)] == [2, 2, 2]
    reasons = sorted(parked.values())
    assert any("queue 'nowhere'" in r and "not declared" in r for r in reasons), reasons
    assert any("attempts" in r for r in reasons), reasons
    assert any("ParentJobNotExist" in r or "parent" in r.lower() for r in reasons), reasons
    # a second pass leaves them parked, adds nothing
    assert _relay(outbox_engine, declared, lease=1).run_once().added == 0
    assert [r[1] for r in _rows(outbox_engine)] == [2, 2, 2]


def test_parked_rows_retried_by_hand_go_out(outbox_engine, declared):
    from sqlalchemy.orm import Session

    from echomq_gevent.contrib.outbox import rows as sql

    with Session(outbox_engine) as s:
        _write(s, "later", "x", {"n": 1})
        s.commit()
    relay = _relay(outbox_engine, declared)
    assert relay.run_once().parked == 1
    with outbox_engine.begin() as conn:  # the queue was renamed; the row is fixed by hand
        conn.exec_driver_sql("UPDATE echomq_outbox SET queue = 'mails'")
    from echomq_gevent.contrib.outbox.sqlalchemy import SqlAlchemyDb

    with SqlAlchemyDb(outbox_engine).atomic() as ex:
        assert sql.retry_parked(ex) == 1
    relay.order.grace = 0  # a retried row is never notified: taken once seen
    relay.run_once()
    relay.run_once()
    assert relay.counts["added"] == 1
    assert [j.data for j in declared("mails").get_jobs(["waiting"])] == [{"n": 1}]


def test_batches_keep_id_order_across_passes(outbox_engine, declared):
    from sqlalchemy.orm import Session

    with Session(outbox_engine) as s:
        for n in range(25):
            _write(s, "orders" if n % 3 else "mails", "n", {"n": n})
        s.commit()
    relay = _relay(outbox_engine, declared, batch_size=10)
    results = [relay.run_once() for _ in range(4)]
    assert [r.added for r in results] == [10, 10, 5, 0]
    assert [r.full for r in results[:2]] == [True, True]
    assert [d["n"] for _i, d in _waiting(declared("orders"))] == [n for n in range(25) if n % 3]
    assert [d["n"] for _i, d in _waiting(declared("mails"))] == [n for n in range(25) if not n % 3]


def test_delay_counts_from_the_enqueue_and_kept_rows_are_marked(outbox_engine, declared):
    from sqlalchemy.orm import Session

    with Session(outbox_engine) as s:
        job_id = _write(s, "orders", "later", {}, {"delay": 60000})
        s.commit()
    created = _rows_created(outbox_engine)
    relay = _relay(outbox_engine, declared, keep_days=1)
    assert relay.run_once().added == 1
    job = declared("orders").get_job(job_id)
    assert job.timestamp == created
    assert declared("orders").get_job_state(job_id) == "delayed"
    assert [r[1] for r in _rows(outbox_engine)] == [1]  # kept, as added


def _rows_created(engine):
    with engine.connect() as conn:
        return conn.exec_driver_sql("SELECT created_ms FROM echomq_outbox").scalar()


def test_a_second_relay_waits_while_the_first_holds_the_lock(outbox_engine, declared):
    """PostgreSQL: the lock row is held for the pass's transaction; SQLite: the lease."""
    from sqlalchemy.orm import Session

    from echomq_gevent.contrib.outbox import rows as sql

    with Session(outbox_engine) as s:
        _write(s, "orders", "x", {})
        s.commit()
    first, second = _relay(outbox_engine, declared), _relay(outbox_engine, declared)
    if outbox_engine.dialect.name == "postgresql":
        with outbox_engine.begin() as conn:  # another relay's pass under way
            conn.exec_driver_sql("SELECT name FROM echomq_outbox_lock FOR UPDATE")
            assert second.run_once().leader is False
        assert second.run_once().added == 1
    else:
        assert first.run_once().added == 1
        with Session(outbox_engine) as s:
            _write(s, "orders", "y", {})
            s.commit()
        assert second.run_once().leader is False  # the first relay's lease runs
        with first.db.atomic() as ex:
            sql.release_lease(ex, first.owner)
        assert second.run_once().added == 1


@pytest.mark.parametrize("driver", ["psycopg2", "psycopg"])
def test_postgresql_relays_in_commit_order_not_insert_order(outbox_engine_of, declared, driver):
    """Two transactions overlap: the one that inserted first commits last. The relay
    that listens sends the jobs in commit order."""
    from sqlalchemy.orm import Session

    engine = outbox_engine_of(driver)
    try:
        relay = _relay(engine, declared)
        assert relay.open_listener()
        assert relay.listener.conn.__class__.__module__.split(".")[0] == driver
        assert relay.run_once().added == 0  # the backlog (none) is read
        early, late = Session(engine), Session(engine)
        _write(early, "orders", "inserted-first", {"t": "early"})
        _write(late, "orders", "inserted-second", {"t": "late"})
        late.commit()
        early.commit()
        early.close()
        late.close()
        select.select([relay.listener.conn], [], [], 2.0)  # the notifications are there
        total = 0
        for _ in range(3):
            total += relay.run_once().added
        assert total == 2
        assert [j.name for j in declared("orders").get_jobs(["waiting"], asc=True)] == \
            ["inserted-second", "inserted-first"]
    finally:
        if relay.listener is not None:
            relay.listener.close()


def test_a_row_failing_for_an_unknown_reason_is_tried_again_later_then_parked(outbox_engine, declared, redis_url,
                                                                              prefix, wait_for):
    """A queue whose id counter Redis holds as a hash (a foreign writer's damage): its
    add fails with WRONGTYPE before it writes anything. The row is counted and tried
    again after a pause of 0.1-2 s (not at the next poll, nor back to back), parked
    after max_attempts naming the error, while the other queue's rows go out."""
    import redis
    from sqlalchemy.orm import Session

    raw = redis.Redis.from_url(redis_url)
    raw.hset(f"{prefix}:mails:id", "not", "a counter")
    with Session(outbox_engine) as s:
        _write(s, "mails", "hello", {"n": 1})
        ok = _write(s, "orders", "ok", {"n": 2})
        s.commit()
    relay = _relay(outbox_engine, declared, max_attempts=3, poll_interval=60.0).start()
    try:
        wait_for(lambda: [r[1] for r in _rows(outbox_engine)] == [2], timeout=15,
                 what="the failing row to be parked after 3 tries", details=lambda: _rows(outbox_engine))
    finally:
        relay.stop()
    (row,) = _rows(outbox_engine)
    assert "failed 3 times" in row[3] and "WRONGTYPE" in row[3], row
    assert relay.counts["retried"] == 2 and relay.counts["parked"] == 1
    assert _waiting(declared("orders")) == [(ok, {"n": 2})]
    assert declared("mails").count() == 0
    raw.close()


def _counting_takes(relay, monkeypatch, take):
    """``relay`` with ``relay.takes`` counting its calls of ``rows.<take>``, the one
    statement that locks the relay group and takes a pass's rows."""
    from echomq_gevent.contrib.outbox import rows as sql

    relay.takes = 0
    real = getattr(sql, take)

    def counted(*args, **kwargs):
        relay.takes += 1
        return real(*args, **kwargs)
    monkeypatch.setattr(sql, take, counted)
    return relay


def _heard_relay(engine, queue_for, monkeypatch, **opts):
    """A PostgreSQL relay listening, its backlog (none) read: the next rows it takes are
    the notified ones, locked and taken in one statement (``relay.takes`` counts those)."""
    relay = _counting_takes(_relay(engine, queue_for, **opts), monkeypatch, "take_pending")
    assert relay.open_listener()
    assert relay.run_once().added == 0
    return relay


def _commit_each(engine, rows):
    """One transaction a row (queue, name, data, opts); their job ids."""
    from sqlalchemy.orm import Session

    ids = []
    for queue, name, data, opts in rows:
        with Session(engine) as s:
            ids.append(_write(s, queue, name, data, opts))
            s.commit()
    return ids


def _full_rows(engine):
    with engine.connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(
            "SELECT id, queue, name, data, opts, job_id, state, created_ms, attempts FROM echomq_outbox "
            "ORDER BY id").fetchall()]


@pytest.mark.parametrize("driver", ["psycopg2", "psycopg"])
def test_notified_rows_not_added_are_kept_as_they_were(outbox_engine_of, declared, redis_url, prefix, driver,
                                                       monkeypatch):
    """The notified rows are deleted as the pass locks; those it parks or will try again
    are back in the same transaction with every column as written (id, data, job id,
    enqueue time), the others are gone, and the jobs keep the commit order."""
    import redis

    engine = outbox_engine_of(driver)
    relay = _heard_relay(engine, declared, monkeypatch, max_attempts=3)
    try:
        redis.Redis.from_url(redis_url).hset(f"{prefix}:mails:id", "not", "a counter")  # WRONGTYPE on add
        ok1, lost, failing, ok2 = _commit_each(engine, [
            ("orders", "ok", {"n": 1}, None), ("nowhere", "lost", {"n": 2}, None),
            ("mails", "failing", {"n": 3}, None), ("orders", "ok", {"n": 4}, {"attempts": 2})])
        before = {r[5]: r for r in _full_rows(engine)}
        select.select([relay.listener.conn], [], [], 2.0)
        result = relay.run_once()
        assert (result.added, result.parked, result.retried) == (2, 1, 1), result
        assert relay.takes == 1
        assert _waiting(declared("orders")) == [(ok1, {"n": 1}), (ok2, {"n": 4})]
        after = {r[5]: r for r in _full_rows(engine)}
        assert sorted(after) == sorted([lost, failing])
        for job_id, state, attempts in ((lost, 2, 1), (failing, 0, 1)):
            assert after[job_id][:6] == before[job_id][:6] and after[job_id][7] == before[job_id][7]
            assert (after[job_id][6], after[job_id][8]) == (state, attempts)
        assert "queue 'nowhere'" in _rows(engine)[0][3]
    finally:
        relay.listener.close()


@pytest.mark.parametrize("order", ["commit", "id"])
@pytest.mark.parametrize("driver", ["psycopg2", "psycopg"])
def test_taken_rows_wait_while_redis_cannot_take_them_then_go_in_order(outbox_engine_of, declared, driver, order,
                                                                      monkeypatch):
    """Redis unreachable: the pass that took the rows (notified ones in commit order, the
    first by id with ``order: "id"``) puts them all back as they were (nothing parked, no
    try counted); the next pass with Redis back adds them in order."""
    from echomq_gevent import Queue

    engine = outbox_engine_of(driver)
    down = Queue("orders", connection="redis://127.0.0.1:9/0", prefix="nowhere")
    use = {"queue_for": lambda name: down}
    make = _heard_relay if order == "commit" else _id_relay
    relay = make(engine, lambda name: use["queue_for"](name), monkeypatch)
    try:
        ids = _commit_each(engine, [("orders", "ok", {"n": i}, None) for i in range(5)])
        before = _full_rows(engine)
        if relay.listener is not None:
            select.select([relay.listener.conn], [], [], 2.0)
        result = relay.run_once()
        assert result.transient and (result.added, result.parked, result.retried) == (0, 0, 0)
        assert relay.takes == 1
        assert _full_rows(engine) == before
        use["queue_for"] = declared
        total = sum(relay.run_once().added for _ in range(3))
        assert total == 5 and _full_rows(engine) == []
        assert [j for j, _ in _waiting(declared("orders"))] == ids
    finally:
        if relay.listener is not None:
            relay.listener.close()
        down.close()


def _id_relay(engine, queue_for, monkeypatch, **opts):
    """A PostgreSQL relay with ``order: "id"``: each pass locks and takes the first rows
    by id in one statement (``relay.takes`` counts those)."""
    return _counting_takes(_relay(engine, queue_for, order="id", **opts), monkeypatch, "take_first")


@pytest.mark.parametrize("driver", ["psycopg2", "psycopg"])
def test_id_order_takes_in_one_statement_and_puts_back_rows_not_added(outbox_engine_of, declared, redis_url,
                                                                      prefix, driver, monkeypatch):
    """``order: "id"`` on PostgreSQL: one statement locks the relay group and deletes the
    pass's rows; those it parks or will try again are back in the same transaction with
    every column as written, the added ones are gone, the jobs go by id, and a pass while
    another relay holds the lock takes nothing."""
    import redis

    engine = outbox_engine_of(driver)
    relay = _id_relay(engine, declared, monkeypatch, max_attempts=3, batch_size=3)
    redis.Redis.from_url(redis_url).hset(f"{prefix}:mails:id", "not", "a counter")  # WRONGTYPE on add
    ok1, lost, failing, ok2 = _commit_each(engine, [
        ("orders", "ok", {"n": 1}, None), ("nowhere", "lost", {"n": 2}, None),
        ("mails", "failing", {"n": 3}, None), ("orders", "ok", {"n": 4}, {"attempts": 2})])
    before = {r[5]: r for r in _full_rows(engine)}
    with engine.connect() as holder:  # another relay's pass holds the lock
        holder.exec_driver_sql("SELECT name FROM echomq_outbox_lock FOR UPDATE")
        assert relay.run_once().leader is False
        holder.rollback()
    assert _full_rows(engine) == sorted(before.values())
    result = relay.run_once()  # the first three rows by id: the batch size
    assert (result.added, result.parked, result.retried, result.full) == (1, 1, 1, True), result
    assert relay.takes == 2
    after = {r[5]: r for r in _full_rows(engine)}
    assert sorted(after) == sorted([lost, failing, ok2])
    for job_id, state, attempts in ((lost, 2, 1), (failing, 0, 1), (ok2, 0, 0)):
        assert after[job_id][:6] == before[job_id][:6] and after[job_id][7] == before[job_id][7]
        assert (after[job_id][6], after[job_id][8]) == (state, attempts)
    assert relay.run_once().added == 1  # ok2 next: the parked row is no longer waiting
    assert _waiting(declared("orders")) == [(ok1, {"n": 1}), (ok2, {"n": 4})]

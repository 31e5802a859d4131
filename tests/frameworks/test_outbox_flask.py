"""The outbox in the Flask integration (Flask-SQLAlchemy, on the example shop), on
SQLite and PostgreSQL: ``enqueue_after_commit`` writes the row in the session's
transaction, a rollback or a rolled-back savepoint takes its rows, the relay adds the
committed ones; ``flask echomq outbox`` lists and retries parked rows."""
from __future__ import annotations

import json
import os

import itertools

import pytest

flask = pytest.importorskip("flask")
pytest.importorskip("flask_sqlalchemy")

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples")
_dbs = itertools.count()
APP_DIR = os.path.join(EXAMPLES, "flask_app")


@pytest.fixture(params=["sqlite", "postgresql", "psycopg"])
def shop(request, tmp_path, redis_url, prefix, monkeypatch):
    monkeypatch.syspath_prepend(APP_DIR)
    monkeypatch.setenv("SHOP_DB", str(tmp_path / "shop.sqlite3"))
    if request.param != "sqlite":
        driver = "psycopg2" if request.param == "postgresql" else pytest.importorskip(request.param).__name__
        server = request.getfixturevalue("pg_server")
        monkeypatch.setenv("SHOP_DATABASE_URL", server.create_database(f"flask{os.getpid()}x{next(_dbs)}", driver))
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("ECHOMQ_PREFIX", prefix)
    monkeypatch.setenv("SHOP_OUTBOX", "1")
    import flaskshop as module

    app = module.create_app()
    app.config["ECHOMQ_OUTBOX"] = {"poll_interval": 0.2}
    module.echomq.init_app(app)
    app.test_cli_runner().invoke(args=["init-db"])
    yield module, app
    from echomq_gevent.contrib.outbox.registry import unregister

    box = module.echomq.state(app).outbox
    if box is not None:  # a later test reading every registered outbox would open its engine again
        unregister(box.key)
    with app.app_context():
        module.db.engine.dispose()


def _relay(module, app):
    from echomq_gevent.contrib.outbox.relay import Relay

    box = module.echomq.state(app).outbox
    return Relay(box.make_db(), box.queue_for, box.settings, box.label)


def _rows(module, app):
    with app.app_context():
        with module.db.engine.connect() as conn:
            return [tuple(r) for r in conn.exec_driver_sql(
                "SELECT name, state, last_error FROM echomq_outbox ORDER BY id").fetchall()]


def test_rows_go_with_the_session_and_out_after_the_commit(shop):
    module, app = shop
    with app.app_context():
        order = module.Order(email="ada@example.com")
        module.db.session.add(order)
        module.db.session.flush()
        job_id = module.echomq.enqueue_after_commit("orders", "confirm", {"order_id": order.id})
        module.db.session.commit()
        module.echomq.enqueue_after_commit("orders", "dropped", {})
        module.db.session.rollback()
        module.echomq.enqueue_after_commit("orders", "outer", {})
        nested = module.db.session.begin_nested()
        module.echomq.enqueue_after_commit("orders", "inner", {})
        nested.rollback()
        module.db.session.commit()
    assert [r[0] for r in _rows(module, app)] == ["confirm", "outer"]
    assert _relay(module, app).run_once().added == 2
    q = module.echomq.queue("orders", app)
    assert [(j.id, j.name) for j in q.get_jobs(["waiting"], asc=True)][0] == (job_id, "confirm")
    assert [j.name for j in q.get_jobs(["waiting"], asc=True)] == ["confirm", "outer"]
    assert _rows(module, app) == []


def test_the_view_commits_with_redis_gone(shop, monkeypatch):
    """The example's POST with Redis unreachable: 201, the order and its row committed."""
    import dataclasses

    module, app = shop
    state = app.extensions["echomq"]
    state.cfg = dataclasses.replace(state.cfg, redis=dataclasses.replace(state.cfg.redis, url="redis://127.0.0.1:1/0"))
    client = app.test_client()
    created = client.post("/orders", json={"email": "no-redis@example.com"})
    assert created.status_code == 201
    assert [r[0] for r in _rows(module, app)] == ["confirm"]
    # without the outbox the same view fails after its commit: the job is lost
    box, state.outbox = state.outbox, None
    app.config["PROPAGATE_EXCEPTIONS"] = False
    try:
        assert client.post("/orders", json={"email": "lost@example.com"}).status_code == 500
    finally:
        state.outbox = box
    assert [r[0] for r in _rows(module, app)] == ["confirm"]


def test_outbox_command(shop):
    module, app = shop
    with app.app_context():
        module.echomq.enqueue_after_commit("orders", "later", {"n": 1})
        module.db.session.commit()
        with module.db.engine.begin() as conn:
            conn.exec_driver_sql("UPDATE echomq_outbox SET queue = 'gone'")
    relay = _relay(module, app)
    assert relay.run_once().parked == 1
    runner = app.test_cli_runner()
    listed = runner.invoke(args=["echomq", "outbox", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    doc = json.loads(listed.output)
    assert doc["parked_count"] == 1 and "not declared" in doc["parked"][0]["last_error"]
    with app.app_context():
        with module.db.engine.begin() as conn:
            conn.exec_driver_sql("UPDATE echomq_outbox SET queue = 'orders'")
    retried = runner.invoke(args=["echomq", "outbox", "retry", str(doc["parked"][0]["id"])])
    assert retried.exit_code == 0 and "1 parked row(s) put back" in retried.output, retried.output
    relay.order.grace = 0
    relay.run_once()
    relay.run_once()
    assert [j.data for j in module.echomq.queue("orders", app).get_jobs(["waiting"])] == [{"n": 1}]
    assert runner.invoke(args=["echomq", "outbox", "retry"]).exit_code == 2

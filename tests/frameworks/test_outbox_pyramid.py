"""The outbox in the Pyramid integration (pyramid_tm, zope.sqlalchemy, on the example
shop), on SQLite and PostgreSQL (psycopg2 and psycopg 3): ``request.enqueue_job`` writes
the row in the request's transaction (marked changed, so pyramid_tm commits it), an
aborted request writes none, the relay adds the committed ones; the ``outbox`` command
of the module lists them."""
from __future__ import annotations

import json
import os
import re
import sys

import itertools

import pytest

pytest.importorskip("pyramid")
pytest.importorskip("pyramid_tm")
pytest.importorskip("zope.sqlalchemy")

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples")
_dbs = itertools.count()
APP_DIR = os.path.join(EXAMPLES, "pyramid_app")


@pytest.fixture(params=["sqlite", "postgresql", "psycopg"])
def shop(request, tmp_path, monkeypatch, pyramid_ini):
    monkeypatch.syspath_prepend(APP_DIR)
    from pyramid.paster import get_app

    import pyramidshop as module
    from echomq_gevent.contrib.outbox.sqlalchemy import metadata

    if request.param != "sqlite":  # postgresql: psycopg2; psycopg: psycopg 3 (postgresql+psycopg)
        driver = "psycopg2" if request.param == "postgresql" else pytest.importorskip(request.param).__name__
        url = request.getfixturevalue("pg_server").create_database(f"pyramid{os.getpid()}x{next(_dbs)}", driver)
    else:
        url = f"sqlite:///{tmp_path / 'shop.sqlite3'}"
    ini = pyramid_ini(url, "echo" "mq.outbox = true\necho" "mq.outbox.poll_interval = 0.2\n")
    app = get_app(ini)
    module.Base.metadata.create_all(app.registry["engine"])
    metadata.create_all(app.registry["engine"])
    yield module, app, ini
    app.registry["engine"].dispose()


def _post(app, body, fail=False):
    from pyramid.request import Request

    req = Request.blank("/orders" + ("?fail=1" if fail else ""), method="POST",
                        body=json.dumps(body).encode(), content_type="application/json")
    return req.get_response(app)


def _state(app):
    from echomq_gevent.contrib.pyramid import integration

    return integration(app.registry)


def _rows(app):
    with app.registry["engine"].connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql("SELECT name, state FROM echomq_outbox ORDER BY id")]


def test_request_writes_the_row_and_the_relay_adds_it(shop):
    from echomq_gevent.contrib.outbox.relay import Relay

    module, app, _ini = shop
    created = _post(app, {"email": "ada@example.com"})
    assert created.status_code == 201, created.text
    with pytest.raises(RuntimeError):
        _post(app, {"email": "failed@example.com"}, fail=True)
    assert _rows(app) == [("confirm", 0)]
    box = _state(app).outbox
    relay = Relay(box.make_db(), box.queue_for, box.settings, box.label)
    assert relay.run_once().added == 1
    jobs = _state(app).queue("orders").get_jobs(["waiting"])
    assert [(j.name, j.data) for j in jobs] == [("confirm", {"order_id": created.json["id"]})]
    assert jobs[0].id.startswith("outbox-")
    assert _rows(app) == []


def test_a_request_that_only_enqueues_commits_its_row(shop):
    """No ORM change in the request: the raw insert alone must make pyramid_tm commit."""
    from pyramid.scripting import prepare

    _module, app, _ini = shop
    env = prepare(registry=app.registry)
    request = env["request"]
    try:
        request.tm.begin()
        request.enqueue_job("orders", "only-this", {})
        request.tm.commit()
    finally:
        env["closer"]()
    assert _rows(app) == [("only-this", 0)]


def test_outbox_command_of_the_module(shop, command):
    _module, app, ini = shop
    _post(app, {"email": "x@example.com"})
    listed = command([sys.executable, "-m", "echomq_gevent.contrib.pyramid", ini, "outbox", "list", "--json"],
                     APP_DIR, {})
    assert listed.finish() == 0, listed.output()
    start = next(i for i, line in enumerate(listed.lines) if line.startswith("{"))
    doc = json.loads("\n".join(listed.lines[start:]))
    assert doc["waiting"] == 1 and doc["parked_count"] == 0


def test_outbox_settings_name_the_setting():
    from echomq_gevent.contrib.pyramid import integration_from_settings
    from echomq_gevent.errors import ConfigError

    base = {"echomq.redis_url": "redis://127.0.0.1:6379/0", "echomq.queues": "orders"}
    with pytest.raises(ConfigError, match=r"echomq\.outbox\.batch_sise: unknown outbox option"):
        integration_from_settings(dict(base, **{"echomq.outbox.batch_sise": "5", "sqlalchemy.url": "sqlite://"}))
    with pytest.raises(ConfigError, match=r"echomq\.outbox: the relay builds its engine from the sqlalchemy\."):
        integration_from_settings(dict(base, **{"echomq.outbox": "true"}))

"""Operating the outbox: its numbers in the Prometheus gauges, on the dashboard and in
``/_echomq/ready`` (503 once the oldest waiting row is older than ``max_age``); and the
Django example shop co-hosted in gunicorn with the outbox on (two gevent worker
processes, each with a relay: every order confirmed once, through the outbox)."""
from __future__ import annotations

import json
import os
import re
import signal
import sys

import pytest

from running_command import http_json

sqlalchemy = pytest.importorskip("sqlalchemy")

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples")
PROJECT = os.path.join(EXAMPLES, "django_project")


@pytest.fixture
def registered(tmp_path, redis_url, prefix):
    """An outbox registered in this process on a SQLite file; Redis is unreachable for
    its relay, so committed rows wait."""
    from sqlalchemy import create_engine

    from echomq_gevent import Queue
    from echomq_gevent.contrib.outbox import OutboxSettings
    from echomq_gevent.contrib.outbox.registry import Outbox, register, unregister
    from echomq_gevent.contrib.outbox.sqlalchemy import SqlAlchemyDb, metadata
    from echomq_gevent.errors import ConfigError

    engine = create_engine(f"sqlite:///{tmp_path / 'ops.sqlite3'}")
    metadata.create_all(engine)

    def queue_for(name):
        if name != "orders":
            raise ConfigError(f"queue {name!r} is not declared")
        return Queue(name, connection="redis://127.0.0.1:1/0", prefix=prefix)
    box = register(Outbox("test-ops", OutboxSettings(enabled=True, max_age=0.5, poll_interval=0.1),
                          lambda: SqlAlchemyDb(engine), queue_for, "ops test app"))
    yield box, engine
    unregister("test-ops")
    engine.dispose()


def _commit_rows(engine, *queues):
    from sqlalchemy.orm import Session

    from echomq_gevent.contrib.outbox.rows import encode_row
    from echomq_gevent.contrib.outbox.sqlalchemy import write_row

    with Session(engine) as s:
        for q in queues:
            write_row(s, encode_row(q, "job", "{}", None))
        s.commit()


class _Host:
    """The part of a CoHost that ``ready`` reads, with this process's real outboxes."""

    def status(self):
        from echomq_gevent.contrib.cohost import _outbox_status

        return {"draining": False, "state": "running", "queues": {}, "outbox": _outbox_status()}

    def redis_ok(self):
        return None


def test_ready_degrades_when_the_oldest_row_is_too_old(registered, wait_for):
    from echomq_gevent.contrib.wsgi import EchoMQMiddleware

    box, engine = registered
    mw = EchoMQMiddleware(lambda e, s: [], cohost=_Host())
    relay = box.start_relay()
    try:
        wait_for(lambda: relay.stats().get("waiting") == 0, what="the relay's first reading")
        assert mw.ready()[0].startswith("200")
        _commit_rows(engine, "orders")
        status, _headers, body = wait_for(lambda: (lambda r: r if r[0].startswith("503") else None)(mw.ready()),
                                          what="ready to answer 503")
        doc = json.loads(body)
        assert "ops test app: the oldest row has waited" in doc["reason"], doc
        ours = [b for b in doc["outbox"] if b.get("app") == "ops test app"]  # other tests' apps may be there
        assert ours[0]["waiting"] == 1 and ours[0]["too_old"] is True, doc
        assert relay.stats()["redis_down_s"] is not None
    finally:
        box.stop_relay(5)


def test_prometheus_gauges_follow_the_relay(registered, wait_for):
    prometheus = pytest.importorskip("echomq_gevent.contrib.prometheus")
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        pytest.skip("multiprocess metrics are tested under gunicorn")
    box, engine = registered
    _commit_rows(engine, "nowhere", "orders", "orders")  # the parked row first: Redis is down for the rest
    assert box.start_relay() is not None
    try:
        def text():
            return prometheus.render()[0].decode()
        wait_for(lambda: 'echomq_outbox_parked{app="ops test app"} 1.0' in text(), what="the parked gauge",
                 details=text)
        body = text()
        assert 'echomq_outbox_waiting{app="ops test app"} 2.0' in body, body
        assert re.search(r'echomq_outbox_oldest_age_seconds\{app="ops test app"\} [0-9.]+', body)
    finally:
        box.stop_relay(5)


def test_dashboard_overview_shows_the_outbox_and_its_parked_rows(registered, redis_url, prefix, wait_for):
    from echomq_gevent.contrib.dashboard import Dashboard

    box, engine = registered
    _commit_rows(engine, "nowhere", "orders")
    relay = box.start_relay()
    try:
        wait_for(lambda: relay.stats().get("parked") == 1, what="the unknown queue's row to be parked")
    finally:
        box.stop_relay(5)
    ui = Dashboard(redis_url, prefix=prefix)
    try:
        out = {}

        def start_response(status, headers):
            out["status"] = status
        page = b"".join(ui({"REQUEST_METHOD": "GET", "PATH_INFO": "/", "wsgi.url_scheme": "http",
                            "SERVER_NAME": "localhost", "SERVER_PORT": "80", "HTTP_HOST": "localhost"},
                           start_response)).decode()
    finally:
        ui.close()
    assert out["status"].startswith("200"), page
    assert 'id="outboxes"' in page and "ops test app" in page
    assert re.search(r'data-parked="\d+"><td class="n">\d+</td><td>nowhere</td>', page), page
    assert "is not declared" in page


def test_example_co_hosted_in_gunicorn_relays_through_the_outbox(tmp_path, redis_url, prefix, command, wait_for):
    """Two gevent worker processes, each with the job workers and a relay, on one SQLite
    file: ten orders, each confirmed once by a job that went through the outbox."""
    shop_db = str(tmp_path / "shop.sqlite3")
    env = {"SHOP_DB": shop_db, "REDIS_URL": redis_url, "ECHOMQ_PREFIX": prefix, "BIND": "127.0.0.1:0",
           "DJANGO_SETTINGS_MODULE": "shop.settings", "SHOP_OUTBOX": "1", "WEB_CONCURRENCY": "2"}
    migrate = command([sys.executable, "manage.py", "migrate", "--verbosity", "0"], PROJECT, env)
    assert migrate.finish() == 0, migrate.output()
    server = command([sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py"], PROJECT, env)
    number = wait_for(server.gunicorn_port, what="gunicorn to listen", details=server.output, give_up=server.exited)

    def call(method, path, body=None):
        return http_json(number, method, path, body)

    wait_for(lambda: len([line for line in server.lines if "outbox relay" in line and "started" in line]) >= 2,
             what="both processes' relays", details=server.output, give_up=server.exited)
    pks = []
    for n in range(10):
        status, body = call("POST", "/orders", {"email": f"c{n}@example.com"})
        assert status == 201, body
        pks.append(json.loads(body)["id"])
    for pk in pks:
        page = wait_for(lambda: (lambda p: p if p["status"] == "confirmed" else None)(
            json.loads(call("GET", f"/orders/{pk}")[1])), what=f"order {pk} to be confirmed",
            details=server.output, give_up=server.exited)
        # the id the outbox row kept (outbox-<hex>, or a task result's 32 hex digits)
        assert re.match(r"^job (outbox-)?[0-9a-f]{32}$", page["confirmed_by"]), page
    doc = wait_for(lambda: (lambda d: d if d["outbox"][0]["waiting"] == 0 else None)(
        json.loads(call("GET", "/_echomq/ready")[1])), what="ready to report an empty outbox", details=server.output)
    assert doc["ready"] is True and doc["outbox"][0]["parked"] == 0, doc
    from echomq_gevent import Queue

    q = Queue("orders", connection=redis_url, prefix=prefix)
    try:
        assert q.get_job_counts("completed")["completed"] == 10
    finally:
        q.close()
    assert server.stop(signal.SIGTERM, timeout=60) == 0, server.output()


def test_relay_false_starts_no_relay_here_and_status_reads_the_database(registered):
    from echomq_gevent.contrib.outbox import OutboxSettings
    from echomq_gevent.contrib.outbox.registry import Outbox

    box, engine = registered
    _commit_rows(engine, "orders")
    quiet = Outbox("test-quiet", OutboxSettings(enabled=True, relay=False), box.make_db, box.queue_for, "quiet")
    assert quiet.start_relay() is None and quiet.relay is None
    s = quiet.status()
    assert (s["waiting"], s["parked"], s["state"]) == (1, 0, "not running in this process")

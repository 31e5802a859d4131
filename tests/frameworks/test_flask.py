"""The Flask integration with the real Flask, Flask-SQLAlchemy, plain SQLAlchemy and
SQLite, on the example shop (``examples/flask_app``): enqueue after commit, an app
context per job, no session or connection leaked by a failing job, ``app.config``
errors naming the key, and ``flask echomq worker`` running and draining in a
subprocess."""
from __future__ import annotations

import json
import os
import signal
import sys

import pytest

flask = pytest.importorskip("flask")
pytest.importorskip("flask_sqlalchemy")

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples")

APP_DIR = os.path.join(EXAMPLES, "flask_app")


@pytest.fixture
def shop(tmp_path, redis_url, prefix, monkeypatch):
    monkeypatch.syspath_prepend(APP_DIR)
    monkeypatch.setenv("SHOP_DB", str(tmp_path / "shop.sqlite3"))
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("ECHOMQ_PREFIX", prefix)
    import flaskshop as module

    app = module.create_app()
    app.config["ECHOMQ_QUEUES"]["orders"].update(drain_delay=0.5, concurrency=1)
    module.echomq.init_app(app)  # again, with the test's worker options
    with app.app_context():
        module.db.create_all()
    return module, app


def _counts(module, app):
    return module.echomq.queue("orders", app).get_job_counts("waiting", "completed", "failed")


def _runner(module, app, redis_url):
    from echomq_gevent.host.runner import Runner

    state = module.echomq.state(app)
    return Runner(state.cfg, redis_url, extra_plugins=state.plugins)


def test_rolled_back_session_enqueues_nothing(shop):
    module, app = shop
    with app.app_context():
        order = module.Order(email="rolled@back.example")
        module.db.session.add(order)
        module.db.session.flush()
        module.echomq.enqueue_after_commit("orders", "confirm", {"order_id": order.id})
        module.db.session.rollback()
        module.echomq.enqueue("orders", "marker", {})
        assert [j.name for j in module.echomq.queue("orders").get_jobs(["waiting"])] == ["marker"]
        # a later commit of the same session does not bring the dropped job back
        module.db.session.commit()
        assert [j.name for j in module.echomq.queue("orders").get_jobs(["waiting"])] == ["marker"]


def test_committed_session_enqueues_once_after_commit(shop):
    module, app = shop
    with app.app_context():
        order = module.Order(email="ada@example.com")
        module.db.session.add(order)
        module.db.session.flush()
        module.echomq.enqueue_after_commit("orders", "confirm", {"order_id": order.id})
        assert _counts(module, app)["waiting"] == 0, "the job went out before the commit"
        module.db.session.commit()
        jobs = module.echomq.queue("orders").get_jobs(["waiting"])
        assert [(j.name, j.data) for j in jobs] == [("confirm", {"order_id": order.id})]
        module.db.session.commit()  # a second commit sends nothing again
        assert _counts(module, app)["waiting"] == 1


def test_request_enqueues_and_processor_reads_the_row_in_its_app_context(shop, redis_url, wait_for):
    module, app = shop
    client = app.test_client()
    created = client.post("/orders", json={"email": "grace@example.com"})
    assert created.status_code == 201
    pk = created.get_json()["id"]
    runner = _runner(module, app, redis_url)
    runner.start()
    try:
        wait_for(lambda: _counts(module, app)["completed"] == 1, what="the confirm job to complete")
    finally:
        runner.drain(0)
        runner.wait(10)
    page = client.get(f"/orders/{pk}").get_json()
    assert page["status"] == "confirmed" and page["confirmed_by"].startswith("job ")


def test_a_raising_job_leaves_no_session_or_connection_for_the_next(shop, redis_url, wait_for):
    module, app = shop
    db = module.db
    seen = {}

    @module.echomq.processor("orders", "leaky")
    def leaky(job):
        db.session.add(module.Order(email="uncommitted@example.com"))
        db.session.flush()  # a transaction is open on a checked-out connection
        raise RuntimeError("fails with a transaction open")

    @module.echomq.processor("orders", "next")
    def next_job(job):
        from flask import current_app

        seen["app"] = current_app.name
        seen["new_session"] = not db.session.new and not db.session().in_transaction()
        seen["leaked_row"] = db.session.query(module.Order).filter_by(email="uncommitted@example.com").count()
        return "ok"

    try:
        with app.app_context():
            engine = db.engine
        q = module.echomq.queue("orders", app)
        q.add("leaky", {})
        runner = _runner(module, app, redis_url)
        runner.start()
        try:
            wait_for(lambda: _counts(module, app)["failed"] == 1, what="the leaky job to fail")
            assert engine.pool.checkedout() == 0, "the failed job's connection was not given back"
            q.add("next", {})
            wait_for(lambda: _counts(module, app)["completed"] == 1, what="the next job to complete")
            assert engine.pool.checkedout() == 0
        finally:
            runner.drain(0)
            runner.wait(10)
    finally:
        module.echomq.processor._routes[:] = [r for r in module.echomq.processor._routes
                                              if r[2] not in (leaky, next_job)]
    assert seen == {"app": "flaskshop", "new_session": True, "leaked_row": 0}


def test_plain_sqlalchemy_scoped_session(tmp_path, redis_url, prefix, wait_for):
    """Without Flask-SQLAlchemy: the extension's scoped_session is the default for
    enqueue_after_commit and is removed after each job."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.orm import scoped_session, sessionmaker

    from echomq_gevent.contrib.flask import EchoMQ
    from echomq_gevent.host.runner import Runner

    engine = create_engine(f"sqlite:///{tmp_path / 'plain.sqlite3'}")
    with engine.begin() as conn:
        conn.execute(text("create table notes (id integer primary key, body text)"))
    Session = scoped_session(sessionmaker(bind=engine))
    app = flask.Flask("plain")
    app.config.update(ECHOMQ_REDIS_URL=redis_url, ECHOMQ_PREFIX=prefix,
                      ECHOMQ_QUEUES={"notes": {"drain_delay": 0.5}})
    ext = EchoMQ(app, session=Session)
    bodies = []

    @ext.processor("notes")
    def read(job):
        bodies.append(Session.execute(text("select body from notes where id = :id"),
                                      {"id": job.data["id"]}).scalar_one())
        return "read"

    with app.app_context():
        Session.execute(text("insert into notes (id, body) values (1, 'kept')"))
        ext.enqueue_after_commit("notes", "read", {"id": 1})
        Session.commit()
        Session.execute(text("insert into notes (id, body) values (2, 'dropped')"))
        ext.enqueue_after_commit("notes", "read", {"id": 2})
        Session.rollback()
        Session.remove()
    q = ext.queue("notes", app)
    assert [j.data for j in q.get_jobs(["waiting"])] == [{"id": 1}]
    runner = Runner(ext.state(app).cfg, redis_url, extra_plugins=ext.state(app).plugins)
    runner.start()
    try:
        wait_for(lambda: q.get_job_counts("completed")["completed"] == 1, what="the read job")
    finally:
        runner.drain(0)
        runner.wait(10)
    assert bodies == ["kept"]
    assert engine.pool.checkedout() == 0


# --- bad input ------------------------------------------------------------------------------
def _app(**config):
    app = flask.Flask("bad")
    app.config.update(config)
    return app


def test_missing_queues_key_is_named():
    from echomq_gevent.contrib.flask import EchoMQ
    from echomq_gevent.errors import ConfigError

    with pytest.raises(ConfigError, match=r"app\.config\['ECHOMQ_QUEUES'\] is not set"):
        EchoMQ(_app(ECHOMQ_REDIS_URL="redis://127.0.0.1:6379/0"))


def test_misspelt_key_and_bad_option_are_named():
    from echomq_gevent.contrib.flask import EchoMQ
    from echomq_gevent.errors import ConfigError

    with pytest.raises(ConfigError, match=r"app\.config\['ECHOMQ_QUEUE'\] is not an echomq-gevent setting; "
                                          r"did you mean 'ECHOMQ_QUEUES'"):
        EchoMQ(_app(ECHOMQ_QUEUE={"a": {}}))
    with pytest.raises(ConfigError, match=r"app\.config\['ECHOMQ_QUEUES'\]\['a'\]\['lock_duration'\]: "):
        EchoMQ(_app(ECHOMQ_QUEUES={"a": {"lock_duration": "30s"}}))
    with pytest.raises(ConfigError, match=r"app\.config\['ECHOMQ_REDIS_URL'\]: must be 'embedded' or a redis://"):
        EchoMQ(_app(ECHOMQ_REDIS_URL="localhost:6379", ECHOMQ_QUEUES={"a": {}}))


def test_unknown_queue_and_unimportable_processor_are_named(redis_url):
    from echomq_gevent.contrib.flask import EchoMQ
    from echomq_gevent.errors import ConfigError

    app = _app(ECHOMQ_REDIS_URL=redis_url, ECHOMQ_QUEUES={"a": {"processor": "no_such_module:fn"}})
    ext = EchoMQ(app)
    with app.app_context():
        with pytest.raises(ConfigError, match=r"app\.config\['ECHOMQ_QUEUES'\]: queue 'b' is not declared"):
            ext.enqueue("b", "x", {})
    with pytest.raises(ConfigError, match=r"app\.config\['ECHOMQ_QUEUES'\]\['a'\]\['processor'\]: processor "
                                          r"'no_such_module:fn': module 'no_such_module' cannot be imported"):
        ext.state(app).prepare()


# --- the CLI group and the example, end to end --------------------------------------------------
def test_flask_echomq_worker_processes_the_example_and_drains_on_sigterm(
        tmp_path, redis_url, prefix, command, wait_for):
    """``flask --app flaskshop init-db``, then ``flask --app flaskshop echomq worker`` in a
    subprocess; a POST (the test client of the same app and database) enqueues after
    the commit; the worker confirms; SIGTERM drains and exits 0; ``flask echomq status
    --json`` counts the completed job."""
    flask_bin = [sys.executable, "-m", "flask", "--app", "flaskshop"]
    env = {"SHOP_DB": str(tmp_path / "shop.sqlite3"), "REDIS_URL": redis_url, "ECHOMQ_PREFIX": prefix}
    init = command(flask_bin + ["init-db"], APP_DIR, env)
    assert init.finish() == 0, init.output()
    worker = command(flask_bin + ["echomq", "worker", "--log-level", "info"], APP_DIR, env)
    wait_for(lambda: worker.saw("1 queue(s) (orders)"), what="the worker to start",
             details=worker.output, give_up=worker.exited)
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    sys.path.insert(0, APP_DIR)
    try:
        import flaskshop as module

        app = module.create_app()
        client = app.test_client()
        created = client.post("/orders", json={"email": "ada@example.com"})
        assert created.status_code == 201
        pk = created.get_json()["id"]
        page = wait_for(lambda: (lambda p: p if p["status"] == "confirmed" else None)(
            client.get(f"/orders/{pk}").get_json()), what="the order to be confirmed",
            details=worker.output, give_up=worker.exited)
        assert page["confirmed_by"].startswith("job ")
    finally:
        sys.path.remove(APP_DIR)
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert worker.stop(signal.SIGTERM) == 0, worker.output()
    assert worker.saw("SIGTERM: stopping"), worker.output()
    assert worker.saw("restarting with gevent patched"), worker.output()
    status = command(flask_bin + ["echomq", "status", "--json"], APP_DIR, env)
    assert status.finish() == 0, status.output()
    assert _json_output(status)["orders"]["counts"]["completed"] == 1


def test_flask_echomq_worker_runs_supervised_processes(tmp_path, redis_url, prefix, command, wait_for):
    flask_bin = [sys.executable, "-m", "flask", "--app", "flaskshop"]
    env = {"SHOP_DB": str(tmp_path / "shop.sqlite3"), "REDIS_URL": redis_url, "ECHOMQ_PREFIX": prefix}
    worker = command(flask_bin + ["echomq", "worker", "--processes", "2"], APP_DIR, env)
    _two_processes_up_then_drained(worker, wait_for)
    bad = command(flask_bin + ["echomq", "worker", "--processes", "many"], APP_DIR, env)
    assert bad.finish() != 0 and bad.saw("must be a whole number of processes"), bad.output()


def test_flask_echomq_worker_refuses_a_bad_setting_at_start(tmp_path, command):
    env = {"SHOP_DB": str(tmp_path / "shop.sqlite3"), "REDIS_URL": "localhost"}
    worker = command([sys.executable, "-m", "flask", "--app", "flaskshop", "echomq", "worker"], APP_DIR, env)
    assert worker.finish() != 0
    assert worker.saw("app.config['ECHOMQ_REDIS_URL']: must be 'embedded' or a redis://"), worker.output()


def _json_output(cmd):
    """The JSON document a command printed (stderr is merged into the lines: skip any
    warning printed before it)."""
    lines = cmd.lines
    start = next(i for i, line in enumerate(lines) if line.startswith("{"))
    return json.loads("\n".join(lines[start:]))


def _two_processes_up_then_drained(worker, wait_for):
    """``--processes 2``: two children run the queue, logs name them; SIGTERM drains both, exit 0."""
    import re

    def up():
        return len({m for line in list(worker.lines)
                    for m in re.findall(r"process=(\d)/\d+ echomq_gevent.cli: echomq-gevent .*1 queue\(s\) \(orders\)",
                                        line)}) == 2

    wait_for(up, timeout=60, what="two worker processes", details=worker.output, give_up=worker.exited)
    assert worker.stop(signal.SIGTERM) == 0, worker.output()
    assert worker.saw("SIGTERM: draining 2 worker process(es)"), worker.output()
    assert worker.saw("every worker process has stopped; exiting 0"), worker.output()


def test_the_apps_jobs_drain_in_the_test(shop):
    """The testing kit's glue: ``echomq.state(app).drain()`` runs the app's processors
    (in an app context of their own) in the test's process; what the view enqueued is
    confirmed when it returns."""
    from echomq_gevent.testing import assert_enqueued

    module, app = shop
    client = app.test_client()
    created = client.post("/orders", json={"email": "drain@example.com"})
    assert created.status_code == 201, created.data
    assert_enqueued(module.echomq.queue("orders", app), "confirm", count=1)
    result = module.echomq.state(app).drain()
    assert [o.name for o in result.completed] == ["confirm"] and result.failed == []
    assert client.get(f"/orders/{created.get_json()['id']}").get_json()["status"] == "confirmed"

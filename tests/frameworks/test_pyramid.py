"""The Pyramid integration with the real Pyramid, pyramid_tm, zope.sqlalchemy and
SQLite, on the example shop (``examples/pyramid_app``): ``request.enqueue_job`` after
the request's transaction commits and never when it aborts, a request and a transaction
per job, ``.ini`` errors naming the setting, and ``python -m
echomq_gevent.contrib.pyramid development.ini`` running and draining in a subprocess."""
from __future__ import annotations

import json
import os
import re
import signal
import sys

import pytest

pytest.importorskip("pyramid")
pytest.importorskip("pyramid_tm")
pytest.importorskip("zope.sqlalchemy")

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples")

APP_DIR = os.path.join(EXAMPLES, "pyramid_app")


def _ini(tmp_path, redis_url, prefix, **extra):
    """The example's development.ini with the test's Redis, prefix and database."""
    with open(os.path.join(APP_DIR, "development.ini"), encoding="utf-8") as fh:
        text = fh.read()
    text = re.sub(r"(?m)^sqlalchemy\.url = .*$", f"sqlalchemy.url = sqlite:///{tmp_path / 'shop.sqlite3'}", text)
    text = re.sub(r"(?m)^echomq\.redis_url = .*$", f"echomq.redis_url = {redis_url}", text)
    text = re.sub(r"(?m)^echomq\.prefix = .*$", f"echomq.prefix = {prefix}", text)
    for key, value in extra.items():
        line = f"{key} = {value}"
        text, n = re.subn(rf"(?m)^{re.escape(key)} = .*$", line, text)
        if not n:
            text = text.replace("[app:main]\n", f"[app:main]\n{line}\n")
    path = tmp_path / "test.ini"
    path.write_text(text)
    return str(path)


@pytest.fixture
def shop(tmp_path, redis_url, prefix, monkeypatch):
    monkeypatch.syspath_prepend(APP_DIR)
    from pyramid.paster import get_app

    import pyramidshop as module

    ini = _ini(tmp_path, redis_url, prefix, **{"echomq.queues.orders.drain_delay": "0.5",
                                               "echomq.queues.orders.concurrency": "1"})
    app = get_app(ini)
    module.Base.metadata.create_all(app.registry["engine"])
    return module, app, ini


def _state(app):
    from echomq_gevent.contrib.pyramid import integration

    return integration(app.registry)


def _counts(app):
    return _state(app).queue("orders").get_job_counts("waiting", "completed", "failed")


def _post(app, body, **params):
    from pyramid.request import Request

    req = Request.blank("/orders" + ("?fail=1" if params.get("fail") else ""), method="POST",
                        body=json.dumps(body).encode(), content_type="application/json")
    return req.get_response(app)


def _get(app, pk):
    from pyramid.request import Request

    return Request.blank(f"/orders/{pk}").get_response(app).json


def test_aborted_request_enqueues_nothing(shop):
    module, app, _ini_path = shop
    with pytest.raises(RuntimeError, match="the view failed"):
        _post(app, {"email": "rolled@back.example"}, fail=True)
    _state(app).enqueue("orders", "marker", {})
    assert [j.name for j in _state(app).queue("orders").get_jobs(["waiting"])] == ["marker"]
    engine = app.registry["engine"]
    with engine.connect() as conn:
        from sqlalchemy import text

        assert conn.execute(text("select count(*) from orders")).scalar_one() == 0


def test_committed_request_enqueues_once_after_commit(shop, monkeypatch):
    module, app, _ini_path = shop
    seen = {}
    original = module.create_order

    def watching(request):
        out = original(request)
        seen["waiting_in_view"] = _counts(app)["waiting"]
        return out

    monkeypatch.setattr(module, "create_order", watching)
    # the view was registered at startup: look the order up through a fresh app
    from pyramid.paster import get_app

    app2 = get_app(_ini_path)
    res = _post(app2, {"email": "ada@example.com"})
    assert res.status_code == 201
    pk = res.json["id"]
    assert seen == {"waiting_in_view": 0}, "the job went out before the commit"
    jobs = _state(app2).queue("orders").get_jobs(["waiting"])
    assert [(j.name, j.data) for j in jobs] == [("confirm", {"order_id": pk})]


def _runner(app, redis_url):
    from echomq_gevent.host.runner import Runner

    state = _state(app)
    return Runner(state.cfg, redis_url, extra_plugins=state.plugins)


def test_job_reads_the_row_and_commits_in_its_own_transaction(shop, redis_url, wait_for):
    module, app, _ini_path = shop
    pk = _post(app, {"email": "grace@example.com"}).json["id"]
    runner = _runner(app, redis_url)
    runner.start()
    try:
        wait_for(lambda: _counts(app)["completed"] == 1, what="the confirm job")
    finally:
        runner.drain(0)
        runner.wait(10)
    page = _get(app, pk)
    assert page["status"] == "confirmed" and page["confirmed_by"].startswith("job ")


def test_a_raising_job_is_aborted_and_leaks_no_connection(shop, redis_url, wait_for):
    module, app, _ini_path = shop
    from echomq_gevent.contrib.pyramid import job_request, processor

    seen = {}

    @processor("orders", "leaky")
    def leaky(job):
        request = job_request()
        request.dbsession.add(module.Order(email="uncommitted@example.com"))
        request.dbsession.flush()
        raise RuntimeError("fails with a transaction open")

    @processor("orders", "next")
    def next_job(job):
        request = job_request()
        seen["job"] = request.echomq_job.id == job.id
        seen["leaked_row"] = request.dbsession.query(module.Order).filter_by(
            email="uncommitted@example.com").count()
        return "ok"

    engine = app.registry["engine"]
    try:
        q = _state(app).queue("orders")
        q.add("leaky", {})
        runner = _runner(app, redis_url)
        runner.start()
        try:
            wait_for(lambda: _counts(app)["failed"] == 1, what="the leaky job to fail")
            assert engine.pool.checkedout() == 0, "the failed job's connection was not given back"
            q.add("next", {})
            wait_for(lambda: _counts(app)["completed"] == 1, what="the next job")
            assert engine.pool.checkedout() == 0
        finally:
            runner.drain(0)
            runner.wait(10)
    finally:
        processor._routes[:] = [r for r in processor._routes if r[2] not in (leaky, next_job)]
    assert seen == {"job": True, "leaked_row": 0}


# --- bad input ------------------------------------------------------------------------------
def test_settings_errors_name_the_ini_setting():
    from echomq_gevent.contrib.pyramid import integration_from_settings
    from echomq_gevent.errors import ConfigError

    with pytest.raises(ConfigError, match=r"echomq\.queues is not set"):
        integration_from_settings({"echomq.redis_url": "redis://127.0.0.1:6379/0"})
    with pytest.raises(ConfigError, match=r"echomq\.queues\.orders\.concurency: unknown key 'concurency'; "
                                          r"did you mean 'concurrency'"):
        integration_from_settings({"echomq.queues.orders.concurency": "5"})
    with pytest.raises(ConfigError, match=r"echomq\.queues\.orders\.lock_duration: "):
        integration_from_settings({"echomq.queues.orders.lock_duration": "soon"})
    with pytest.raises(ConfigError, match=r"echomq\.redis_url: must be 'embedded' or a redis://"):
        integration_from_settings({"echomq.redis_url": "localhost", "echomq.queues": "orders"})
    with pytest.raises(ConfigError, match=r"echomq\.queues\.a\.schedulers\.nightly\.repeat\.evry: .*did you mean "
                                          r"'every'"):
        integration_from_settings({"echomq.queues.a.schedulers.nightly.repeat.evry": "60000"})
    ok = integration_from_settings({"echomq.queues": "a b", "echomq.queues.b.concurrency": "7",
                                    "echomq.queues.b.schedulers.nightly.repeat.every": "60000",
                                    "echomq.entry_points": "false", "echomq.plugins": "x\n y"})
    assert ok.cfg.queues["a"].options["concurrency"] == 1
    assert ok.cfg.queues["b"].options["concurrency"] == 7
    assert ok.cfg.entry_points is False and ok.cfg.plugins == ["x", "y"]
    assert ok.cfg.queues["b"].schedulers["nightly"]["repeat"] == {"every": 60000}


def test_unknown_queue_and_unimportable_processor_are_named(redis_url):
    from echomq_gevent.contrib.pyramid import integration_from_settings
    from echomq_gevent.errors import ConfigError

    state = integration_from_settings({"echomq.redis_url": redis_url,
                                       "echomq.queues.orders.processor": "no_such_module:fn"})
    with pytest.raises(ConfigError, match=r"echomq\.queues: queue 'b' is not declared"):
        state.enqueue("b", "x", {})
    with pytest.raises(ConfigError, match=r"echomq\.queues\.orders\.processor: processor 'no_such_module:fn': "
                                          r"module 'no_such_module' cannot be imported"):
        state.prepare()


# --- the runner module and the example, end to end -----------------------------------------------
def test_runner_processes_the_example_and_drains_on_sigterm(tmp_path, redis_url, prefix, command, wait_for):
    ini = _ini(tmp_path, redis_url, prefix)
    init = command([sys.executable, "pyramidshop.py", ini, "init-db"], APP_DIR, {})
    assert init.finish() == 0, init.output()
    worker = command([sys.executable, "-m", "echomq_gevent.contrib.pyramid", ini, "--log-level", "info"],
                     APP_DIR, {})
    wait_for(lambda: worker.saw("1 queue(s) (orders)"), what="the worker to start",
             details=worker.output, give_up=worker.exited)
    sys.path.insert(0, APP_DIR)
    try:
        from pyramid.paster import get_app

        app = get_app(ini)
        pk = _post(app, {"email": "ada@example.com"}).json["id"]
        page = wait_for(lambda: (lambda p: p if p["status"] == "confirmed" else None)(_get(app, pk)),
                        what="the order to be confirmed", details=worker.output, give_up=worker.exited)
        assert page["confirmed_by"].startswith("job ")
    finally:
        sys.path.remove(APP_DIR)
    assert worker.stop(signal.SIGTERM) == 0, worker.output()
    assert worker.saw("SIGTERM: stopping"), worker.output()
    assert not worker.saw("MonkeyPatchWarning"), worker.output()  # patched before redis/ssl loaded
    status = command([sys.executable, "-m", "echomq_gevent.contrib.pyramid", ini, "status", "--json"], APP_DIR, {})
    assert status.finish() == 0, status.output()
    assert _json_output(status)["orders"]["counts"]["completed"] == 1


def test_runner_runs_supervised_processes(tmp_path, redis_url, prefix, command, wait_for):
    ini = _ini(tmp_path, redis_url, prefix)
    worker = command([sys.executable, "-m", "echomq_gevent.contrib.pyramid", ini, "--processes", "2"], APP_DIR, {})
    _two_processes_up_then_drained(worker, wait_for)
    bad = command([sys.executable, "-m", "echomq_gevent.contrib.pyramid", ini, "--processes", "-1"], APP_DIR, {})
    assert bad.finish() == 2 and bad.saw("must be a whole number of processes"), bad.output()


def test_runner_refuses_a_bad_setting_at_start(tmp_path, command):
    ini = _ini(tmp_path, "localhost", "p")
    worker = command([sys.executable, "-m", "echomq_gevent.contrib.pyramid", ini], APP_DIR, {})
    assert worker.finish() == 2, worker.output()
    assert worker.saw("echomq.redis_url: must be 'embedded' or a redis://"), worker.output()


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
    """The testing kit's glue: ``integration(registry).drain()`` runs the app's
    processors (a request and a transaction each) in the test's process."""
    from echomq_gevent.testing import assert_enqueued

    module, app, _ini_path = shop
    response = _post(app, {"email": "drain@example.com"})
    pk = response.json["id"]
    assert_enqueued(_state(app).queue("orders"), count=1)
    result = _state(app).drain(raise_errors=True)
    assert len(result.completed) == 1 and result.failed == []
    assert _get(app, pk)["status"] == "confirmed"

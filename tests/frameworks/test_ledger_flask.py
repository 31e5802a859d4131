"""The effect ledger in the Flask integration (Flask-SQLAlchemy, the example shop), on
SQLite and PostgreSQL, with a real Redis and workers: a processor marked atomic writes its
rows and the ledger's in the jobs' session transaction; a delivery again answers the stored
value without running it; a first pick-up that meets a row (another delivery committed
first) rolls its writes back; a failure or a ``commit()`` of its own leaves nothing; a
missing table is refused at start naming the processor."""
from __future__ import annotations

import itertools
import os

import pytest

flask = pytest.importorskip("flask")
pytest.importorskip("flask_sqlalchemy")

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples")
APP_DIR = os.path.join(EXAMPLES, "flask_app")
_dbs = itertools.count()


@pytest.fixture(params=["sqlite", "postgresql"])
def shop(request, tmp_path, redis_url, prefix, monkeypatch):
    monkeypatch.syspath_prepend(APP_DIR)
    monkeypatch.setenv("SHOP_DB", str(tmp_path / "shop.sqlite3"))
    if request.param != "sqlite":
        server = request.getfixturevalue("pg_server")
        monkeypatch.setenv("SHOP_DATABASE_URL", server.create_database(f"flaskledger{os.getpid()}x{next(_dbs)}"))
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("ECHOMQ_PREFIX", prefix)
    import flaskshop as module

    from echomq_gevent.contrib.ledger.sqlalchemy import metadata as ledger_metadata

    app = module.create_app()
    app.config["ECHOMQ_QUEUES"]["orders"].update(drain_delay=0.5, concurrency=1)
    module.echomq.init_app(app)
    with app.app_context():
        module.db.create_all()
        ledger_metadata.create_all(module.db.engine)
    routes = list(module.echomq.processor._routes)
    yield module, app
    module.echomq.processor._routes[:] = routes
    with app.app_context():
        module.db.engine.dispose()


def _charge(module):
    """A processor writing one Order row (its email names the job) and returning which
    run wrote it; ``fail`` raises after the write, ``commit`` commits by itself."""
    import uuid

    def charge(job):
        run = uuid.uuid4().hex
        module.db.session.add(module.Order(email=f"{job.id}@ledger", confirmed_by=run))
        if job.data.get("commit"):
            module.db.session.commit()
        if job.data.get("fail"):
            raise RuntimeError("the processor failed after its write")
        return {"run": run}
    return charge


def _orders(module, app, job_id):
    with app.app_context():
        return [o.confirmed_by for o in module.Order.query.filter_by(email=f"{job_id}@ledger").all()]


def _ledger(module, app):
    with app.app_context():
        with module.db.engine.connect() as conn:
            return [tuple(r) for r in conn.exec_driver_sql(
                "SELECT job_id, job_ts, return_value FROM echomq_ledger ORDER BY id").fetchall()]


def test_the_rows_and_the_ledger_commit_together_and_a_delivery_again_does_not_run_it(shop, run_workers):
    module, app = shop
    module.echomq.processor("orders", "charge", atomic=True)(_charge(module))
    queue = module.echomq.queue("orders", app)
    job = queue.add("charge", {}, {"jobId": "f1"})
    run_workers(module.echomq.state(app), lambda: queue.get_job_state("f1") == "completed")
    first = queue.get_job("f1").returnvalue
    assert _orders(module, app, "f1") == [first["run"]]
    assert _ledger(module, app) == [("f1", job.timestamp, '{"run":"%s"}' % first["run"])]

    queue.get_job("f1").retry("completed")  # delivered again, as a stalled job is
    run_workers(module.echomq.state(app), lambda: queue.get_job_state("f1") == "completed")
    assert queue.get_job("f1").returnvalue == first
    assert _orders(module, app, "f1") == [first["run"]]


def test_a_first_pick_up_that_meets_a_row_rolls_its_writes_back(shop, run_workers):
    from echomq_gevent.contrib.ledger.core import now_ms

    module, app = shop
    module.echomq.processor("orders", "charge", atomic=True)(_charge(module))
    queue = module.echomq.queue("orders", app)
    job = queue.add("charge", {}, {"jobId": "raced"})
    with app.app_context():
        with module.db.engine.begin() as conn:
            conn.exec_driver_sql(
                "INSERT INTO echomq_ledger (prefix, queue, job_id, job_ts, job_name, return_value, created_ms) "
                f"VALUES ('{job.prefix}', 'orders', 'raced', {job.timestamp}, 'charge', "
                f"'{{\"run\":\"the other delivery\"}}', {now_ms()})")  # fresh: the worker's pruning keeps it
    run_workers(module.echomq.state(app), lambda: queue.get_job_state("raced") == "completed")
    assert queue.get_job("raced").returnvalue == {"run": "the other delivery"}
    assert _orders(module, app, "raced") == []


def test_a_failure_or_a_commit_of_its_own_leaves_nothing(shop, run_workers):
    module, app = shop
    module.echomq.processor("orders", "charge", atomic=True)(_charge(module))
    queue = module.echomq.queue("orders", app)
    queue.add("charge", {"fail": True}, {"jobId": "fails"})
    queue.add("charge", {"commit": True}, {"jobId": "commits"})
    run_workers(module.echomq.state(app), lambda: {queue.get_job_state(i) for i in ("fails", "commits")} == {"failed"})
    assert "the processor failed after its write" in queue.get_job("fails").failed_reason
    assert "called commit() on its session" in queue.get_job("commits").failed_reason
    assert _orders(module, app, "fails") == [] and _orders(module, app, "commits") == []
    assert _ledger(module, app) == []


@pytest.mark.parametrize("offload", ["thread", "process"])
def test_under_offload_it_runs_in_an_app_context_of_its_own_and_a_delivery_again_does_not_run_it(
        shop, run_workers, offload, monkeypatch):
    """A native thread has no app context of the job's greenlet, a child process no app at
    all: the processor pushes one there (the child loads the app from ECHOMQ_FLASK_APP,
    which ``flask echomq worker`` sets)."""
    import threading

    module, app = shop
    if offload == "process":
        if not app.config["SQLALCHEMY_DATABASE_URI"].startswith("sqlite"):
            pytest.skip("offload: process is run on SQLite (the database does not matter to it)")
        monkeypatch.setenv("ECHOMQ_FLASK_APP", "flaskshop:create_app")
    import ledger_offload_flask as jobs

    module.echomq.processor("orders", "charge")(jobs.charge)
    app.config["ECHOMQ_QUEUES"]["orders"]["offload"] = offload
    module.echomq.init_app(app)
    queue = module.echomq.queue("orders", app)
    queue.add("charge", {}, {"jobId": "o1"})
    queue.add("charge", {"fail": True}, {"jobId": "o2"})
    state = module.echomq.state(app)
    run_workers(state, lambda: {queue.get_job_state(i) for i in ("o1", "o2")} == {"completed", "failed"})
    first = queue.get_job("o1").returnvalue
    assert _orders(module, app, "o1") == [first["run"]]
    if offload == "thread":
        assert first["pid"] == os.getpid() and first["thread"] != threading.get_native_id()
    else:
        assert first["pid"] != os.getpid()
    assert "the processor failed after its write" in queue.get_job("o2").failed_reason
    assert _orders(module, app, "o2") == [] and [r[0] for r in _ledger(module, app)] == ["o1"]

    queue.get_job("o1").retry("completed")
    run_workers(state, lambda: queue.get_job_state("o1") == "completed")
    assert queue.get_job("o1").returnvalue == first and _orders(module, app, "o1") == [first["run"]]


def test_a_missing_ledger_table_is_refused_at_start_naming_the_processor(shop):
    from echomq_gevent.contrib.ledger.sqlalchemy import ledger_table
    from echomq_gevent.errors import ConfigError

    module, app = shop
    module.echomq.processor("orders", "charge", atomic=True)(_charge(module))
    with app.app_context():
        ledger_table.drop(module.db.engine)
    with pytest.raises(ConfigError) as info:
        module.echomq.state(app).prepare()
    text = str(info.value)
    assert "the processor test_ledger_flask._charge.<locals>.charge is marked atomic" in text
    assert "has no echomq_ledger table" in text and "metadata.create_all(engine)" in text


def test_the_worker_processes_prune_the_ledger_after_keep_days(shop):
    from echomq_gevent.contrib.ledger.core import now_ms
    from echomq_gevent.contrib.ledger.pruner import LedgerPruner

    module, app = shop
    app.config["ECHOMQ_LEDGER"] = {"keep_days": 1}
    module.echomq.init_app(app)
    [pruner] = [p for p in module.echomq.state(app).plugins if isinstance(p, LedgerPruner)]
    assert not pruner.active()  # nothing marked atomic yet
    module.echomq.processor("orders", "charge", atomic=True)(_charge(module))
    assert pruner.active()
    with app.app_context():
        with module.db.engine.begin() as conn:
            conn.exec_driver_sql(
                "INSERT INTO echomq_ledger (prefix, queue, job_id, job_ts, job_name, return_value, created_ms) "
                f"VALUES ('p', 'q', 'old', 1, 'x', 'null', {now_ms() - 2 * 86400 * 1000}), "
                f"('p', 'q', 'new', 1, 'x', 'null', {now_ms()})")
    assert pruner.prune_now() == 1
    assert [r[0] for r in _ledger(module, app)] == ["new"]


def test_a_bad_ledger_setting_is_named(shop):
    from echomq_gevent.errors import ConfigError

    module, app = shop
    app.config["ECHOMQ_LEDGER"] = {"keep_days": -1}
    with pytest.raises(ConfigError) as info:
        module.echomq.init_app(app)
    assert str(info.value).startswith("app.config['ECHOMQ_LEDGER']['keep_days']: must be a number above 0")


def test_a_yaml_processor_marked_atomic_is_checked_at_start(shop, tmp_path, redis_url, monkeypatch):
    """``processor: module:function`` naming a processor marked atomic, run by
    ``echomq-gevent -c``: without the app (nor ECHOMQ_FLASK_APP to load it), or without the
    table, the start is refused at the processor's line."""
    from echomq_gevent.contrib.ledger.sqlalchemy import ledger_table
    from echomq_gevent.errors import ConfigError
    from echomq_gevent.host.config import load_config
    from echomq_gevent.host.runner import build_plugin_host

    module, app = shop
    import ledger_offload_flask  # noqa: F401 - what the file names

    path = tmp_path / "worker.yaml"
    path.write_text(f"redis: {redis_url}\nentry_points: false\nqueues:\n  orders:\n"
                    f"    processor: ledger_offload_flask:charge\n")
    line = f"{path}, line 5, key queues.orders.processor"
    monkeypatch.setattr(module.echomq, "_app", None)  # as in a process that made no app
    monkeypatch.delenv("ECHOMQ_FLASK_APP", raising=False)
    monkeypatch.delenv("FLASK_APP", raising=False)
    with pytest.raises(ConfigError) as info:
        build_plugin_host(load_config(str(path)))
    assert line in str(info.value) and "neither ECHOMQ_FLASK_APP nor FLASK_APP names it" in str(info.value)

    monkeypatch.setenv("ECHOMQ_FLASK_APP", "flaskshop:create_app")
    build_plugin_host(load_config(str(path)))  # the app loaded, the table there
    assert module.echomq._app is not None
    with app.app_context():
        ledger_table.drop(module.db.engine)
    with pytest.raises(ConfigError) as info:
        build_plugin_host(load_config(str(path)))
    assert line in str(info.value) and "has no echomq_ledger table" in str(info.value)


def test_the_worker_command_has_its_children_load_the_app_under_offload_process(shop, command, wait_for):
    """``flask --app ... echomq worker`` tells its children of ``offload: process`` where
    the app is (ECHOMQ_FLASK_APP): the child runs the processor marked atomic in an app
    context of the app it loaded."""
    import signal
    import sys

    module, app = shop
    if not app.config["SQLALCHEMY_DATABASE_URI"].startswith("sqlite"):
        pytest.skip("offload: process is run on SQLite (the database does not matter to it)")
    queue = module.echomq.queue("orders", app)
    queue.add("charge", {}, {"jobId": "c1"})
    here = os.path.dirname(os.path.abspath(__file__))
    env = {"PYTHONPATH": os.pathsep.join([here, APP_DIR, os.environ.get("PYTHONPATH", "")])}
    worker = command([sys.executable, "-m", "flask", "--app", "ledger_offload_flask:create_app", "echomq", "worker"],
                     here, env)
    wait_for(lambda: queue.get_job_state("c1") == "completed", what="the job to complete in a child",
             details=worker.output, timeout=60,
             give_up=lambda: worker.exited() or ("the job failed" if queue.get_job_state("c1") == "failed" else None))
    value = queue.get_job("c1").returnvalue
    assert value["pid"] not in (os.getpid(), worker.proc.pid)
    assert _orders(module, app, "c1") == [value["run"]]
    assert [r[0] for r in _ledger(module, app)] == ["c1"]
    assert worker.stop(signal.SIGTERM) == 0, worker.output()

"""The effect ledger in the Pyramid integration (pyramid_tm, zope.sqlalchemy, the example
shop), on SQLite and PostgreSQL, with a real Redis and workers: the processor's rows and
the job's ledger row commit in the job's request transaction; a delivery again answers
the stored value without running it; a first pick-up that meets a row aborts its
transaction's writes; a failure leaves nothing; a missing table is refused at start."""
from __future__ import annotations

import itertools
import os

import pytest

pytest.importorskip("pyramid")
pytest.importorskip("pyramid_tm")
pytest.importorskip("zope.sqlalchemy")

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples")
APP_DIR = os.path.join(EXAMPLES, "pyramid_app")
_dbs = itertools.count()


def charge(job):
    """Writes one Order row through the job's request.dbsession (its email names the job)
    and returns which run wrote it; ``fail`` raises after the write."""
    from ledger_offload_pyramid import write_order

    return {"run": write_order(job)}


@pytest.fixture(params=["sqlite", "postgresql"])
def shop(request, tmp_path, monkeypatch, pyramid_ini):
    monkeypatch.syspath_prepend(APP_DIR)
    from pyramid.paster import get_app

    import pyramidshop as module
    from echomq_gevent.contrib.ledger.sqlalchemy import metadata as ledger_metadata
    from echomq_gevent.contrib.pyramid import processor

    if request.param != "sqlite":
        url = request.getfixturevalue("pg_server").create_database(f"pyrledger{os.getpid()}x{next(_dbs)}")
    else:
        url = f"sqlite:///{tmp_path / 'shop.sqlite3'}"
    routes = list(processor._routes)
    atomic = processor("orders", "charge", atomic=True)(charge)
    app = get_app(pyramid_ini(url))
    module.Base.metadata.create_all(app.registry["engine"])
    ledger_metadata.create_all(app.registry["engine"])
    yield module, app, atomic
    processor._routes[:] = routes
    app.registry["engine"].dispose()


def _state(app):
    from echomq_gevent.contrib.pyramid import integration

    return integration(app.registry)


def _sql(app, statement):
    with app.registry["engine"].begin() as conn:
        res = conn.exec_driver_sql(statement)
        return [tuple(r) for r in res.fetchall()] if res.returns_rows else []


def _orders(app, job_id):
    return [r[0] for r in _sql(app, f"SELECT confirmed_by FROM orders WHERE email = '{job_id}@ledger' ORDER BY id")]


def test_the_rows_and_the_ledger_commit_together_and_a_delivery_again_does_not_run_it(shop, run_workers):
    _module, app, _atomic = shop
    queue = _state(app).queue("orders")
    job = queue.add("charge", {}, {"jobId": "y1"})
    run_workers(_state(app), lambda: queue.get_job_state("y1") == "completed")
    first = queue.get_job("y1").returnvalue
    assert _orders(app, "y1") == [first["run"]]
    assert _sql(app, "SELECT job_id, job_ts, return_value FROM echomq_ledger") == \
        [("y1", job.timestamp, '{"run":"%s"}' % first["run"])]
    queue.get_job("y1").retry("completed")
    run_workers(_state(app), lambda: queue.get_job_state("y1") == "completed")
    assert queue.get_job("y1").returnvalue == first and _orders(app, "y1") == [first["run"]]


def test_a_first_pick_up_that_meets_a_row_aborts_its_writes_and_a_failure_leaves_nothing(shop, run_workers):
    from echomq_gevent.contrib.ledger.core import now_ms

    _module, app, _atomic = shop
    queue = _state(app).queue("orders")
    job = queue.add("charge", {}, {"jobId": "raced"})
    queue.add("charge", {"fail": True}, {"jobId": "fails"})
    _sql(app, "INSERT INTO echomq_ledger (prefix, queue, job_id, job_ts, job_name, return_value, created_ms) "
              f"VALUES ('{job.prefix}', 'orders', 'raced', {job.timestamp}, 'charge', '{{\"run\":\"other\"}}', "
              f"{now_ms()})")  # a fresh row: the worker's pruning keeps it
    run_workers(_state(app), lambda: {queue.get_job_state(i) for i in ("raced", "fails")} ==
         {"completed", "failed"})
    assert queue.get_job("raced").returnvalue == {"run": "other"} and _orders(app, "raced") == []
    assert "the processor failed after its write" in queue.get_job("fails").failed_reason
    assert _orders(app, "fails") == []
    assert [r[0] for r in _sql(app, "SELECT job_id FROM echomq_ledger")] == ["raced"]


@pytest.mark.parametrize("offload", ["thread", "process"])
def test_under_offload_it_runs_with_a_request_of_its_own_and_a_delivery_again_does_not_run_it(
        shop, run_workers, offload, pyramid_ini, monkeypatch):
    """A native thread has no request of the job's greenlet, a child process no app at
    all: the processor prepares a request there, in its own ``request.tm`` transaction
    (the child loads the app from ECHOMQ_PYRAMID_INI, which the worker command sets)."""
    import threading

    from pyramid.paster import get_app

    from echomq_gevent.contrib.pyramid import processor

    _module, app, _atomic = shop
    url = app.registry["engine"].url.render_as_string(hide_password=False)
    if offload == "process" and not url.startswith("sqlite"):
        pytest.skip("offload: process is run on SQLite (the database does not matter to it)")
    import ledger_offload_pyramid as jobs

    processor._routes[:] = [r for r in processor._routes if r[2] is not _atomic]
    processor("orders", "charge")(jobs.charge)
    extra = f"echomq.queues.orders.offload = {offload}\n"
    ini = pyramid_ini(url, extra + ("echomq.queues.orders.offload_processes = 1\n" if offload == "process" else ""))
    monkeypatch.setenv("ECHOMQ_PYRAMID_INI", ini)
    app = get_app(ini)
    try:
        state = _state(app)
        queue = state.queue("orders")
        queue.add("charge", {}, {"jobId": "o1"})
        queue.add("charge", {"fail": True}, {"jobId": "o2"})
        run_workers(state, lambda: {queue.get_job_state(i) for i in ("o1", "o2")} == {"completed", "failed"})
        first = queue.get_job("o1").returnvalue
        assert _orders(app, "o1") == [first["run"]]
        if offload == "thread":
            assert first["pid"] == os.getpid() and first["thread"] != threading.get_native_id()
        else:
            assert first["pid"] != os.getpid()
        assert "the processor failed after its write" in queue.get_job("o2").failed_reason
        assert _orders(app, "o2") == [] and [r[0] for r in _sql(app, "SELECT job_id FROM echomq_ledger")] == ["o1"]

        queue.get_job("o1").retry("completed")
        run_workers(state, lambda: queue.get_job_state("o1") == "completed")
        assert queue.get_job("o1").returnvalue == first and _orders(app, "o1") == [first["run"]]
    finally:
        app.registry["engine"].dispose()


def test_a_missing_ledger_table_is_refused_at_start_naming_the_processor(shop):
    from echomq_gevent.errors import ConfigError

    _module, app, _atomic = shop
    _sql(app, "DROP TABLE echomq_ledger")
    with pytest.raises(ConfigError) as info:
        _state(app).prepare()
    assert "the processor test_ledger_pyramid.charge is marked atomic" in str(info.value)
    assert "has no echomq_ledger table" in str(info.value)


def test_the_worker_processes_prune_the_ledger(shop):
    from echomq_gevent.contrib.ledger.core import now_ms
    from echomq_gevent.contrib.ledger.pruner import LedgerPruner

    _module, app, _atomic = shop
    [pruner] = [p for p in _state(app).plugins if isinstance(p, LedgerPruner)]
    assert pruner.active() and pruner.settings.keep_days == 7.0
    old = now_ms() - 8 * 86400 * 1000
    _sql(app, "INSERT INTO echomq_ledger (prefix, queue, job_id, job_ts, job_name, return_value, created_ms) "
              f"VALUES ('p', 'q', 'old', 1, 'x', 'null', {old}), ('p', 'q', 'new', 1, 'x', 'null', {now_ms()})")
    assert pruner.prune_now() == 1
    assert _sql(app, "SELECT job_id FROM echomq_ledger") == [("new",)]


def test_a_processor_declared_after_the_app_was_built_is_checked_at_start_too(shop):
    from echomq_gevent.contrib.pyramid import processor
    from echomq_gevent.errors import ConfigError

    _module, app, _atomic = shop

    def late(job):
        return None

    processor("orders", "late", atomic=True)(late)
    processor._routes[:] = [r for r in processor._routes if r[2] is not _atomic]
    _sql(app, "DROP TABLE echomq_ledger")
    with pytest.raises(ConfigError) as info:
        _state(app).prepare()
    assert "test_ledger_pyramid.test_a_processor_declared_after_the_app_was_built_is_checked_at_start_too." \
           "<locals>.late is marked atomic" in str(info.value)
    assert "has no echomq_ledger table" in str(info.value)


def test_a_yaml_processor_marked_atomic_is_checked_at_start(shop, tmp_path, redis_url, monkeypatch, pyramid_ini):
    """``processor: module:function`` naming a processor marked atomic, run by
    ``echomq-gevent -c``: the app comes from ECHOMQ_PYRAMID_INI; without it, or without the
    table, the start is refused at the processor's line."""
    from echomq_gevent.errors import ConfigError
    from echomq_gevent.host.config import load_config
    from echomq_gevent.host.runner import build_plugin_host

    _module, app, _atomic = shop
    import ledger_offload_pyramid as jobs

    monkeypatch.setattr(jobs.charge, "registry", None)  # as in a process that built no app
    path = tmp_path / "worker.yaml"
    path.write_text(f"redis: {redis_url}\nentry_points: false\nqueues:\n  orders:\n"
                    f"    processor: ledger_offload_pyramid:charge\n")
    monkeypatch.delenv("ECHOMQ_PYRAMID_INI", raising=False)
    with pytest.raises(ConfigError) as info:
        build_plugin_host(load_config(str(path)))
    assert f"{path}, line 5, key queues.orders.processor" in str(info.value) and "ECHOMQ_PYRAMID_INI is not set" in str(info.value)

    url = app.registry["engine"].url.render_as_string(hide_password=False)
    monkeypatch.setenv("ECHOMQ_PYRAMID_INI", pyramid_ini(url))
    build_plugin_host(load_config(str(path)))  # the table is there
    monkeypatch.setattr(jobs.charge, "registry", None)
    _sql(app, "DROP TABLE echomq_ledger")
    with pytest.raises(ConfigError) as info:
        build_plugin_host(load_config(str(path)))
    assert f"{path}, line 5, key queues.orders.processor" in str(info.value) and "has no echomq_ledger table" in str(info.value)


def test_the_worker_command_has_its_children_load_the_app_under_offload_process(shop, pyramid_ini, command, wait_for):
    """``python -m echomq_gevent.contrib.pyramid INI`` tells its children of ``offload:
    process`` where the app is (ECHOMQ_PYRAMID_INI): the child runs the processor marked
    atomic with a request of the app it loaded."""
    import signal
    import sys

    _module, app, _atomic = shop
    url = app.registry["engine"].url.render_as_string(hide_password=False)
    if not url.startswith("sqlite"):
        pytest.skip("offload: process is run on SQLite (the database does not matter to it)")
    ini = pyramid_ini(url, "echomq.queues.orders.offload = process\nechomq.queues.orders.offload_processes = 1\n")
    with open(ini, encoding="utf-8") as fh:
        text = fh.read().replace("call:pyramidshop:main", "call:ledger_offload_pyramid:main")
    with open(ini, "w", encoding="utf-8") as fh:
        fh.write(text)
    queue = _state(app).queue("orders")
    queue.add("charge", {}, {"jobId": "c1"})
    here = os.path.dirname(os.path.abspath(__file__))
    env = {"PYTHONPATH": os.pathsep.join([here, APP_DIR, os.environ.get("PYTHONPATH", "")])}
    worker = command([sys.executable, "-m", "echomq_gevent.contrib.pyramid", ini], here, env)
    wait_for(lambda: queue.get_job_state("c1") == "completed", what="the job to complete in a child",
             details=worker.output, timeout=60,
             give_up=lambda: worker.exited() or ("the job failed" if queue.get_job_state("c1") == "failed" else None))
    value = queue.get_job("c1").returnvalue
    assert value["pid"] not in (os.getpid(), worker.proc.pid)
    assert _orders(app, "c1") == [value["run"]]
    assert [r[0] for r in _sql(app, "SELECT job_id FROM echomq_ledger")] == ["c1"]
    assert worker.stop(signal.SIGTERM) == 0, worker.output()

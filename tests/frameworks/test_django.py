"""The Django integration with the real Django and SQLite, on the example shop project
(``examples/django_project``): enqueue on commit, processors reading the ORM, database
hygiene between jobs, settings errors naming the setting, and the management commands
running and draining the worker in a subprocess."""
from __future__ import annotations

import json
import os
import signal
import sys

import pytest

from running_command import http_json

django = pytest.importorskip("django")

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples")

PROJECT = os.path.join(EXAMPLES, "django_project")


@pytest.fixture(scope="module")
def shop(django_shop):
    """Django set up in this process with the example shop's settings, on a SQLite file
    (migrated; conftest's ``django_shop``); the file's path."""
    return django_shop


@pytest.fixture
def echomq(shop, redis_url, prefix):
    """settings.ECHOMQ pointing at the test Redis, with the test's own prefix."""
    from django_echomq import django_echomq_settings

    with django_echomq_settings(redis_url, prefix, ["orders"]) as integration:
        yield integration


def _counts(integration):
    return integration.queue("orders").get_job_counts("waiting", "active", "completed", "failed", "delayed")


def test_rolled_back_transaction_enqueues_nothing(echomq):
    from django.db import transaction

    from shop.models import Order

    with pytest.raises(RuntimeError):
        with transaction.atomic():
            order = Order.objects.create(email="rolled@back.example")
            echomq.enqueue_on_commit("orders", "confirm", {"order_id": order.pk})
            raise RuntimeError("the view failed")
    # A job asked for after the rollback, outside a transaction, goes out at once: the
    # marker that the queue was written to, and the only job there.
    echomq.enqueue_on_commit("orders", "marker", {})
    q = echomq.queue("orders")
    assert [j.name for j in q.get_jobs(["waiting"])] == ["marker"]
    assert not Order.objects.filter(email="rolled@back.example").exists()


def test_savepoint_rolled_back_drops_its_jobs_only(echomq):
    from django.db import transaction

    with transaction.atomic():
        echomq.enqueue_on_commit("orders", "outer", {})
        try:
            with transaction.atomic():
                echomq.enqueue_on_commit("orders", "inner", {})
                raise ValueError("inner block fails")
        except ValueError:
            pass
    assert sorted(j.name for j in echomq.queue("orders").get_jobs(["waiting"])) == ["outer"]


def test_committed_transaction_enqueues_once_after_commit(echomq):
    from django.db import transaction

    from shop.models import Order

    with transaction.atomic():
        order = Order.objects.create(email="ada@example.com")
        echomq.enqueue_on_commit("orders", "confirm", {"order_id": order.pk})
        assert _counts(echomq)["waiting"] == 0, "the job went out before the commit"
    jobs = echomq.queue("orders").get_jobs(["waiting"])
    assert [(j.name, j.data) for j in jobs] == [("confirm", {"order_id": order.pk})]


def _runner(integration, redis_url):
    from echomq_gevent.host.runner import Runner

    return Runner(integration.integration().cfg, redis_url, extra_plugins=integration.worker_plugins())


def test_processor_reads_the_committed_row_through_the_orm(echomq, redis_url, wait_for):
    from django.db import transaction

    from shop.models import Order

    with transaction.atomic():
        order = Order.objects.create(email="grace@example.com")
        echomq.enqueue_on_commit("orders", "confirm", {"order_id": order.pk})
    runner = _runner(echomq, redis_url)
    runner.start()
    try:
        wait_for(lambda: _counts(echomq)["completed"] == 1, what="the confirm job to complete")
    finally:
        runner.drain(0)
        runner.wait(10)
    job = echomq.queue("orders").get_jobs(["completed"])[0]
    assert job.returnvalue == {"order": order.pk, "status": "confirmed"}
    order.refresh_from_db()
    assert order.status == "confirmed" and order.confirmed_by == f"job {job.id}"


def test_a_raising_job_leaves_no_transaction_or_connection_for_the_next(echomq, redis_url, wait_for):
    """The first job turns autocommit off, writes a row and raises; the second job sees
    a closed connection, autocommit on, no atomic block, and not the first job's row."""
    from django.db import connection

    from echomq_gevent.contrib.django import processor
    from shop.models import Order

    seen = {}

    @processor("orders", "leaky")
    def leaky(job):
        from django.db import transaction

        transaction.set_autocommit(False)
        Order.objects.create(email="uncommitted@example.com")
        raise RuntimeError("fails with a transaction open")

    @processor("orders", "next")
    def next_job(job):
        seen["connection_open"] = connection.connection is not None
        seen["autocommit"] = connection.get_autocommit()
        seen["in_atomic_block"] = connection.in_atomic_block
        seen["leaked_row"] = Order.objects.filter(email="uncommitted@example.com").exists()
        return "ok"

    try:
        q = echomq.queue("orders")
        q.add("leaky", {})
        runner = _runner(echomq, redis_url)
        runner.start()
        try:
            wait_for(lambda: _counts(echomq)["failed"] == 1, what="the leaky job to fail")
            assert connection.connection is None, "the failed job's connection was left open"
            q.add("next", {})
            wait_for(lambda: _counts(echomq)["completed"] == 1, what="the next job to complete")
        finally:
            runner.drain(0)
            runner.wait(10)
    finally:
        processor._routes[:] = [r for r in processor._routes if r[2] not in (leaky, next_job)]
    assert seen == {"connection_open": False, "autocommit": True, "in_atomic_block": False,
                    "leaked_row": False}
    failed = q.get_jobs(["failed"])[0]
    assert "fails with a transaction open" in failed.failed_reason


# --- bad input ------------------------------------------------------------------------------
def test_cancel_command_cancels_a_waiting_job_and_refuses_a_missing_one(echomq):
    from io import StringIO

    from django.core.management import CommandError, call_command

    job = echomq.enqueue("orders", "confirm", {"order": 1})
    out = StringIO()
    call_command("echomq_cancel", "orders", job.id, "--reason", "order withdrawn", stdout=out)
    assert f"job {job.id} was waiting: it is now failed" in out.getvalue()
    assert echomq.queue("orders").get_job(job.id).failed_reason == "job cancelled: order withdrawn"
    with pytest.raises(CommandError, match="does not exist"):
        call_command("echomq_cancel", "orders", "no-such-job")
    with pytest.raises(CommandError, match="is not declared"):
        call_command("echomq_cancel", "nope", job.id)


def test_missing_setting_is_named(echomq):
    from django.conf import settings

    from echomq_gevent.errors import ConfigError

    del settings.ECHOMQ
    echomq.reset()
    with pytest.raises(ConfigError, match=r"settings\.ECHOMQ is not set"):
        echomq.integration()


def test_unknown_queue_is_named(echomq):
    from echomq_gevent.errors import ConfigError

    with pytest.raises(ConfigError, match=r"settings\.ECHOMQ\['queues'\]: queue 'nope' is not declared"):
        echomq.enqueue_on_commit("nope", "confirm", {})


def test_bad_option_names_the_setting(echomq):
    from django.conf import settings

    from echomq_gevent.errors import ConfigError

    settings.ECHOMQ = dict(settings.ECHOMQ, queues={"orders": {"concurency": 3}})
    echomq.reset()
    with pytest.raises(ConfigError, match=r"settings\.ECHOMQ\['queues'\]\['orders'\]\['concurency'\]: "
                                          r"unknown key 'concurency'; did you mean 'concurrency'"):
        echomq.integration()


def test_processor_path_that_does_not_import_is_named(echomq):
    from django.conf import settings

    from echomq_gevent.errors import ConfigError

    settings.ECHOMQ = dict(settings.ECHOMQ, queues={"orders": {"processor": "shop.nowhere:confirm"}})
    echomq.reset()
    with pytest.raises(ConfigError, match=r"settings\.ECHOMQ\['queues'\]\['orders'\]\['processor'\]: "
                                          r"processor 'shop.nowhere:confirm': module 'shop.nowhere' cannot be "
                                          r"imported"):
        echomq.integration().prepare(plugins=echomq.worker_plugins())


# --- the management commands and the example, end to end --------------------------------------
def test_example_request_enqueues_worker_command_processes_and_drains_on_sigterm(
        shop, redis_url, prefix, command, wait_for):
    """A POST to the example's view (Django's test client, this process) saves an order
    and enqueues after the commit; ``manage.py echomq_worker`` (a subprocess, same SQLite
    file) confirms it; the order's page shows it; SIGTERM drains and exits 0; then
    ``manage.py echomq_status --json`` counts the completed job."""
    from django.conf import settings
    from django.test import Client

    from echomq_gevent.contrib import django as integration

    env = {"SHOP_DB": shop, "REDIS_URL": redis_url, "ECHOMQ_PREFIX": prefix,
           "DJANGO_SETTINGS_MODULE": "shop.settings"}
    saved = settings.ECHOMQ
    settings.ECHOMQ = dict(saved, redis=redis_url, prefix=prefix)
    integration.reset()
    try:
        worker = command([sys.executable, "manage.py", "echomq_worker", "--log-level", "info"], PROJECT, env)
        wait_for(lambda: worker.saw("1 queue(s) (orders)"), what="the worker to start",
                 details=worker.output, give_up=worker.exited)
        client = Client()
        created = client.post("/orders", data=json.dumps({"email": "ada@example.com"}),
                              content_type="application/json")
        assert created.status_code == 201, created.content
        pk = created.json()["id"]
        page = wait_for(lambda: (lambda r: r if r["status"] == "confirmed" else None)(
            client.get(f"/orders/{pk}").json()), what="the order to be confirmed by the worker",
            details=worker.output, give_up=worker.exited)
        assert page["confirmed_by"].startswith("job ")
        assert worker.stop(signal.SIGTERM) == 0, worker.output()
        assert worker.saw("SIGTERM: stopping"), worker.output()
        assert worker.saw("restarting with gevent patched"), worker.output()
        status = command([sys.executable, "manage.py", "echomq_status", "--json"], PROJECT, env)
        assert status.finish() == 0, status.output()
        report = _json_output(status)
        assert report["orders"]["counts"]["completed"] == 1
    finally:
        settings.ECHOMQ = saved
        integration.reset()


def test_worker_command_runs_supervised_processes(shop, redis_url, prefix, command, wait_for):
    env = {"SHOP_DB": shop, "REDIS_URL": redis_url, "ECHOMQ_PREFIX": prefix, "DJANGO_SETTINGS_MODULE": "shop.settings"}
    worker = command([sys.executable, "manage.py", "echomq_worker", "--processes", "2"], PROJECT, env)
    _two_processes_up_then_drained(worker, wait_for, lambda: _supervisor_status(command, env))
    bad = command([sys.executable, "manage.py", "echomq_worker", "--processes", "0"], PROJECT, env)
    assert bad.finish() != 0 and bad.saw("must be a whole number of processes"), bad.output()


def test_worker_command_refuses_a_bad_setting_at_start(shop, redis_url, command):
    env = {"SHOP_DB": shop, "REDIS_URL": "mysql://nope", "DJANGO_SETTINGS_MODULE": "shop.settings"}
    worker = command([sys.executable, "manage.py", "echomq_worker"], PROJECT, env)
    assert worker.finish() != 0
    assert worker.saw("settings.ECHOMQ['redis']['url']: must be 'embedded' or a redis://"), worker.output()


def test_example_under_gunicorn_reads_the_same_settings(shop, redis_url, prefix, command, wait_for):
    """``gunicorn -c gunicorn.conf.py`` (the example's): the web app and its job workers
    in one gevent worker process, configured from settings.ECHOMQ; a POST enqueues after
    the commit, the co-hosted worker confirms, SIGTERM stops gunicorn cleanly."""
    env = {"SHOP_DB": shop, "REDIS_URL": redis_url, "ECHOMQ_PREFIX": prefix, "BIND": "127.0.0.1:0",
           "DJANGO_SETTINGS_MODULE": "shop.settings"}
    server = command([sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py"], PROJECT, env)
    number = wait_for(server.gunicorn_port, what="gunicorn to listen", details=server.output, give_up=server.exited)

    def call(method, path, body=None):
        return http_json(number, method, path, body)

    status, body = wait_for(lambda: (lambda r: r if r[0] == 201 else None)(
        call("POST", "/orders", {"email": "gunicorn@example.com"})),
        what="the POST to be served", details=server.output, give_up=server.exited)
    pk = json.loads(body)["id"]
    page = wait_for(lambda: (lambda p: p if p["status"] == "confirmed" else None)(
        json.loads(call("GET", f"/orders/{pk}")[1])), what="the co-hosted worker to confirm the order",
        details=server.output, give_up=server.exited)
    assert page["confirmed_by"].startswith("job ")
    assert server.stop(signal.SIGTERM, timeout=60) == 0, server.output()


def _json_output(cmd):
    """The JSON document a command printed (stderr is merged into the lines: skip any
    warning printed before it)."""
    lines = cmd.lines
    start = next(i for i, line in enumerate(lines) if line.startswith("{"))
    return json.loads("\n".join(lines[start:]))


def _supervisor_status(command, env):
    """What ``manage.py echomq_status --json`` says of the supervisor's processes."""
    status = command([sys.executable, "manage.py", "echomq_status", "--json"], PROJECT, env)
    assert status.finish() == 0, status.output()
    return _json_output(status).get("echomq:supervisors")


def _two_processes_up_then_drained(worker, wait_for, supervisors=None):
    """``--processes 2``: two children run the queue, logs name them; SIGTERM drains both, exit 0."""
    import re

    def up():
        return len({m for line in list(worker.lines)
                    for m in re.findall(r"process=(\d)/\d+ echomq_gevent.cli: echomq-gevent .*1 queue\(s\) \(orders\)",
                                        line)}) == 2

    wait_for(up, timeout=60, what="two worker processes", details=worker.output, give_up=worker.exited)
    if supervisors is not None:  # the status command lists them
        [state] = supervisors()
        assert state["supervisor"]["pid"] == worker.proc.pid  # (a restart to patch gevent first keeps the pid)
        assert sorted(p["index"] for p in state["processes"]) == [1, 2], state
        assert all(p["queues"] == ["orders"] and p["state"] == "running" for p in state["processes"]), state
    assert worker.stop(signal.SIGTERM) == 0, worker.output()
    assert worker.saw("SIGTERM: draining 2 worker process(es)"), worker.output()
    assert worker.saw("every worker process has stopped; exiting 0"), worker.output()

"""Django's Tasks framework on echomq-gevent (``EchoMQBackend``), with the real Django
(``django.tasks`` on Django 6, the ``django-tasks`` backport on 4.2 to 5.2), SQLite and
a real Redis: enqueueing (names, data, ids, priorities, delays, job options,
transactions, the outbox), the worker running the tasks (context, retries, results),
``get_result`` and its async variants, bad input from Django and from foreign
producers, the settings checks, and a Node producer and reader on the same queue."""
from __future__ import annotations

import asyncio
import datetime
import os
import sys

import pytest

django = pytest.importorskip("django")
if django.VERSION < (4, 2):
    pytest.skip("Django's Tasks framework needs Django 6, or 4.2 and later with the django-tasks backport",
                allow_module_level=True)
task_api = pytest.importorskip("echomq_gevent.contrib.django.task_api",
                                reason="Django < 6 without the django-tasks backport")

PROJECT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                       "examples", "django_project")
BACKEND = "echomq_gevent.contrib.django.tasks.EchoMQBackend"
JOB_OPTIONS = {"attempts": 3, "backoff": {"type": "fixed", "delay": 20}}


@pytest.fixture(scope="module")
def shop(django_shop):
    """Django set up with the example shop's settings (conftest's ``django_shop``)."""
    return django_shop


def _tasks_setting(queues=("orders", "tasks"), **options):
    opts = {"modules": ["djtasks.tasks"], "job_options": JOB_OPTIONS}
    opts.update(options)
    return {"default": {"BACKEND": BACKEND, "QUEUES": list(queues), "OPTIONS": opts}}


@pytest.fixture
def configure(shop, redis_url, prefix):
    """``configure(outbox=False, **options)``: settings.ECHOMQ on the test Redis and
    prefix (queues ``orders`` and ``tasks``), settings.TASKS with this backend."""
    from django.conf import settings
    from django.test.utils import override_settings

    from echomq_gevent.contrib import django as integration

    saved = settings.ECHOMQ
    overrides = []

    def apply(outbox=False, queues=("orders", "tasks"), **options):
        settings.ECHOMQ = {"redis": redis_url, "prefix": prefix, "entry_points": False, "outbox": outbox,
                           "queues": {"orders": {"concurrency": 1, "drain_delay": 0.5, "shutdown_timeout": 5},
                                      "tasks": {"concurrency": 1, "drain_delay": 0.5, "shutdown_timeout": 5}}}
        integration.reset()
        o = override_settings(TASKS=_tasks_setting(queues, **options))
        o.enable()
        overrides.append(o)
        import djtasks.tasks  # noqa: F401 (defines the tasks against this backend)
        return integration

    yield apply
    for o in reversed(overrides):
        o.disable()
    settings.ECHOMQ = saved
    integration.reset()


@pytest.fixture
def t(configure):
    """The test tasks module, with the default settings applied."""
    configure()
    import djtasks.tasks as mod

    return mod


def _backend(alias="default"):
    """The backend of ``settings.TASKS[alias]`` (made on first use)."""
    import importlib

    return importlib.import_module(task_api.API).task_backends[alias]


def _queue(name="tasks"):
    from echomq_gevent.contrib import django as integration

    return integration.queue(name)


def _counts(name="tasks"):
    return _queue(name).get_job_counts("waiting", "prioritized", "active", "completed", "failed", "delayed")


class _Worker:
    """The workers of settings.ECHOMQ in this process, as ``manage.py echomq_worker`` builds them."""

    def __init__(self, redis_url):
        from echomq_gevent.contrib import django as integration
        from echomq_gevent.host.runner import Runner

        self.runner = Runner(integration.integration().cfg, redis_url, extra_plugins=integration.worker_plugins())

    def __enter__(self):
        self.runner.start()
        return self

    def __exit__(self, *exc):
        self.runner.drain(0)
        self.runner.wait(10)


# --- enqueueing ----------------------------------------------------------------------------------
def test_enqueue_adds_one_job_named_by_the_task_path(t):
    result = t.add.enqueue(2, b=3)
    assert result.status == task_api.TaskResultStatus.READY and len(result.id) == 32
    assert result.args == [2] and result.kwargs == {"b": 3} and result.enqueued_at is not None
    [job] = _queue().get_jobs(["prioritized"])
    assert job.id == result.id and job.name == "djtasks.tasks.add"
    assert job.data == {"args": [2], "kwargs": {"b": 3}}
    # the backend's job options, and Django's default priority 0 as BullMQ's 100
    assert job.opts["attempts"] == 3 and job.opts["backoff"] == {"type": "fixed", "delay": 20}
    assert job.priority == 100


def test_priorities_map_monotonically_and_run_in_that_order(t, redis_url, wait_for):
    from echomq_gevent.contrib.django.tasks import bullmq_priority

    assert [bullmq_priority(p) for p in (100, 99, 1, 0, -1, -100)] == [0, 1, 99, 100, 101, 200]
    key = "order"
    ids = {}
    for p, value in ((-100, "lowest"), (0, "default"), (100, "highest"), (50, "high")):
        ids[value] = t.record.using(priority=p).enqueue(key, value).id
    jobs = {j.id: j for j in _queue().get_jobs(["waiting", "prioritized"])}
    assert {v: jobs[i].priority for v, i in ids.items()} == {"lowest": 200, "default": 100, "highest": 0,
                                                             "high": 50}
    with _Worker(redis_url):
        wait_for(lambda: _counts()["completed"] == 4, what="the four tasks to run")
    assert t.SEEN[key] == ["highest", "high", "default", "lowest"]


def test_run_after_is_a_delay(t):
    from django.utils import timezone

    when = timezone.now() + datetime.timedelta(seconds=60)
    result = t.add.using(run_after=when).enqueue(1)
    job = _queue().get_job(result.id)
    assert _queue().get_job_state(result.id) == "delayed"
    assert 58_000 <= job.opts["delay"] <= 60_000
    assert t.add.get_result(result.id).status == task_api.TaskResultStatus.READY


def test_arguments_json_cannot_hold_are_refused_with_nothing_added(t):
    before = _counts()
    with pytest.raises(TypeError):
        t.add.enqueue(object())
    with pytest.raises(ValueError):
        t.add.enqueue(b"\xff\xfe")
    with pytest.raises(TypeError):
        t.add.enqueue(1, b=datetime.datetime.now())
    assert _counts() == before


def test_enqueue_inside_a_transaction_goes_out_at_once_by_default(t):
    from django.db import transaction

    with transaction.atomic():
        result = t.add.enqueue(1)
        assert _queue().get_job(result.id) is not None, "enqueue() adds at once, as Django documents"


def test_enqueue_on_commit_option_waits_for_the_commit_and_drops_on_rollback(configure):
    from django.db import transaction

    configure(enqueue_on_commit=True)
    import djtasks.tasks as t

    with transaction.atomic():
        result = t.add.enqueue(1)
        assert _queue().get_job(result.id) is None, "the job went out before the commit"
    assert _queue().get_job(result.id).data == {"args": [1], "kwargs": {}}
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            dropped = t.add.enqueue(2)
            raise RuntimeError("the view failed")
    assert _queue().get_job(dropped.id) is None
    with pytest.raises(task_api.TaskResultDoesNotExist):
        t.add.get_result(dropped.id)


def test_with_the_outbox_an_enqueue_is_a_row_of_the_transaction(configure, redis_url, wait_for):
    from django.db import connection, transaction

    configure(outbox=True)
    import djtasks.tasks as t

    def rows():
        with connection.cursor() as cur:
            cur.execute("SELECT job_id, name FROM echomq_outbox")
            return cur.fetchall()

    with connection.cursor() as cur:
        cur.execute("DELETE FROM echomq_outbox")
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            t.add.enqueue(5)
            assert len(rows()) == 1
            raise RuntimeError("rolled back")
    assert rows() == []
    with transaction.atomic():
        result = t.add.enqueue(5, b=6)
        assert rows() == [(result.id, "djtasks.tasks.add")]
    assert _queue().get_job(result.id) is None, "only the relay adds it"
    with _Worker(redis_url):
        done = wait_for(lambda: (lambda r: r if r.is_finished else None)(t.add.get_result(result.id))
                        if _queue().get_job(result.id) else None, what="the relayed task to run")
    assert done.status == task_api.TaskResultStatus.SUCCESSFUL and done.return_value == {"sum": 11}
    assert rows() == []


# --- the worker and the results --------------------------------------------------------------------
def test_worker_runs_the_task_and_get_result_reports_it(t, redis_url, wait_for):
    result = t.add.enqueue(20, b=22)
    with _Worker(redis_url):
        wait_for(lambda: _counts()["completed"] == 1, what="the task to run")
    assert result.status == task_api.TaskResultStatus.READY  # until refreshed
    result.refresh()
    assert result.status == task_api.TaskResultStatus.SUCCESSFUL and result.return_value == {"sum": 42}
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.last_attempted_at == result.started_at and result.attempts == 1 and result.errors == []
    assert _backend().get_result(result.id).return_value == {"sum": 42}
    assert _queue().get_job(result.id).returnvalue == {"sum": 42}


def test_an_atomic_task_delivered_again_answers_its_stored_value_without_running(t, redis_url, wait_for):
    from django.db import connection

    import ledger_jobs

    ledger_jobs.create_effects(connection)
    result = t.charge_once.enqueue("task-1")
    with _Worker(redis_url):
        wait_for(lambda: _counts()["completed"] == 1, what="the task to run")
        first = _queue().get_job(result.id).returnvalue
        _queue().get_job(result.id).retry("completed")  # delivered again, as a stalled job is
        wait_for(lambda: _queue().get_job_state(result.id) == "completed", what="the delivery again to complete")
    assert _queue().get_job(result.id).returnvalue == first
    assert t.charge_once.get_result(result.id).return_value == first
    with connection.cursor() as cur:
        cur.execute("SELECT run FROM ledger_effects WHERE job_id = 'task-1'")
        assert [r[0] for r in cur.fetchall()] == [first["run"]]
    connection.close()


def test_retries_give_the_context_its_attempt_and_keep_each_error(t, redis_url, wait_for):
    result = t.flaky.enqueue("retry", 2)
    with _Worker(redis_url):
        wait_for(lambda: _counts()["completed"] == 1, what="the task to succeed on its third attempt")
    assert t.SEEN["retry"] == [1, 2, 3]
    done = t.flaky.get_result(result.id)
    assert done.return_value == {"attempt": 3, "id": result.id} and done.attempts == 3
    assert [e.exception_class_path for e in done.errors] == ["djtasks.tasks.Declined"] * 2
    assert done.errors[0].exception_class is t.Declined
    assert "attempt 1 declined" in done.errors[0].traceback and "Traceback" in done.errors[0].traceback


def test_a_task_that_keeps_failing_ends_failed_with_every_error(t, redis_url, wait_for):
    result = t.always_fails.enqueue("card declined")
    with _Worker(redis_url):
        wait_for(lambda: _counts()["failed"] == 1, what="the task to fail three times")
    done = t.always_fails.get_result(result.id)
    assert done.status == task_api.TaskResultStatus.FAILED and done.attempts == 3
    assert len(done.errors) == 3 and done.finished_at is not None
    with pytest.raises(ValueError):
        done.return_value  # noqa: B018 (Django raises for a failed task)


def test_a_return_value_json_cannot_hold_fails_once(t, redis_url, wait_for):
    result = t.returns_a_set.enqueue()
    with _Worker(redis_url):
        wait_for(lambda: _counts()["failed"] == 1, what="the task to fail")
    done = t.returns_a_set.get_result(result.id)
    assert done.attempts == 1, "no retry for a task whose result cannot be stored"
    assert done.errors[-1].exception_class_path == "echomq_gevent.errors.UnrecoverableError"
    assert "returned a value JSON cannot hold" in _queue().get_job(result.id).failed_reason


def test_foreign_jobs_fail_once_with_the_cause_and_the_worker_goes_on(t, redis_url, wait_for):
    q = _queue()
    not_args = q.add("djtasks.tasks.add", {"a": 1})
    not_a_list = q.add("djtasks.tasks.add", {"args": "1,2", "kwargs": {}})
    misfit = q.add("djtasks.tasks.add", {"args": [1], "kwargs": {"c": 1}})
    missing = q.add("djtasks.tasks.add", {"kwargs": {"b": 1}})
    unknown = q.add("djtasks.unimported.boom", {"args": [], "kwargs": {}})
    stdlib = q.add("os.system", {"args": ["true"], "kwargs": {}})
    good = t.add.enqueue(1, b=1)
    with _Worker(redis_url):
        wait_for(lambda: _counts()["failed"] == 6 and _counts()["completed"] == 1,
                 what="six foreign jobs to fail and the task to complete")
    reasons = {j.id: (j.failed_reason, j.attempts_made) for j in q.get_jobs(["failed"])}
    assert "its data must be" in reasons[not_args.id][0]
    assert "args must be a list" in reasons[not_a_list.id][0]
    assert "its arguments do not fit add(a, b=0): got an unexpected keyword argument 'c'" in reasons[misfit.id][0]
    assert "missing a required argument: 'a'" in reasons[missing.id][0]
    assert "'djtasks.unimported.boom', which is not a Django task" in reasons[unknown.id][0]
    assert "'os.system', which is not a Django task" in reasons[stdlib.id][0]
    assert all(attempts == 1 for _reason, attempts in reasons.values()), reasons
    assert "djtasks.unimported" not in sys.modules and "ECHOMQ_TEST_UNIMPORTED_WAS_IMPORTED" not in os.environ
    assert t.add.get_result(good.id).return_value == {"sum": 2}


def test_get_result_of_an_unknown_or_removed_job(t, redis_url, wait_for):
    with pytest.raises(task_api.TaskResultDoesNotExist):
        t.add.get_result("0" * 32)
    with pytest.raises(task_api.TaskResultDoesNotExist):
        t.add.get_result("no such id!")
    other = _queue().add("not-a-task", {})
    with pytest.raises(task_api.TaskResultDoesNotExist):
        t.add.get_result(other.id)  # a job by that id, but not a task's
    result = t.add.enqueue(1)
    _queue().get_job(result.id).remove()
    with pytest.raises(task_api.TaskResultDoesNotExist):
        result.refresh()


def test_async_variants(t, redis_url, wait_for):
    result = asyncio.run(t.add.aenqueue(4, b=4))
    assert _queue().get_job(result.id).data == {"args": [4], "kwargs": {"b": 4}}
    with _Worker(redis_url):
        wait_for(lambda: _counts()["completed"] == 1, what="the task to run")
    fetched = asyncio.run(t.add.aget_result(result.id))
    assert fetched.return_value == {"sum": 8}
    asyncio.run(result.arefresh())
    assert result.status == task_api.TaskResultStatus.SUCCESSFUL


# --- settings and definitions --------------------------------------------------------------------
def test_definitions_are_checked_where_the_task_is_defined(t):
    task = task_api.task
    with pytest.raises(task_api.InvalidTask, match="priority"):
        task(priority=101, queue_name="tasks")(t.plain)
    with pytest.raises(task_api.InvalidTask):
        task(queue_name="elsewhere")(t.plain)
    with pytest.raises(task_api.InvalidTask, match="async def task: echomq-gevent runs tasks on gevent"):
        task(queue_name="tasks")(t.coroutine)


def test_a_backend_queue_the_echomq_setting_lacks_is_refused_by_check_and_the_worker(configure):
    from django.core import checks
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    from echomq_gevent.errors import ConfigError

    integration = configure(queues=("tasks", "ghost"))
    messages = [m for m in checks.run_checks() if m.id == "echomq_gevent.E001"]
    assert len(messages) == 1 and "settings.TASKS['default']['QUEUES']" in messages[0].msg
    assert "'ghost'" in messages[0].msg and "settings.ECHOMQ['queues']" in messages[0].msg
    with pytest.raises(SystemCheckError):
        call_command("check")
    with pytest.raises(ConfigError, match=r"settings.TASKS\['default'\]\['QUEUES'\] names the queue 'ghost'"):
        integration.worker_plugins()


def test_bad_options_name_the_setting(configure):
    from django.core.exceptions import ImproperlyConfigured

    configure(retries=3)
    with pytest.raises(ImproperlyConfigured, match=r"settings.TASKS\['default'\]\['OPTIONS'\]\['retries'\]"):
        _backend()


def test_status_command_prints_the_outbox_line(configure, capsys):
    """``manage.py echomq_status`` with the outbox on: the line of waiting and parked rows
    (the Django integration kept its outbox where the status did not read it)."""
    from django.core.management import call_command
    from django.db import connection

    configure(outbox=True)
    with connection.cursor() as cur:
        cur.execute("DELETE FROM echomq_outbox")
    call_command("echomq_status", "tasks")
    assert "outbox: 0 row(s) waiting" in capsys.readouterr().out


# --- Node on the same queue ------------------------------------------------------------------------
@pytest.mark.interop
def test_a_node_producer_enqueues_a_task_and_a_node_reader_sees_results(t, redis_url, prefix, wait_for):
    """Node's bullmq (the pinned 6.7.0) adds a job naming the task with ``{args, kwargs}``;
    our worker runs it; Node reads the return value, and reads a job Django enqueued."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "interop"))
    from interop_node import NodeTool

    node = NodeTool(redis_url, prefix, "tasks")
    try:
        from_node = node.run("add", name="djtasks.tasks.add", data={"args": [2], "kwargs": {"b": 5}},
                             opts={"attempts": 2})
        from_django = t.add.enqueue(1, b=2)
        seen = node.run("getJob", jobId=from_django.id)
        assert seen["name"] == "djtasks.tasks.add" and seen["data"] == {"args": [1], "kwargs": {"b": 2}}
        with _Worker(redis_url):
            wait_for(lambda: _counts()["completed"] == 2, what="both tasks to run")
        assert node.run("getJob", jobId=from_node["id"])["returnvalue"] == {"sum": 7}
        assert node.run("getJob", jobId=from_django.id)["returnvalue"] == {"sum": 3}
        assert t.add.get_result(from_node["id"]).return_value == {"sum": 7}
    finally:
        node.close()


def test_manage_py_check_and_the_worker_command_name_a_queue_echomq_lacks(shop, tmp_path, redis_url, command):
    """In a new process, before any task module is imported: ``manage.py check`` reports
    the backend's queue that settings.ECHOMQ lacks, and ``manage.py echomq_worker`` stops
    at its start naming both settings."""
    from django.conf import settings

    (tmp_path / "ghost_settings.py").write_text(
        "from shop.settings import *  # noqa\n"
        f"TASKS = {{'default': {{'BACKEND': {BACKEND!r}, 'QUEUES': ['orders', 'ghost']}}}}\n")
    root = os.path.dirname(os.path.dirname(PROJECT))
    env = {"SHOP_DB": settings.DATABASES["default"]["NAME"], "REDIS_URL": redis_url,
           "DJANGO_SETTINGS_MODULE": "ghost_settings",
           "PYTHONPATH": os.pathsep.join([root, PROJECT, str(tmp_path)])}
    check = command([sys.executable, "manage.py", "check"], PROJECT, env)
    assert check.finish() != 0
    assert check.saw("(echomq_gevent.E001) settings.TASKS['default']['QUEUES'] names the queue 'ghost'"), \
        check.output()
    worker = command([sys.executable, "manage.py", "echomq_worker"], PROJECT, env)
    assert worker.finish() != 0  # Django's system checks, run before the command, stop it
    assert worker.saw("settings.TASKS['default']['QUEUES'] names the queue 'ghost', which settings.ECHOMQ['queues'] "
                      "does not declare"), worker.output()

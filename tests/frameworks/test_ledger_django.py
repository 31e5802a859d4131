"""The effect ledger on Django (the example shop's SQLite database, a real Redis, real
workers): the processor's row and the ledger's commit together, a delivery again answers
the stored value without running it, a failure leaves nothing, a new job with an old id
runs, a row that cannot be read fails the job once, a missing database is refused at
start; on the job's greenlet, ``offload: thread`` and ``offload: process``."""
from __future__ import annotations

import time

import pytest

django = pytest.importorskip("django")

import ledger_jobs  # noqa: E402


@pytest.fixture
def shop_db(django_shop):
    """The shop's migrated SQLite database, with the effect table emptied."""
    from django.db import connection

    ledger_jobs.create_effects(connection)
    with connection.cursor() as cur:
        cur.execute(f"DELETE FROM {ledger_jobs.EFFECTS}")
        cur.execute("DELETE FROM echomq_ledger")
    connection.close()
    return django_shop


def _effects(job_id=None):
    from django.db import connection

    with connection.cursor() as cur:
        if job_id is None:
            cur.execute(f"SELECT job_id, run FROM {ledger_jobs.EFFECTS} ORDER BY id")
        else:
            cur.execute(f"SELECT job_id, run FROM {ledger_jobs.EFFECTS} WHERE job_id = %s ORDER BY id", [job_id])
        rows = cur.fetchall()
    connection.close()
    return rows


def _ledger_rows():
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT prefix, queue, job_id, job_ts, job_name, return_value FROM echomq_ledger ORDER BY id")
        rows = cur.fetchall()
    connection.close()
    return rows


def _insert_row(prefix, qname, job_id, job_ts, return_value, created_ms=None, job_name="charge"):
    """A ledger row written by hand (as another delivery, or a person, would leave it),
    committed now unless ``created_ms`` says otherwise."""
    from django.db import connection

    from echomq_gevent.contrib.ledger.core import now_ms

    created_ms = now_ms() if created_ms is None else created_ms
    with connection.cursor() as cur:
        cur.execute("INSERT INTO echomq_ledger (prefix, queue, job_id, job_ts, job_name, return_value, created_ms) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s)", [prefix, qname, job_id, job_ts, job_name, return_value,
                                                            created_ms])
    connection.close()


def _run(redis_url, prefix, qname, wait_for, until, **opts):
    from integration.worker_helpers import make_worker, running

    with running(make_worker(redis_url, prefix, qname, ledger_jobs.charge, concurrency=1, **opts)):
        wait_for(until, what="the jobs to settle")


@pytest.mark.parametrize("offload", [None, "thread", "process"])
def test_the_effect_and_its_ledger_row_commit_together_and_a_delivery_again_does_not_run_it(
        shop_db, redis_url, prefix, qname, queue, wait_for, offload):
    job = queue.add("charge", {"n": 1}, {"jobId": "order-1"})
    _run(redis_url, prefix, qname, wait_for, lambda: queue.get_job_state("order-1") == "completed",
         offload=offload)
    first = queue.get_job("order-1").returnvalue
    effects = _effects("order-1")
    assert [e[1] for e in effects] == [first["run"]]
    assert _ledger_rows() == [(prefix, qname, "order-1", job.timestamp, "charge",
                               '{"run":"%s","pid":%d,"n":1}' % (first["run"], first["pid"]))]

    # the same job delivered again (moved back to wait as a stalled job would be): the
    # worker finds the row and completes the job with the stored value, without a write
    queue.get_job("order-1").retry("completed")
    assert queue.get_job_state("order-1") == "waiting"
    _run(redis_url, prefix, qname, wait_for, lambda: queue.get_job_state("order-1") == "completed",
         offload=offload)
    assert queue.get_job("order-1").returnvalue == first
    assert _effects("order-1") == effects


def test_a_failed_attempt_leaves_no_row_and_its_retry_runs_once(shop_db, redis_url, prefix, qname, queue, wait_for):
    queue.add("charge", {"fail": True}, {"jobId": "fails", "attempts": 2})
    _run(redis_url, prefix, qname, wait_for, lambda: queue.get_job_state("fails") == "failed")
    failed = queue.get_job("fails")
    assert failed.attempts_made == 2 and "the processor failed after its write" in failed.failed_reason
    assert _effects("fails") == [] and _ledger_rows() == []  # both attempts rolled back

    queue.add("charge", {"n": 2}, {"jobId": "ok"})
    _run(redis_url, prefix, qname, wait_for, lambda: queue.get_job_state("ok") == "completed")
    assert len(_effects("ok")) == 1 and len(_ledger_rows()) == 1


def test_a_new_job_with_an_old_id_runs_again(shop_db, redis_url, prefix, qname, queue, wait_for):
    old = queue.add("charge", {"n": 1}, {"jobId": "reused"})
    _run(redis_url, prefix, qname, wait_for, lambda: queue.get_job_state("reused") == "completed")
    queue.get_job("reused").remove()
    time.sleep(0.005)  # a later millisecond: the new job's creation time differs
    new = queue.add("charge", {"n": 2}, {"jobId": "reused"})
    assert new.timestamp != old.timestamp
    _run(redis_url, prefix, qname, wait_for, lambda: queue.get_job_state("reused") == "completed")
    assert queue.get_job("reused").returnvalue["n"] == 2
    assert len(_effects("reused")) == 2
    assert [r[3] for r in _ledger_rows()] == [old.timestamp, new.timestamp]


def test_a_ledger_row_that_cannot_be_read_fails_the_job_once_without_running_it(
        shop_db, redis_url, prefix, qname, queue, wait_for):
    from django.db import connection

    job = queue.add("charge", {"n": 1}, {"jobId": "garbled", "attempts": 3})
    _insert_row(prefix, qname, "garbled", job.timestamp, "{not json")
    _run(redis_url, prefix, qname, wait_for, lambda: queue.get_job_state("garbled") == "failed")
    failed = queue.get_job("garbled")
    assert failed.attempts_made == 1  # once: no retry reads it better
    assert "echomq_ledger row (prefix" in failed.failed_reason and "job_id 'garbled'" in failed.failed_reason
    assert "not JSON" in failed.failed_reason
    assert _effects("garbled") == []  # the processor never ran


@pytest.fixture
def echomq(shop_db, redis_url, prefix):
    """settings.ECHOMQ pointing at the test Redis (queue ``billing``)."""
    from django.conf import settings

    from echomq_gevent.contrib import django as integration

    saved = settings.ECHOMQ
    settings.ECHOMQ = {"redis": redis_url, "prefix": prefix, "entry_points": False,
                       "queues": {"billing": {}, "orders": {}}}  # orders: the shop's settings.TASKS
    integration.reset()
    yield integration
    settings.ECHOMQ = saved
    integration.reset()


def test_a_processor_marked_atomic_on_a_database_not_configured_is_refused_at_start(echomq):
    from echomq_gevent.errors import ConfigError

    def refund(job):
        return None

    registered = echomq.processor("billing", "refund", atomic="billing")(refund)
    try:
        with pytest.raises(ConfigError) as info:
            echomq.integration().prepare()
    finally:
        echomq.processor._routes[:] = [r for r in echomq.processor._routes if r[2] is not registered]
    text = str(info.value)
    assert "the processor test_ledger_django." in text and ".refund is marked atomic" in text
    assert "its database 'billing' (its atomic='billing') is not in settings.DATABASES" in text


def test_prune_deletes_only_rows_older_than_keep_days(shop_db):
    from django.db import connection

    from echomq_gevent.contrib.django.ledger import DjangoLedgerDb
    from echomq_gevent.contrib.ledger.core import now_ms, prune

    day = 86400 * 1000
    now = now_ms()
    for i, age_days in enumerate([10, 8, 6, 0]):
        _insert_row("p", "q", str(i), 1, "null", created_ms=now - age_days * day)
    assert prune(DjangoLedgerDb("default"), 7.0, now=now) == 2
    assert [r[2] for r in _ledger_rows()] == ["2", "3"]


def test_a_first_pick_up_that_meets_a_row_rolls_its_writes_back_and_answers_the_stored_value(
        shop_db, redis_url, prefix, qname, queue, wait_for):
    """A first pick-up skips the look-up; should a row exist anyway (another delivery
    committed while this one ran, or a retry that reset attemptsStarted), the unique key
    refuses the second row: the run's writes roll back with it and the stored value is
    the job's result."""
    from django.db import connection

    job = queue.add("charge", {"n": 1}, {"jobId": "raced"})
    _insert_row(prefix, qname, "raced", job.timestamp, '{"run":"the other delivery"}')
    _run(redis_url, prefix, qname, wait_for, lambda: queue.get_job_state("raced") == "completed")
    done = queue.get_job("raced")
    assert done.attempts_started == 1 and done.returnvalue == {"run": "the other delivery"}
    assert _effects("raced") == []  # its own write rolled back with the refused row


def test_the_worker_processes_prune_the_database_of_their_atomic_processors(echomq):
    from django.conf import settings

    from echomq_gevent.contrib.ledger.core import now_ms
    from echomq_gevent.contrib.ledger.pruner import LedgerPruner

    settings.ECHOMQ = dict(settings.ECHOMQ, ledger={"keep_days": 1})
    echomq.reset()

    def bill(job):
        return None

    registered = echomq.processor("billing", "bill", atomic=True)(bill)
    try:
        pruners = [p for p in echomq.worker_plugins() if isinstance(p, LedgerPruner)]
    finally:
        echomq.processor._routes[:] = [r for r in echomq.processor._routes if r[2] is not registered]
    assert [p.label for p in pruners] == ["Django database 'default'"]
    day = 86400 * 1000
    _insert_row("p", "q", "old", 1, "null", created_ms=now_ms() - 2 * day)
    _insert_row("p", "q", "new", 1, "null", created_ms=now_ms())
    assert pruners[0].prune_now() == 1
    assert [r[2] for r in _ledger_rows()] == ["new"]


def test_a_job_asked_for_by_an_atomic_processor_through_the_outbox_is_asked_for_once(
        echomq, redis_url, prefix, wait_for):
    """With the outbox on, the follow-up job of an atomic processor is a row of the
    ledger's transaction: one row for the job, none more when it is delivered again."""
    from django.conf import settings
    from django.db import connection

    from echomq_gevent import Queue

    settings.ECHOMQ = dict(settings.ECHOMQ, outbox={"relay": False})
    echomq.reset()

    def ship(job):
        return {"email": echomq.enqueue_on_commit("billing", "email", {"order": job.data["order"]})}

    registered = echomq.processor("billing", "ship", atomic=True)(ship)
    queue = Queue("billing", connection=redis_url, prefix=prefix)
    try:
        queue.add("ship", {"order": 7}, {"jobId": "s1"})
        from integration.worker_helpers import make_worker, running

        with running(make_worker(redis_url, prefix, "billing", registered, concurrency=1)):
            wait_for(lambda: queue.get_job_state("s1") == "completed", what="the job to complete")
            first = queue.get_job("s1").returnvalue
            queue.get_job("s1").retry("completed")  # delivered again
            wait_for(lambda: queue.get_job_state("s1") == "completed", what="the delivery again to complete")
        assert queue.get_job("s1").returnvalue == first
        with connection.cursor() as cur:
            cur.execute("SELECT job_id, name FROM echomq_outbox WHERE queue = 'billing'")
            assert cur.fetchall() == [(first["email"], "email")]
            cur.execute("DELETE FROM echomq_outbox")
        connection.close()
    finally:
        echomq.processor._routes[:] = [r for r in echomq.processor._routes if r[2] is not registered]
        queue.close()


def test_a_jobs_module_importing_models_at_the_top_runs_under_offload_process(shop_db, redis_url, prefix, qname,
                                                                              queue, wait_for):
    """The child of ``offload: process`` sets Django up from the worker's settings module
    before it imports the processor's module (before, that import raised
    AppRegistryNotReady and the worker did not start)."""
    import os

    from django.db import connection
    from shop.models import Order

    import offload_model_jobs

    Order.objects.create(email="a@example.com")
    Order.objects.create(email="a@example.com")
    connection.close()
    queue.add("count", {"email": "a@example.com"}, {"jobId": "c1"})
    from integration.worker_helpers import make_worker, running

    with running(make_worker(redis_url, prefix, qname, offload_model_jobs.count_orders, concurrency=1,
                             offload="process")):
        wait_for(lambda: queue.get_job_state("c1") in ("completed", "failed"), what="the job to settle")
    job = queue.get_job("c1")
    assert job.returnvalue is not None, job.failed_reason
    assert job.returnvalue["orders"] == 2
    assert job.returnvalue["pid"] != os.getpid()  # it ran in the child

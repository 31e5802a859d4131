"""The outbox in the Django integration, with the real Django on the example shop: the
migration makes the tables, ``enqueue_on_commit`` writes a row in the view's
transaction (SQLite and PostgreSQL), rollbacks and savepoints take theirs with them,
the relay adds the committed ones, and ``manage.py echomq_worker`` relays and runs
them; ``manage.py echomq_outbox`` lists and retries parked rows. Django 4.2+ takes psycopg
3 when it is installed, so the PostgreSQL cases here run on it (``test_outbox_drivers.py``
runs Django on each driver, in processes of their own)."""
from __future__ import annotations

import json
import os
import re
import signal
import sys

import pytest

django = pytest.importorskip("django")

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples")
PROJECT = os.path.join(EXAMPLES, "django_project")


@pytest.fixture(scope="module")
def shop(django_shop):
    """Django set up with the example shop's settings (conftest's ``django_shop``)."""
    return django_shop


@pytest.fixture(scope="module")
def pg_alias(shop, pg_server):
    """Database alias ``pg``: a PostgreSQL database of the session's cluster, migrated."""
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connections

    name = f"django{os.getpid()}"
    pg_server.create_database(name)
    entry = {"ENGINE": "django.db.backends.postgresql", "NAME": name, "USER": pg_server.user,
             "HOST": "127.0.0.1", "PORT": str(pg_server.port)}
    settings.DATABASES["pg"] = entry
    both = connections.configure_settings({"default": dict(settings.DATABASES["default"]), "pg": dict(entry)})
    connections.settings["pg"] = both["pg"]
    call_command("migrate", database="pg", verbosity=0)
    yield "pg"
    connections["pg"].close()


@pytest.fixture(params=["default", "pg"])
def alias(request, shop):
    return "default" if request.param == "default" else request.getfixturevalue("pg_alias")


@pytest.fixture
def integration(shop, alias, redis_url, prefix):
    """settings.ECHOMQ with the outbox on, on database ``alias``."""
    from django.conf import settings
    from django.db import connections

    from echomq_gevent.contrib import django as integration

    saved = settings.ECHOMQ
    settings.ECHOMQ = {"redis": redis_url, "prefix": prefix, "entry_points": False,
                       "queues": {"orders": {"concurrency": 1, "drain_delay": 0.5, "shutdown_timeout": 5}},
                       "outbox": {"database": alias, "poll_interval": 0.2}}
    integration.reset()
    with connections[alias].cursor() as cur:
        cur.execute("DELETE FROM echomq_outbox")
        cur.execute("UPDATE echomq_outbox_lock SET owner = '', lease_until_ms = 0")  # an earlier test's lease
    yield integration
    settings.ECHOMQ = saved
    integration.reset()


def _rows(alias):
    from django.db import connections

    with connections[alias].cursor() as cur:
        cur.execute("SELECT name, state, job_id, last_error FROM echomq_outbox ORDER BY id")
        return cur.fetchall()


def _relay(integration):
    from echomq_gevent.contrib.outbox.relay import Relay

    box = integration.outbox()
    return Relay(box.make_db(), box.queue_for, box.settings, box.label)


def test_rows_are_written_in_the_transaction_and_relayed_after_the_commit(integration, alias):
    from django.db import transaction

    from shop.models import Order

    with transaction.atomic(using=alias):
        order = Order.objects.using(alias).create(email="ada@example.com")
        job_id = integration.enqueue_on_commit("orders", "confirm", {"order_id": order.pk}, {"attempts": 2})
        assert [r[0] for r in _rows(alias)] == ["confirm"]  # in the transaction, not in Redis
        assert integration.queue("orders").count() == 0
    assert job_id.startswith("outbox-")
    relay = _relay(integration)
    assert relay.run_once().added == 1
    job = integration.queue("orders").get_job(job_id)
    assert (job.name, job.data, job.opts["attempts"]) == ("confirm", {"order_id": order.pk}, 2)
    assert _rows(alias) == []


def test_postgresql_runs_on_psycopg3_when_it_is_installed(pg_alias):
    """Django 4.2 and later take psycopg 3 when it imports; older ones psycopg2."""
    from django.db import connections

    expected = "psycopg" if _imports("psycopg") and django.VERSION >= (4, 2) else "psycopg2"  # 4.2 took psycopg 3
    with connections[pg_alias].cursor() as cur:
        cur.execute("SELECT 1")
    assert type(connections[pg_alias].connection).__module__.split(".")[0] == expected


def _imports(module):
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def test_rollback_and_savepoint(integration, alias):
    from django.db import transaction

    with pytest.raises(RuntimeError):
        with transaction.atomic(using=alias):
            integration.enqueue_on_commit("orders", "rolled-back", {})
            raise RuntimeError("the view failed")
    with transaction.atomic(using=alias):
        integration.enqueue_on_commit("orders", "outer", {})
        try:
            with transaction.atomic(using=alias):
                integration.enqueue_on_commit("orders", "inner", {})
                raise ValueError("the inner block fails")
        except ValueError:
            pass
    assert [r[0] for r in _rows(alias)] == ["outer"]
    assert _relay(integration).run_once().added == 1
    assert [j.name for j in integration.queue("orders").get_jobs(["waiting"])] == ["outer"]


def test_bad_input_is_refused_where_the_job_is_asked_for(integration, alias):
    from django.db import transaction

    from echomq_gevent.errors import ConfigError, InvalidOptionError

    with transaction.atomic(using=alias):
        with pytest.raises(ConfigError, match="queue 'nope' is not declared"):
            integration.enqueue_on_commit("nope", "x", {})
        with pytest.raises(InvalidOptionError, match="attemps"):
            integration.enqueue_on_commit("orders", "x", {}, {"attemps": 3})
        with pytest.raises(ValueError, match="the outbox table is in database"):
            integration.enqueue_on_commit("orders", "x", {}, using="elsewhere")
    assert _rows(alias) == []


def test_outbox_settings_are_checked(shop, redis_url):
    from django.conf import settings

    from echomq_gevent.contrib import django as integration
    from echomq_gevent.errors import ConfigError

    saved = settings.ECHOMQ
    try:
        settings.ECHOMQ = {"redis": redis_url, "queues": {"orders": {}}, "outbox": {"batch_sise": 5}}
        integration.reset()
        with pytest.raises(ConfigError, match=r"settings\.ECHOMQ\['outbox'\]\['batch_sise'\]: unknown outbox "
                                              r"option 'batch_sise'; did you mean 'batch_size'"):
            integration.integration()
        settings.ECHOMQ = {"redis": redis_url, "queues": {"orders": {}}, "outbox": "yes"}
        integration.reset()
        with pytest.raises(ConfigError, match=r"settings\.ECHOMQ\['outbox'\]: must be true, false or a mapping"):
            integration.integration()
    finally:
        settings.ECHOMQ = saved
        integration.reset()


def test_outbox_command_lists_and_retries_parked_rows(integration, alias, capsys):
    from django.core.management import call_command
    from django.db import connections, transaction

    with transaction.atomic(using=alias):
        integration.enqueue_on_commit("orders", "later", {"n": 1})
    with connections[alias].cursor() as cur:  # a row the relay cannot add: an unknown queue
        cur.execute("UPDATE echomq_outbox SET queue = 'gone'")
    relay = _relay(integration)
    assert relay.run_once().parked == 1
    call_command("echomq_outbox", "list")
    listed = capsys.readouterr().out
    assert "gone" in listed and "not declared" in listed, listed
    call_command("echomq_outbox", "list", "--json")
    doc = json.loads(capsys.readouterr().out)
    assert doc["parked"][0]["queue"] == "gone" and doc["waiting"] == 0 and doc["parked_count"] == 1
    with connections[alias].cursor() as cur:
        cur.execute("UPDATE echomq_outbox SET queue = 'orders'")
    call_command("echomq_outbox", "retry", "--all")
    assert "1 parked row(s) put back" in capsys.readouterr().out
    relay.order.grace = 0
    relay.run_once()
    relay.run_once()
    assert [j.data for j in integration.queue("orders").get_jobs(["waiting"])] == [{"n": 1}]


def test_worker_command_relays_and_processes(shop, redis_url, prefix, command, wait_for):
    """The example shop with SHOP_OUTBOX=1: a POST writes the order and its outbox row in
    one transaction; ``manage.py echomq_worker`` relays the row and confirms the order."""
    from django.conf import settings
    from django.test import Client

    from echomq_gevent.contrib import django as integration

    env = {"SHOP_DB": shop, "REDIS_URL": redis_url, "ECHOMQ_PREFIX": prefix, "SHOP_OUTBOX": "1",
           "DJANGO_SETTINGS_MODULE": "shop.settings"}
    saved = settings.ECHOMQ
    settings.ECHOMQ = dict(saved, redis=redis_url, prefix=prefix, outbox=True)
    integration.reset()
    try:
        worker = command([sys.executable, "manage.py", "echomq_worker", "--log-level", "info"], PROJECT, env)
        wait_for(lambda: worker.saw("outbox relay"), what="the worker's relay to start",
                 details=worker.output, give_up=worker.exited)
        client = Client()
        created = client.post("/orders", data=json.dumps({"email": "outbox@example.com"}),
                              content_type="application/json")
        assert created.status_code == 201, created.content
        pk = created.json()["id"]
        page = wait_for(lambda: (lambda r: r if r["status"] == "confirmed" else None)(
            client.get(f"/orders/{pk}").json()), what="the order to be confirmed through the outbox",
            details=worker.output, give_up=worker.exited)
        # the id the outbox row kept: outbox-<hex> from enqueue_on_commit, or on a Django
        # with the Tasks framework the 32 hex digits of the task's result id
        assert re.match(r"^job (outbox-)?[0-9a-f]{32}$", page["confirmed_by"]), page
        assert worker.stop(signal.SIGTERM) == 0, worker.output()
        assert worker.saw("outbox relay") and worker.saw("stopped"), worker.output()
    finally:
        settings.ECHOMQ = saved
        integration.reset()

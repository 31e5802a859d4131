"""Django's outbox on one PostgreSQL driver, in a process of its own: Django takes psycopg
3 when it imports and psycopg2 otherwise, once per process, so the other driver is
hidden before Django loads.

    python outbox_django_proc.py DRIVER HOST PORT USER DBNAME REDIS_URL PREFIX

Migrates, opens the relay's listening connection, then runs two overlapping
transactions: a raw one on a connection of Django's settings inserts its row first and
commits last; a Django ``atomic`` block with ``enqueue_on_commit`` commits in between.
Prints one JSON line: the driver of Django's connection and of the listener, the ids
heard by LISTEN, the jobs' names in the queue's order, and the seconds the notifications
took to arrive.
"""
import json
import sys
import time


def main() -> int:
    driver, host, port, user, dbname, redis_url, prefix = sys.argv[1:8]
    sys.modules["psycopg" if driver == "psycopg2" else "psycopg2"] = None  # hidden: Django takes `driver`

    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["echomq_gevent.contrib.django"], USE_TZ=True,
        DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "NAME": dbname, "USER": user,
                               "HOST": host, "PORT": port}},
        ECHOMQ={"redis": redis_url, "prefix": prefix, "entry_points": False, "queues": {"orders": {}},
                "outbox": {"poll_interval": 30.0}})
    django.setup()
    from django.core.management import call_command
    from django.db import connections, transaction

    from echomq_gevent.contrib import django as integration
    from echomq_gevent.contrib.outbox.relay import Relay
    from echomq_gevent.contrib.outbox.rows import encode_row, insert_sql

    call_command("migrate", verbosity=0)
    box = integration.outbox()
    relay = Relay(box.make_db(), box.queue_for, box.settings, box.label)
    assert relay.open_listener()
    relay.run_once()  # the backlog (none)

    early = relay.db.listen_connection()  # a plain connection of Django's settings
    with early.cursor() as cur:
        cur.execute(insert_sql("postgresql"), list(encode_row("orders", "inserted-first", "{}", None)))
    with transaction.atomic():
        job_id = integration.enqueue_on_commit("orders", "inserted-second", {"n": 2}, {"attempts": 2})
    early.commit()
    early.close()
    started = time.monotonic()
    heard = []
    while len(heard) < 2 and time.monotonic() - started < 5:
        heard += relay.listener.wait(5.0)
    took = time.monotonic() - started
    relay.order.heard(heard)  # what the relay's listening greenlet does
    added = 0
    for _ in range(3):
        added += relay.run_once().added
    queue = integration.queue("orders")
    job = queue.get_job(job_id)
    print(json.dumps({
        "django_driver": type(connections["default"].connection).__module__.split(".")[0],
        "listener_driver": type(relay.listener.conn).__module__.split(".")[0],
        "heard": heard, "took": took, "added": added,
        "names": [j.name for j in queue.get_jobs(["waiting"], asc=True)],
        "job": [job.data, job.opts.get("attempts")],
    }), flush=True)
    relay.listener.close()
    queue.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

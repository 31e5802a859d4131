"""The tasks the backend's tests enqueue and run (module level, as Django requires)."""
from echomq_gevent.contrib.django import atomic_task
from echomq_gevent.contrib.django.task_api import task

#: what the tasks saw, by test key (the tests run the worker in their own process)
SEEN = {}


@task(queue_name="tasks")
def add(a, b=0):
    return {"sum": a + b}


@task(queue_name="tasks", takes_context=True)
def flaky(context, key, fail_times):
    """Fails ``fail_times`` times, then returns the attempt it succeeded on."""
    SEEN.setdefault(key, []).append(context.attempt)
    if context.attempt <= fail_times:
        raise Declined(f"attempt {context.attempt} declined")
    return {"attempt": context.attempt, "id": context.task_result.id}


@task(queue_name="tasks")
def always_fails(reason):
    raise Declined(reason)


@task(queue_name="tasks")
def returns_a_set():
    return {1, 2}


@task(queue_name="tasks", priority=10)
def record(key, value):
    SEEN.setdefault(key, []).append(value)
    return value


class Declined(Exception):
    """A task's own exception, found again by its class path in the result's errors."""


def plain(x):
    """Decorated by the tests themselves (a task must be defined at module level)."""
    return x


async def coroutine(x):
    return x


@task(queue_name="tasks")
@atomic_task
def charge_once(key):
    """Writes one effect row and returns which run wrote it; atomic: its job's delivery
    again answers the stored value without a second row."""
    import uuid

    from django.db import connection

    run = uuid.uuid4().hex
    with connection.cursor() as cur:
        cur.execute("INSERT INTO ledger_effects (job_id, run) VALUES (%s, %s)", [key, run])
    return {"run": run}

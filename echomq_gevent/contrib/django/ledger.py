"""The effect ledger on Django's ORM: processors and ``@task`` functions whose database
effects happen once.

::

    @processor("billing", "charge", atomic=True)      # or atomic="billing" (a database alias)
    def charge(job):
        Payment.objects.create(order_id=job.data["order"], amount=job.data["amount"])
        return {"charged": job.data["amount"]}

    @task()
    @atomic_task                                       # or @atomic_task(using="billing")
    def send_invoice(order_id): ...

The processor runs inside ``transaction.atomic(using=alias)`` on the connection its own ORM
calls use (Django keeps one per thread, one per greenlet under gevent), and the job's row
of ``echomq_ledger`` (:mod:`echomq_gevent.contrib.ledger.core`) is written in that same
transaction; a delivery of the job again finds the row and answers its return value
without calling the processor. The table comes with ``python manage.py migrate``
(``0002_ledger``); the worker processes prune it (``settings.ECHOMQ['ledger']``).

It works where the processor runs: on the job's greenlet, in a native thread
(``offload: thread``), or in a child process (``offload: process``; the child sets
Django up on its first ledgered job when ``DJANGO_SETTINGS_MODULE`` is set, as the
worker's environment has it).
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator, Optional

from ...errors import ConfigError
from ..ledger.core import TABLE, run_once
from .outbox_db import CursorExec

__all__ = ["AtomicProcessor", "DjangoLedgerDb", "atomic_task", "atomic_of", "ledger_alias", "check_alias",
           "make_atomic", "ATTR"]

#: The attribute ``@atomic_task`` sets on a task's function: the alias (``None``: the
#: ledger's database of the settings).
ATTR = "__echomq_atomic__"
_DEFAULT = object()


class DjangoLedgerDb:
    """Database ``alias`` as the ledger uses it: the current thread's (greenlet's)
    connection, the one the processor's ORM calls use."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.label = f"Django database {alias!r}"

    @contextlib.contextmanager
    def atomic(self) -> Iterator[CursorExec]:
        from django.db import connections, transaction

        with transaction.atomic(using=self.alias):
            with connections[self.alias].cursor() as cur:
                yield CursorExec(cur)

    def is_conflict(self, exc: BaseException) -> bool:
        from django.db import IntegrityError

        return isinstance(exc, IntegrityError)

    def close(self) -> None:
        """Close this greenlet's connection (the pruner's, after each prune)."""
        from django.db import connections

        try:
            connections[self.alias].close()
        except Exception:  # pragma: no cover - best effort
            pass


def _ensure_django(what: str) -> None:
    """Set Django up in a process that has not (a child of ``offload: process``), from
    ``DJANGO_SETTINGS_MODULE``; ConfigError naming ``what`` when there is none."""
    import os

    from django.apps import apps
    from django.conf import settings

    if apps.ready:
        return
    if not settings.configured and not os.environ.get("DJANGO_SETTINGS_MODULE"):
        raise ConfigError(f"{what} is marked atomic and runs in a process where Django is not set up (a child "
                          f"of offload: process) and DJANGO_SETTINGS_MODULE is not set: run the worker with "
                          f"manage.py echomq_worker, or set DJANGO_SETTINGS_MODULE in its environment")
    import django

    django.setup()


def ledger_alias(explicit: Optional[str] = None) -> str:
    """The database a ledgered processor writes to: its own ``atomic='alias'``, else
    ``settings.ECHOMQ['ledger']['database']``, else ``'default'``."""
    if explicit:
        return explicit
    from . import integration

    return integration().ledger.database or "default"


def check_alias(alias: str, what: str, setting: str) -> None:
    """Refuse at start a ledger whose database is not configured or not migrated:
    ConfigError naming ``what`` (the processor or task) and ``setting``."""
    from django.conf import settings
    from django.db import DatabaseError, connections

    if alias not in getattr(settings, "DATABASES", {}):
        raise ConfigError(f"{what} is marked atomic, but its database {alias!r} ({setting}) is not in "
                          f"settings.DATABASES: add it there, or name one that is")
    try:
        with connections[alias].cursor() as cur:
            cur.execute(f"SELECT id FROM {TABLE} WHERE 1 = 0")
    except DatabaseError as exc:
        raise ConfigError(f"{what} is marked atomic, but database {alias!r} ({setting}) has no {TABLE} table "
                          f"({type(exc).__name__}: {exc}): run python manage.py migrate "
                          f"--database {alias}") from None
    finally:
        try:
            if not connections[alias].in_atomic_block:
                connections[alias].close()
        except DatabaseError:  # pragma: no cover - a connection of another thread: left to it
            pass


class AtomicProcessor:
    """A processor whose database effects and ledger row commit together
    (``@processor(..., atomic=True)``). Keeps the function's module and name, so
    ``offload: process`` imports it by the same name."""

    #: what :meth:`~echomq_gevent.contrib.frameworks.Processors.atomic_routes` looks for
    echomq_ledgered = True

    def __init__(self, fn: Callable[[Any], Any], alias: Optional[str] = None) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        #: ``module.qualified.name`` of the function (what errors and logs name)
        self.name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}"
        self.alias = alias

    def __call__(self, job: Any) -> Any:
        _ensure_django(f"the processor {self.name}")
        return run_once(DjangoLedgerDb(ledger_alias(self.alias)), self.fn, job)

    def __repr__(self) -> str:
        return f"<atomic processor {self.name}>"

    def check(self) -> None:
        """At start: ConfigError when the ledger's database is missing or not migrated."""
        what = f"the processor {self.name}"
        _ensure_django(what)  # named by a YAML processor: and run by echomq-gevent -c, not manage.py
        setting = "its atomic=" + repr(self.alias) if self.alias else "settings.ECHOMQ['ledger']['database']"
        check_alias(ledger_alias(self.alias), what, setting)


def make_atomic(fn: Callable[[Any], Any], atomic: Any) -> AtomicProcessor:
    """What ``@processor(queue, name, atomic=...)`` registers: ``True`` for the ledger's
    database of the settings, or a database alias."""
    if atomic is True:
        return AtomicProcessor(fn)
    if isinstance(atomic, str) and atomic:
        return AtomicProcessor(fn, atomic)
    raise TypeError(f"@processor(..., atomic=...) takes True or a database alias, got {atomic!r}")


def atomic_task(fn: Any = None, *, using: Optional[str] = None) -> Any:
    """Mark a ``@task`` function atomic: its database effects and its job's ledger row
    commit together, and a delivery of its job again answers the stored return value
    without calling it. Put it under ``@task()``::

        @task()
        @atomic_task
        def charge(order_id): ...
    """
    def mark(func: Any) -> Any:
        if not callable(func):
            raise TypeError(f"@atomic_task decorates {func!r}, which is not callable (put it under @task())")
        setattr(func, ATTR, using)
        return func
    return mark(fn) if fn is not None else mark


def atomic_of(func: Any) -> Any:
    """``_DEFAULT``-free look-up of ``@atomic_task``: ``None`` when ``func`` is not marked,
    else ``(alias,)`` (the alias ``None``: the settings' database)."""
    value = getattr(func, ATTR, _DEFAULT)
    return None if value is _DEFAULT else (value,)

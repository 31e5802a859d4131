"""The effect ledger: a processor's database effects happen once, however often its job
is delivered.

Processing is at least once: a job runs again when its worker dies, freezes or loses
Redis after the processor's transaction committed and before the job's completion reached
Redis. A processor marked atomic (``@processor("billing", "charge", atomic=True)``) runs
inside one database transaction that also writes the job's row into ``echomq_ledger``
(its queue, id, creation time and return value); a delivery of the job that finds the row
completes the job with the stored return value without calling the processor. A processor
that raises leaves no row (its transaction rolled back), so a retry runs it again.

Modules: :mod:`.core` (the table, its SQL and the rule), :mod:`.settings` (the options),
:mod:`.pruner` (the worker processes' pruning), :mod:`.sqlalchemy` (the table for SQLAlchemy
apps, and a session's transaction: Flask). The Django side is
``echomq_gevent.contrib.django.ledger``, Pyramid's ``echomq_gevent.contrib.pyramid.ledger``. See ``docs/frameworks.md``.
"""
from __future__ import annotations

from .core import DEFAULT_KEEP_DAYS, TABLE, LedgerKey, key_of, prune, run_once
from .settings import OPTIONS, LedgerSettings, ledger_settings

__all__ = ["TABLE", "DEFAULT_KEEP_DAYS", "LedgerKey", "key_of", "run_once", "prune",
           "LedgerSettings", "OPTIONS", "ledger_settings"]

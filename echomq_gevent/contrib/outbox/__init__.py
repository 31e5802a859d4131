"""The transactional outbox: jobs written in the app's database transaction, moved to
Redis by a relay once it commits, each exactly once and in commit order.

With the outbox on (``settings.ECHOMQ['outbox'] = True``, ``app.config['ECHOMQ_OUTBOX']``,
``echomq.outbox = true``), ``enqueue_on_commit`` / ``enqueue_after_commit`` /
``request.enqueue_job`` insert a row into ``echomq_outbox`` in the same transaction
as the app's own rows instead of waiting for the commit to call Redis: a Redis outage,
a failover or a process killed after the commit no longer loses the job. The relay
(:mod:`.relay`) runs in the worker processes and adds the committed rows' jobs.

Modules: :mod:`.settings` (the options), :mod:`.rows` (the tables, the job ids and all
SQL), :mod:`.order` (commit order), :mod:`.listen` (PostgreSQL LISTEN), :mod:`.drivers`
(psycopg2 and psycopg 3 under it), :mod:`.adding` (rows to jobs, and why a row is
parked), :mod:`.relay` (the loop), :mod:`.registry` (this process's outboxes, their
relays and status), :mod:`.sqlalchemy` (the table and the session side for Flask and
Pyramid), :mod:`.commands` (list and retry parked rows).
The Django model is ``echomq_gevent.contrib.django.models``. See ``docs/frameworks.md``.
"""
from __future__ import annotations

from .settings import OPTIONS, OutboxSettings, outbox_settings

__all__ = ["OutboxSettings", "OPTIONS", "outbox_settings"]

"""Pruning the ledger from the worker processes: a plugin that starts one greenlet per
process when its first worker starts, deletes the rows older than ``keep_days`` every
``prune_interval`` seconds (the first time at start), and stops with the workers.

Several processes prune the same table at once without harm: each statement deletes a
bounded batch of old rows, and a row another process deleted first is simply gone.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Optional

import gevent

from ...plugins.hookspecs import hookimpl
from .core import LedgerDb, prune
from .settings import LedgerSettings

log = logging.getLogger("echomq_gevent.ledger")

__all__ = ["LedgerPruner"]


class LedgerPruner:
    """Plugin: prunes one ledger table while this process runs workers.

    ``make_db`` builds the database adapter on the pruning greenlet (a Django connection
    belongs to the greenlet that opened it; for SQLAlchemy an
    :class:`~echomq_gevent.contrib.outbox.sqlalchemy.SqlAlchemyDb` of the engine); ``after``
    (optional) runs after each prune on that greenlet (Django closes the greenlet's
    connection there)."""

    def __init__(self, make_db: Callable[[], LedgerDb], settings: LedgerSettings, label: str,
                 after: Optional[Callable[[], None]] = None, active: Optional[Callable[[], bool]] = None) -> None:
        self.__name__ = f"echomq_gevent.ledger.pruner:{label}"
        self.make_db = make_db
        self.settings = settings
        self.label = label
        self.after = after
        #: asked when a worker starts: whether anything writes to this ledger (Flask and
        #: Pyramid: a processor marked atomic); None: always
        self.active = active
        self._greenlet: Any = None

    def prune_now(self) -> int:
        """One prune; returns the rows deleted (0, logged, when the database fails)."""
        try:
            n = prune(self.make_db(), self.settings.keep_days)
        except Exception as exc:
            log.warning("ledger of %s: pruning the rows older than %g days failed (%s: %s); trying again in %g s",
                        self.label, self.settings.keep_days, type(exc).__name__, exc, self.settings.prune_interval)
            n = 0
        finally:
            if self.after is not None:
                try:
                    self.after()
                except Exception:  # pragma: no cover - best effort
                    pass
        if n:
            log.info("ledger of %s: %d row(s) older than %g days pruned", self.label, n, self.settings.keep_days)
        return n

    def _loop(self) -> None:
        while True:
            self.prune_now()
            gevent.sleep(self.settings.prune_interval)

    @hookimpl
    def echomq_worker_started(self, worker: Any) -> None:
        if self.active is not None and not self.active():
            return
        if self._greenlet is None or self._greenlet.dead:
            self._greenlet = gevent.spawn(self._loop)

    @hookimpl
    def echomq_worker_stopping(self, worker: Any, reason: str) -> None:
        g, self._greenlet = self._greenlet, None
        if g is not None:
            g.kill(block=False)

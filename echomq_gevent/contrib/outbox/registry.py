"""The outboxes of this process: one per app that switched it on, and their relays.

A framework integration registers its app's :class:`Outbox` when it reads settings with
the outbox on (Django's ``integration()``, Flask's ``init_app``, Pyramid's
``includeme``). What runs job workers then starts the relays of every registered outbox:
the framework worker commands (through :class:`RelayPlugin`, a plugin of their
workers) and gunicorn co-hosting (:class:`~echomq_gevent.contrib.cohost.CoHost`).
The health endpoint, the Prometheus plugin, the dashboard and the status commands read
:func:`status` from here.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Callable, Dict, List, Optional, Sequence

from ...plugins.hookspecs import hookimpl
from . import rows as sql
from .relay import Relay, read_stats
from .rows import Db, Row
from .settings import OutboxSettings

__all__ = ["Outbox", "register", "registered", "relay_waiting", "start_relays", "stop_relays", "status", "RelayPlugin"]

log = logging.getLogger("echomq_gevent.outbox")


class Outbox:
    """One app's outbox in this process.

    ``key`` identifies the app (a second registration under it replaces the first);
    ``make_db()`` builds a fresh :class:`~.rows.Db` for a relay or a command;
    ``queue_for(name)`` is the app's Queue of a declared queue (ConfigError otherwise).
    """

    def __init__(self, key: str, settings: OutboxSettings, make_db: Callable[[], Db],
                 queue_for: Callable[[str], Any], label: str) -> None:
        self.key = key
        self.settings = settings
        self.make_db = make_db
        self.queue_for = queue_for
        self.label = label
        self.relay: Optional[Relay] = None
        self._pid = os.getpid()

    def start_relay(self) -> Optional[Relay]:
        """Start this process's relay (once; ``relay: false`` starts none)."""
        if not self.settings.relay:
            return None
        if self.relay is not None and self._pid == os.getpid() and self.relay.running:
            return self.relay
        self._pid = os.getpid()
        self.relay = Relay(self.make_db(), self.queue_for, self.settings, self.label).start()
        return self.relay

    def stop_relay(self, timeout: float = 10.0) -> None:
        relay, self.relay = self.relay, None
        if relay is not None and self._pid == os.getpid():
            relay.stop(timeout)

    def wake(self) -> None:
        """After a commit that wrote rows: the relay of this process (if any) runs soon."""
        relay = self.relay
        if relay is not None and self._pid == os.getpid():
            relay.wake()

    def status(self) -> Dict[str, Any]:
        """Depth, oldest age and parked rows, and the relay's state. From the running
        relay's last reading (no database access), else read now."""
        relay = self.relay if self._pid == os.getpid() else None
        if relay is not None and relay.running:
            s = relay.stats()
        else:
            s = self.read()
            s["state"] = "not running in this process"
        s["app"] = self.label
        s["max_age_s"] = self.settings.max_age
        age = s.get("oldest_age_s")
        s["too_old"] = bool(age is not None and age > self.settings.max_age)
        return s

    def read(self) -> Dict[str, Any]:
        """The numbers read from the database now (a connection of its own)."""
        db = self.make_db()
        try:
            s = read_stats(db)
            s["error"] = ""
        except Exception as exc:
            s = {"waiting": None, "oldest_age_s": None, "parked": None, "error": f"{type(exc).__name__}: {exc}"}
        finally:
            db.close()
        return s

    # -- the command's operations ------------------------------------------------------------
    def parked(self, limit: int = 1000) -> List[Row]:
        return self._with_db(lambda ex: sql.parked_rows(ex, limit))

    def retry(self, ids: Optional[Sequence[int]] = None) -> int:
        """Put parked rows back to waiting (all when ``ids`` is None); the relay takes
        them on its next pass. Returns how many."""
        n = self._with_db(lambda ex: sql.retry_parked(ex, ids))
        self.wake()
        return n

    def delete(self, ids: Sequence[int]) -> int:
        """Delete parked rows for good (their jobs are never added). Returns how many."""
        return self._with_db(lambda ex: sql.delete_parked(ex, ids))

    def _with_db(self, fn: Callable[[Any], Any]) -> Any:
        db = self.make_db()
        try:
            with db.atomic() as ex:
                return fn(ex)
        finally:
            db.close()


_outboxes: Dict[str, Outbox] = {}


def register(outbox: Outbox) -> Outbox:
    """Keep ``outbox`` for this process (replacing one of the same key, whose relay is
    stopped)."""
    old = _outboxes.get(outbox.key)
    if old is not None and old is not outbox and old.relay is not None:
        old.stop_relay(1.0)
    _outboxes[outbox.key] = outbox
    return outbox


def unregister(key: str) -> None:
    old = _outboxes.pop(key, None)
    if old is not None:
        old.stop_relay(1.0)


def registered() -> List[Outbox]:
    return list(_outboxes.values())


def relay_waiting() -> Optional[Callable[[], int]]:
    """A call that relays the waiting rows of every registered outbox once, through the
    calling greenlet's database connection, and returns how many jobs it added (what a
    test's drain calls before it looks at the queues: rows written in a transaction the
    test has not committed are relayed too); None when this process registered none."""
    relays = [Relay(box.make_db(), box.queue_for, box.settings, box.label) for box in registered()]
    if not relays:
        return None

    def relay_once() -> int:
        return sum(relay.run_once().added for relay in relays)
    return relay_once


def start_relays() -> List[Relay]:
    """Start the relay of every registered outbox that has none running here."""
    started = []
    for box in registered():
        try:
            relay = box.start_relay()
        except Exception:
            log.exception("%s: the outbox relay could not start", box.label)
            continue
        if relay is not None:
            started.append(relay)
    return started


def stop_relays(timeout: float = 10.0) -> None:
    for box in registered():
        try:
            box.stop_relay(timeout)
        except Exception:
            log.exception("%s: stopping the outbox relay failed", box.label)


def status() -> List[Dict[str, Any]]:
    """:meth:`Outbox.status` of every registered outbox."""
    return [box.status() for box in registered()]


class RelayPlugin:
    """Plugin of the framework worker commands: the relays start with the first worker
    and stop when the workers stop fetching (the pass under way finishes first)."""

    __name__ = "echomq_gevent.contrib.outbox.relays"

    def __init__(self) -> None:
        self._started = False

    @hookimpl
    def echomq_worker_started(self, worker: Any) -> None:
        if not self._started:
            self._started = True
            start_relays()

    @hookimpl
    def echomq_worker_stopping(self, worker: Any, reason: str) -> None:
        if self._started:
            self._started = False
            stop_relays()

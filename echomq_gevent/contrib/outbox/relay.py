"""The relay: committed outbox rows to Redis, in commit order, each exactly once.

One :class:`Relay` runs in each worker process of an app with the outbox on (the
framework worker commands, each gunicorn worker that co-hosts job workers). They share
the work through the database, so a second relay is harmless:

* **PostgreSQL, MySQL**: a pass is one transaction that first locks the group's row of
  ``echomq_outbox_lock`` with ``FOR UPDATE SKIP LOCKED`` (a relay that does not get it
  skips the pass), reads the rows, adds their jobs to Redis and deletes them. On
  PostgreSQL, when the pass takes notified rows (the common case under load), the lock,
  the read and the delete are one statement (``DELETE ... RETURNING`` under the lock):
  ``BEGIN``, that statement and ``COMMIT`` are the pass's whole database work, and a row
  it then does not add (parked, to try again, Redis down) is put back as it was in the
  same transaction. A relay
  that dies anywhere in between leaves its transaction to be rolled back: the rows come
  back and the next pass adds them again with the same job ids, which BullMQ refuses as
  duplicates, so nothing is added twice and nothing is lost.
* **SQLite** (no row locks; a writer would hold the whole database during the Redis
  round trip): the lock row is a lease (``owner``, ``lease_until_ms``) taken in a short
  transaction; the rows are read, added, then deleted in short transactions of their
  own. A relay that dies leaves the lease to run out (``lease`` seconds) and the rows
  to be added again, with the same effect.

A pass takes up to ``batch_size`` rows in commit order (:mod:`.order`); the loop runs
passes while rows are left, then waits for a wake-up: :meth:`Relay.wake` (the app's
commit in this process), a PostgreSQL notification (any process's commit, :mod:`.listen`)
or ``poll_interval``. With ``order: "id"`` on PostgreSQL the rows carry no notification:
the relay goes by id, does not listen, and after a pass that found rows looks again
after ``linger`` instead of waiting for ``poll_interval``. A pass costs about the same
for one row as for a hundred (a transaction of three to five statements and a Redis
round trip), so a busy relay (its last pass
that found rows took more than one) lets ``linger`` seconds pass from the start of one
pass to the next: the rows committed meanwhile go out together. Rows that come one at a
time, a wake-up after a quiet spell, and the pass after one that took a whole batch
run at once. When Redis cannot take jobs the rows wait and the
relay retries with a backoff from 0.1 s doubling to 2 s; never parks them.

Runs on greenlets of its own (the pass loop, the listener) on the hub of the process;
:meth:`Relay.run_once` may also be called directly (tests, the benchmarks).
"""
from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from typing import AbstractSet, Any, Callable, Dict, List, Optional, Sequence

from . import rows as sql
from .adding import Outcome, add_rows, is_transient
from .order import CommitOrder, IdOrder
from .rows import Db
from .settings import OutboxSettings

__all__ = ["Relay", "PassResult", "read_stats"]

log = logging.getLogger("echomq_gevent.outbox")

#: Databases whose relays coordinate with ``SELECT ... FOR UPDATE SKIP LOCKED``.
ROW_LOCKING = ("postgresql", "mysql")
BACKOFF_MIN, BACKOFF_MAX = 0.1, 2.0
#: How often the leader deletes kept rows older than ``keep_days``.
PURGE_EVERY_S = 600.0
STATS_EVERY_S = 1.0
#: Called as ``fn(label, stats)`` each time a relay read its numbers (the Prometheus
#: plugin sets its gauges from them); an exception is logged and ignored.
STATS_LISTENERS: List[Callable[[str, Dict[str, Any]], None]] = []


class PassResult:
    """What one pass did: ``leader`` (it held the lock or lease), the rows ``added``,
    ``parked`` and ``retried``, ``transient`` (Redis could not take the rest), ``full``
    (it took a whole batch: run again at once)."""

    __slots__ = ("leader", "added", "parked", "retried", "transient", "full", "error")

    def __init__(self, leader: bool = False) -> None:
        self.leader = leader
        self.added = self.parked = self.retried = 0
        self.transient = False
        self.full = False
        self.error = ""

    def __repr__(self) -> str:
        return (f"PassResult(leader={self.leader}, added={self.added}, parked={self.parked}, "
                f"retried={self.retried}, transient={self.transient}, full={self.full})")


def read_stats(db: Db) -> Dict[str, Any]:
    """The outbox's numbers read from the database now: ``waiting``, ``oldest_age_s``
    (of the oldest waiting row, 0 when none), ``parked``."""
    with db.atomic() as ex:
        waiting, oldest, parked = sql.stats(ex)
    age = max(0.0, (sql.now_ms() - oldest) / 1000.0) if oldest is not None else 0.0
    return {"waiting": waiting, "oldest_age_s": round(age, 3), "parked": parked}


class Relay:
    """Moves one database's outbox rows to Redis.

    ``db`` is the relay's own database access (:class:`~.rows.Db`), ``queue_for(name)``
    the Queue of a declared queue (raises ConfigError for another: such a row is
    parked), ``label`` names the app in logs.
    """

    def __init__(self, db: Db, queue_for: Callable[[str], Any], settings: OutboxSettings,
                 label: str = "outbox") -> None:
        self.db = db
        self.queue_for = queue_for
        self.settings = settings
        self.label = label
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.locking = db.dialect in ROW_LOCKING
        # order "id": the rows carry no notification, so there is nothing to listen for
        self.listening = db.dialect == "postgresql" and settings.notifies
        self.order: Any = CommitOrder() if self.listening else self._by_id()
        self.listener: Any = None
        self.state = "built"
        self.leader = False
        self.counts = {"added": 0, "parked": 0, "retried": 0, "passes": 0}
        self.last_error = ""
        self.redis_down_since: Optional[float] = None
        self._stats: Dict[str, Any] = {}
        self._stats_at = 0.0
        self._purged_at = 0.0
        self._pass_began = 0.0
        #: the last pass that found rows took more than one: the relay lingers
        self._busy = False
        self._lock_row_ready = False
        self._stopping = False
        self._wake: Any = None
        self._loop: Any = None
        self._listen_loop: Any = None

    def _by_id(self) -> IdOrder:
        """The order by id; on PostgreSQL a pass takes its rows in one statement."""
        return IdOrder(one_statement=self.db.dialect == "postgresql")

    # -- one pass ---------------------------------------------------------------------------
    def run_once(self) -> PassResult:
        """Take the lock (or lease), move up to ``batch_size`` rows; returns what it did.
        Raises the database's error (the caller resets the connection and backs off)."""
        if not self._lock_row_ready:
            self._ensure_lock_row()
        if self.listener is not None and self.listener.is_open:
            self.order.heard(self.listener.drain())
        limit = self.settings.batch_size
        if self.locking:
            with self.db.atomic() as ex:
                if self.settings.keep_days <= 0 and self.order.can_take():
                    # notified rows (or, by id, the first rows): the lock and their
                    # delete in one statement
                    took = self.order.take(ex, limit)
                    if took is None:
                        self.leader = False
                        return PassResult(False)
                    batch, taken = took
                else:
                    if not sql.lock_skip_locked(ex):
                        self.leader = False
                        return PassResult(False)
                    batch, taken = self.order.next_rows(ex, limit), set()
                outcomes = add_rows(batch, self.queue_for) if batch else []
                result = self._apply(ex, outcomes, len(batch), limit, batch, taken)
        else:
            with self.db.atomic() as ex:
                got = sql.take_lease(ex, self.owner, int(self.settings.lease * 1000))
            if not got:
                self.leader = False
                return PassResult(False)
            with self.db.atomic() as ex:
                batch = self.order.next_rows(ex, limit)
            outcomes = add_rows(batch, self.queue_for) if batch else []
            with self.db.atomic() as ex:
                result = self._apply(ex, outcomes, len(batch), limit)
        self.leader = True
        self._maybe_purge()
        return result

    def _apply(self, ex: Any, outcomes: List[Outcome], count: int, limit: int, batch: Sequence[sql.Row] = (),
               taken: AbstractSet[int] = frozenset()) -> PassResult:
        """Write what the pass did: delete (or keep) the added rows, park or count the
        others. ``taken``: ids of ``batch`` the pass already deleted (the orders'
        ``take``); those not added are put back first, as they were."""
        result = PassResult(True)
        added: List[int] = []
        if taken:
            kept = {o.row.id for o in outcomes if o.kind == "added"}
            for row in batch:
                if row.id in taken and row.id not in kept:
                    sql.restore(ex, row)
        for o in outcomes:
            if o.kind == "added":
                if o.row.id not in taken:
                    added.append(o.row.id)
            elif o.kind == "park":
                sql.park(ex, o.row.id, o.detail)
                result.parked += 1
                log.error("%s: outbox row %d (queue %r, job %r, id %s) parked: %s", self.label, o.row.id,
                          o.row.queue, o.row.name, o.row.job_id, o.detail)
            elif o.kind == "retry":
                if o.row.attempts + 1 >= self.settings.max_attempts:
                    reason = f"failed {o.row.attempts + 1} times; last: {o.detail}"
                    sql.park(ex, o.row.id, reason)
                    result.parked += 1
                    log.error("%s: outbox row %d (queue %r, job %r) parked: %s", self.label, o.row.id,
                              o.row.queue, o.row.name, reason)
                else:
                    sql.count_failure(ex, o.row.id, o.detail)
                    result.retried += 1
                    log.warning("%s: outbox row %d (queue %r, job %r) not added (try %d of %d): %s", self.label,
                                o.row.id, o.row.queue, o.row.name, o.row.attempts + 1, self.settings.max_attempts,
                                o.detail)
            else:
                result.transient = True
                result.error = o.detail
        if added:
            sql.mark_added(ex, added, keep=self.settings.keep_days > 0, dialect=self.db.dialect)
        result.added = sum(1 for o in outcomes if o.kind == "added")
        self.order.done([o.row.id for o in outcomes if o.kind in ("added", "park")])
        result.full = count >= limit and not result.transient
        c = self.counts
        c["added"] += result.added
        c["parked"] += result.parked
        c["retried"] += result.retried
        c["passes"] += 1
        return result

    def _ensure_lock_row(self) -> None:
        try:
            with self.db.atomic() as ex:
                sql.ensure_lock_row(ex)
        except Exception:
            # another relay created it at the same moment (a duplicate key), or the
            # table is missing: the pass that follows says which
            self.db.reset()
        self._lock_row_ready = True

    def _maybe_purge(self) -> None:
        if self.settings.keep_days <= 0 or time.monotonic() - self._purged_at < PURGE_EVERY_S:
            return
        self._purged_at = time.monotonic()
        with self.db.atomic() as ex:
            n = sql.purge_added(ex, self.settings.keep_days)
        if n:
            log.info("%s: deleted %d outbox row(s) added more than %g day(s) ago", self.label, n,
                     self.settings.keep_days)

    def open_listener(self) -> bool:
        """Open the PostgreSQL listening connection when there is none (the listener's
        greenlet, or a caller of :meth:`run_once`); True when one is open."""
        if not self.listening:
            return False
        if self.listener is None or not self.listener.is_open:
            from .listen import Listener

            listener = Listener(self.db.listen_connection)
            listener.open()
            self.listener = listener
            self.order.reset()
        return True

    # -- stats ------------------------------------------------------------------------------
    def refresh_stats(self) -> Dict[str, Any]:
        """Read the numbers now (relay greenlet); kept for :meth:`stats`."""
        try:
            s = read_stats(self.db)
            s["error"] = ""
        except Exception as exc:
            self.db.reset()
            s = dict(self._stats or {"waiting": None, "oldest_age_s": None, "parked": None})
            s["error"] = f"{type(exc).__name__}: {exc}"
        self._stats, self._stats_at = s, time.monotonic()
        for listener in list(STATS_LISTENERS):
            try:
                listener(self.label, s)
            except Exception:
                log.exception("%s: an outbox stats listener failed", self.label)
        return s

    def stats(self) -> Dict[str, Any]:
        """The latest numbers (read by the relay at most ``STATS_EVERY_S`` ago) and the
        relay's own state; safe from any greenlet (no database access)."""
        s = dict(self._stats) if self._stats else {"waiting": None, "oldest_age_s": None, "parked": None,
                                                   "error": "not read yet"}
        if s.get("oldest_age_s") and self._stats_at:
            s["oldest_age_s"] = round(s["oldest_age_s"] + (time.monotonic() - self._stats_at), 3)
        s.update(state=self.state, leader=self.leader, owner=self.owner, counts=dict(self.counts),
                 last_error=self.last_error,
                 redis_down_s=round(time.monotonic() - self.redis_down_since, 1)
                 if self.redis_down_since is not None else None)
        return s

    # -- running ----------------------------------------------------------------------------
    def wake(self) -> None:
        """Run a pass soon (the app committed rows in this process). Any greenlet or thread."""
        if self._wake is not None:
            try:
                self._wake.set()
            except Exception:  # from a foreign thread: the poll finds the rows
                pass

    def start(self) -> "Relay":
        """Start the pass loop (and the PostgreSQL listener) on greenlets of this hub."""
        import gevent
        import gevent.event

        if self._loop is not None:
            return self
        self._wake = gevent.event.Event()
        self._stopping = False
        self.state = "running"
        self._loop = gevent.spawn(self._run)
        if self.listening:
            self._listen_loop = gevent.spawn(self._listen)
        log.info("%s: outbox relay %s started (%s, %s)", self.label, self.owner, self.db.label,
                 "row lock" if self.locking else f"lease {self.settings.lease:g} s")
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Finish the pass under way (up to ``timeout`` s), then stop and release the
        lease and the connections. Any greenlet of the hub."""
        if self._loop is None:
            return
        self._stopping = True
        self.wake()
        self._loop.join(timeout=timeout)
        if not self._loop.dead:
            self._loop.kill(block=True, timeout=1)
        if self._listen_loop is not None:
            self._listen_loop.kill(block=True, timeout=1)
            self._listen_loop = None
        self._loop = None
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        if not self.locking:
            try:
                with self.db.atomic() as ex:
                    sql.release_lease(ex, self.owner)
            except Exception:
                pass
        self.db.close()
        self.state = "stopped"
        log.info("%s: outbox relay %s stopped (%d job(s) added, %d row(s) parked)", self.label, self.owner,
                 self.counts["added"], self.counts["parked"])

    @property
    def running(self) -> bool:
        return self._loop is not None and not self._loop.dead

    def _run(self) -> None:
        import gevent

        backoff = 0.0
        hurry = False  # the last pass took a whole batch: the next one goes at once
        while not self._stopping:
            if time.monotonic() - self._stats_at >= STATS_EVERY_S:
                self.refresh_stats()  # also while Redis is down: the age keeps growing
            if not hurry:
                self._linger()
                if self._stopping:
                    break
            hurry = False
            # a wake-up from here on is for rows this pass may not see: it runs another
            self._wake.clear()
            self._pass_began = time.monotonic()
            try:
                result = self.run_once()
            except Exception as exc:
                self.db.reset()
                self.last_error = f"{type(exc).__name__}: {exc}"
                if is_transient(exc) and not _is_db_error(exc):
                    self._redis_down(self.last_error)
                else:
                    log.warning("%s: outbox relay pass failed (%s); retrying", self.label, self.last_error)
                backoff = min(BACKOFF_MAX, max(BACKOFF_MIN, backoff * 2))
                self._pause(backoff)
                continue
            if result.transient:
                self._redis_down(result.error)
                backoff = min(BACKOFF_MAX, max(BACKOFF_MIN, backoff * 2))
                self._pause(backoff)
                continue
            if self.redis_down_since is not None and result.leader:
                log.warning("%s: Redis takes jobs again after %.1f s; the outbox rows are going out", self.label,
                            time.monotonic() - self.redis_down_since)
                self.redis_down_since = None
            if result.retried and not result.full:
                # rows that failed for an unknown reason are tried again after a pause, as
                # after a Redis error: max_attempts then spans seconds, not a burst of
                # passes (a row still notified), nor max_attempts polls (one that is not)
                backoff = min(BACKOFF_MAX, max(BACKOFF_MIN, backoff * 2))
                self._pause(backoff)
                continue
            backoff = 0.0
            taken = result.added + result.parked + result.retried
            if taken:
                self._busy = taken > 1
            if result.leader and (result.full or self.order.more):
                hurry = result.full
                gevent.sleep(0)
                continue
            if result.leader and taken and self.db.dialect == "postgresql" and not self.listening:
                # no notification wakes it: a relay that found rows looks again after its
                # linger (at once after a single row), not after poll_interval
                continue
            self._pause(self.settings.poll_interval)
        self.state = "stopping"

    def _linger(self) -> None:
        """While busy, wait until ``linger`` seconds after the last pass began: the rows
        committed meanwhile then go out in one pass (one transaction and one Redis round
        trip for many rows, not one each). A wake-up after a quiet spell does not wait."""
        import gevent

        left = self.settings.linger - (time.monotonic() - self._pass_began)
        if self._busy and left > 0 and not self._stopping:
            gevent.sleep(min(left, self.settings.linger))

    def _pause(self, seconds: float) -> None:
        if self._stopping:
            return
        self._wake.wait(timeout=seconds)
        self._wake.clear()

    def _redis_down(self, detail: str) -> None:
        if self.redis_down_since is None:
            self.redis_down_since = time.monotonic()
            log.warning("%s: Redis does not take jobs (%s); the outbox rows wait and the relay retries",
                        self.label, detail)
        self.last_error = detail

    def _listen(self) -> None:
        """The listener's greenlet: notified ids to the commit order, and a wake-up."""
        import gevent

        backoff = 0.0
        while not self._stopping:
            try:
                if self.listener is None or not self.listener.is_open:
                    self.open_listener()
                    backoff = 0.0
                ids = self.listener.wait(5.0)
            except NotImplementedError as exc:
                log.warning("%s: %s; the relay polls every %g s and goes by row id", self.label, exc,
                            self.settings.poll_interval)
                self.order = self._by_id()
                self.listener = None
                self.listening = False
                return
            except Exception as exc:
                log.warning("%s: the outbox's LISTEN connection failed (%s: %s); opening another", self.label,
                            type(exc).__name__, exc)
                if self.listener is not None:
                    self.listener.close()
                    self.listener = None
                backoff = min(BACKOFF_MAX * 2, max(BACKOFF_MIN, backoff * 2))
                gevent.sleep(backoff)
                continue
            if ids:
                self.order.heard(ids)
                self.wake()
                if self._busy and self.settings.linger:
                    # what is notified meanwhile waits in the socket: the next pass (or
                    # this loop) reads it in one go, not one wake-up per commit
                    gevent.sleep(self.settings.linger)


def _is_db_error(exc: BaseException) -> bool:
    """True for a database driver's error (DB-API ``Error``), also when wrapped by
    Django or SQLAlchemy."""
    for cls in type(exc).__mro__:
        if cls.__module__.split(".")[0] in ("psycopg2", "psycopg", "sqlite3", "django", "sqlalchemy", "MySQLdb",
                                            "pymysql"):
            return True
    return False

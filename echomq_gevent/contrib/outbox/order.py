"""Which rows a relay pass takes, in which order: commit order.

A row's id is taken when it is inserted, not when its transaction commits: of two
transactions that overlap, the one with the lower id may commit last. Relaying by id
would then put its jobs first, ahead of jobs whose rows committed before it.

* **SQLite** has one writer at a time: a transaction holds the write lock from its first
  insert to its commit, so ids are in commit order and the relay goes by id.
* **PostgreSQL** delivers the notifications of ``NOTIFY`` in the order the
  transactions committed (and drops those of a rollback). Every insert notifies its row
  id (:data:`~.rows.CHANNEL`), so a relay that listens learns the commit order and goes by it
  (:class:`CommitOrder`). Rows it could not have heard of (they committed before it
  started listening, or while its listening connection was down) go first, by id.
* Other databases (MySQL), and PostgreSQL with the outbox's ``order: "id"`` (the rows
  are written without their NOTIFY, which saves PostgreSQL the notification's work and
  the listener's wake-up at every commit): by id; concurrent transactions may come out
  in insert order.

Within one transaction the rows (and so the jobs) keep the order they were asked in.
Used on the relay's greenlet.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from typing import Dict, Iterable, List, Optional, Set, Tuple

from . import rows as sql
from .rows import Exec, Row

__all__ = ["IdOrder", "CommitOrder"]


class IdOrder:
    """By id: SQLite (where it is commit order), and databases without LISTEN.

    ``one_statement`` (PostgreSQL): a pass locks the relay group and deletes its rows in
    one statement (:meth:`take`), instead of a lock, a select and a delete."""

    def __init__(self, one_statement: bool = False) -> None:
        self.one_statement = one_statement

    def next_rows(self, ex: Exec, limit: int) -> List[Row]:
        return sql.pending(ex, limit)

    def take(self, ex: Exec, limit: int) -> Optional[Tuple[List[Row], Set[int]]]:
        """Lock and delete the first ``limit`` waiting rows (:func:`~.rows.take_first`);
        ``None`` when another relay holds the lock; else the rows by id and their ids
        (all deleted: the relay puts back any it does not add)."""
        got = sql.take_first(ex, limit)
        if got is None:
            return None
        return got, {r.id for r in got}

    def done(self, ids: Iterable[int]) -> None:
        pass

    def heard(self, ids: Iterable[int]) -> None:
        pass

    def reset(self) -> None:
        pass

    def can_take(self) -> bool:
        return self.one_statement

    @property
    def more(self) -> bool:
        return False


class CommitOrder:
    """By the order PostgreSQL delivered the rows' notifications (their commit order).

    :meth:`heard` takes notified ids as they arrive. :meth:`reset` (the listening
    connection was (re)opened) marks every row already waiting as *backlog*: those are
    taken first, by id, before any notified row. A waiting row heard of neither way (a
    parked row put back by ``retry``, a notification lost with a connection) is taken by
    id once it has waited ``grace`` seconds unheard. Notified ids not found waiting
    (another relay took them) are dropped; at most ``cap`` are remembered.
    """

    def __init__(self, grace: float = 1.0, cap: int = 200000) -> None:
        self.grace = grace
        self.cap = cap
        self._heard: "OrderedDict[int, None]" = OrderedDict()
        self._backlog_max: Optional[int] = None
        self._backlog_known = False
        self._unheard_since: Dict[int, float] = {}
        self._stray_check = 0.0
        #: the backlog rows of the last pass, when they were its last ones
        self._backlog_tail: Optional[set] = None

    def reset(self) -> None:
        """The listening connection is new: what waits now may never be notified to us."""
        self._backlog_known = False
        self._backlog_max = None

    def heard(self, ids: Iterable[int]) -> None:
        for i in ids:
            self._heard[i] = None
        while len(self._heard) > self.cap:
            self._heard.popitem(last=False)

    @property
    def more(self) -> bool:
        """True while notified rows are left for another pass."""
        return bool(self._heard) or (self._backlog_max is not None)

    def done(self, ids: Iterable[int]) -> None:
        """The rows ``ids`` left the waiting state (added or parked)."""
        ids = set(ids)
        for i in ids:
            self._heard.pop(i, None)
            self._unheard_since.pop(i, None)
        if self._backlog_tail is not None and self._backlog_tail <= ids:
            self._backlog_max = None  # the backlog's last rows went out: it is over
        self._backlog_tail = None

    def next_rows(self, ex: Exec, limit: int) -> List[Row]:
        """The rows of the next pass, in the order they go to Redis (inside the pass's
        transaction, after the relay lock was taken)."""
        if not self._backlog_known:
            self._backlog_max = sql.max_pending_id(ex)
            self._backlog_known = True
        self._backlog_tail = None
        if self._backlog_max is not None:
            backlog = sql.pending(ex, limit, max_id=self._backlog_max)
            if not backlog:
                self._backlog_max = None
            else:
                if len(backlog) < limit:  # the backlog ends once these went out
                    self._backlog_tail = {r.id for r in backlog}
                return backlog
        out: List[Row] = []
        if self._heard:
            wanted = list(self._heard)[:limit]
            out = self._in_heard_order(wanted, sql.pending_by_ids(ex, wanted))
        if len(out) < limit:
            out.extend(self._strays(ex, limit - len(out), {r.id for r in out}))
        return out

    def _in_heard_order(self, wanted: List[int], rows: List[Row]) -> List[Row]:
        """``rows`` (found waiting among ``wanted``) in the order they were heard; a
        wanted id not found is forgotten (taken by another relay, or parked)."""
        found = {r.id: r for r in rows}
        out: List[Row] = []
        for i in wanted:
            row = found.get(i)
            if row is None:
                self._heard.pop(i, None)
            else:
                out.append(row)
        return out

    def can_take(self) -> bool:
        """True when the next pass starts with notified rows (no backlog left): the relay
        may then lock and take them in one statement (:meth:`take`)."""
        return self._backlog_known and self._backlog_max is None and bool(self._heard)

    def take(self, ex: Exec, limit: int) -> Optional[Tuple[List[Row], Set[int]]]:
        """Lock the relay group and delete the notified rows in one statement
        (:func:`~.rows.take_pending`), then look for strays as :meth:`next_rows` does.
        ``None`` when another relay holds the lock; else the rows in the order they go to
        Redis and the ids of those already deleted (the relay puts back any it does not
        add)."""
        self._backlog_tail = None
        wanted = list(self._heard)[:limit]
        got = sql.take_pending(ex, wanted)
        if got is None:
            return None
        out = self._in_heard_order(wanted, got)
        taken = {r.id for r in got}
        if len(out) < limit:
            out.extend(self._strays(ex, limit - len(out), taken))
        return out, taken

    def _strays(self, ex: Exec, limit: int, taken: set) -> List[Row]:
        """Waiting rows never notified, once they waited ``grace`` (looked for at most
        every ``grace / 2`` seconds)."""
        now = time.monotonic()
        if now - self._stray_check < self.grace / 2 and not self._unheard_since:
            return []
        self._stray_check = now
        ids = [i for i in sql.pending_ids(ex, limit + len(self._heard) + len(taken))
               if i not in self._heard and i not in taken]
        seen = set(ids)
        for i in list(self._unheard_since):
            if i not in seen:
                del self._unheard_since[i]
        due = []
        for i in ids:
            first = self._unheard_since.setdefault(i, now)
            if now - first >= self.grace:
                due.append(i)
        if not due:
            return []
        found = {r.id: r for r in sql.pending_by_ids(ex, due[:limit])}
        return [found[i] for i in due[:limit] if i in found]

    @property
    def waiting_unheard(self) -> bool:
        return bool(self._unheard_since)

"""The effect ledger's rows, its SQL, and running a processor once through it.

One table, the same on every database and framework (the Django model and the SQLAlchemy
table are two spellings of it):

``echomq_ledger``
    ``id``, ``prefix``, ``queue``, ``job_id``, ``job_ts`` (the job's creation time, its
    hash's ``timestamp``, epoch ms), ``job_name``, ``return_value`` (the processor's
    return value as compact JSON, as the job's ``returnvalue`` is written) and
    ``created_ms`` (when the row committed, epoch ms: what pruning reads). Unique on
    ``(prefix, queue, job_id, job_ts)``: a job whose id is used again after it was
    removed (a custom ``jobId``, deduplication) has a new ``timestamp``, so it is a new
    job and not taken for a delivery again of the old one.

:func:`run_once` is the whole rule, for any database adapter (:class:`LedgerDb`): in one
transaction, look for the job's row (unless this is the job's first pick-up ever, when
there can be none); when it is there, answer its return value without calling the
processor; else call the processor, write the row and commit both. A
processor that raises rolls its writes back with the transaction, so no row is left and
a retry runs it again. Two deliveries of one job running at once (a lock lost while the
first still ran) both find no row; the second's insert then meets the first's row (the
unique key), its transaction rolls back with its writes, and it answers the first's
return value. Called where the processor runs: the job's greenlet, a native thread
(``offload: thread``) or a child process (``offload: process``).
"""
from __future__ import annotations

import json
import time
from typing import Any, Callable, ContextManager, List, NamedTuple, Optional, Protocol, Sequence, Tuple

from ...errors import UnrecoverableError
from ...protocol.options import compact_json

__all__ = ["first_delivery", "TABLE", "UNIQUE_INDEX", "AGE_INDEX", "LedgerKey", "LedgerDb", "Exec", "key_of", "run_once",
           "select_sql", "insert_sql", "prune_sql", "prune", "now_ms", "DEFAULT_KEEP_DAYS"]

TABLE = "echomq_ledger"
UNIQUE_INDEX = "echomq_ledger_job"
AGE_INDEX = "echomq_ledger_created"
#: Days a row is kept when the settings do not say (longer than any retry window of the
#: jobs it guards: the time from a job's first attempt to its last delivery).
DEFAULT_KEEP_DAYS = 7.0
#: Rows one prune statement deletes (a prune runs statements until fewer are deleted).
PRUNE_BATCH = 1000


def now_ms() -> int:
    return int(time.time() * 1000)


class LedgerKey(NamedTuple):
    """Who a ledger row belongs to: one job, by its queue and its creation time."""

    prefix: str
    queue: str
    job_id: str
    job_ts: int

    def describe(self) -> str:
        return (f"{TABLE} row (prefix {self.prefix!r}, queue {self.queue!r}, job_id {self.job_id!r}, "
                f"job_ts {self.job_ts})")


def key_of(job: Any) -> LedgerKey:
    """The ledger key of ``job`` (a :class:`~echomq_gevent.Job`, or the job a child process
    of ``offload: process`` receives: both carry ``prefix``, ``queue_name``, ``id`` and
    ``timestamp``)."""
    ts = getattr(job, "timestamp", None)
    try:
        job_ts = int(ts) if ts is not None else 0
    except (TypeError, ValueError):
        job_ts = 0
    return LedgerKey(str(getattr(job, "prefix", None) or "bull"), str(job.queue_name), str(job.id), job_ts)


class Exec(Protocol):
    """A statement runner inside the ledger's transaction."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run ``sql``; returns the row count."""

    def fetch(self, sql: str, params: Sequence[Any] = ()) -> List[Tuple[Any, ...]]:
        """Run ``sql``; returns every row."""


class LedgerDb(Protocol):
    """One framework's database as the ledger uses it."""

    #: what errors name: ``Django database 'default'``, ``SQLAlchemy engine ...``
    label: str

    def atomic(self) -> ContextManager[Exec]:
        """One transaction on the connection the processor's own writes use (committed
        on a clean exit, rolled back on an exception)."""

    def is_conflict(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the database's unique-key violation (an integrity error)."""


# --- SQL (``%s`` placeholders; each adapter runs it in its driver's style) ----------------
def select_sql() -> str:
    return (f"SELECT id, return_value FROM {TABLE} "
            f"WHERE prefix = %s AND queue = %s AND job_id = %s AND job_ts = %s")


def insert_sql() -> str:
    return (f"INSERT INTO {TABLE} (prefix, queue, job_id, job_ts, job_name, return_value, created_ms) "
            f"VALUES (%s, %s, %s, %s, %s, %s, %s)")


def prune_sql() -> str:
    """Delete at most :data:`PRUNE_BATCH` rows older than a time (PostgreSQL and SQLite
    both take the sub-select; a bounded statement keeps each transaction short)."""
    return (f"DELETE FROM {TABLE} WHERE id IN "
            f"(SELECT id FROM {TABLE} WHERE created_ms < %s ORDER BY created_ms LIMIT {PRUNE_BATCH})")


def _stored(key: LedgerKey, row: Tuple[Any, ...]) -> Any:
    """The return value a ledger row holds; ``UnrecoverableError`` naming the row when
    it is not JSON (the job fails once: no retry would read it better; the processor is
    not run again). Plain ``UnrecoverableError``, so it keeps its type across the pipe of
    ``offload: process``."""
    row_id, text = row[0], row[1]
    if isinstance(text, (bytes, bytearray, memoryview)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UnrecoverableError(f"the job's {key.describe()} (id {row_id}) holds a return value that is not "
                                 f"UTF-8 text ({exc}); the processor was not run again. Delete that row to "
                                 f"run it once more, or fix its return_value") from None
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise UnrecoverableError(f"the job's {key.describe()} (id {row_id}) holds a return value that is not JSON "
                             f"({exc}: {str(text)[:80]!r}); the processor was not run again. Delete that row "
                             f"to run it once more, or fix its return_value") from None


def first_delivery(job: Any) -> bool:
    """Whether this is the job's first pick-up ever (``attemptsStarted`` is 1): no run can
    have committed a row before, so the look-up is skipped (a round trip less per job).
    Should the count be wrong (reset by a retry that asks for it, or written by another
    producer), the unique key still refuses a second row: the run's writes roll back and
    it answers the stored value."""
    started = getattr(job, "attempts_started", None)
    return isinstance(started, int) and not isinstance(started, bool) and started == 1


def run_once(db: LedgerDb, fn: Callable[[Any], Any], job: Any) -> Any:
    """Run ``fn(job)`` once for ``job``, its database writes and the job's ledger row in
    one transaction of ``db``; returns ``fn``'s return value, or the one stored by the
    run that committed before (``fn`` is then not called).

    Raises what ``fn`` raises (the transaction rolled back: no row); ``TypeError`` or
    ``ValueError`` for a return value JSON cannot hold (rolled back too: the job would
    fail anyway when its result is written); ``UnrecoverableError`` for a stored
    value that cannot be read. Runs on the caller's greenlet or thread.
    """
    key = key_of(job)
    params = tuple(key)
    inserting = False
    try:
        with db.atomic() as ex:
            if not first_delivery(job):
                rows = ex.fetch(select_sql(), params)
                if rows:
                    return _stored(key, rows[0])
            value = fn(job)
            text = compact_json(value)
            inserting = True
            ex.execute(insert_sql(), params + (str(getattr(job, "name", "") or "")[:255], text, now_ms()))
            inserting = False
        return value
    except BaseException as exc:
        if not inserting or not db.is_conflict(exc):
            raise
    # another delivery of the job committed first while this one ran: this one's writes
    # were rolled back with its transaction; answer what the first stored
    with db.atomic() as ex:
        rows = ex.fetch(select_sql(), params)
    if not rows:  # pragma: no cover - a conflict on a row that is gone (pruned at once)
        raise UnrecoverableError(f"the job's {key.describe()} was written by another delivery and then deleted; "
                                 f"the job is failed rather than run again")
    return _stored(key, rows[0])


def prune(db: LedgerDb, keep_days: float, now: Optional[int] = None) -> int:
    """Delete the rows that committed more than ``keep_days`` days before ``now``
    (epoch ms, default now), one bounded statement a transaction; returns how many."""
    cutoff = (now_ms() if now is None else now) - int(keep_days * 86400 * 1000)
    total = 0
    while True:
        with db.atomic() as ex:
            n = ex.execute(prune_sql(), (cutoff,))
        total += max(n, 0)
        if n < PRUNE_BATCH:
            return total

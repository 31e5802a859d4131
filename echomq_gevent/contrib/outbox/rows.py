"""The outbox's rows: what one holds, the job id it carries, and every SQL statement.

A row is written in the app's own transaction by ``enqueue_on_commit`` (Django),
``enqueue_after_commit`` (Flask) or ``request.enqueue_job`` (Pyramid) once the outbox
is on; the relay (:mod:`.relay`) turns committed rows into jobs. Two tables, the same
on every database and every framework (the Django model and the SQLAlchemy table are
two spellings of them):

``echomq_outbox``
    ``id`` (ascending: the order rows are relayed in, see :mod:`.order`), ``queue``,
    ``name`` (the job name), ``data`` (JSON text), ``opts`` (JSON text, BullMQ option
    names), ``job_id`` (the id the job is added with), ``state`` (:data:`PENDING`,
    :data:`ADDED` when kept after its add, :data:`PARKED`), ``created_ms`` (epoch ms
    of the enqueue), ``attempts`` (failed tries), ``last_error`` (why it was parked,
    or the last failure), ``parked_ms``, ``added_ms``.
``echomq_outbox_lock``
    one row per relay group (``name``): the row the relays lock (``FOR UPDATE SKIP
    LOCKED``) or lease (``owner``, ``lease_until_ms``) so one relays at a time.

SQL is written with ``%s`` placeholders; each database adapter (:class:`Db`) runs it
with its driver's style. Nothing here talks to Redis.
"""
from __future__ import annotations

import json
import time
import uuid
from typing import Any, ContextManager, List, Mapping, NamedTuple, Optional, Protocol, Sequence, Tuple


__all__ = ["Row", "Db", "Exec", "PENDING", "ADDED", "PARKED", "TABLE", "LOCK_TABLE", "CHANNEL",
           "JOB_ID_PREFIX", "new_job_id", "now_ms", "insert_sql", "encode_row"]

TABLE = "echomq_outbox"
LOCK_TABLE = "echomq_outbox_lock"
#: The PostgreSQL NOTIFY channel: each insert notifies its row id, delivered at commit.
CHANNEL = "echomq_outbox"
#: The lock row of the default relay group.
LOCK_NAME = "relay"

PENDING, ADDED, PARKED = 0, 1, 2
STATE_NAMES = {PENDING: "pending", ADDED: "added", PARKED: "parked"}

#: Jobs added from the outbox without a ``jobId`` of their own get ``outbox-<32 hex>``.
JOB_ID_PREFIX = "outbox-"

COLUMNS = ("id", "queue", "name", "data", "opts", "job_id", "state", "created_ms", "attempts", "last_error",
           "parked_ms", "added_ms")


class Row(NamedTuple):
    """One row of ``echomq_outbox`` as read back (every field as stored)."""

    id: int
    queue: str
    name: str
    data: str
    opts: str
    job_id: str
    state: int
    created_ms: int
    attempts: int
    last_error: str
    parked_ms: Optional[int]
    added_ms: Optional[int]

    def as_dict(self) -> dict:
        d = self._asdict()
        d["state"] = STATE_NAMES.get(self.state, str(self.state))
        return d


class Exec(Protocol):
    """A statement runner inside one transaction (what :meth:`Db.atomic` yields)."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run ``sql``; returns the row count."""

    def fetch(self, sql: str, params: Sequence[Any] = ()) -> List[Tuple[Any, ...]]:
        """Run ``sql``; returns every row."""


class Db(Protocol):
    """The relay's own access to the outbox's database (a Django alias, an SQLAlchemy
    engine). Used from the relay's greenlet only."""

    #: ``postgresql``, ``sqlite``, ``mysql``...
    dialect: str
    #: where the table lives, for messages (``Django database 'default'``)
    label: str

    def atomic(self) -> ContextManager[Exec]:
        """One transaction: committed when the block ends, rolled back when it raises."""

    def reset(self) -> None:
        """Drop the connection after a database error (the next use opens another)."""

    def listen_connection(self) -> Any:
        """A new DB-API connection of its own (PostgreSQL LISTEN), or ``None``."""

    def close(self) -> None:
        """Release the connections."""


def now_ms() -> int:
    return int(time.time() * 1000)


def new_job_id() -> str:
    """A job id of its own for a row: random, so a restored backup, a reset sequence or
    two databases feeding one Redis never hand out an id a job already has."""
    return JOB_ID_PREFIX + uuid.uuid4().hex


def encode_row(queue: str, name: str, data_json: str, opts: Optional[Mapping[str, Any]]) -> Tuple[Any, ...]:
    """The INSERT parameters of a job (already checked by the caller): queue, name,
    data, opts, job_id, state, created_ms, attempts, last_error. A job whose options
    name a ``jobId`` keeps it."""
    clean = dict(opts or {})
    job_id = clean.get("jobId") or new_job_id()
    return (queue, name, data_json, json.dumps(clean, separators=(",", ":"), sort_keys=True), str(job_id),
            PENDING, now_ms(), 0, "")


_INSERT = (f"INSERT INTO {TABLE} (queue, name, data, opts, job_id, state, created_ms, attempts, last_error) "
           f"VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)")
#: PostgreSQL (``order: "commit"``, the default): the insert and its NOTIFY in one round
#: trip (the notification goes out at commit, in commit order, and not at all on a rollback).
_INSERT_NOTIFY = (f"WITH row AS ({_INSERT} RETURNING id) SELECT pg_notify('{CHANNEL}', row.id::text) FROM row")


def insert_sql(dialect: str, notify: bool = True) -> str:
    """The statement that writes one row in the app's transaction; on PostgreSQL with
    its ``pg_notify`` unless ``notify`` is false (the outbox's ``order: "id"``)."""
    return _INSERT_NOTIFY if dialect == "postgresql" and notify else _INSERT


# --- the relay's statements ----------------------------------------------------------------------
_SELECT = f"SELECT {', '.join(COLUMNS)} FROM {TABLE}"


def pending(ex: Exec, limit: int, max_id: Optional[int] = None) -> List[Row]:
    """Waiting rows in id order (up to ``limit``; with ``max_id`` only those at or below)."""
    if max_id is None:
        rows = ex.fetch(f"{_SELECT} WHERE state = %s ORDER BY id LIMIT %s", (PENDING, limit))
    else:
        rows = ex.fetch(f"{_SELECT} WHERE state = %s AND id <= %s ORDER BY id LIMIT %s", (PENDING, max_id, limit))
    return [Row(*r) for r in rows]


def pending_by_ids(ex: Exec, ids: Sequence[int]) -> List[Row]:
    """PostgreSQL: the waiting rows among ``ids`` (any order). The ids go as one array
    parameter, so the statement's text is the same whatever their number (a driver that
    prepares repeated statements, psycopg 3, prepares it once)."""
    if not ids:
        return []
    return [Row(*r) for r in ex.fetch(f"{_SELECT} WHERE state = %s AND id = ANY(%s::bigint[])", (PENDING, list(ids)))]


def _lock_and_delete(ex: Exec, which: str, params: Sequence[Any], name: str) -> Optional[List[Row]]:
    """PostgreSQL, one statement: lock the group's row (``FOR UPDATE SKIP LOCKED``) and,
    when this transaction got it, delete the waiting rows ``which`` (a condition on the
    table, its placeholders' values in ``params``) and return them (any order). ``None``
    when another relay holds the lock (nothing deleted). The deletes are undone by a
    rollback like any other; a row the pass then does not add is put back with
    :func:`restore` in the same transaction."""
    found = ex.fetch(
        f"WITH lock AS (SELECT name FROM {LOCK_TABLE} WHERE name = %s FOR UPDATE SKIP LOCKED), "
        f"taken AS (DELETE FROM {TABLE} WHERE {which} AND EXISTS (SELECT 1 FROM lock) "
        f"RETURNING {', '.join(COLUMNS)}) "
        f"SELECT (SELECT COUNT(*) FROM lock), taken.* FROM (SELECT 1) AS one LEFT JOIN taken ON true",
        (name, *params))
    if not found or not found[0][0]:
        return None
    return [Row(*r[1:]) for r in found if r[1] is not None]


def take_pending(ex: Exec, ids: Sequence[int], name: str = LOCK_NAME) -> Optional[List[Row]]:
    """The waiting rows among ``ids``, locked and deleted in one statement
    (:func:`_lock_and_delete`; any order)."""
    return _lock_and_delete(ex, "state = %s AND id = ANY(%s::bigint[])", (PENDING, list(ids)), name)


def take_first(ex: Exec, limit: int, name: str = LOCK_NAME) -> Optional[List[Row]]:
    """The first ``limit`` waiting rows by id, locked and deleted in one statement
    (:func:`_lock_and_delete`), in id order (the outbox's ``order: "id"``)."""
    got = _lock_and_delete(ex, f"id IN (SELECT id FROM {TABLE} WHERE state = %s ORDER BY id LIMIT %s)",
                           (PENDING, limit), name)
    return None if got is None else sorted(got, key=lambda r: r.id)


def restore(ex: Exec, row: Row) -> None:
    """Put back a row :func:`take_pending` or :func:`take_first` deleted in this
    transaction, as it was."""
    marks = ", ".join(["%s"] * len(COLUMNS))
    ex.execute(f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) VALUES ({marks})", tuple(row))


def pending_ids(ex: Exec, limit: int) -> List[int]:
    return [int(r[0]) for r in ex.fetch(f"SELECT id FROM {TABLE} WHERE state = %s ORDER BY id LIMIT %s",
                                        (PENDING, limit))]


def max_pending_id(ex: Exec) -> Optional[int]:
    found = ex.fetch(f"SELECT MAX(id) FROM {TABLE} WHERE state = %s", (PENDING,))
    return int(found[0][0]) if found and found[0][0] is not None else None


def mark_added(ex: Exec, ids: Sequence[int], keep: bool, dialect: str = "") -> None:
    """Rows whose jobs are in Redis: deleted, or kept as :data:`ADDED` (``keep_days``).
    On PostgreSQL one statement whose ids are an array parameter (the same text each
    pass); elsewhere ``IN`` lists of up to 500."""
    if dialect == "postgresql" and ids:
        if keep:
            ex.execute(f"UPDATE {TABLE} SET state = %s, added_ms = %s WHERE id = ANY(%s::bigint[])",
                       (ADDED, now_ms(), list(ids)))
        else:
            ex.execute(f"DELETE FROM {TABLE} WHERE id = ANY(%s::bigint[])", (list(ids),))
        return
    for chunk in _chunks(ids):
        marks = ", ".join(["%s"] * len(chunk))
        if keep:
            ex.execute(f"UPDATE {TABLE} SET state = %s, added_ms = %s WHERE id IN ({marks})",
                       (ADDED, now_ms(), *chunk))
        else:
            ex.execute(f"DELETE FROM {TABLE} WHERE id IN ({marks})", tuple(chunk))


def park(ex: Exec, row_id: int, reason: str) -> None:
    ex.execute(f"UPDATE {TABLE} SET state = %s, parked_ms = %s, last_error = %s, attempts = attempts + 1 "
               f"WHERE id = %s", (PARKED, now_ms(), reason[:4000], row_id))


def count_failure(ex: Exec, row_id: int, reason: str) -> None:
    ex.execute(f"UPDATE {TABLE} SET attempts = attempts + 1, last_error = %s WHERE id = %s",
               (reason[:4000], row_id))


def purge_added(ex: Exec, keep_days: float) -> int:
    """Delete kept rows older than ``keep_days``; returns how many."""
    cutoff = now_ms() - int(keep_days * 86400000)
    return ex.execute(f"DELETE FROM {TABLE} WHERE state = %s AND added_ms < %s", (ADDED, cutoff))


def stats(ex: Exec) -> Tuple[int, Optional[int], int]:
    """``(waiting rows, created_ms of the oldest waiting row or None, parked rows)``."""
    waiting, oldest, parked = 0, None, 0
    for state, count, first in ex.fetch(f"SELECT state, COUNT(*), MIN(created_ms) FROM {TABLE} "
                                        f"WHERE state IN (%s, %s) GROUP BY state", (PENDING, PARKED)):
        if int(state) == PENDING:
            waiting, oldest = int(count), (int(first) if first is not None else None)
        else:
            parked = int(count)
    return waiting, oldest, parked


def parked_rows(ex: Exec, limit: int = 1000) -> List[Row]:
    return [Row(*r) for r in ex.fetch(f"{_SELECT} WHERE state = %s ORDER BY id LIMIT %s", (PARKED, limit))]


def retry_parked(ex: Exec, ids: Optional[Sequence[int]] = None) -> int:
    """Put parked rows (all, or ``ids``) back to waiting with their tries reset."""
    if ids is None:
        return ex.execute(f"UPDATE {TABLE} SET state = %s, attempts = 0, parked_ms = NULL WHERE state = %s",
                          (PENDING, PARKED))
    total = 0
    for chunk in _chunks(ids):
        marks = ", ".join(["%s"] * len(chunk))
        total += ex.execute(f"UPDATE {TABLE} SET state = %s, attempts = 0, parked_ms = NULL "
                            f"WHERE state = %s AND id IN ({marks})", (PENDING, PARKED, *chunk))
    return total


def delete_parked(ex: Exec, ids: Sequence[int]) -> int:
    total = 0
    for chunk in _chunks(ids):
        marks = ", ".join(["%s"] * len(chunk))
        total += ex.execute(f"DELETE FROM {TABLE} WHERE state = %s AND id IN ({marks})", (PARKED, *chunk))
    return total


# --- the lock row ----------------------------------------------------------------------------------
def ensure_lock_row(ex: Exec, name: str = LOCK_NAME) -> None:
    """Create the relay group's lock row when missing (a race with another relay ends in
    a duplicate-key error, which the caller treats as done)."""
    if not ex.fetch(f"SELECT name FROM {LOCK_TABLE} WHERE name = %s", (name,)):
        ex.execute(f"INSERT INTO {LOCK_TABLE} (name, owner, lease_until_ms) VALUES (%s, %s, %s)", (name, "", 0))


def lock_skip_locked(ex: Exec, name: str = LOCK_NAME) -> bool:
    """Lock the group's row for this transaction; False when another relay holds it."""
    return bool(ex.fetch(f"SELECT name FROM {LOCK_TABLE} WHERE name = %s FOR UPDATE SKIP LOCKED", (name,)))


def take_lease(ex: Exec, owner: str, lease_ms: int, name: str = LOCK_NAME) -> bool:
    """Take or renew the group's lease for ``owner``; False while another holds it."""
    now = now_ms()
    return ex.execute(f"UPDATE {LOCK_TABLE} SET owner = %s, lease_until_ms = %s "
                      f"WHERE name = %s AND (owner = %s OR lease_until_ms < %s)",
                      (owner, now + lease_ms, name, owner, now)) == 1


def release_lease(ex: Exec, owner: str, name: str = LOCK_NAME) -> None:
    ex.execute(f"UPDATE {LOCK_TABLE} SET owner = %s, lease_until_ms = %s WHERE name = %s AND owner = %s",
               ("", 0, name, owner))


def lease_holder(ex: Exec, name: str = LOCK_NAME) -> Tuple[str, int]:
    found = ex.fetch(f"SELECT owner, lease_until_ms FROM {LOCK_TABLE} WHERE name = %s", (name,))
    return (str(found[0][0] or ""), int(found[0][1] or 0)) if found else ("", 0)


def _chunks(ids: Sequence[int], size: int = 500) -> List[Sequence[int]]:
    return [ids[i:i + size] for i in range(0, len(ids), size)]

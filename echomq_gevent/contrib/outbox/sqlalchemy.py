"""The outbox for SQLAlchemy apps (Flask-SQLAlchemy, Pyramid with ``pyramid_tm`` and
zope.sqlalchemy): the tables, the row written in a session's transaction, and the
relay's database access through an ``Engine``.

Create the tables with the app's own tools::

    from echomq_gevent.contrib.outbox.sqlalchemy import metadata as outbox_metadata
    outbox_metadata.create_all(engine)              # or db.create_all() + this line

    # Alembic (env.py): migrations then carry the two tables
    target_metadata = [Base.metadata, outbox_metadata]

``metadata.create_all`` also writes the relay group's lock row (the relay writes it too
when it is missing). :func:`write_row` runs on the caller's greenlet or thread inside the
session's transaction (SQLAlchemy begins one if none is open); a rollback takes the row
with it, a rolled-back ``begin_nested()`` savepoint only the rows written inside it.
On PostgreSQL both drivers work, and the relay listens with either: ``postgresql://``
and ``postgresql+psycopg2://`` (psycopg2), ``postgresql+psycopg://`` (psycopg 3).
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, List, Sequence, Tuple

from sqlalchemy import BigInteger, Column, Index, Integer, MetaData, SmallInteger, String, Table, Text, event

from . import rows as sql
from .drivers import cooperative_psycopg

__all__ = ["metadata", "outbox_table", "lock_table", "write_row", "SqlAlchemyDb", "session_of", "ConnExec",
           "driver_sql"]

metadata = MetaData()

#: ``echomq_outbox`` (see :mod:`.rows` for the columns). On SQLite the id is the rowid
#: with AUTOINCREMENT, so an id is never handed out twice.
outbox_table = Table(
    sql.TABLE, metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("queue", String(255), nullable=False),
    Column("name", String(255), nullable=False),
    Column("data", Text, nullable=False),
    Column("opts", Text, nullable=False),
    Column("job_id", String(255), nullable=False),
    Column("state", SmallInteger, nullable=False, default=0),
    Column("created_ms", BigInteger, nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("last_error", Text, nullable=False, default=""),
    Column("parked_ms", BigInteger, nullable=True),
    Column("added_ms", BigInteger, nullable=True),
    Index("echomq_outbox_state_id", "state", "id"),
    sqlite_autoincrement=True,
)

#: ``echomq_outbox_lock``: one row per relay group.
lock_table = Table(
    sql.LOCK_TABLE, metadata,
    Column("name", String(64), primary_key=True),
    Column("owner", String(255), nullable=False, default=""),
    Column("lease_until_ms", BigInteger, nullable=False, default=0),
)


@event.listens_for(lock_table, "after_create")
def _lock_row(target: Any, connection: Any, **kw: Any) -> None:
    connection.execute(lock_table.insert().values(name=sql.LOCK_NAME, owner="", lease_until_ms=0))


def driver_sql(dialect: Any, statement: str) -> str:
    """``%s`` placeholders in the driver's own style (``exec_driver_sql``)."""
    if dialect.paramstyle == "qmark":
        return statement.replace("%s", "?")
    if dialect.paramstyle == "numeric":
        parts = statement.split("%s")
        return "".join(p + (f":{i + 1}" if i < len(parts) - 1 else "") for i, p in enumerate(parts))
    return statement


def session_of(session: Any) -> Any:
    """The real session of a ``scoped_session`` (Flask-SQLAlchemy's ``db.session``)."""
    return session.registry() if hasattr(session, "registry") else session


def write_row(session: Any, params: Sequence[Any], notify: bool = True) -> Any:
    """Insert one outbox row in ``session``'s transaction (its connection for the outbox
    table's bind); returns the real session. A session that zope.sqlalchemy joins to a
    ``transaction`` manager must then be marked changed by the caller
    (``zope.sqlalchemy.mark_changed``): a raw insert alone leaves it read-only, and the
    manager would roll it back. ``notify``: false writes the row without its
    ``pg_notify`` (the outbox's ``order: "id"``)."""
    real = session_of(session)
    conn = real.connection(bind_arguments={"clause": outbox_table.select()})
    conn.exec_driver_sql(driver_sql(conn.dialect, sql.insert_sql(conn.dialect.name, notify)), tuple(params))
    return real


class ConnExec:
    """A SQLAlchemy ``Connection`` as the outbox and the ledger run ``%s`` statements on it."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def execute(self, statement: str, params: Sequence[Any] = ()) -> int:
        return self.conn.exec_driver_sql(driver_sql(self.conn.dialect, statement), tuple(params)).rowcount

    def fetch(self, statement: str, params: Sequence[Any] = ()) -> List[Tuple[Any, ...]]:
        res = self.conn.exec_driver_sql(driver_sql(self.conn.dialect, statement), tuple(params))
        return [tuple(r) for r in res.fetchall()]


class SqlAlchemyDb:
    """An ``Engine`` as the relay uses it (a pooled connection per transaction)."""

    def __init__(self, engine: Any, label: str = "") -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self.label = label or f"SQLAlchemy engine {engine.url.render_as_string(hide_password=True)}"
        if self.dialect == "postgresql":
            cooperative_psycopg()  # the relay's queries must not block the hub (see .drivers)

    @contextlib.contextmanager
    def atomic(self) -> Iterator[ConnExec]:
        with self.engine.begin() as conn:
            yield ConnExec(conn)

    def reset(self) -> None:
        pass  # a failed connection is invalidated by the pool

    def listen_connection(self) -> Any:
        """A DB-API connection of its own, taken out of the pool for good."""
        raw = self.engine.raw_connection()
        driver = getattr(raw, "driver_connection", None) or raw.connection
        raw.detach()
        return driver

    def close(self) -> None:
        pass  # the engine's pool is the app's

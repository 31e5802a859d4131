"""The effect ledger for SQLAlchemy apps (Flask with Flask-SQLAlchemy or a
``scoped_session`` of its own): the table, and a processor run once in the transaction of
the session it writes with.

Create the table with the app's own tools, as the outbox's::

    from echomq_gevent.contrib.ledger.sqlalchemy import metadata as ledger_metadata
    ledger_metadata.create_all(engine)             # or in Alembic: target_metadata = [..., ledger_metadata]

A processor marked atomic (``@echomq.processor(queue, name, atomic=True)``) runs inside
``session.begin()`` of the session the app's jobs use; the job's ledger row is written on
that session's connection before the commit, so the processor's ORM writes (flushed at
the commit) and the row commit together. The processor must leave the commit to the
ledger: a ``session.commit()`` inside it is refused (the attempt fails, nothing is
committed). The session must have no transaction open when the job starts (a new app
context's session has none).
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Optional

from sqlalchemy import BigInteger, Column, Index, Integer, MetaData, String, Table, Text, UniqueConstraint, event

from ...errors import ConfigError
from ..outbox.sqlalchemy import ConnExec, session_of
from .core import AGE_INDEX, TABLE, UNIQUE_INDEX, run_once

__all__ = ["metadata", "ledger_table", "SessionLedgerDb", "SessionAtomicProcessor", "LedgerCommitRefused",
           "check_table"]

metadata = MetaData()

#: ``echomq_ledger`` (see :mod:`.core` for the columns).
ledger_table = Table(
    TABLE, metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("prefix", String(255), nullable=False),
    Column("queue", String(255), nullable=False),
    Column("job_id", String(255), nullable=False),
    Column("job_ts", BigInteger, nullable=False),
    Column("job_name", String(255), nullable=False, default=""),
    Column("return_value", Text, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    UniqueConstraint("prefix", "queue", "job_id", "job_ts", name=UNIQUE_INDEX),
    Index(AGE_INDEX, "created_ms"),
    sqlite_autoincrement=True,
)

_GUARD = "echomq_gevent.ledger.guard"


class LedgerCommitRefused(RuntimeError):
    """An atomic processor called ``commit()`` on the ledger's session."""


def _refuse_commit(session: Any) -> None:
    if session.info.get(_GUARD):
        raise LedgerCommitRefused(
            "a processor marked atomic called commit() on its session: the ledger commits the processor's writes "
            "together with the job's ledger row; leave the commit to it (flush() is fine)")


class SessionLedgerDb:
    """The session a processor writes with, as the ledger uses it: ``atomic()`` is its
    ``begin()``; a commit inside is refused until the ledger's own at the end."""

    def __init__(self, session: Any, label: str = "the SQLAlchemy session") -> None:
        self.session = session_of(session)
        self.label = label

    @contextlib.contextmanager
    def atomic(self) -> Iterator[ConnExec]:
        real = self.session
        if real.in_transaction():
            raise RuntimeError(f"{self.label} already has a transaction open when the job starts; a processor "
                               f"marked atomic needs the ledger to begin and commit it")
        if not event.contains(real, "before_commit", _refuse_commit):
            event.listen(real, "before_commit", _refuse_commit)
        with real.begin():
            real.info[_GUARD] = True
            try:
                yield ConnExec(real.connection(bind_arguments={"clause": ledger_table.select()}))
            finally:
                real.info.pop(_GUARD, None)

    def is_conflict(self, exc: BaseException) -> bool:
        from sqlalchemy.exc import IntegrityError

        return isinstance(exc, IntegrityError)


def check_table(session: Any, what: str, setting: str) -> None:
    """ConfigError naming ``what`` (the processor) and ``setting`` (where its session comes
    from) when the database of ``session`` has no ledger table."""
    try:
        with session_of(session).get_bind(clause=ledger_table.select()).connect() as conn:
            conn.execute(ledger_table.select().where(ledger_table.c.id < 0))
    except Exception as exc:
        raise ConfigError(f"{what} is marked atomic, but the database of {setting} has no {TABLE} table "
                          f"({type(exc).__name__}: {exc}); create it as the app's other tables: "
                          f"echomq_gevent.contrib.ledger.sqlalchemy.metadata.create_all(engine), or through "
                          f"Alembic") from None


class SessionAtomicProcessor:
    """A processor whose session writes and ledger row commit together. ``session`` is
    called per job (where the processor runs, inside ``context()``) for the session the
    processor writes with; ``setting`` names where that session comes from (errors);
    ``context`` (optional) is what each run and the start check are entered in (Flask: the
    app context, pushed where the job's greenlet has not: a native thread of ``offload:
    thread``, a child of ``offload: process``)."""

    #: what :meth:`~echomq_gevent.contrib.frameworks.Processors.atomic_routes` looks for
    echomq_ledgered = True

    def __init__(self, fn: Callable[[Any], Any], session: Callable[[], Any], setting: str,
                 context: Optional[Callable[[], Any]] = None) -> None:
        import functools

        functools.update_wrapper(self, fn)
        self.fn = fn
        #: ``module.qualified.name`` of the function (what errors and logs name)
        self.name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}"
        self.session = session
        self.setting = setting
        #: what each run and the start check are entered in (Flask: an app context), or None
        self.context = context

    def __call__(self, job: Any) -> Any:
        with (self.context() if self.context is not None else contextlib.nullcontext()):
            return run_once(SessionLedgerDb(self.session(), self.setting), self.fn, job)

    def __repr__(self) -> str:
        return f"<atomic processor {self.name}>"

    def check(self) -> None:
        """At start: ConfigError naming the processor and the setting when there is no
        session to write with, or its database has no ``echomq_ledger`` table."""
        what = f"the processor {self.name}"
        with (self.context() if self.context is not None else contextlib.nullcontext()):
            try:
                real = session_of(self.session())
            except Exception as exc:
                raise ConfigError(f"{what} is marked atomic, but it has no SQLAlchemy session to write with "
                                  f"({self.setting}): {exc}") from None
            try:
                check_table(real, what, self.setting)
            finally:
                try:
                    real.close()
                except Exception:  # pragma: no cover - best effort
                    pass

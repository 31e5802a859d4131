"""The Django side of the outbox: the row written in the caller's transaction, and the
relay's database access through Django's connections.

:func:`write_row` runs on the caller's greenlet or thread, in whatever transaction its
connection of database ``using`` is in (an ``atomic`` block, or autocommit); a rollback,
or a savepoint rolled back, takes the row with it. :class:`DjangoDb` is the relay's
:class:`~echomq_gevent.contrib.outbox.rows.Db`: under gevent Django keeps one connection
per greenlet, so the relay's greenlet has its own. Django runs on psycopg 3 when it is
installed, else on psycopg2; the outbox's statements and its ``LISTEN`` work on both.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, List, Sequence, Tuple

from ..outbox import rows as sql
from ..outbox.drivers import cooperative_psycopg

__all__ = ["DjangoDb", "CursorExec", "write_row"]


def write_row(using: str, params: Sequence[Any], notify: bool = True) -> None:
    """Insert one outbox row on database ``using``'s connection (this greenlet's);
    ``notify``: false leaves out PostgreSQL's ``pg_notify`` (``order: "id"``)."""
    from django.db import connections

    conn = connections[using]
    with conn.cursor() as cur:
        cur.execute(sql.insert_sql(conn.vendor, notify), list(params))


class CursorExec:
    """A DB-API cursor as the outbox and the ledger run statements on it."""

    def __init__(self, cursor: Any) -> None:
        self.cursor = cursor

    def execute(self, statement: str, params: Sequence[Any] = ()) -> int:
        self.cursor.execute(statement, list(params))
        return self.cursor.rowcount

    def fetch(self, statement: str, params: Sequence[Any] = ()) -> List[Tuple[Any, ...]]:
        self.cursor.execute(statement, list(params))
        return [tuple(r) for r in self.cursor.fetchall()]


class DjangoDb:
    """Database ``alias`` as the relay uses it (the current greenlet's connection)."""

    def __init__(self, alias: str = "default") -> None:
        from django.db import connections

        self.alias = alias
        self.dialect = connections[alias].vendor
        self.label = f"Django database {alias!r}"
        cooperative_psycopg()  # the relay's queries must not block the hub (see .drivers)

    @contextlib.contextmanager
    def atomic(self) -> Iterator[CursorExec]:
        from django.db import connections, transaction

        with transaction.atomic(using=self.alias):
            with connections[self.alias].cursor() as cur:
                yield CursorExec(cur)

    def reset(self) -> None:
        from django.db import connections

        conn = connections[self.alias]
        try:
            if conn.in_atomic_block:
                return  # inside an atomic block the block's own exit cleans up
            conn.close()
        except Exception:
            pass

    def listen_connection(self) -> Any:
        """A new DB-API connection with the alias's settings, outside Django's handling."""
        from django.db import connections

        return new_connection(connections[self.alias])

    def close(self) -> None:
        from django.db import connections

        try:
            connections[self.alias].close()
        except Exception:
            pass


def new_connection(wrapper: Any) -> Any:
    """A DB-API connection of its own for Django's connection ``wrapper``. With Django's
    connection pool (``OPTIONS['pool']``, psycopg 3, Django 5.1+) it is opened beside the
    pool: one taken from it would hold a pooled connection for as long as the relay runs."""
    params = wrapper.get_connection_params()
    if getattr(wrapper, "settings_dict", {}).get("OPTIONS", {}).get("pool"):
        return wrapper.Database.connect(**params)
    return wrapper.get_new_connection(params)

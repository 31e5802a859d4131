"""PostgreSQL ``LISTEN`` for the relay: wake-ups across processes, and the commit order.

Every outbox insert on PostgreSQL runs ``pg_notify('echomq_outbox', <row id>)`` in the
app's transaction; PostgreSQL sends it when (and only if) the transaction commits, in
commit order. :class:`Listener` holds a connection of its own in autocommit, listening
on that channel; the relay waits on its socket with gevent's ``select`` (the wait
yields to the hub whether or not the process is monkey-patched) and reads the ids
without waiting. Drivers: psycopg2 and psycopg 3 (:mod:`.drivers` reads each). With
another driver :func:`supported` is False and the relay polls instead.
"""
from __future__ import annotations

from typing import Any, Callable, List

from gevent import select as gselect

from .drivers import PSYCOPG, NotifyReader, cooperative_psycopg, driver_of
from .rows import CHANNEL

__all__ = ["Listener", "supported"]


def supported(conn: Any) -> bool:
    """True for a psycopg2 or psycopg 3 connection (the drivers whose notifications
    :mod:`.drivers` reads)."""
    return driver_of(conn) is not None


class Listener:
    """One listening connection, made by ``connect()`` (a new DB-API connection).

    Used by the relay's greenlets only. :meth:`wait` and :meth:`drain` raise the
    driver's error when the connection is lost; the relay then closes it and opens
    another (and treats what waits then as backlog, see :class:`~.order.CommitOrder`).
    """

    def __init__(self, connect: Callable[[], Any]) -> None:
        self._connect = connect
        self.conn: Any = None
        self._reader: Any = None

    def open(self) -> None:
        conn = self._connect()
        driver = driver_of(conn)
        if driver is None:
            try:
                conn.close()
            except Exception:
                pass
            raise NotImplementedError(f"LISTEN needs a psycopg2 or psycopg 3 connection, got "
                                      f"{type(conn).__module__}")
        if driver == PSYCOPG:
            cooperative_psycopg()
        try:
            reader = NotifyReader(conn)
            conn.rollback()  # a connection handed over inside a transaction cannot switch to autocommit
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(f"LISTEN {CHANNEL}")
        except BaseException:
            try:
                conn.close()
            except Exception:
                pass
            raise
        self.conn, self._reader = conn, reader

    @property
    def is_open(self) -> bool:
        return self.conn is not None and not self.conn.closed

    def drain(self) -> List[int]:
        """The row ids notified since the last call (in commit order), without waiting."""
        ids: List[int] = []
        for channel, payload in self._reader.read():
            if channel != CHANNEL:
                continue
            try:
                ids.append(int(payload))
            except ValueError:
                continue  # not ours: a NOTIFY by hand on the channel
        return ids

    def wait(self, timeout: float) -> List[int]:
        """Wait up to ``timeout`` s for a notification; the ids read (maybe none)."""
        ready, _, _ = gselect.select([self.conn], [], [], timeout)
        return self.drain() if ready else []

    def close(self) -> None:
        conn, self.conn, self._reader = self.conn, None, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

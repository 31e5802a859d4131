"""PostgreSQL ``LISTEN`` for the relay: wake-ups across processes, and the commit order.

Every outbox insert on PostgreSQL runs ``pg_notify('echomq_outbox', <row id>)`` in the
app's transaction; PostgreSQL sends it when (and only if) the transaction commits, in
commit order. :class:`Listener` holds a connection of its own in autocommit, listening
on that channel; the relay waits on its socket with gevent's ``select`` (the wait
yields to the hub whether or not the process is monkey-patched) and reads the ids. Driver: psycopg2 (``conn.poll()`` / ``conn.notifies``).
With another driver :func:`supported` is False and the relay polls instead.
"""
from __future__ import annotations

from typing import Any, Callable, List

from gevent import select as gselect

from .rows import CHANNEL

__all__ = ["Listener", "supported"]


def supported(conn: Any) -> bool:
    """True for a psycopg2 connection (the LISTEN code below reads its notifies)."""
    return type(conn).__module__.startswith("psycopg2") and hasattr(conn, "notifies")


class Listener:
    """One listening connection, made by ``connect()`` (a new DB-API connection).

    Used by the relay's greenlets only. :meth:`wait` and :meth:`drain` raise the
    driver's error when the connection is lost; the relay then closes it and opens
    another (and treats what waits then as backlog, see :class:`~.order.CommitOrder`).
    """

    def __init__(self, connect: Callable[[], Any]) -> None:
        self._connect = connect
        self.conn: Any = None

    def open(self) -> None:
        conn = self._connect()
        if not supported(conn):
            conn.close()
            raise NotImplementedError(f"LISTEN needs a psycopg2 connection, got {type(conn).__module__}")
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f"LISTEN {CHANNEL}")
        self.conn = conn

    @property
    def is_open(self) -> bool:
        return self.conn is not None and not self.conn.closed

    def drain(self) -> List[int]:
        """The row ids notified since the last call (in commit order), without waiting."""
        self.conn.poll()
        ids: List[int] = []
        while self.conn.notifies:
            n = self.conn.notifies.pop(0)
            if n.channel != CHANNEL:
                continue
            try:
                ids.append(int(n.payload))
            except ValueError:
                continue  # not ours: a NOTIFY by hand on the channel
        return ids

    def wait(self, timeout: float) -> List[int]:
        """Wait up to ``timeout`` s for a notification; the ids read (maybe none)."""
        ready, _, _ = gselect.select([self.conn], [], [], timeout)
        return self.drain() if ready else []

    def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

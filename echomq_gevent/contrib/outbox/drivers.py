"""The PostgreSQL drivers the outbox listens with: psycopg2 and psycopg 3.

Each insert's ``pg_notify`` is sent in the app's transaction by whichever driver the app
uses; only the relay's listening connection reads notifications, and it reads them
without waiting (the relay waits on the socket with gevent's ``select``). This module
tells the two drivers apart and reads what a connection has received:

* **psycopg2**: ``conn.poll()`` reads the socket, ``conn.notifies`` holds the list.
* **psycopg 3**: ``conn.pgconn.consume_input()`` reads the socket (libpq's socket is
  non-blocking, so neither call waits) and ``conn.pgconn.notifies()`` hands out what
  libpq parsed; a notify handler (``add_notify_handler``) collects the notifications
  psycopg itself read while it ran a statement on the connection (the ``LISTEN``). Both
  calls exist from psycopg 3.0 on; ``notifies(timeout=...)`` (3.2) is not used, as it
  waits through psycopg's wait function, not through gevent's ``select``.

psycopg 3 and gevent: psycopg picks its wait function (the C ``wait_c`` of the binary
package, or one built on ``select.poll``) once, when ``psycopg.waiting`` is imported;
from 3.1.14 on it avoids ``wait_c`` when gevent has already patched ``select``. A
process that imported psycopg before gevent patched it (a gunicorn app preloaded by the
master, a module importing Django's backend before ``patch_all()``) keeps ``wait_c``,
which blocks the hub for as long as each query runs. :func:`cooperative_psycopg`
notices that and switches psycopg to its own ``select.poll`` wait, which gevent has
patched, logging once why. psycopg2 has no such switch: it needs a wait callback
(``psycogreen``) to yield to the hub at all.
"""
from __future__ import annotations

import collections
import logging
import os
import sys
from typing import Any, Deque, List, Optional, Tuple

__all__ = ["driver_of", "NotifyReader", "cooperative_psycopg"]

log = logging.getLogger("echomq_gevent.outbox")

PSYCOPG2, PSYCOPG = "psycopg2", "psycopg"


def driver_of(conn: Any) -> Optional[str]:
    """``"psycopg2"``, ``"psycopg"`` (psycopg 3) or ``None`` for another DB-API connection."""
    module = type(conn).__module__ or ""
    root = module.split(".")[0]
    if root == PSYCOPG2 and hasattr(conn, "poll") and hasattr(conn, "notifies"):
        return PSYCOPG2
    if root == PSYCOPG and hasattr(conn, "pgconn") and hasattr(conn, "add_notify_handler"):
        return PSYCOPG
    return None


class NotifyReader:
    """The ``(channel, payload)`` pairs a listening connection received, read without
    waiting. Made right after the connection is opened, before its ``LISTEN``."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.driver = driver_of(conn)
        if self.driver is None:
            raise NotImplementedError(f"LISTEN needs a psycopg2 or psycopg 3 connection, got "
                                      f"{type(conn).__module__}.{type(conn).__name__}")
        self._heard: Deque[Tuple[str, str]] = collections.deque()
        if self.driver == PSYCOPG:
            conn.add_notify_handler(self._handled)

    def _handled(self, notify: Any) -> None:
        self._heard.append((notify.channel, notify.payload))

    def read(self) -> List[Tuple[str, str]]:
        """What arrived since the last call, in the order PostgreSQL sent it. Raises the
        driver's error when the connection is lost."""
        if self.driver == PSYCOPG2:
            self.conn.poll()
            out = []
            while self.conn.notifies:
                n = self.conn.notifies.pop(0)
                out.append((n.channel, n.payload))
            return out
        pgconn = self.conn.pgconn
        pgconn.consume_input()
        encoding = self.conn.info.encoding
        while True:
            n = pgconn.notifies()
            if n is None:
                break
            self._heard.append((n.relname.decode(encoding, "replace"), n.extra.decode(encoding, "replace")))
        out = list(self._heard)
        self._heard.clear()
        return out


_switched = False


def cooperative_psycopg() -> bool:
    """In a process gevent has patched, make sure psycopg 3 waits through the patched
    ``select.poll`` rather than its C wait (see the module's notes). True when it
    switched psycopg's wait now; False when there was nothing to do (psycopg not
    imported yet: it will choose well when it is; gevent has not patched ``select``;
    psycopg already waits cooperatively; ``PSYCOPG_WAIT_FUNC`` names the user's own
    choice)."""
    global _switched
    waiting = sys.modules.get("psycopg.waiting")
    monkey = sys.modules.get("gevent.monkey")
    if waiting is None or monkey is None or os.environ.get("PSYCOPG_WAIT_FUNC"):
        return False
    try:
        if not monkey.is_module_patched("select"):
            return False
    except Exception:
        return False
    wait_c = getattr(waiting, "wait_c", None)
    if wait_c is None or getattr(waiting, "wait", None) is not wait_c:
        return False
    import select

    fallback = getattr(waiting, "wait_poll", None) if hasattr(select, "poll") else None
    fallback = fallback or getattr(waiting, "wait_select", None)
    if fallback is None:
        return False
    waiting.wait = fallback
    # connecting waits on a selector psycopg imported by name: gevent's, if it has patched it
    import selectors

    try:
        if monkey.is_module_patched("selectors") and hasattr(waiting, "DefaultSelector"):
            waiting.DefaultSelector = selectors.DefaultSelector
    except Exception:
        pass
    if not _switched:
        _switched = True
        log.warning("psycopg was imported before gevent patched this process, so its C wait would block the "
                    "hub during every query; switched it to %s. Patch gevent before anything imports psycopg "
                    "(from gevent import monkey; monkey.patch_all() first) to avoid this.", fallback.__name__)
    return True

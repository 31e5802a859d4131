"""One connection of a client's pool kept checked out for script calls.

A command through ``redis.Redis`` checks a connection out of the pool, polls its socket
for readiness, sends, reads and checks it back in. For the EVALSHAs the worker and
``Queue.add`` run per job that bookkeeping costs about as much as the round trip to a
local Redis, so :class:`~echomq_gevent.protocol.scripts.Scripts` keeps one connection of its
client's pool checked out between its own calls and talks on it directly
(:class:`KeptConnection`). It sends the same bytes and reads the same answers (or
errors) as the client would; everything else goes through the pool as usual.

This module and :mod:`.pipelined_wire` (which also reads ``Connection._parser.parse_error``
and ``Connection.encoder`` to build its hiredis reader) are the ones that touch redis-py
below its public client API. What this one relies on, all present from redis-py 4.5 (the lowest the package allows) to the newest release,
is named once in :class:`_RedisPy`:

* ``ConnectionPool.get_connection`` (its ``command_name`` argument is required before
  5.3 and deprecated after), ``ConnectionPool.release``, and the pool attributes
  ``connection_kwargs``, ``max_connections`` and ``cache`` (client-side caching, 5.1+);
* ``Connection.connect``, ``Connection.check_health``, ``Connection.can_read`` and
  ``Connection._sock`` (before a call is written, so a failure there is known to have
  sent nothing);
* ``Connection.send_packed_command`` (and its ``check_health`` argument), ``Connection.read_response``,
  ``Connection.disconnect``, ``Connection.pack_command``/``pack_commands`` (without
  hiredis);
* ``Redis.connection`` (set for ``single_connection_client=True``);
* ``hiredis.pack_command``, the C packer redis-py itself uses when hiredis is installed.

``tests/integration/connection/test_kept_connection.py`` runs against every redis-py version the
package allows at its ends (``tests/integration/connection/test_redis_py_versions.py``).
"""
from __future__ import annotations

import inspect
import os
import time
import weakref
from typing import Any, List, Optional, Sequence, Tuple

import redis
from redis.exceptions import ResponseError

try:  # the C packer redis-py itself uses when hiredis is installed
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover - redis-py without hiredis
    _hiredis_pack = None

__all__ = ["KeptConnection", "MIN_POOL_SIZE", "pack_command", "AmbiguousCallError"]

#: Fewest pool connections for which a connection is kept (the rest stay for other commands).
MIN_POOL_SIZE = 4
#: Seconds a kept connection may sit idle before it is polled once for an EOF (the server
#: closed it, e.g. restarted) before the next call is written on it. A busy worker uses it
#: without pause and never pays the poll; after a pause the poll tells "closed before the
#: call" (re-sendable) apart from "failed after the call was written" (ambiguous).
STALE_AFTER_S = 1.0

#: What a connection that broke mid-call raises; the call is then run through the client.
_CONNECTION_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)


#: How many times this process is a fork's child; compared instead of os.getpid(), a system
#: call on every connection use (glibc no longer caches the pid).
_forks = [0]


def _count_fork() -> None:
    _forks[0] += 1


os.register_at_fork(after_in_child=_count_fork)


class AmbiguousCallError(redis.ConnectionError):
    """The connection failed after a command was sent and before its answer arrived, and
    the command is not safe to send again: Redis may or may not have run it. The caller
    reads the state back instead (``docs/reliability.md``, "No blind replay").

    A ``redis.ConnectionError``, so code that only retries connection errors after a
    pause still does; ``commands`` are the commands whose outcome is unknown.
    """

    def __init__(self, message: str, commands: Sequence[Sequence[Any]] = ()) -> None:
        super().__init__(message)
        self.commands = [tuple(c) for c in commands]


class _RedisPy:
    """The redis-py internals :class:`KeptConnection` uses, in one place."""

    #: redis-py >= 5.3 deprecates the command-name argument of ``get_connection``; 4.x needs it.
    _sig = inspect.signature(redis.ConnectionPool.get_connection).parameters.get("command_name")
    checkout_takes_name = _sig is not None and _sig.default is inspect.Parameter.empty
    del _sig

    @classmethod
    def checkout(cls, pool: Any) -> Any:
        return pool.get_connection("EVALSHA") if cls.checkout_takes_name else pool.get_connection()

    @staticmethod
    def checkin(pool: Any, conn: Any) -> None:
        pool.release(conn)

    @staticmethod
    def drop(pool: Any, conn: Any) -> None:
        """Close a connection whose state is unknown (an answer may be unread) and check it in."""
        try:
            conn.disconnect()
        finally:
            pool.release(conn)

    @staticmethod
    def ready(conn: Any, poll: bool) -> None:
        """Connect if needed, and with ``poll`` replace a connection the server has closed
        (its socket is readable: EOF, or an answer nobody asked for); then run the client's
        health check (a PING on a connection idle longer than ``health_check_interval``).
        All before anything of the call is written: a failure here is unambiguous."""
        connected = getattr(conn, "_sock", None) is not None
        if poll and connected:
            try:
                stale = conn.can_read(timeout=0)
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                stale = True
            if stale:
                conn.disconnect()
                connected = False
        if not connected:  # (connect() returns at once when connected, through several frames)
            conn.connect()
        if getattr(conn, "health_check_interval", 1):
            conn.check_health()

    @staticmethod
    def send(conn: Any, commands: Sequence[Sequence[Any]]) -> None:
        """Write ``commands`` in one send, packed as the client packs them (the health
        check already ran in :meth:`ready`)."""
        if _hiredis_pack is not None:
            conn.send_packed_command((b"".join([_hiredis_pack(tuple(c)) for c in commands]),), check_health=False)
        elif len(commands) == 1:  # pragma: no cover - without hiredis
            conn.send_packed_command(conn.pack_command(*commands[0]), check_health=False)
        else:  # pragma: no cover - without hiredis
            conn.send_packed_command(conn.pack_commands(commands), check_health=False)

    @staticmethod
    def send_packed(conn: Any, data: bytes) -> None:
        """Write bytes packed already (by ``hiredis.pack_command``), in one send."""
        conn.send_packed_command((data,), check_health=False)

    @staticmethod
    def read(conn: Any) -> Any:
        return conn.read_response()

    @staticmethod
    def plain_pool(client: Any) -> bool:
        """A plain ``redis.Redis`` on a plain pool: no single-connection client, no
        client-side cache, RESP2, UTF-8 as hiredis packs it, at least
        :data:`MIN_POOL_SIZE` connections."""
        if type(client) is not redis.Redis or getattr(client, "connection", None) is not None:
            return False
        pool = getattr(client, "connection_pool", None)
        if pool is None or getattr(pool, "cache", None) is not None:
            return False
        kwargs = getattr(pool, "connection_kwargs", {})
        if kwargs.get("encoding", "utf-8").lower().replace("-", "") != "utf8":
            return False
        if kwargs.get("protocol") not in (None, 2, "2"):
            return False
        return (getattr(pool, "max_connections", 0) or 0) >= MIN_POOL_SIZE


def pack_command(command: Sequence[Any]) -> Optional[bytes]:
    """The bytes :class:`KeptConnection` writes for ``command`` (``None`` without hiredis)."""
    return _hiredis_pack(tuple(command)) if _hiredis_pack is not None else None


def through_client(client: Any, commands: Sequence[Sequence[Any]]) -> List[Any]:
    """Run ``commands`` through ``client`` (its pool and retry policy) in one pipeline, not
    a transaction: each answer (an error in place of a failed one) in order. For a client
    that cannot lend a kept connection, and for resend-safe commands sent again after
    their kept connection failed."""
    pipe = client.pipeline(transaction=False)
    try:
        for command in commands:
            pipe.execute_command(*command)
        return pipe.execute(raise_on_error=False)
    finally:
        pipe.reset()


def _give_back(pool: Any, idle: List[Any]) -> None:
    """Check the kept connections back in (on :meth:`KeptConnection.release` or collection)."""
    while idle:
        conn = idle.pop()
        try:
            _RedisPy.checkin(pool, conn)
        except Exception:  # pragma: no cover - best effort
            pass


class KeptConnection:
    """Connections of ``client``'s pool kept checked out between calls (at most one idle).

    Build it with :meth:`for_client`, which says ``None`` for clients it cannot serve
    (a custom client class, a single-connection client, client-side caching, RESP3, a
    non-UTF-8 encoding, a pool smaller than :data:`MIN_POOL_SIZE`). Any greenlet may call
    it: a call takes the idle connection or checks out another one, so concurrent calls
    never share a socket. After a fork the parent's connections are forgotten, not used.
    """

    def __init__(self, client: "redis.Redis") -> None:
        self.client = client
        self._idle: List[Any] = []
        self._idle_since = 0.0
        self._forked = _forks[0]
        # not at interpreter exit: the process' sockets close with it anyway
        weakref.finalize(self, _give_back, client.connection_pool, self._idle).atexit = False

    @classmethod
    def for_client(cls, client: Any) -> Optional["KeptConnection"]:
        return cls(client) if _RedisPy.plain_pool(client) else None

    @property
    def idle(self) -> List[Any]:
        """The connection kept idle right now (empty or one), for inspection."""
        return self._idle

    def release(self) -> None:
        """Check the kept connection back in; the next call takes one again. Idempotent."""
        _give_back(self.client.connection_pool, self._idle)

    def _take(self) -> Tuple[Any, bool]:
        """A connection for one call, and whether it sat idle long enough to be polled."""
        if self._forked != _forks[0]:  # forked: the kept sockets belong to the parent
            self._idle.clear()
            self._forked = _forks[0]
        try:
            conn = self._idle.pop()
        except IndexError:  # the pool checks out a connection as it checks any other
            return _RedisPy.checkout(self.client.connection_pool), False
        return conn, time.monotonic() - self._idle_since > STALE_AFTER_S

    def _keep(self, conn: Any) -> None:
        if self._idle:
            _RedisPy.checkin(self.client.connection_pool, conn)  # one idle connection is enough
        else:
            self._idle.append(conn)
            self._idle_since = time.monotonic()

    def call(self, *command: Any, resend: bool = True) -> Any:
        """:meth:`call_command` with the command's parts as arguments."""
        return self.call_command(command, resend)

    def call_command(self, command: Tuple[Any, ...], resend: bool = True) -> Any:
        """One command: the same answer (or error) as ``client.execute_command(*command)``.

        With ``resend`` (an idempotent or read-only command) a connection that fails is
        given up and the command runs through the client (with its retry policy). Without,
        a failure before the command was written (connect, health check) raises that
        connection error (nothing was sent: trying again is safe), and one after it was
        written raises :class:`AmbiguousCallError`: Redis may have run it, it is never
        sent again (a client's retry policy would send it blindly)."""
        pool = self.client.connection_pool
        conn, poll = self._take()
        try:
            _RedisPy.ready(conn, poll)
        except _CONNECTION_ERRORS:
            _RedisPy.drop(pool, conn)
            if not resend:
                raise  # nothing was sent: the caller may try again, knowing that
            return self.client.execute_command(*command)
        except BaseException:
            _RedisPy.drop(pool, conn)
            raise
        try:
            _RedisPy.send(conn, (command,))
            result = _RedisPy.read(conn)
        except ResponseError:  # a whole answer was read: the connection is clean
            self._keep(conn)
            raise
        except _CONNECTION_ERRORS as exc:
            _RedisPy.drop(pool, conn)
            if not resend:
                raise AmbiguousCallError(
                    f"the connection failed after {command[0]} was sent ({type(exc).__name__}: {exc}); it is not "
                    f"sent again, as it may have run", (command,)) from exc
            return self.client.execute_command(*command)
        except BaseException:  # e.g. GreenletExit mid-read: the answer may still be unread
            _RedisPy.drop(pool, conn)
            raise
        self._keep(conn)
        return result

    def call_many(self, commands: Sequence[Sequence[Any]], resend: bool = True) -> List[Any]:
        """Several commands in one write, answers read in order with an error in place of
        its answer, as a non-transaction redis-py pipeline gives them. With ``resend`` (all
        of them idempotent) a failed connection is given up and they run as such a
        pipeline; without, a failure before the write raises it, one after raises
        :class:`AmbiguousCallError`."""
        pool = self.client.connection_pool
        conn, poll = self._take()
        sent = False
        try:
            _RedisPy.ready(conn, poll)
            sent = True
            _RedisPy.send(conn, commands)
            results: List[Any] = []
            for _ in commands:
                try:
                    results.append(_RedisPy.read(conn))
                except ResponseError as exc:
                    results.append(exc)
        except _CONNECTION_ERRORS as exc:
            _RedisPy.drop(pool, conn)
            if not resend and not sent:
                raise
            if not resend:
                raise AmbiguousCallError(
                    f"the connection failed after {len(commands)} command(s) were sent ({type(exc).__name__}: "
                    f"{exc}); they are not sent again, as they may have run", commands) from exc
            return through_client(self.client, commands)
        except BaseException:
            _RedisPy.drop(pool, conn)
            raise
        self._keep(conn)
        return results

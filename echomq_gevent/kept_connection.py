"""One connection of a client's pool kept checked out for script calls.

A command through ``redis.Redis`` checks a connection out of the pool, polls its socket
for readiness, sends, reads and checks it back in. For the EVALSHAs the worker and
``Queue.add`` run per job that bookkeeping costs about as much as the round trip to a
local Redis, so :class:`~echomq_gevent.scripts.Scripts` keeps one connection of its
client's pool checked out between its own calls and talks on it directly
(:class:`KeptConnection`). It sends the same bytes and reads the same answers (or
errors) as the client would; everything else goes through the pool as usual.

This is the one module that touches redis-py below its public client API. What it relies
on, all present from redis-py 4.5 (the lowest the package allows) to the newest release,
is named once in :class:`_RedisPy`:

* ``ConnectionPool.get_connection`` (its ``command_name`` argument is required before
  5.3 and deprecated after), ``ConnectionPool.release``, and the pool attributes
  ``connection_kwargs``, ``max_connections`` and ``cache`` (client-side caching, 5.1+);
* ``Connection.send_packed_command``, ``Connection.read_response``,
  ``Connection.disconnect``, ``Connection.pack_command``/``pack_commands`` (without
  hiredis);
* ``Redis.connection`` (set for ``single_connection_client=True``);
* ``hiredis.pack_command``, the C packer redis-py itself uses when hiredis is installed.

``tests/integration/test_kept_connection.py`` runs against every redis-py version the
package allows at its ends (``tests/integration/test_redis_py_versions.py``).
"""
from __future__ import annotations

import inspect
import os
import weakref
from typing import Any, List, Optional, Sequence

import redis
from redis.exceptions import ResponseError

try:  # the C packer redis-py itself uses when hiredis is installed
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover - redis-py without hiredis
    _hiredis_pack = None

__all__ = ["KeptConnection", "MIN_POOL_SIZE", "pack_command"]

#: Fewest pool connections for which a connection is kept (the rest stay for other commands).
MIN_POOL_SIZE = 4

#: What a connection that broke mid-call raises; the call is then run through the client.
_CONNECTION_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)


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
    def send(conn: Any, commands: Sequence[Sequence[Any]]) -> None:
        """Write ``commands`` in one send, packed as the client packs them."""
        if _hiredis_pack is not None:
            conn.send_packed_command((b"".join([_hiredis_pack(tuple(c)) for c in commands]),))
        elif len(commands) == 1:  # pragma: no cover - without hiredis
            conn.send_packed_command(conn.pack_command(*commands[0]))
        else:  # pragma: no cover - without hiredis
            conn.send_packed_command(conn.pack_commands(commands))

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
        self._pid = os.getpid()
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

    def _take(self) -> Any:
        if self._pid != os.getpid():  # forked: the kept sockets belong to the parent
            self._idle.clear()
            self._pid = os.getpid()
        try:
            return self._idle.pop()
        except IndexError:
            return _RedisPy.checkout(self.client.connection_pool)

    def _keep(self, conn: Any) -> None:
        if self._idle:
            _RedisPy.checkin(self.client.connection_pool, conn)  # one idle connection is enough
        else:
            self._idle.append(conn)

    def call(self, *command: Any) -> Any:
        """One command: the same answer (or error) as ``client.execute_command(*command)``.
        A connection error gives the connection up and runs the command through the
        client, with its retry policy, as every other command."""
        pool = self.client.connection_pool
        conn = self._take()
        try:
            _RedisPy.send(conn, (command,))
            result = _RedisPy.read(conn)
        except ResponseError:  # a whole answer was read: the connection is clean
            self._keep(conn)
            raise
        except _CONNECTION_ERRORS:
            _RedisPy.drop(pool, conn)
            return self.client.execute_command(*command)
        except BaseException:  # e.g. GreenletExit mid-read: the answer may still be unread
            _RedisPy.drop(pool, conn)
            raise
        self._keep(conn)
        return result

    def call_many(self, commands: Sequence[Sequence[Any]]) -> List[Any]:
        """Several commands in one write, answers read in order with an error in place of
        its answer, as a non-transaction redis-py pipeline gives them. A connection error
        gives the connection up and runs them as such a pipeline."""
        pool = self.client.connection_pool
        conn = self._take()
        try:
            _RedisPy.send(conn, commands)
            results: List[Any] = []
            for _ in commands:
                try:
                    results.append(_RedisPy.read(conn))
                except ResponseError as exc:
                    results.append(exc)
        except _CONNECTION_ERRORS:
            _RedisPy.drop(pool, conn)
            pipe = self.client.pipeline(transaction=False)
            try:
                for command in commands:
                    pipe.execute_command(*command)
                return pipe.execute(raise_on_error=False)
            finally:
                pipe.reset()
        except BaseException:
            _RedisPy.drop(pool, conn)
            raise
        self._keep(conn)
        return results

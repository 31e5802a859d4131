"""The bytes of a pipelined connection, moved on its plain socket without the layers above.

A call on :class:`~echomq_gevent.connection.pipelined.PipelinedConnection` written through redis-py
and gevent's socket object goes through about ten Python frames and four system calls:
``getsockopt(SO_SNDBUF)`` (gevent's ``sendall`` sizes its chunks on every call), ``send``,
a ``recv`` that finds nothing yet (gevent reads before it waits), the wait, and the
``recv`` that gets the answer. On a machine where a system call costs microseconds
that is a large part of a no-op job. :class:`Wire` does the same work in two system
calls and a wait:

* **Writing** is one ``send`` on the socket under gevent's (non-blocking); whatever the
  kernel did not take (a full send buffer) goes through gevent's ``sendall``, which
  waits for room.
* **Reading** feeds what ``recv_into`` brings into a ``hiredis.Reader`` made as
  redis-py makes its own (the same error classes, decoding and protocol error). A caller
  that has just written waits for the socket to be readable before its first read: the
  answer cannot be there yet. The wait is the hub's, bounded by the socket's timeout on one
  timer kept for the socket (gevent's socket makes a new timer for every wait).

Errors are what redis-py raises for the same failures: a timeout is ``redis.TimeoutError``,
a closed or failing socket ``redis.ConnectionError``; an error reply is returned as its
``ResponseError`` (the caller decides), like the values around it.

Only a plain TCP or Unix socket under gevent's monkey-patching qualifies
(:meth:`Wire.of`); TLS sockets and anything else keep redis-py's path. A Wire belongs to
one socket: a reconnected connection gets a new one.
"""
from __future__ import annotations

import _socket
import errno
from typing import Any, Optional

import redis
from gevent import getcurrent
from redis.exceptions import InvalidResponse

try:
    import hiredis
except ImportError:  # pragma: no cover - redis[hiredis] is a dependency
    hiredis = None

__all__ = ["Wire"]

_READ_SIZE = 65536
_CLOSED = "Connection closed by server."


def _gevent_socket_type() -> Optional[type]:
    try:
        from gevent import socket as gsocket
    except ImportError:  # pragma: no cover
        return None
    return getattr(gsocket, "socket", None)


_GEVENT_SOCKET = _gevent_socket_type()


def _reader_for(conn: Any) -> Any:
    """A hiredis Reader configured as redis-py configures the connection's own parser,
    except that it never decodes strictly: bytes that are not UTF-8 become lone surrogates
    (``surrogateescape``), so one such value fails the job it belongs to (``Job``) instead
    of the whole answer and the connection."""
    kwargs = {"protocolError": InvalidResponse, "replyError": conn._parser.parse_error}
    encoder = conn.encoder
    if encoder.decode_responses:
        kwargs["encoding"] = encoder.encoding
        errors = getattr(encoder, "encoding_errors", "strict")
        kwargs["errors"] = errors if errors and errors != "strict" else "surrogateescape"
    return hiredis.Reader(**kwargs)


class Wire:
    """Raw reads and writes on one gevent socket of a redis-py connection."""

    __slots__ = ("gsock", "raw", "reader", "buffer", "_gets", "_hub_wait", "_timer")

    def __init__(self, gsock: Any, reader: Any) -> None:
        self.gsock = gsock
        #: the non-blocking stdlib socket inside gevent's
        self.raw = gsock._sock
        self.reader = reader
        self._gets = reader.gets
        self.buffer = bytearray(_READ_SIZE)
        self._hub_wait = gsock.hub.wait
        #: the socket's timeout for a wait to read: one event-loop timer reused by every wait,
        #: armed with again(), which counts the whole timeout each time. (start() after stop()
        #: would go on from the time left: libev keeps it at the stop, so the timeout was a
        #: budget for the socket's whole life, and after that many seconds of waiting in all
        #: an ordinary wait failed at once, taking every call in flight with it.)
        timeout = gsock.timeout
        self._timer = gsock.hub.loop.timer(timeout, timeout, ref=False) if timeout is not None else None

    @classmethod
    def of(cls, conn: Any) -> Optional["Wire"]:
        """A Wire for ``conn``'s current socket, or None when it does not qualify (no
        hiredis, not a plain gevent socket, a parser without ``parse_error``)."""
        if hiredis is None or _GEVENT_SOCKET is None:
            return None
        gsock = getattr(conn, "_sock", None)
        if type(gsock) is not _GEVENT_SOCKET or not isinstance(getattr(gsock, "_sock", None),
                                                               _socket.socket):
            return None
        if getattr(gsock, "_read_event", None) is None or not callable(getattr(gsock.hub, "wait", None)):
            return None
        parser = getattr(conn, "_parser", None)
        if parser is None or not callable(getattr(parser, "parse_error", None)):
            return None
        try:
            reader = _reader_for(conn)
        except Exception:  # an unexpected redis-py or hiredis shape: keep redis-py's path
            return None
        return cls(gsock, reader)

    def serves(self, conn: Any) -> bool:
        """Still the socket of ``conn`` (not reconnected since)."""
        return getattr(conn, "_sock", None) is self.gsock

    # -- writing ----------------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        try:
            sent = self.raw.send(data)
        except BlockingIOError:
            sent = 0
        except _socket.timeout:  # pragma: no cover - a non-blocking send does not time out
            raise redis.TimeoutError("Timeout writing to socket")
        except OSError as exc:
            raise _write_error(exc) from exc
        if sent < len(data):  # the send buffer is full: let gevent wait for room
            try:
                self.gsock.sendall(memoryview(data)[sent:])
            except _socket.timeout:
                raise redis.TimeoutError("Timeout writing to socket") from None
            except OSError as exc:
                raise _write_error(exc) from exc

    # -- reading ----------------------------------------------------------------------------
    def read(self, just_written: bool = False) -> Any:
        """The next answer. ``just_written``: the request was sent a moment ago, so wait
        for the socket before the first read instead of finding it empty."""
        value = self._gets()
        if value is not False:
            return value
        raw, buffer = self.raw, self.buffer
        wait_first = just_written
        while True:
            try:
                if wait_first:
                    wait_first = False
                    self._wait_readable()
                count = raw.recv_into(buffer)
            except BlockingIOError:
                wait_first = True
                continue
            except (_ReadTimeout, _socket.timeout):
                raise redis.TimeoutError("Timeout reading from socket") from None
            except OSError as exc:
                raise redis.ConnectionError(
                    f"Error while reading from socket: {exc.args}") from exc
            except Exception as exc:  # gevent's: the socket was closed by another greenlet
                raise redis.ConnectionError(f"Error while reading from socket: {exc}") from exc
            if not count:
                raise redis.ConnectionError(_CLOSED)
            self.reader.feed(buffer, 0, count)
            value = self._gets()
            if value is not False:
                return value

    def _wait_readable(self) -> None:
        """Wait for the socket to be readable, for at most the socket's timeout (then
        raises _ReadTimeout). gevent's own wait makes a new timer for every wait."""
        event = self.gsock._read_event
        if event is None:  # closed by another greenlet
            raise redis.ConnectionError("Error while reading from socket: the socket was closed")
        timer = self._timer
        if timer is None:
            self._hub_wait(event)
            return
        timer.again(getcurrent().throw, _ReadTimeout)
        try:
            self._hub_wait(event)
        finally:
            timer.stop()


class _ReadTimeout(Exception):
    """A wait to read outlasted the socket's timeout."""


def _write_error(exc: OSError) -> redis.ConnectionError:
    if exc.errno in (errno.EPIPE, errno.ECONNRESET):
        return redis.ConnectionError(f"Error {exc.errno} while writing to socket. {exc.strerror}.")
    return redis.ConnectionError(f"Error while writing to socket. {exc.args}.")

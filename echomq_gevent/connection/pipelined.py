"""Script calls of many greenlets on one connection, several round trips in flight.

:class:`~echomq_gevent.connection.kept.KeptConnection` sends a call (or a batch) and
waits for its answers before the connection takes the next one: batches move in
lockstep with Redis, and while Redis runs one batch the worker has nothing to do but
wait, and while the worker handles the answers Redis waits. :class:`PipelinedConnection`
takes the calls of every greenlet of one hub on one connection and keeps writing while
answers are outstanding:

* **Writing.** The first call of a hub turn is written at once by the calling greenlet,
  as ioredis does: Redis starts on it while the worker is still busy with the other jobs
  woken in the same turn. The calls those other greenlets make are gathered and written
  together when the turn's callbacks are done: one send for all of them (each write and
  each read is a system call on both sides). Calls are written in the order they were
  made, and Redis runs them in that order: one connection orders the calls of all
  greenlets, never less than the separate connections it replaces did.
* **A burst after a quiet moment goes through a window.** Redis runs every command that
  one read of a client's socket brings (up to 16 KB, some 25 finishes) before it writes
  any of their answers: the first call of a large batch waits for the last. Jobs that
  sleep on I/O end in waves, and a wave's finishes reach an idle connection together.
  So when the connection has had nothing in flight for :data:`QUIET_S` or more, the
  first :data:`BURST` requests written from then on go at most :data:`WINDOW` commands
  in flight at a time. The calls beyond wait in order on this side, and once the
  answers of half the window are read the next ones are written while Redis still runs
  the other half. Redis reads the burst in small pieces and answers each piece at once,
  instead of answering the whole wave late. Under steady load (the connection never
  quiet, or a burst past :data:`BURST` requests) there is no window: every turn's calls
  go at once. There a window would hold calls back while Redis could run them, and
  cost more wake-ups on a worker whose CPU is busy. The measurements are in
  ``bench/results/history.md`` (the runs of f1d0eee and 996c99c).
* **Reading.** Answers come back in the order the calls were written. A lone caller
  reads its own answer; otherwise one reader greenlet reads them as they arrive and
  wakes each caller as soon as its own answers are in, while the rest are still being
  run by Redis. The worker handles one part of the answers while Redis runs the next.
* **A caller killed while waiting** (``GreenletExit``, ``gevent.Timeout``): a call not
  yet written is taken out of the queue and never sent; one already written has its
  answer read and dropped; the connection and the other callers are unaffected.
* **The connection failing** (a read or write error, a timeout): every call written on
  it and not answered is *ambiguous* (Redis may have run it); calls still queued were
  not written and go on a new connection. Each waiting caller gets its own outcome:
  with ``resend`` (an idempotent call) it runs again through the client; without, an
  ambiguous call raises :class:`~echomq_gevent.connection.kept.AmbiguousCallError` and
  is never sent again, and a call that failed before it was written raises the
  connection error (safe to try again) -- the rules of ``docs/reliability.md``.

One instance serves the greenlets of one thread (the one that built its
:class:`~echomq_gevent.protocol.scripts.Scripts`) with monkey-patched sockets and hiredis;
other threads use the kept connection's one-call-at-a-time path.
"""
from __future__ import annotations

import collections
import time
import weakref
from typing import Any, Deque, List, Optional, Sequence, Tuple

import gevent
import gevent.monkey
import greenlet
import redis
from gevent.hub import Waiter
from redis.exceptions import ResponseError

from .kept import (_CONNECTION_ERRORS, _forks, STALE_AFTER_S, AmbiguousCallError, KeptConnection, _give_back,
                              _hiredis_pack, _RedisPy, through_client)
from .wire import Wire

__all__ = ["PipelinedConnection", "pipelining_available"]

_QUEUED, _SENT, _DONE = 0, 1, 2

#: commands written and not yet answered, at most, in a burst after a quiet moment
WINDOW = 16
#: the connection had nothing in flight this long (seconds): the next calls are a burst
QUIET_S = 0.001
#: requests of a burst written through the window; the rest go as they come
BURST = 64
_UNBOUNDED = 1 << 30


def pipelining_available() -> bool:
    """Sockets are monkey-patched (answers can be awaited without blocking the thread)
    and hiredis parses them (a read interrupted in a wait loses nothing)."""
    return _hiredis_pack is not None and gevent.monkey.is_module_patched("socket")


class _Request:
    """The commands of one caller, written together; their answers in order."""

    __slots__ = ("commands", "results", "state", "waiter", "failure", "cancelled")

    def __init__(self, commands: Sequence[Sequence[Any]]) -> None:
        self.commands = commands
        self.results: List[Any] = []
        self.state = _QUEUED
        self.waiter = Waiter()
        #: ("unsent" | "sent", exception) when the connection failed before the answers;
        #: ("unpackable", exception) when the commands could not be packed
        self.failure: Optional[Tuple[str, BaseException]] = None
        self.cancelled = False


class _Link:
    """One connection and the requests written on it whose answers are outstanding."""

    __slots__ = ("conn", "wire", "inflight", "commands", "dead", "reader", "idle_since", "release_when_idle",
                 "windowed", "burst_sent")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        #: raw reads and writes on the connection's socket (None: through redis-py)
        self.wire: Optional[Wire] = None
        self.inflight: Deque[_Request] = collections.deque()
        #: the commands of the requests in ``inflight``
        self.commands = 0
        self.dead = False
        #: the greenlet reading answers (the reader, or a lone caller reading its own)
        self.reader: Any = None
        self.idle_since = time.monotonic()
        self.release_when_idle = False
        #: this period of calls (since the connection was last idle) is a windowed burst
        self.windowed = False
        #: requests written in the burst
        self.burst_sent = 0


def _fit(queue: List[_Request], room: int) -> Tuple[List[_Request], int]:
    """The requests at the head of ``queue`` that fill ``room`` commands (the last one may
    go past it; cancelled ones are skipped), and how many of the queue that took."""
    batch: List[_Request] = []
    taken = used = 0
    for req in queue:
        taken += 1
        if req.cancelled:
            continue
        batch.append(req)
        used += len(req.commands)
        if used >= room:
            break
    return batch, taken


def _writer_loop(ref: "weakref.ref[PipelinedConnection]") -> None:
    """The writer greenlet of a :class:`PipelinedConnection`: write what is queued, then
    park in the hub until :meth:`PipelinedConnection._hand_to_writer` switches to it with
    the next write. A plain greenlet whose frames hold neither itself nor its connection
    object: the connection holds it while it is parked, and a connection nobody uses any
    more takes it along (its deallocation ends the greenlet with ``GreenletExit``). A
    suspended greenlet in a reference cycle would never be freed."""
    hub = gevent.get_hub()
    try:
        while True:
            conn = ref()
            if conn is None:
                return
            conn._write()
            conn._writer_parked = greenlet.getcurrent()
            del conn
            hub.switch()
    except BaseException as exc:
        conn = ref()
        if conn is not None:
            if conn._writer_parked is greenlet.getcurrent():  # killed while parked
                conn._writer_parked = None  # the next write starts a writer
            elif conn._writing:  # killed once handed a write (after a write, _write reset it)
                conn._writing = False
                conn._hand_to_writer()
            del conn
        if not isinstance(exc, greenlet.GreenletExit):
            hub.handle_error(None, type(exc), exc, exc.__traceback__)


def _as_connection_error(exc: BaseException) -> BaseException:
    """What other callers see when a write was interrupted by something that is not an
    error (the writing greenlet was killed or timed out)."""
    if isinstance(exc, Exception):
        return exc
    return redis.ConnectionError(f"the connection was closed when a write was interrupted ({type(exc).__name__})")


class PipelinedConnection:
    """Calls of the greenlets of one hub on one connection of ``kept``'s client, written
    as soon as they are made, several round trips in flight (see the module docstring).

    :meth:`call` and :meth:`call_many` have the contract of
    :meth:`KeptConnection.call <echomq_gevent.connection.kept.KeptConnection.call>` and
    :meth:`~echomq_gevent.connection.kept.KeptConnection.call_many`. ``window``, ``quiet``
    and ``burst``: see "A burst after a quiet moment goes through a window" (``window=None``:
    never)."""

    def __init__(self, kept: KeptConnection, window: Optional[int] = WINDOW, quiet: float = QUIET_S,
                 burst: int = BURST) -> None:
        if window is not None and window < 2:
            raise ValueError(f"window must be at least 2 commands, not {window!r}")
        self.window = window
        self.quiet = quiet
        self.burst = burst
        #: in flight at or below this, the reader writes the calls waiting for the window
        self._refill_at = (window or 0) // 2
        self.client = kept.client
        self._pool = kept.client.connection_pool
        self._hub = gevent.get_hub()
        self._queue: List[_Request] = []
        self._link: Optional[_Link] = None
        self._writing = False
        #: the writer greenlet while it is parked between writes (None: no writer yet, or
        #: it is writing); see :meth:`_hand_to_writer`
        self._writer_parked: Optional[greenlet.greenlet] = None
        #: a call was written at once in this hub turn; the turn's later calls are queued
        #: and written together by :meth:`_end_turn`
        self._turn_open = False
        self._forked = _forks[0]
        self._held: List[Any] = []  # the connection in use, for the finalizer
        #: sends made, requests written, and the most requests ever outstanding at once
        self.writes = 0
        self.requests = 0
        self.max_in_flight = 0
        #: bursts after a quiet moment written through the window
        self.bursts = 0
        weakref.finalize(self, _give_back, self._pool, self._held).atexit = False

    # -- public -----------------------------------------------------------------------------
    def call(self, *command: Any, resend: bool = True) -> Any:
        return self.call_command(command, resend)

    def call_command(self, command: Tuple[Any, ...], resend: bool = True) -> Any:
        """:meth:`call` with the command as one tuple. A plain call, where ``call(*command)``
        goes through the C stack (CPython runs a call with ``*args`` in a new interpreter
        frame of its own): a caller waiting for its answer parks a shorter C stack, which
        gevent copies to the heap for every waiting greenlet (traced with a thousand jobs
        finishing at once: 1,179 bytes a waiting greenlet on average instead of 1,483)."""
        req = self._run((command,))
        if req.failure is not None:
            return self._after_failure(req, resend)[0]
        result = req.results[0]
        if isinstance(result, ResponseError):
            raise result
        return result

    def call_many(self, commands: Sequence[Sequence[Any]], resend: bool = True) -> List[Any]:
        req = self._run([tuple(c) for c in commands])
        if req.failure is not None:
            return self._after_failure(req, resend)
        return req.results

    def gather_turn(self) -> None:
        """Have the next call of this hub turn wait for the turn's end, to be written with
        the calls the turn's other greenlets make, instead of at once."""
        if not self._turn_open:
            self._turn_open = True
            self._hub.loop.run_callback(self._end_turn)

    @property
    def in_flight(self) -> int:
        """Requests written and not yet answered."""
        link = self._link
        return len(link.inflight) if link is not None else 0

    def release(self) -> None:
        """Give the connection back to the pool (at once when idle, else once the answers
        in flight are read); the next call takes one again."""
        link = self._link
        if link is None:
            return
        if link.inflight or self._queue or self._writing:
            link.release_when_idle = True
            return
        self._retire(link)

    # -- the caller's side --------------------------------------------------------------------
    def _run(self, commands: Sequence[Sequence[Any]]) -> _Request:
        if self._forked != _forks[0]:  # forked: the connection belongs to the parent
            self._forked = _forks[0]
            self._link, self._queue, self._writing, self._turn_open = None, [], False, False
            self._writer_parked = None  # the parent's writer: a new one is started here
            self._held.clear()
        req = _Request(commands)
        self._queue.append(req)
        if not self._turn_open:
            # the first call of a hub turn is written at once, on this greenlet, so Redis
            # starts on it while the worker goes on; the calls the other greenlets of the
            # same turn make are gathered and written together when the turn ends
            self._turn_open = True
            self._hub.loop.run_callback(self._end_turn)
            if not self._writing:
                self._write(req)
        # else: written at the end of the turn (or by the write under way, which takes
        # what is queued before it returns); in a burst, as answers free the window
        self._wait(req)
        return req

    def _wait(self, req: _Request) -> None:
        try:
            while req.state != _DONE:
                link = self._link
                if (req.state == _SENT and link is not None and link.reader is None and link.inflight
                        and link.inflight[0] is req):
                    self._read_own(link, req)  # a lone caller reads its own answers
                else:
                    req.waiter.get()
                    req.waiter = Waiter()
        except BaseException:
            if req.state == _QUEUED:
                req.cancelled = True  # never written
            raise  # written: its answers are read and dropped

    def _read_own(self, link: _Link, req: _Request) -> None:
        link.reader = gevent.getcurrent()
        try:
            # a lone caller reads right after its own write: its answer is not there yet
            self._read_request(link, req, just_written=len(link.inflight) == 1)
        except _CONNECTION_ERRORS as exc:
            link.reader = None
            self._kill(link, exc)
            return
        except BaseException as exc:
            link.reader = None
            if isinstance(exc, Exception):  # e.g. a parser error: the stream is lost
                self._kill(link, redis.ConnectionError(f"unreadable answer ({type(exc).__name__}: {exc})"))
                return
            # this greenlet is interrupted (killed, timed out) in a wait: nothing was read
            # half, the reader goes on (and drops what is left of this caller's answers)
            self._start_reader(link)
            raise
        link.reader = None
        self._answered(link)
        req.state = _DONE
        self._refill(link)
        self._start_reader(link)

    def _after_failure(self, req: _Request, resend: bool) -> List[Any]:
        kind, exc = req.failure  # type: ignore[misc]
        commands = req.commands
        if kind == "unpackable":
            raise exc  # the same through the client: its caller's error, nothing was written
        if resend:  # idempotent: run again through the client (and its retry policy)
            if len(commands) == 1:
                return [self.client.execute_command(*commands[0])]
            return through_client(self.client, commands)
        if kind == "unsent":
            raise exc  # nothing was written: trying again is safe
        what = commands[0][0] if len(commands) == 1 else f"{len(commands)} command(s)"
        raise AmbiguousCallError(
            f"the connection failed after {what} {'was' if len(commands) == 1 else 'were'} sent "
            f"({type(exc).__name__}: {exc}); not sent again, as it may have run", commands) from exc

    def _end_turn(self) -> None:
        """In the hub, after the callbacks of the turn in which a call was written at once:
        the calls made since go in one write (on the writer greenlet: a write may wait),
        or in a burst as many as the window takes."""
        self._turn_open = False
        if self._queue and not self._writing and self._room() > 0:
            self._hand_to_writer()

    def _hand_to_writer(self) -> None:
        """Have the queued calls written on the writer greenlet. It lives as long as this
        connection and parks between writes: a greenlet spawned for each write (a hub
        turn's gathered calls, several times a job at concurrency 10) costs a greenlet
        start and end each time, and CPython 3.11 maps and unmaps a page of frame stack
        for each. Switched to at once when this runs in the hub, else at its next turn."""
        self._writing = True
        writer, self._writer_parked = self._writer_parked, None
        args: Tuple[Any, ...] = ()
        if writer is None or writer.dead:
            writer = greenlet.greenlet(_writer_loop, self._hub)
            args = (weakref.ref(self),)
        if greenlet.getcurrent() is self._hub:
            writer.switch(*args)
        else:
            self._hub.loop.run_callback(writer.switch, *args)

    # -- writing ----------------------------------------------------------------------------
    def _new_link(self) -> _Link:
        link = _Link(_RedisPy.checkout(self._pool))
        self._held.append(link.conn)
        return link

    def _room(self) -> int:
        """Commands that may be written now: the window less the commands in flight in a
        burst after a quiet moment, else no limit."""
        link = self._link
        if link is None or link.dead:
            return _UNBOUNDED  # a new connection: no quiet moment to speak of
        if not link.inflight:  # idle: what is written now starts a new period of calls
            link.windowed = self.window is not None and time.monotonic() - link.idle_since >= self.quiet
            link.burst_sent = 0
        window = self.window
        if not link.windowed or window is None:
            return _UNBOUNDED
        return window - link.commands

    def _write(self, own: Optional[_Request] = None) -> None:
        """Write the queued requests (in a burst, those that fit in the window), one send
        per round: more calls may be queued, and answers read, while a send waits for
        room in the socket. It runs on the caller of ``own`` (the first call of a hub
        turn), on a writer greenlet at the end of the turn, or on the greenlet that read
        answers once they free half the window. A request is written whole: one larger
        than the room left goes when the window has any room. Then make sure the answers
        are read: by the reader, or by ``own``'s caller when its request is first."""
        self._writing = True
        try:
            while self._queue:
                room = self._room()
                if room <= 0:
                    break  # written as answers free the window (_refill)
                queue = self._queue
                if room >= _UNBOUNDED:  # steady load: everything queued
                    batch, taken = [r for r in queue if not r.cancelled], len(queue)
                else:
                    batch, taken = _fit(queue, room)
                self._queue = queue[taken:]
                if batch:
                    self._send(batch)
        except BaseException as exc:  # this greenlet is interrupted: the rest was not written
            queued, self._queue = self._queue, []
            for req in queued:
                if not req.cancelled:
                    self._fail(req, "unsent", _as_connection_error(exc))
            raise
        finally:
            self._writing = False
            link = self._link
            if link is not None and link.inflight and link.reader is None and \
                    (own is None or link.inflight[0] is not own):
                self._start_reader(link)

    def _send(self, batch: List[_Request]) -> None:
        # packed first, each request apart: a command that cannot be packed (an argument
        # hiredis cannot encode, such as a str holding a lone surrogate) fails its own
        # caller, unsent, and leaves the connection and the other requests alone
        packed: List[bytes] = []
        ok: List[_Request] = []
        for req in batch:
            try:
                packed.append(b"".join([_hiredis_pack(c) for c in req.commands]))
            except Exception as exc:
                self._fail(req, "unpackable", exc)
                continue
            ok.append(req)
        if not ok:
            return
        batch = ok
        link = self._link
        try:
            if link is None or link.dead:
                link = self._link = self._new_link()
            if not link.inflight:  # idle: connect, health check, replace if the server closed it
                _RedisPy.ready(link.conn, time.monotonic() - link.idle_since > STALE_AFTER_S)
                if link.wire is None or not link.wire.serves(link.conn):
                    link.wire = Wire.of(link.conn)
        except BaseException as exc:  # nothing of the batch was written
            if link is not None:
                self._kill(link, exc)
            for req in batch:
                self._fail(req, "unsent", _as_connection_error(exc))
            if not isinstance(exc, Exception):
                raise
            return
        for req in batch:
            req.state = _SENT
            link.commands += len(req.commands)
        link.inflight.extend(batch)
        if link.windowed:
            if not link.burst_sent:
                self.bursts += 1
            link.burst_sent += len(batch)
            if link.burst_sent >= self.burst:
                link.windowed = False  # not a burst: a steady flow
        if len(link.inflight) > self.max_in_flight:
            self.max_in_flight = len(link.inflight)
        self.writes += 1
        self.requests += len(batch)
        try:
            data = packed[0] if len(packed) == 1 else b"".join(packed)
            if link.wire is not None:
                link.wire.send(data)
            else:
                _RedisPy.send_packed(link.conn, data)
        except BaseException as exc:  # maybe partly written: all of it is ambiguous
            self._kill(link, _as_connection_error(exc))
            if not isinstance(exc, Exception):
                raise
            return

    @staticmethod
    def _answered(link: _Link) -> None:
        """The first request in flight is answered."""
        link.commands -= len(link.inflight.popleft().commands)

    def _refill(self, link: _Link) -> None:
        """After an answer: once half the window is answered (or the window is lifted),
        write the calls waiting for it, here, on the greenlet that read the answer."""
        if self._queue and not self._writing and link is self._link and (
                link.commands <= self._refill_at or not link.windowed):
            self._write()

    # -- reading ----------------------------------------------------------------------------
    def _start_reader(self, link: _Link) -> None:
        if link.inflight and link.reader is None and not link.dead:
            link.reader = gevent.spawn(self._read_loop, link)
        elif not link.inflight:
            link.idle_since = time.monotonic()
            if link.release_when_idle and not self._queue and not self._writing:
                self._retire(link)

    @staticmethod
    def _read_request(link: _Link, req: _Request, just_written: bool = False) -> None:
        results = req.results
        wire = link.wire
        if wire is not None:
            while len(results) < len(req.commands):
                results.append(wire.read(just_written))  # an error reply is a value here
                just_written = False
            return
        conn = link.conn
        while len(results) < len(req.commands):
            try:
                value = conn.read_response(disconnect_on_error=False)
            except ResponseError as err:  # a whole answer was read: the stream is intact
                value = err
            results.append(value)

    def _read_loop(self, link: _Link) -> None:
        wake = self._hub.loop.run_callback
        try:
            while link.inflight and not link.dead:
                req = link.inflight[0]
                self._read_request(link, req)
                req.state = _DONE
                wake(req.waiter.switch, None)
                self._answered(link)
                if self._queue:
                    self._refill(link)
        except BaseException as exc:
            link.reader = None
            self._kill(link, exc if isinstance(exc, _CONNECTION_ERRORS) else
                       redis.ConnectionError(f"reading answers failed ({type(exc).__name__}: {exc})"))
            if not isinstance(exc, Exception):
                raise
            return
        link.reader = None
        self._start_reader(link)

    # -- failure ----------------------------------------------------------------------------
    def _fail(self, req: _Request, kind: str, exc: BaseException) -> None:
        req.failure = (kind, exc)
        req.state = _DONE
        self._hub.loop.run_callback(req.waiter.switch, None)

    def _kill(self, link: _Link, exc: BaseException) -> None:
        """The connection failed: close it; every request written on it and not answered
        is ambiguous. Queued requests stay queued (they go on a new connection)."""
        if link.dead:
            return
        link.dead = True
        if self._link is link:
            self._link = None
        if link.conn in self._held:
            self._held.remove(link.conn)
        try:
            _RedisPy.drop(self._pool, link.conn)
        except Exception:  # pragma: no cover - best effort
            pass
        pending, link.inflight, link.commands = list(link.inflight), collections.deque(), 0
        for req in pending:
            self._fail(req, "sent", exc)
        if self._queue and not self._writing:  # calls not written yet: on a new connection
            self._hand_to_writer()
        # a reader blocked on the closed socket wakes with an error and stops
        link.reader = None

    def _retire(self, link: _Link) -> None:
        link.dead = True
        if self._link is link:
            self._link = None
        if link.conn in self._held:
            self._held.remove(link.conn)
            _RedisPy.checkin(self._pool, link.conn)

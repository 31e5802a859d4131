"""The idle worker's wait on the queue's marker, with its pick-up written behind it.

An idle worker blocks on the marker ZSET (``BZPOPMIN``) on a connection of its own,
and takes a job (``moveToActive-11``) once the wait ends. Written the plain way, that
is two round trips after a job is added: the pop's answer, then the pick-up's.

When nothing of the worker is in flight, :class:`MarkerWaiter` writes the pick-up in the
same send, right behind the ``BZPOPMIN``. Redis reads a blocked client's next command
only once its blocking command is answered, so the pick-up runs the moment the wait
ends: on a marker, on the wait's timeout, or on a ``CLIENT UNBLOCK``. The worker then
gets the job with the pop's answer, one round trip sooner. The pick-up asks Redis for
the time (an empty ``now``), since the time of its writing is stale by then.

What it must handle, and how:

* **A cancel** (a close, a pause): ``CLIENT UNBLOCK`` ends the wait, so the pick-up
  runs, and :meth:`MarkerWaiter.cancel` returns its answer. A job it took is handed
  straight back to the front of ``wait`` (``moveJobFromActiveToWait``). No pick-up is
  written when the connection's ``CLIENT ID`` is unknown: without it there is no cancel
  that leaves the answer readable.
* **A connection that fails after the send**: the pick-up may have taken a job. Its
  answer is an :class:`~.kept_connection.AmbiguousCallError`, never a second send; the
  worker then finds the job by its lock token (:mod:`.lost_pickups`).
  A failure before anything was sent is an ordinary error of the wait. The answers are
  awaited for the wait's own timeout plus :attr:`MarkerWaiter.answer_slack` (the
  connection's ``socket_timeout``), not the longest wait's, so a dead connection is
  noticed as soon as the wait should have ended.
* **A pick-up that could not run** (NOSCRIPT after a script flush, a redirection,
  READONLY after a failover): its answer is that error; the worker picks up again
  through its script connection, which loads a missing script.
* **A pick-up still pending when the worker is busy again**: none can be, since one is
  only written when no job of the worker is in flight. Its answer is taken by the next
  wait, or by the fetch loop as soon as it arrives (the wait's wake-up event is set).
* **A wait begun while jobs ran** (``concurrency`` above 1: free slots wait on the marker
  with no pick-up behind): the loop reuses it once it is idle, rather than end it (a
  ``CLIENT UNBLOCK`` and a ``BZPOPMIN`` more). So such a wait runs on a connection the
  waiter holds, and the pick-up is written behind it, blocked as it is, the moment the loop
  reuses it idle (or sent right after its ``BZPOPMIN`` when that has not gone out yet,
  :class:`_PlainWait`): every idle wait carries a pick-up.

One wait is in flight at a time; the fetch loop waits for it *or* for its own wake-up
event, whichever comes first, and a wait still pending when the loop was woken is reused
by the next wait instead of issuing another. When the process is monkey-patched the wait
runs on a greenlet; when it is not, on a pool thread
(:func:`~.runtime.sockets_patched`). Only the fetch-loop greenlet calls
:meth:`MarkerWaiter.wait`; :meth:`MarkerWaiter.cancel` is called by ``close`` and by
the loop at a pause.

The wait's connection is the worker's own (:func:`open_marker_wait`), named as BullMQ
names a worker's (:func:`blocking_client_name`), so ``getWorkers()`` lists the worker.
"""
from __future__ import annotations

import base64
import logging
import time
from typing import Any, Optional, Sequence, Tuple

import gevent
import redis
from redis.exceptions import ResponseError

from ..connection.kept import AmbiguousCallError, _RedisPy
from ..connection.blocking import MAX_BLOCK_S, MIN_BLOCK_S, native_lock, sockets_patched
from ..connection.clients import clone_client
from ..connection.cluster import is_cluster
from ..connection.slot_client import SlotClient

log = logging.getLogger("echomq_gevent.worker")

__all__ = ["MarkerWaiter", "Fetched", "blocking_client_name", "open_marker_wait"]

#: Seconds a cancel waits for the pending wait (and the pick-up behind it) to answer.
CANCEL_WAIT_S = 1.0


class _PopFailed:
    """The error of a wait that sent nothing ambiguous, returned by the greenlet or thread
    that ran it."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


class _PlainWait:
    """A wait begun with no pick-up behind it, which one may still be written behind until
    its answer comes (:meth:`write_behind`, the fetch loop's greenlet) and whose pop (a
    greenlet or a pool thread) then reads that pick-up's answer as well. Asked before the
    pop sent its ``BZPOPMIN``, the pick-up is left for the pop to send right after it. A
    native lock orders the two, held for no I/O."""

    __slots__ = ("_lock", "_conn", "_closed", "behind")

    def __init__(self) -> None:
        self._lock = native_lock()
        self._conn: Any = None
        self._closed = False
        #: ``(token, command)`` of the pick-up written (or to write) behind the wait
        self.behind: Optional[Tuple[str, Sequence[Any]]] = None

    @property
    def open(self) -> bool:
        """No answer yet and nothing behind it: a pick-up may be written behind it."""
        return not self._closed and self.behind is None

    def opened(self, conn: Any) -> Optional[Tuple[str, Sequence[Any]]]:
        """The pop sent its ``BZPOPMIN`` on ``conn``. Returns a pick-up asked for before
        that, which the pop sends now."""
        with self._lock:
            self._conn = conn
            return self.behind

    def close(self) -> Optional[Tuple[str, Sequence[Any]]]:
        """The pop has its answer (or failed): nothing more goes behind it. Returns the
        pick-up written behind it, whose answer the pop reads next."""
        with self._lock:
            self._closed = True
            self._conn = None
            return self.behind

    def refuse(self) -> None:
        """A cancel: nothing goes behind the wait any more."""
        with self._lock:
            self._closed = True

    def token(self) -> Optional[str]:
        behind = self.behind
        return behind[0] if behind is not None else None

    def write_behind(self, token: str, command: Sequence[Any]) -> bool:
        """Write the pick-up behind the wait (or leave it to the pop, whose ``BZPOPMIN``
        is not sent yet); False when the wait has its answer already (the next wait carries
        the pick-up). Once written it is the pop's: a failing send fails the pop's read
        too, whose answer is then ambiguous."""
        with self._lock:
            if self._closed or self.behind is not None:
                return False
            self.behind = (token, command)
            conn = self._conn
        if conn is not None:
            try:
                _RedisPy.send(conn, [tuple(command)])
            except Exception as exc:  # the connection is dropped: the pop's read fails with it
                log.debug("writing the pick-up behind the marker wait failed: %s", exc)
        return True


class Fetched:
    """What a wait with a pick-up behind it brought.

    ``answer``: ``moveToActive``'s answer; a ``ResponseError`` when the pick-up could not
    run or failed (pick up again the ordinary way); an ``AmbiguousCallError`` when the
    connection failed after the send (find the job by ``token``). ``pop_error``: the
    ``BZPOPMIN``'s own error reply, if it had one (the pick-up ran anyway). ``read_at``:
    the monotonic time the answers were read (made with them)."""

    __slots__ = ("token", "answer", "pop_error", "read_at")

    def __init__(self, token: str, answer: Any, pop_error: Optional[Exception] = None) -> None:
        self.token = token
        self.answer = answer
        self.pop_error = pop_error
        #: monotonic time the answers were read
        self.read_at = time.monotonic()


class MarkerWaiter:
    """Blocks on the queue's marker ZSET (``BZPOPMIN``) for the fetch loop, with a pick-up
    written behind the wait when the loop asks for one (see the module's docstring)."""

    def __init__(self, client: Any, marker_key: str, use_thread: Optional[bool] = None,
                 fetch_behind: bool = True) -> None:
        self.client = client
        self.key = marker_key
        self.use_thread = (not sockets_patched()) if use_thread is None else use_thread
        #: Whether a pick-up may be written behind the wait (off on a cluster, whose
        #: script calls follow redirections through the worker's router).
        self.fetch_behind = fetch_behind
        self.connection_id: Optional[int] = None  # set by the blocking client's connect hook
        #: Seconds past the wait's own timeout that its answers may take (socket_timeout).
        self.answer_slack = 10.0
        self._pending: Any = None
        self._pending_token: Optional[str] = None  # the pick-up's, when one is behind the wait
        #: the wait in flight when it has no pick-up behind it yet and may still get one
        self._plain: Optional[_PlainWait] = None

    @property
    def pending(self) -> bool:
        """A wait is in flight (its answer not yet taken)."""
        return self._pending is not None

    @property
    def can_fetch(self) -> bool:
        """A pick-up may be written behind the next wait: allowed, the connection's
        ``CLIENT ID`` known (a cancel needs it), and no wait in flight, or one in flight
        with no pick-up behind it that one can still be written behind (a wait begun while
        jobs of the worker ran, which the loop now reuses idle)."""
        if not self.fetch_behind or self.connection_id is None:
            return False
        if self._pending is None:
            return True
        return self._pending_token is None and self._plain is not None and self._plain.open

    @property
    def answered(self) -> bool:
        """A wait with a pick-up behind it has answered and nobody took the answer yet."""
        return self._pending_token is not None and self._pending is not None and self._pending.ready()

    # ------------------------------------------------------------------ the waits
    def _pop(self, timeout: float, plain: Optional["_PlainWait"] = None) -> Any:
        if plain is not None:
            return self._pop_open(timeout, plain)
        try:
            return self.client.bzpopmin(self.key, timeout)
        except Exception as exc:
            # Handed to wait(), which raises it in the fetch loop (which logs and retries).
            # Raised here, gevent would also print it as a crashed greenlet, with a
            # traceback, for every failed wait while Redis is away.
            return _PopFailed(exc)

    def _pop_open(self, timeout: float, plain: "_PlainWait") -> Any:
        """``BZPOPMIN`` on a connection of the blocking client's pool, with the pick-up of
        ``plain.behind`` in the same send when there is one already; else
        :meth:`_PlainWait.write_behind` may still write one behind it while it is blocked.
        With a pick-up behind it, both answers are read in order (a :class:`Fetched`).
        Never sends twice."""
        pool = self.client.connection_pool
        conn = None
        sent = False
        try:
            conn = _RedisPy.checkout(pool)
            _RedisPy.ready(conn, poll=True)
            first = plain.behind
            _RedisPy.send(conn, [("BZPOPMIN", self.key, timeout)] + ([tuple(first[1])] if first else []))
            sent = True
            queued = plain.opened(conn)
            if queued is not None and first is None:  # asked for before the BZPOPMIN went out
                _RedisPy.send(conn, [tuple(queued[1])])
            sock = getattr(conn, "_sock", None)
            kept_timeout = sock.gettimeout() if sock is not None else None
            if sock is not None:
                sock.settimeout(timeout + self.answer_slack)
            try:
                popped: Any = conn.read_response()
            except ResponseError as exc:  # an error reply: the connection is fine
                popped = exc
            behind = plain.close()
            answer: Any = None
            if behind is not None:
                try:
                    answer = conn.read_response()
                except ResponseError as exc:
                    answer = exc
            if sock is not None and conn._sock is sock:
                sock.settimeout(kept_timeout)
        except BaseException as exc:
            behind = plain.close()
            if conn is not None:
                _RedisPy.drop(pool, conn)
            if not isinstance(exc, Exception):  # killed (a cancel that gave up)
                raise
            if behind is not None and sent:
                return Fetched(behind[0], AmbiguousCallError(
                    f"the connection failed after a pick-up was written behind the marker wait ({exc}); "
                    f"it may have taken a job", [behind[1]]))
            return _PopFailed(exc)  # nothing was sent: a pick-up asked for never went out
        _RedisPy.checkin(pool, conn)
        if behind is None:
            return _PopFailed(popped) if isinstance(popped, ResponseError) else popped
        return Fetched(behind[0], answer, popped if isinstance(popped, ResponseError) else None)

    def _pop_and_fetch(self, timeout: float, token: str, command: Sequence[Any]) -> Any:
        """``BZPOPMIN`` and the pick-up in one send; both answers read in order."""
        plain = _PlainWait()
        plain.behind = (token, command)
        return self._pop_open(timeout, plain)

    def _spawn(self, fn: Any, *args: Any) -> Any:
        if self.use_thread:
            return gevent.get_hub().threadpool.spawn(fn, *args)
        return gevent.spawn(fn, *args)

    def wait(self, timeout: float, wake: Any,
             fetch: Optional[Tuple[str, Sequence[Any]]] = None) -> Tuple[str, Any]:
        """Wait up to ``timeout`` s. Returns ``("marker", score)`` when a marker was
        popped, ``("timeout", 0)`` when the time ran out (or BZPOPMIN timed out),
        ``("woken", 0)`` when ``wake`` (a gevent Event) was set first, and
        ``("fetched", Fetched)`` when the wait had a pick-up behind it and both answered.

        ``fetch`` (``(token, EVALSHA command)``) is written behind a new wait when
        :attr:`can_fetch`; a wait already in flight is reused as it is. Errors of the
        wait are raised here."""
        timeout = min(max(timeout, MIN_BLOCK_S), MAX_BLOCK_S)
        deadline = time.monotonic() + timeout
        while True:
            reused = self._pending is not None
            if not reused:
                self._plain = None
                if fetch is not None and self.can_fetch:
                    token, command = fetch
                    self._pending = self._spawn(self._pop_and_fetch, timeout, token, command)
                    self._pending_token = token
                    # a loop that left this wait (woken) hears of the answer at once
                    self._pending.rawlink(lambda _: wake.set())
                elif self.fetch_behind and self.connection_id is not None:
                    # a pick-up may be written behind this one later, if the loop reuses it
                    # once nothing of the worker is in flight any more
                    self._plain = _PlainWait()
                    self._pending = self._spawn(self._pop, timeout, self._plain)
                else:
                    self._pending = self._spawn(self._pop, timeout)
            elif fetch is not None and self.can_fetch:
                # the loop is idle now and reuses a wait begun while jobs ran: the pick-up
                # goes behind it as behind a new one (never a second BZPOPMIN meanwhile)
                assert self._plain is not None
                token, command = fetch
                if self._plain.write_behind(token, command):
                    self._pending_token = token
                    self._pending.rawlink(lambda _: wake.set())
                    fetch = None
                # else the wait is over already: a next wait of this call carries the pick-up
            pending = self._pending
            # a pick-up behind the wait answers just after the BZPOPMIN's own timeout, or its
            # read fails within answer_slack after that: wait for either rather than give up
            # first (the loop would pick up the ordinary way beside it)
            limit = timeout + self.answer_slack + 0.5 if self._pending_token is not None else timeout
            gevent.wait([pending, wake], timeout=limit, count=1)
            if self._pending is not pending:  # cancelled meanwhile (close): the cancel has it
                return "woken", 0.0
            if pending.ready():
                res = self.take()
                if isinstance(res, Fetched):
                    return "fetched", res
                if not res:
                    timeout = deadline - time.monotonic()
                    if reused and timeout >= MIN_BLOCK_S and not wake.is_set():
                        # the BZPOPMIN of an earlier wait, which the loop left on its own
                        # timer (Redis ends a blocked command's timeout only at its next
                        # tick), timed out: this wait's own time is not over
                        continue
                    return "timeout", 0.0
                return "marker", float(res[2])
            if wake.is_set():
                return "woken", 0.0
            return "timeout", 0.0

    def take(self) -> Any:
        """The answer of the finished wait (its error raised), which is no longer pending."""
        pending = self._pending
        self._pending = None
        self._pending_token = None
        self._plain = None
        res = pending.get()
        if isinstance(res, _PopFailed):
            raise res.error
        return res

    def cancel(self, unblock_client: Any = None) -> Optional[Fetched]:
        """Abandon the pending wait so it pops no marker meant for other workers:
        ``CLIENT UNBLOCK`` it (through ``unblock_client``) and, on a greenlet that does not
        answer, kill it. Returns what the pick-up behind the wait brought, if one was
        written: the caller runs or hands back the job it took (an ``AmbiguousCallError``
        answer when the wait did not answer in time)."""
        pending, self._pending = self._pending, None
        token, self._pending_token = self._pending_token, None
        plain, self._plain = self._plain, None
        if plain is not None:
            plain.refuse()  # no pick-up behind it from now on: its answer is the wait's
            if token is None:
                token = plain.token()
        if pending is None:
            return None
        if not pending.ready():
            if unblock_client is not None and self.connection_id is not None:
                try:
                    unblock_client.execute_command("CLIENT", "UNBLOCK", self.connection_id)
                except Exception:
                    log.debug("CLIENT UNBLOCK of the marker wait failed", exc_info=True)
            try:
                gevent.wait([pending], timeout=CANCEL_WAIT_S)
            except Exception:  # pragma: no cover
                pass
        if not pending.ready():
            if not self.use_thread:
                pending.kill(block=False)
            if token is None:
                return None
            return Fetched(token, AmbiguousCallError(
                f"the marker wait did not answer within {CANCEL_WAIT_S:g} s of its cancel; the pick-up "
                f"written behind it may have taken a job"))
        try:
            res = pending.get()
        except BaseException:  # pragma: no cover - the wait catches its own errors
            return None
        return res if isinstance(res, Fetched) else None


# ---------------------------------------------------------------------- the wait's connection
def blocking_client_name(prefix: str, queue_name: str, worker_name: Optional[str]) -> str:
    """The name of a worker's marker-wait connection, as BullMQ names a worker's
    (``<prefix>:<base64 queue>[:w:<name>]``), so ``getWorkers()`` lists the worker."""
    name = f"{prefix}:{base64.b64encode(queue_name.encode('utf-8')).decode('ascii')}"
    if worker_name:
        name += f":w:{worker_name}"
    return name


def _tcp_kwargs(settings: Any) -> Any:
    kwargs = settings.client_kwargs()
    kwargs.pop("socket_timeout", None)
    return kwargs


def open_marker_wait(client: Any, marker_key: str, settings: Any, client_name: str) -> MarkerWaiter:
    """A :class:`MarkerWaiter` on a connection of its own (``waiter.client``), made from the
    worker's ``client`` and connection ``settings`` and named ``client_name``; its connect
    hook reads the ``CLIENT ID`` a cancel needs. On a cluster the connection is a plain
    client of the primary serving the marker's slot, and no pick-up is written behind the
    wait (script calls follow redirections through the worker's router there). Nothing is
    connected yet. Called by the fetch loop's set-up, on the run greenlet."""
    marker = MarkerWaiter(None, marker_key, fetch_behind=not is_cluster(client))

    def on_connect(conn: Any) -> None:
        conn.on_connect()
        try:
            conn.send_command("CLIENT", "ID")
            marker.connection_id = int(conn.read_response())
        except redis.ResponseError:
            marker.connection_id = None

    if is_cluster(client):  # a plain client of the primary serving the marker's slot
        marker.client = SlotClient(client, marker_key, max_connections=2, **_tcp_kwargs(settings),
                                   client_name=client_name, socket_timeout=MAX_BLOCK_S + settings.socket_timeout,
                                   redis_connect_func=on_connect)
    else:
        marker.client = clone_client(client, max_connections=2, settings=settings, client_name=client_name,
                                     socket_timeout=MAX_BLOCK_S + settings.socket_timeout,
                                     redis_connect_func=on_connect)
    marker.answer_slack = settings.socket_timeout
    return marker

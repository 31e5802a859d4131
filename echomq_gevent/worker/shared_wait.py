"""One marker wait for the idle workers of many queues: a single ``BZPOPMIN`` over their
markers, on one blocking connection per process and Redis.

By default each worker blocks on its own queue's marker on a connection of its own
(:mod:`.marker`): a process with ``Q`` queues holds ``Q`` blocking connections.
``BZPOPMIN`` takes several keys and pops from the first that has a member, so a
:class:`SharedMarkerWait` serves every queue of a process with one connection: its
greenlet keeps one ``BZPOPMIN`` in flight over the markers of the queues whose worker is
waiting, and hands each popped marker to its queue's worker (:class:`SharedWaitHandle`,
which the fetch loop uses in place of a :class:`~.marker.MarkerWaiter`).

How it behaves, and what it costs:

* **A queue that starts waiting while a wait is in flight.** When its marker is not among
  the keys of the wait in flight, the wait is ended with ``CLIENT UNBLOCK`` (several queues
  starting in one hub turn share one unblock) and sent again with every waiting queue's
  marker. A queue whose marker is in flight already (a
  worker that waits again after its own timeout or a fetch that found nothing) joins it
  without a round trip.
* **Each queue's own timeout.** Every worker keeps its own timer (``drain_delay``, or the
  due time of its earliest delayed job) and fetches when it runs out, as with a wait of
  its own; the shared ``BZPOPMIN`` itself runs for the longest wait (10 s) and is sent
  again. A queue that stopped waiting stays in the wait in flight until it ends or is sent
  again (it is not unblocked for that).
* **A marker for one queue wakes that queue's worker only.** A marker popped for a queue
  whose worker has stopped waiting (its timer ran out, it was woken, it is busy) is not
  lost: the worker is woken and its next wait answers at once with that marker, so it
  fetches. Only a closed worker's marker is dropped, as a closing worker's own wait drops
  it; the worker's other peers fetch at their own timeout as they always do.
* **A pause or a close** takes the queue out at once (``CLIENT UNBLOCK`` when its marker
  is in flight), so the process pops no wake-up meant for workers of that queue elsewhere.
* **A failing connection.** The wait is logged and sent again after a growing pause; the
  workers fetch on their own timers meanwhile (their fetches fail and are logged by the
  fetch loop while Redis is away).
* **No pick-up behind the wait.** A worker's own wait writes its ``moveToActive`` behind
  the ``BZPOPMIN`` in the same send (:mod:`.marker`), saving a round trip per wake-up; a
  shared wait cannot (the queue that will wake is not known), so a woken worker picks up
  with one more round trip, on its command connection.
* **Names.** The shared connection is named ``echomq:markers``; BullMQ's ``getWorkers()``
  (and :meth:`~echomq_gevent.queue.queue.Queue.get_workers`) list a queue's workers by the
  name of their blocking connection, so the workers of a shared wait are not listed there.
* **Where.** One Redis server (or the primary behind Sentinel). On a Redis Cluster the keys
  of one ``BZPOPMIN`` must share a slot: the workers keep their own waits there.

Everything runs on the hub of the workers; the ``BZPOPMIN`` itself on a greenlet when the
process is monkey-patched, on a pool thread when it is not.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple

import gevent
import gevent.event
import redis

from ..connection.blocking import MAX_BLOCK_S, MIN_BLOCK_S, sockets_patched
from ..connection.clients import DEFAULT_SETTINGS, clone_client, close_client
from ..connection.cluster import is_cluster
from ..protocol.scripts import shared_call

log = logging.getLogger("echomq_gevent.worker")

__all__ = ["SharedMarkerWait", "SharedWaitHandle", "SHARED_WAIT_NAME"]

#: The name of the shared wait's connection (``CLIENT LIST``).
SHARED_WAIT_NAME = "echomq:markers"

#: Seconds the loop waits for an unblocked wait to answer before it gives up on it.
_UNBLOCK_WAIT_S = 1.0


class _Failed:
    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


class SharedWaitHandle:
    """One worker's part of a :class:`SharedMarkerWait`, with the interface the fetch loop
    uses of a :class:`~.marker.MarkerWaiter` (no pick-up behind the wait: ``can_fetch``
    is always False)."""

    can_fetch = False
    answered = False
    connection_id = None
    use_thread = False

    def __init__(self, group: "SharedMarkerWait", key: str) -> None:
        self.group = group
        self.key = key
        #: inside :meth:`wait` (its marker is asked for in the next shared wait)
        self.waiting = False
        #: the score of a marker popped for this queue while its worker was not waiting
        self.missed: Optional[float] = None
        self._got: Optional[float] = None
        self._event = gevent.event.Event()
        self._wake: Any = None
        self.detached = False
        #: taken out by :meth:`cancel` (until the next :meth:`wait`)
        self._cancelled = False

    @property
    def pending(self) -> bool:
        """Its marker is asked for: it waits, or it left the wait (its timer, a wake-up)
        and the wait in flight still asks for its marker. A pause takes it out with
        :meth:`cancel`, so the process pops no wake-up meant for other workers."""
        return self.waiting or (not self._cancelled and self.key in self.group._inflight)

    def wait(self, timeout: float, wake: Any, fetch: Any = None) -> Tuple[str, Any]:
        """As :meth:`.marker.MarkerWaiter.wait`: ``("marker", score)``, ``("timeout", 0)``
        or ``("woken", 0)`` (``fetch`` is ignored)."""
        timeout = min(max(timeout, MIN_BLOCK_S), MAX_BLOCK_S)
        self._wake = wake
        if self.missed is not None:  # popped while this worker was not waiting: a job may be there
            score, self.missed = self.missed, None
            return "marker", score
        self._got = None
        self._event.clear()
        self._cancelled = False
        self.waiting = True
        self.group._join(self)
        try:
            gevent.wait([self._event, wake], timeout=timeout, count=1)
        finally:
            self.waiting = False
            self.group._leave(self, unblock=False)
        if self._got is not None:
            score, self._got = self._got, None
            return "marker", score
        if self.missed is not None:  # delivered just as the wait ended
            score, self.missed = self.missed, None
            return "marker", score
        if wake.is_set():
            return "woken", 0.0
        return "timeout", 0.0

    def take(self) -> Any:  # pragma: no cover - never answered (no pick-up behind the wait)
        raise RuntimeError("a shared marker wait has no pick-up to take")

    def cancel(self, unblock_client: Any = None) -> None:
        """Leave the shared wait now (a pause, a close): the queue's marker is no longer
        asked for, and the wait in flight is unblocked when it asks for it."""
        self.waiting = False
        self._cancelled = True
        self._event.set()
        self.group._leave(self, unblock=True)
        return None

    def _deliver(self, score: float) -> None:
        if self.waiting:
            self._got = score
            self.waiting = False
            self._event.set()
            return
        self.missed = score if self.missed is None else min(self.missed, score)
        if self._wake is not None:
            self._wake.set()  # the fetch loop looks again, and its next wait answers at once


class SharedMarkerWait:
    """The shared marker wait of the workers of one process on one Redis (see the module's
    docstring). ``client``: the command client the workers share (``CLIENT UNBLOCK`` goes
    on it; the blocking connection is cloned from it with ``settings``)."""

    def __init__(self, client: Any, settings: Any = None, use_thread: Optional[bool] = None) -> None:
        if is_cluster(client):
            raise ValueError("a shared marker wait needs one Redis server; on a Redis Cluster each queue waits "
                             "on its own primary")
        self.client = client
        self.settings = settings or DEFAULT_SETTINGS
        self.use_thread = (not sockets_patched()) if use_thread is None else use_thread
        self.connection_id: Optional[int] = None
        self.blocking: Any = None
        #: marker key -> the handles of that queue's workers in this process
        self._handles: Dict[str, List[SharedWaitHandle]] = {}
        #: marker key -> the waiting handles (insertion order: the order of the keys sent)
        self._waiting: Dict[str, List[SharedWaitHandle]] = {}
        #: the keys of the wait in flight
        self._inflight: frozenset = frozenset()
        self._changed = gevent.event.Event()
        self._unblock = False
        self._closed = False
        self._loop: Optional[gevent.Greenlet] = None
        #: counters for tests and the bench: waits sent, unblocks sent, markers handed over
        self.stats = {"waits": 0, "unblocks": 0, "markers": 0, "missed": 0, "dropped": 0, "errors": 0}

    # ------------------------------------------------------------------ the workers' side
    def attach(self, marker_key: str) -> SharedWaitHandle:
        """A handle for a worker of the queue whose marker is ``marker_key``; starts the
        shared wait's greenlet on the current hub (the workers' hub) on first use."""
        if self._closed:
            raise RuntimeError("the shared marker wait is closed")
        handle = SharedWaitHandle(self, marker_key)
        self._handles.setdefault(marker_key, []).append(handle)
        if self.blocking is None:
            self._connect()
        if self._loop is None:
            self._loop = gevent.spawn(self._run)
        return handle

    def detach(self, handle: SharedWaitHandle) -> None:
        """The worker closed: forget its handle (a marker popped for it now is dropped)."""
        handle.cancel()
        handle.detached = True
        handles = self._handles.get(handle.key, [])
        if handle in handles:
            handles.remove(handle)
        if not handles:
            self._handles.pop(handle.key, None)

    def _join(self, handle: SharedWaitHandle) -> None:
        waiting = self._waiting.setdefault(handle.key, [])
        if handle not in waiting:
            waiting.append(handle)
        if handle.key not in self._inflight:
            self._unblock = True  # the wait in flight does not ask for this marker: send it again
            self._changed.set()

    def _leave(self, handle: SharedWaitHandle, unblock: bool) -> None:
        waiting = self._waiting.get(handle.key)
        if waiting and handle in waiting:
            waiting.remove(handle)
        if not waiting:
            self._waiting.pop(handle.key, None)
            if unblock and handle.key in self._inflight:
                self._unblock = True
                self._changed.set()

    # ------------------------------------------------------------------ the connection
    def _connect(self) -> None:
        def on_connect(conn: Any) -> None:
            conn.on_connect()
            try:
                conn.send_command("CLIENT", "ID")
                self.connection_id = int(conn.read_response())
            except redis.ResponseError:
                self.connection_id = None

        settings = self.settings
        self.blocking = clone_client(self.client, max_connections=2, settings=settings,
                                     client_name=SHARED_WAIT_NAME,
                                     socket_timeout=MAX_BLOCK_S + settings.socket_timeout,
                                     redis_connect_func=on_connect)

    def _pop(self, keys: Sequence[str], timeout: float) -> Any:
        try:
            return self.blocking.bzpopmin(list(keys), timeout)
        except Exception as exc:  # handed to the loop, which logs it and waits before the next
            return _Failed(exc)

    def _spawn(self, fn: Any, *args: Any) -> Any:
        if self.use_thread:
            return gevent.get_hub().threadpool.spawn(fn, *args)
        return gevent.spawn(fn, *args)

    def _send_unblock(self) -> bool:
        """``CLIENT UNBLOCK`` the wait in flight; True when Redis ended it (False: not
        blocked yet, or already answered, or the connection's id is unknown)."""
        self._unblock = False
        if self.connection_id is None:
            return False
        self.stats["unblocks"] += 1
        try:
            return bool(shared_call(self.client, "CLIENT", "UNBLOCK", self.connection_id))
        except Exception as exc:
            log.debug("CLIENT UNBLOCK of the shared marker wait failed: %s", exc)
            return False

    def _stale(self) -> bool:
        """A waiting queue's marker is not asked for by the wait in flight, or the wait
        asks for markers nobody wants since a pause or a close."""
        return self._unblock or any(key not in self._inflight for key in self._waiting)

    # ------------------------------------------------------------------ the loop
    def _run(self) -> None:
        while not self._closed:
            try:
                self._serve()
            except gevent.GreenletExit:
                raise
            except Exception:  # pragma: no cover - a bug: log it, never leave the workers without wake-ups
                log.exception("the shared marker wait failed; it starts again in 1 s")
                self._inflight = frozenset()
                gevent.sleep(1.0)

    def _serve(self) -> None:
        failures = 0
        while not self._closed:
            keys = list(self._waiting)
            if not keys:
                self._changed.clear()
                self._changed.wait()
                continue
            self._changed.clear()
            self._unblock = False
            self._inflight = frozenset(keys)
            self.stats["waits"] += 1
            pending = self._spawn(self._pop, keys, MAX_BLOCK_S)
            try:
                self._follow(pending)
                if not pending.ready():  # closed
                    break
                res = pending.get()
            finally:
                self._inflight = frozenset()
            if isinstance(res, _Failed):
                failures += 1
                self.stats["errors"] += 1
                delay = min(5.0, 0.1 * (2 ** min(failures - 1, 10)))
                if failures == 1 or failures % 10 == 0:
                    log.warning("the shared marker wait failed (%s: %s); waiting again in %.1f s",
                                type(res.error).__name__, res.error, delay)
                gevent.sleep(delay)
                continue
            failures = 0
            if res:
                self._deliver(res[0], float(res[2]))

    def _follow(self, pending: Any) -> None:
        """Wait for the wait in flight to answer; unblock it when the set of waiting
        queues changed in a way it does not cover. An unblock that found the wait not
        blocked yet (it raced the ``BZPOPMIN`` to Redis) is tried again shortly after."""
        retry: Optional[float] = None
        unblocked = False
        while not pending.ready() and not self._closed:
            if unblocked:
                timeout: Optional[float] = _UNBLOCK_WAIT_S
            else:
                timeout = retry
            gevent.wait([pending, self._changed], count=1, timeout=timeout)
            if pending.ready() or self._closed:
                return
            changed = self._changed.is_set()
            self._changed.clear()
            if unblocked:
                if changed:
                    continue  # it is ending: the next wait covers the change
                # the unblocked wait did not answer in time: try again
                unblocked = False
            if self._stale():
                if self._send_unblock():
                    unblocked = True
                    retry = None
                else:
                    # not blocked yet (or just answered): look again in a moment
                    retry = 0.0005 if retry is None else min(retry * 2, 0.5)
            else:
                retry = None

    def _deliver(self, key: str, score: float) -> None:
        self.stats["markers"] += 1
        waiting = self._waiting.get(key)
        if waiting:
            handle = waiting.pop(0)
            if not waiting:
                self._waiting.pop(key, None)
            handle._deliver(score)
            return
        handles = self._handles.get(key)
        if handles:  # its worker is not waiting now: it looks again (nothing is lost)
            self.stats["missed"] += 1
            handles[0]._deliver(score)
            return
        self.stats["dropped"] += 1  # the queue's worker closed meanwhile

    def close(self) -> None:
        """End the shared wait and drop its connection (the owner, after the workers closed)."""
        if self._closed:
            return
        self._closed = True
        for handles in list(self._handles.values()):
            for handle in list(handles):
                handle.cancel()
        self._waiting.clear()
        loop = self._loop
        if loop is not None and not loop.dead:
            if self._inflight:
                self._send_unblock()
            self._changed.set()
            loop.join(timeout=_UNBLOCK_WAIT_S + 1.0)
            if not loop.dead:
                loop.kill(block=False)
        if self.blocking is not None:
            try:
                self.blocking.connection_pool.disconnect(inuse_connections=not self.use_thread)
            except Exception:
                pass
            try:
                close_client(self.blocking)
            except Exception:
                pass

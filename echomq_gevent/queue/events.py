"""Queue events: read a queue's event stream (``QueueEvents``), publish custom events.

Every script that changes a job appends an entry to the queue's ``events`` stream
(``bull:<queue>:events``); Node's ``QueueEvents`` reads it with ``XREAD BLOCK``, and so
does :class:`QueueEvents` here, on its own connection, in a greenlet. Event names and
fields are the stream's, decoded the way Node decodes them: ``progress.data`` and
``completed.returnvalue`` are JSON, ``delayed.delay`` is a number, every other field is
text. A listener is called as ``fn(args, event_id)`` on the reader greenlet for
``"<event>"`` and again for ``"<event>:<jobId>"``.

When the process is not monkey-patched (a script, a test), the blocking read runs in a
gevent pool thread so the hub stays free; listeners still run on the reader greenlet.
A lost connection (Redis restarted, a network cut) is reported to ``error``
listeners and retried with back-off from the last entry read, so no event between
the cut and the reconnection is skipped (as far as the server kept them).
"""
from __future__ import annotations

import base64
import json
import logging
import time
from typing import Any, Callable, Dict, Iterator, List, Mapping, NamedTuple, Optional, Tuple

import gevent
import gevent.event
import gevent.queue
import redis

from ..connection.cluster import disconnect as cluster_disconnect
from ..connection.cluster import is_cluster
from ..connection.clients import DEFAULT_URL, ConnectionLike, clone_client, close_client, make_client
from ..errors import EchoMQError, close_matches
from ..protocol.keys import DEFAULT_PREFIX, QueueKeys
from ..connection.blocking import sockets_patched

log = logging.getLogger("echomq_gevent.events")

__all__ = ["QueueEvents", "QueueEventsProducer", "QueueEvent", "EVENT_NAMES", "JobFailedError",
           "WaitTimeoutError", "EventsClosedError"]

#: The events BullMQ 6.7.0's scripts write (and Node's QueueEvents emits), plus ``error``,
#: which a QueueEvents emits itself when reading fails.
EVENT_NAMES = ("active", "added", "cleaned", "completed", "deduplicated", "delayed", "drained",
               "duplicated", "error", "failed", "paused", "progress", "removed", "resumed",
               "retries-exhausted", "stalled", "waiting", "waiting-children")

#: Node's ``QUEUE_EVENT_SUFFIX``: a QueueEvents connection is named ``<prefix>:<base64 queue>:qe``.
CLIENT_NAME_SUFFIX = ":qe"

_CONNECTION_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)
#: Back-off between reconnection attempts: doubles from the first to the last value.
_RETRY_FIRST_S, _RETRY_MAX_S = 0.1, 2.0

Listener = Callable[[Dict[str, Any], str], Any]


class JobFailedError(EchoMQError):
    """``Job.wait_until_finished``: the job failed (or is gone); ``failed_reason`` says why."""

    def __init__(self, job_id: str, failed_reason: str) -> None:
        self.job_id = job_id
        self.failed_reason = failed_reason
        super().__init__(failed_reason)


class WaitTimeoutError(EchoMQError):
    """``Job.wait_until_finished``: no finish arrived within the timeout."""


class EventsClosedError(EchoMQError):
    """The QueueEvents was closed (or is closing) while something waited on it."""


class QueueEvent(NamedTuple):
    """One stream entry as the iterator form yields it."""

    name: str
    args: Dict[str, Any]
    id: str


def _decode_entry(fields: Mapping[str, str], entry_id: str) -> Tuple[str, Dict[str, Any], Optional[str]]:
    """(event name, args, problem) for one stream entry, decoded as Node decodes it.

    A field Node would parse but cannot be parsed stays as text; ``problem`` then says
    which (Node's QueueEvents stops reading in that case; ours reports and goes on).
    """
    args = dict(fields)
    name = args.pop("event", "")
    problem = None
    field = {"progress": "data", "completed": "returnvalue"}.get(name)
    if field is not None and field in args:
        try:
            args[field] = json.loads(args[field])
        except ValueError as exc:
            problem = f"events entry {entry_id} ({name}): field {field!r} is not JSON ({exc}); kept as text"
    elif name == "delayed" and "delay" in args:
        text = args["delay"]
        try:
            args["delay"] = int(text)
        except ValueError:
            try:
                args["delay"] = float(text)
            except ValueError:
                problem = f"events entry {entry_id} (delayed): field 'delay' is not a number: {text!r}"
    return name, args, problem


class QueueEvents:
    """Listen to the events of one queue (Node's ``QueueEvents``).

    ``last_event_id``: ``"$"`` (default) starts after the newest entry at construction
    time; ``"0"`` replays the whole stream; any stream id starts after that entry.
    ``blocking_timeout`` (ms) is the longest single ``XREAD BLOCK``. With ``autorun``
    (default) the reader greenlet starts at once; otherwise call :meth:`run`.

    Register listeners with :meth:`on`/:meth:`once` (names in :data:`EVENT_NAMES`, or
    ``"<event>:<jobId>"``; a custom name published with :class:`QueueEventsProducer`
    needs ``custom=True``), or iterate (``for ev in events: ...`` yields
    :class:`QueueEvent` until :meth:`close`). Use from the hub thread's greenlets.
    """

    def __init__(self, queue_name: str, connection: ConnectionLike = DEFAULT_URL,
                 prefix: str = DEFAULT_PREFIX, last_event_id: str = "$",
                 blocking_timeout: int = 10000, autorun: bool = True) -> None:
        self.keys = QueueKeys(queue_name, prefix)
        self.name = self.keys.name
        self.prefix = self.keys.prefix
        if not isinstance(last_event_id, str) or not last_event_id:
            raise ValueError(f"last_event_id must be a stream id ('$', '0', '<ms>-<seq>'), "
                             f"got {last_event_id!r}")
        if isinstance(blocking_timeout, bool) or not isinstance(blocking_timeout, int) or blocking_timeout < 1:
            raise ValueError(f"blocking_timeout must be milliseconds as an integer >= 1, got {blocking_timeout!r}")
        self.blocking_timeout = blocking_timeout
        encoded = base64.b64encode(self.name.encode("utf-8")).decode("ascii")
        self.client_name = f"{self.prefix}:{encoded}{CLIENT_NAME_SUFFIX}"
        base = make_client(connection)
        # A connection of our own: XREAD BLOCK holds it; the socket timeout catches a dead peer.
        self.client = clone_client(base, max_connections=2, client_name=self.client_name,
                                   socket_timeout=blocking_timeout / 1000.0 + 5)
        if base is not connection:
            base.close()
        self._requested_id = last_event_id
        self.last_event_id: Optional[str] = None if last_event_id == "$" else last_event_id
        self._listeners: Dict[str, List[Tuple[Listener, bool]]] = {}
        self._subscribers: List[gevent.queue.Queue] = []
        self._ready = gevent.event.Event()
        self._closed = gevent.event.Event()
        self.closing = False
        self._greenlet: Optional[gevent.Greenlet] = None
        self._use_thread = not sockets_patched()
        if autorun:
            self.run()

    def __repr__(self) -> str:
        return f"QueueEvents({self.name!r}, prefix={self.prefix!r}, last_event_id={self.last_event_id!r})"

    def __enter__(self) -> "QueueEvents":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- listeners ------------------------------------------------------------------------
    @staticmethod
    def _check_name(event: Any, custom: bool) -> str:
        if not isinstance(event, str) or not event:
            raise ValueError(f"event name must be a non-empty string, got {event!r}")
        if custom:
            return event
        base = event.split(":", 1)[0]
        if base not in EVENT_NAMES:
            near = close_matches(base, EVENT_NAMES)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ValueError(f"unknown event {event!r}{hint}; BullMQ's events are {', '.join(EVENT_NAMES)} "
                             f"(or '<event>:<jobId>'); pass custom=True for a custom published event")
        return event

    def on(self, event: str, fn: Listener, custom: bool = False) -> "QueueEvents":
        """Call ``fn(args, event_id)`` for every ``event`` (``error`` listeners get
        ``fn(exception, None)``). Raises ValueError for an unknown name."""
        if not callable(fn):
            raise TypeError(f"listener for {event!r} must be callable, got {fn!r}")
        self._listeners.setdefault(self._check_name(event, custom), []).append((fn, False))
        return self

    def once(self, event: str, fn: Listener, custom: bool = False) -> "QueueEvents":
        """As :meth:`on`, removed after its first call."""
        if not callable(fn):
            raise TypeError(f"listener for {event!r} must be callable, got {fn!r}")
        self._listeners.setdefault(self._check_name(event, custom), []).append((fn, True))
        return self

    def off(self, event: str, fn: Listener) -> "QueueEvents":
        """Remove a listener (no error when it was not registered)."""
        kept = [(f, once) for f, once in self._listeners.get(event, []) if f is not fn]
        if kept:
            self._listeners[event] = kept
        else:
            self._listeners.pop(event, None)
        return self

    def listener_count(self, event: str) -> int:
        return len(self._listeners.get(event, ()))

    def _emit(self, event: str, args: Any, event_id: Optional[str]) -> None:
        entries = self._listeners.get(event)
        if not entries:
            return
        if any(once for _, once in entries):
            self._listeners[event] = [(f, o) for f, o in entries if not o]
            if not self._listeners[event]:
                del self._listeners[event]
        for fn, _once in list(entries):
            try:
                fn(args, event_id)
            except Exception:
                log.exception("queue %r: listener %r for %r raised", self.name, fn, event)

    def _report(self, exc: BaseException) -> None:
        if self._listeners.get("error"):
            self._emit("error", exc, None)
        else:
            log.warning("queue %r events: %s", self.name, exc)

    # -- iterator form --------------------------------------------------------------------
    def __iter__(self) -> Iterator[QueueEvent]:
        return self.listen()

    def listen(self, timeout: Optional[float] = None) -> Iterator[QueueEvent]:
        """Yield every event read from now on as a :class:`QueueEvent`, until
        :meth:`close`, or until ``timeout`` seconds pass without one."""
        if self.closing:
            raise EventsClosedError(f"QueueEvents of queue {self.name!r} is closed")
        box: gevent.queue.Queue = gevent.queue.Queue()
        self._subscribers.append(box)
        try:
            while True:
                try:
                    item = box.get(timeout=timeout)
                except gevent.queue.Empty:
                    return
                if item is None:
                    return
                yield item
        finally:
            if box in self._subscribers:
                self._subscribers.remove(box)

    # -- reading --------------------------------------------------------------------------
    def run(self) -> gevent.Greenlet:
        """Start the reader greenlet (``autorun`` does this); returns it."""
        if self._greenlet is not None:
            raise EchoMQError(f"QueueEvents of queue {self.name!r} is already running")
        if self.closing:
            raise EventsClosedError(f"QueueEvents of queue {self.name!r} is closed")
        if self.last_event_id is None:
            try:  # "$" means "after what the stream holds now", not when the reader first runs
                self.last_event_id = self._blocking(self._start_id)
            except _CONNECTION_ERRORS as exc:
                log.warning("queue %r events: Redis not reachable yet (%s); the reader keeps trying", self.name, exc)
        self._greenlet = gevent.spawn(self._consume)
        return self._greenlet

    def wait_until_ready(self, timeout: Optional[float] = None) -> bool:
        """Block until the reader's place in the stream is fixed: every event written
        after this returns will be delivered. False if ``timeout`` (s) ran out."""
        if self._greenlet is None:
            raise EchoMQError(f"QueueEvents of queue {self.name!r} is not running; call run()")
        return bool(self._ready.wait(timeout))

    def _blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._use_thread:
            return gevent.get_hub().threadpool.apply(fn, args)
        return fn(*args)

    def _start_id(self) -> str:
        """``$`` pinned to a real id (the newest entry, or ``0-0``), so reading resumes
        exactly there after a reconnection."""
        newest = self.client.xrevrange(self.keys.events, "+", "-", count=1)
        return newest[0][0] if newest else "0-0"

    def _consume(self) -> None:
        delay = _RETRY_FIRST_S
        while not self.closing:
            try:
                if self.last_event_id is None:
                    self.last_event_id = self._blocking(self._start_id)
                self._ready.set()
                data = self._blocking(self.client.xread, {self.keys.events: self.last_event_id},
                                      None, self.blocking_timeout)
                delay = _RETRY_FIRST_S
            except _CONNECTION_ERRORS as exc:
                if self.closing:
                    break
                self._report(EchoMQError(f"queue {self.name!r}: reading events failed ({exc}); "
                                         f"retrying in {delay:.1f} s from {self.last_event_id or '$'}"))
                self._closed.wait(delay)
                delay = min(delay * 2, _RETRY_MAX_S)
                continue
            except Exception as exc:  # a server error reply, or the connection torn down by close()
                if self.closing:
                    break
                self._report(EchoMQError(f"queue {self.name!r}: XREAD on {self.keys.events!r} failed: {exc}"))
                self._closed.wait(_RETRY_MAX_S)
                continue
            if not data or self.closing:
                continue
            for entry_id, fields in data[0][1]:
                self.last_event_id = entry_id
                self._dispatch(entry_id, fields or {})
        self._ready.set()

    def _dispatch(self, entry_id: str, fields: Mapping[str, str]) -> None:
        name, args, problem = _decode_entry(fields, entry_id)
        if problem:
            self._report(EchoMQError(f"queue {self.name!r}: {problem}"))
        if not name:
            self._report(EchoMQError(f"queue {self.name!r}: events entry {entry_id} has no 'event' field; skipped"))
            return
        for box in self._subscribers:
            box.put(QueueEvent(name, args, entry_id))
        self._emit(name, args, entry_id)
        job_id = args.get("jobId")
        if job_id and name != "drained":
            self._emit(f"{name}:{job_id}", args, entry_id)

    def close(self, timeout: float = 5.0) -> None:
        """Stop reading and close the connection; iterators end, waiters get
        :class:`EventsClosedError`. Idempotent."""
        if self.closing:
            return
        self.closing = True
        self._closed.set()
        self._emit("closing", {}, None)
        for box in list(self._subscribers):
            box.put(None)
        greenlet = self._greenlet
        if greenlet is not None and not greenlet.ready():
            if self._use_thread:
                try:
                    # the pool thread sits in XREAD BLOCK: dropping the connection ends it
                    if is_cluster(self.client):
                        cluster_disconnect(self.client)
                    else:
                        self.client.connection_pool.disconnect(inuse_connections=True)
                except Exception:  # pragma: no cover - best effort
                    log.debug("disconnecting the events connection failed", exc_info=True)
                greenlet.join(timeout)
            if not greenlet.ready():  # on the hub (patched sockets) the read is simply abandoned
                greenlet.kill(block=True, timeout=timeout)
        close_client(self.client)

    # -- waiting for one job --------------------------------------------------------------
    def wait_for_job(self, scripts: Any, job_id: str, name: str = "",
                     timeout: Optional[float] = None) -> Any:
        """What ``Job.wait_until_finished`` does: the job's returnvalue once it completed,
        :class:`JobFailedError` when it failed or is gone, :class:`WaitTimeoutError` after
        ``timeout`` seconds, :class:`EventsClosedError` if this QueueEvents closes first."""
        if self.closing:
            raise EventsClosedError(f"QueueEvents of queue {self.name!r} is closed; cannot wait for job {job_id}")
        if scripts.keys != self.keys:
            raise ValueError(f"job {job_id} belongs to queue {scripts.keys.queue_key!r}, but this QueueEvents "
                             f"reads {self.keys.queue_key!r}")
        outcome: gevent.event.AsyncResult = gevent.event.AsyncResult()

        def on_completed(args: Dict[str, Any], _id: Optional[str]) -> None:
            if not outcome.ready():
                outcome.set(("completed", args.get("returnvalue")))

        def on_failed(args: Dict[str, Any], _id: Optional[str]) -> None:
            if not outcome.ready():
                outcome.set(("failed", args.get("failedReason") or ""))

        def on_closing(_args: Any, _id: Optional[str]) -> None:
            if not outcome.ready():
                outcome.set(("closed", None))

        done, failed = f"completed:{job_id}", f"failed:{job_id}"
        self.on(done, on_completed).on(failed, on_failed)
        self._listeners.setdefault("closing", []).append((on_closing, False))
        started = time.monotonic()
        try:
            # Listen first, then look: a job that finished before the listeners existed is
            # found by isFinished; one that finishes later is seen by the reader.
            if not self.wait_until_ready(timeout):
                raise WaitTimeoutError(f"job {job_id} ({name!r}): the events reader was not ready within {timeout} s")
            status = scripts.admin.is_finished(str(job_id), True)
            code = int(status[0]) if status else 0
            if code == 1:
                value = status[1] if len(status) > 1 else None
                try:
                    return json.loads(value) if value is not None else None
                except ValueError:
                    log.warning("job %s: corrupted returnvalue %r", job_id, value)
                    return None
            if code in (2, -1):
                reason = status[1] if len(status) > 1 else f"job {job_id} does not exist"
                raise JobFailedError(str(job_id), reason or "")
            left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
            try:
                kind, value = outcome.get(timeout=left)
            except gevent.Timeout:
                raise WaitTimeoutError(f"job {job_id} ({name!r}): no finish notification arrived within "
                                       f"{timeout} s") from None
            if kind == "completed":
                return value
            if kind == "failed":
                raise JobFailedError(str(job_id), value)
            raise EventsClosedError(f"QueueEvents of queue {self.name!r} closed while waiting for job {job_id}")
        finally:
            self.off(done, on_completed).off(failed, on_failed).off("closing", on_closing)


class QueueEventsProducer:
    """Publish custom events on a queue's events stream (Node's ``QueueEventsProducer``)."""

    def __init__(self, queue_name: str, connection: ConnectionLike = DEFAULT_URL,
                 prefix: str = DEFAULT_PREFIX) -> None:
        self.keys = QueueKeys(queue_name, prefix)
        self.name = self.keys.name
        self.client = make_client(connection)
        self._owns_client = self.client is not connection

    def publish_event(self, event_name: str, fields: Optional[Mapping[str, Any]] = None,
                      max_events: int = 1000) -> str:
        """``XADD events MAXLEN ~ max_events * event <event_name> field value ...``;
        returns the entry id. Values must be text or numbers (encode objects as JSON
        yourself); ``event`` is not allowed as a field name."""
        if not isinstance(event_name, str) or not event_name:
            raise ValueError(f"event_name must be a non-empty string, got {event_name!r}")
        if isinstance(max_events, bool) or not isinstance(max_events, int) or max_events < 1:
            raise ValueError(f"max_events must be an integer >= 1, got {max_events!r}")
        entry: Dict[str, Any] = {"event": event_name}
        for key, value in (fields or {}).items():
            if not isinstance(key, str) or not key or key == "event":
                raise ValueError(f"event field names must be non-empty strings other than 'event', got {key!r}")
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise ValueError(f"event field {key!r} must be text or a number, got {type(value).__name__} "
                                 f"(encode it with json.dumps first)")
            entry[key] = value
        return self.client.xadd(self.keys.events, entry, maxlen=max_events, approximate=True)

    def close(self) -> None:
        if self._owns_client:
            close_client(self.client)

    def __enter__(self) -> "QueueEventsProducer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

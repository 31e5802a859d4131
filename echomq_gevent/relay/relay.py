"""``Relay``: namespaced publish/subscribe between the nodes of a fleet, wire-compatible
with Node bullmq 6.7.0's ``Relay`` (same keys, scripts, inbox entries and leases), so a
Python service and Node services on one Redis exchange messages both ways.

Each node registers with a lease and renews it (heartbeat); its subscriptions (topics or
patterns with ``*`` and ``>``) are kept in Redis, and a publish appends one entry to the
inbox (a stream) of every live node with a matching subscription. A node reads its inbox,
calls its listeners, trims what it consumed and what exceeds ``inbox_max_length`` (the
oldest go first, counted as ``dropped``), and emits ``lag`` when its unread backlog
reaches ``lag_threshold``. Any node sweeps the nodes whose lease ended (``swept``); a node
whose own lease ended registers again and restores its subscriptions (``recovered``).

Threads: three greenlets of the hub that made the relay (the reader, the heartbeat and
the sweep). Listeners and event handlers are called on the reader (messages) or on the
greenlet that noticed (``lag``, ``swept``, ``recovered``, ``error``), one at a time, in
order: a listener that blocks holds up the messages behind it, not the heartbeat. In a
process that is not monkey-patched the blocking inbox wait runs in a pool thread (as
:class:`~echomq_gevent.events.QueueEvents`), so the hub stays free; the relay then runs
whenever the hub does (the main greenlet waiting in ``gevent.sleep``, ``join``...).
"""
from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple

import gevent
import gevent.event
import gevent.lock
import redis

from .. import __version__
from ..connection.clients import DEFAULT_URL, ConnectionLike, clone_client, close_client, make_client
from ..errors import EchoMQError
from ..protocol.keys import DEFAULT_PREFIX
from ..connection.blocking import sockets_patched
from ..queue.forward import forward
from .backend import MINIMUM_REDIS, InboxEntry, RelayBackend
from .errors import DATA_TOO_LARGE, RelayClosedError, RelayError
from .grammar import check_id, check_pattern, check_topic
from .messages import Endpoint, PublishResult, RelayMessage, Subscription
from .views import RelayViews

log = logging.getLogger("echomq_gevent.relay")

__all__ = ["Relay", "RelayMessage", "PublishResult", "Subscription", "RELAY_EVENTS"]

#: The events a Relay emits (Node's names).
RELAY_EVENTS = ("error", "recovered", "swept", "lag")
_MAX_INT = 2_147_483_647
_CONNECTION_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)
#: Entries read from the inbox in one batch, and nodes one sweep may drop (Node's figures).
_BATCH, _SWEEP_LIMIT = 100, 100


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value > _MAX_INT:
        raise ValueError(f"Relay {name} must be an integer from 1 to {_MAX_INT}, got {value!r}")
    return value


class Relay:
    """A node of a relay namespace (Node's ``Relay``).

    ``connection``: a Redis URL or client (the relay makes its own clients from it);
    ``namespace`` and ``node_id`` (default: a random hex id) are ``[A-Za-z0-9_-]{1,64}``;
    ``name`` is shown by dashboards. Durations are milliseconds: ``lease_duration`` (30 s),
    ``heartbeat_interval`` (a third of the lease), ``sweep_interval`` (the lease),
    ``block_timeout`` (5 s, the longest inbox wait). ``inbox_max_length`` (10,000) caps
    the unread messages kept for this node; ``lag_threshold`` (half of it) is the backlog
    at which ``lag`` is emitted; ``max_message_size`` (512 KiB) caps a published message's
    JSON text, in bytes. With ``autorun`` (default) the node registers and starts reading
    at once; otherwise call :meth:`run`. Use from greenlets of the hub that made it.
    """

    def __init__(self, connection: ConnectionLike = DEFAULT_URL, namespace: str = "default",
                 node_id: Optional[str] = None, name: Optional[str] = None, prefix: str = DEFAULT_PREFIX,
                 lease_duration: int = 30000, heartbeat_interval: Optional[int] = None,
                 sweep_interval: Optional[int] = None, block_timeout: int = 5000,
                 inbox_max_length: int = 10000, lag_threshold: Optional[int] = None,
                 max_message_size: int = 512 * 1024, skip_version_check: bool = False,
                 autorun: bool = True) -> None:
        self.namespace = check_id("namespace", namespace)
        self.node_id = check_id("node_id", node_id if node_id is not None else uuid.uuid4().hex)
        if name is not None and (not isinstance(name, str) or len(name) > 256):
            raise ValueError(f"Relay name must be a string of at most 256 characters, got {name!r}")
        if not isinstance(prefix, str) or not prefix:
            raise ValueError(f"Relay prefix must be a non-empty string, got {prefix!r}")
        self.name = name
        self.prefix = prefix
        self.lease_duration = _positive("lease_duration", lease_duration)
        self.heartbeat_interval = _positive("heartbeat_interval", heartbeat_interval) if heartbeat_interval \
            is not None else max(1, lease_duration // 3)
        self.sweep_interval = _positive("sweep_interval", sweep_interval) if sweep_interval is not None \
            else lease_duration
        self.block_timeout = _positive("block_timeout", block_timeout)
        self.inbox_max_length = _positive("inbox_max_length", inbox_max_length)
        self.lag_threshold = _positive("lag_threshold", lag_threshold) if lag_threshold is not None \
            else max(1, inbox_max_length // 2)
        if self.lag_threshold > self.inbox_max_length:
            raise ValueError(f"Relay lag_threshold ({self.lag_threshold}) must not exceed inbox_max_length "
                             f"({self.inbox_max_length})")
        self.max_message_size = _positive("max_message_size", max_message_size)
        self.skip_version_check = skip_version_check
        base = make_client(connection)
        # a client of our own for the script calls (closed with the relay; the caller's
        # stays open); the inbox wait has another
        self.client = clone_client(base, max_connections=8) if base is connection else base
        self.backend = RelayBackend(self.client, prefix, self.namespace, self.node_id)
        #: the namespace's views (``get_counts``, ``get_nodes``...), this relay's methods of the same names
        self.views = RelayViews(self)
        self.cursor = "0-0"
        self._endpoints: Dict[str, Endpoint] = {}
        self._listeners: Dict[str, List[Callable[..., Any]]] = {}
        self._registration = 0
        self._recovery_pending = False
        self._batch_in_flight = False
        self._ready = gevent.event.AsyncResult()
        self._closed = gevent.event.Event()
        self.closing = False
        self._greenlets: List[gevent.Greenlet] = []
        self._starter: Optional[gevent.Greenlet] = None
        self._reader: Optional[gevent.Greenlet] = None
        self._heartbeat_lock = gevent.lock.Semaphore()
        self._backlog_lock = gevent.lock.Semaphore()
        self._sweeping = False
        self._renewed_at = float("-inf")  # monotonic time of the last renewal sent
        self._trimmed_at = float("-inf")
        self._use_thread = not sockets_patched()
        if autorun:
            self.run()

    def __repr__(self) -> str:
        return f"Relay(namespace={self.namespace!r}, node_id={self.node_id!r}, prefix={self.prefix!r})"

    def __enter__(self) -> "Relay":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- events ---------------------------------------------------------------------------
    def on(self, event: str, fn: Callable[..., Any]) -> "Relay":
        """Call ``fn(value)`` on ``error`` (the exception), ``swept`` (the list of node ids
        removed), ``lag`` (the unread backlog) and ``recovered`` (``fn()``)."""
        if event not in RELAY_EVENTS:
            raise ValueError(f"unknown relay event {event!r}; the events are {', '.join(RELAY_EVENTS)}")
        if not callable(fn):
            raise TypeError(f"listener for {event!r} must be callable, got {fn!r}")
        self._listeners.setdefault(event, []).append(fn)
        return self

    def off(self, event: str, fn: Callable[..., Any]) -> "Relay":
        self._listeners[event] = [f for f in self._listeners.get(event, []) if f is not fn]
        return self

    def _emit(self, event: str, *args: Any) -> None:
        for fn in list(self._listeners.get(event, ())):
            try:
                fn(*args)
            except Exception:
                log.exception("relay %s/%s: %r listener %r raised", self.namespace, self.node_id, event, fn)

    def _report(self, exc: BaseException) -> None:
        if self._listeners.get("error"):
            self._emit("error", exc)
        else:
            log.warning("relay %s/%s: %s", self.namespace, self.node_id, exc)

    # -- starting -------------------------------------------------------------------------
    def run(self) -> None:
        """Register the node and start its greenlets (``autorun`` does this)."""
        if self._starter is not None:
            raise EchoMQError(f"{self!r} is already running")
        if self.closing:
            raise RelayClosedError(f"{self!r} is closed")
        self._starter = gevent.spawn(self._start)

    def wait_until_ready(self, timeout: Optional[float] = None) -> None:
        """Block until the node is registered; raise what registering raised."""
        if self._starter is None:
            raise EchoMQError(f"{self!r} is not running; call run()")
        try:
            self._ready.get(timeout=timeout)
        except gevent.Timeout:
            raise EchoMQError(f"{self!r} was not registered within {timeout} s") from None

    def _start(self) -> None:
        try:
            if not self.skip_version_check:
                version = self.backend.redis_version()
                if version < MINIMUM_REDIS:
                    raise EchoMQError(f"the relay needs Redis {'.'.join(map(str, MINIMUM_REDIS))} or newer; "
                                      f"this server is {'.'.join(map(str, version))}")
            self._register()
        except BaseException as exc:
            self._ready.set_exception(exc)
            self._report(exc)
            return
        if self.closing:
            self._ready.set(None)
            return
        self._greenlets = [gevent.spawn(self._every, self.heartbeat_interval, self._heartbeat_tick),
                           gevent.spawn(self._every, self.sweep_interval, self._sweep)]
        self._reader = gevent.spawn(self._read_loop)
        self._ready.set(None)

    def _register(self) -> None:
        sent_at = time.monotonic()
        self._do_register()
        self._renewed_at = sent_at

    def _do_register(self) -> None:
        info: Dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid(), "version": __version__,
                                "library": "echomq-gevent"}
        if self.name is not None:
            info = {"name": self.name, **info}
        self.backend.register_node(self.node_id, self.lease_duration, info, self.inbox_max_length)

    def _every(self, interval_ms: int, fn: Callable[[], None]) -> None:
        while not self._closed.wait(interval_ms / 1000.0):
            try:
                fn()
            except Exception as exc:
                if self.closing:
                    return
                self._report(exc)

    def _ensure_open(self) -> None:
        if self.closing:
            raise RelayClosedError(f"{self!r} is closed")

    # -- publish / subscribe ----------------------------------------------------------------
    def publish(self, topic: str, data: Any = None, retain: int = 0) -> PublishResult:
        """Publish ``data`` (anything ``json.dumps`` takes; ``None`` is JSON null) on a
        concrete topic. ``retain`` (ms) keeps it as the topic's retained message, which a
        later subscriber to that exact topic gets first. A bad topic, retain or a value
        too large raises before anything is written."""
        check_topic(topic)
        if isinstance(retain, bool) or not isinstance(retain, int) or retain < 0:
            raise ValueError(f"Invalid relay retain: {retain!r} (milliseconds, an integer >= 0)")
        try:
            text = json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"relay message on {topic!r} is not JSON-serializable: {exc}") from None
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:  # lone surrogates: written as \udXXXX escapes, as Node's JSON.stringify does
            text = json.dumps(data, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
            size = len(text)
        if size > self.max_message_size:
            raise RelayError.from_code(DATA_TOO_LARGE, topic, f"{size} bytes of JSON, more than max_message_size "
                                       f"{self.max_message_size}")
        self.wait_until_ready()
        self._ensure_open()
        from ..protocol.clock import now_ms

        mid, nodes, endpoints = self.backend.publish(topic, text, now_ms(), retain, self.max_message_size,
                                                     self.inbox_max_length)
        return PublishResult(mid, nodes, endpoints)

    def subscribe(self, pattern: str, listener: Callable[[RelayMessage], Any]) -> Subscription:
        """Call ``listener(message)`` for every message on a topic matching ``pattern``
        (``*`` one segment, ``>`` one or more trailing ones). For an exact topic its
        retained message, if any, comes first (``retained=True``)."""
        check_pattern(pattern)
        if not callable(listener):
            raise TypeError(f"relay listener for {pattern!r} must be callable, got {listener!r}")
        self.wait_until_ready()
        self._ensure_open()
        endpoint_id = uuid.uuid4().hex
        endpoint = Endpoint(pattern, listener)
        # listed first: messages read while subscribing are buffered, then delivered
        # after the retained one
        self._endpoints[endpoint_id] = endpoint
        try:
            _added, retained = self.backend.subscribe(self.node_id, endpoint_id, pattern)
        except BaseException:
            endpoint.pending = None
            endpoint.active = False
            try:
                self._remove_endpoint(endpoint_id)
            except Exception as cleanup:
                self._recovery_pending = True
                self._report(cleanup)
            raise
        pending = endpoint.pending or []
        endpoint.pending = None
        cutoff = 0
        if retained is not None:
            mid, ts, data = retained
            self._deliver(endpoint, pattern, mid, ts, data, True)
            cutoff = int(mid)
        for topic, mid, ts, data in pending:  # live copies of the retained one, or older, are skipped
            if int(mid) > cutoff:
                self._deliver(endpoint, topic, mid, ts, data, False)
        return Subscription(self, endpoint_id, endpoint)

    def _remove_endpoint(self, endpoint_id: str) -> None:
        if self.closing:
            return
        self.backend.remove_endpoint(self.node_id, endpoint_id)
        endpoint = self._endpoints.get(endpoint_id)
        if endpoint is not None and not endpoint.active:
            self._endpoints.pop(endpoint_id, None)

    def delete_retained(self, topic: str) -> bool:
        """Delete a topic's retained message; False when it had none."""
        check_topic(topic)
        self.wait_until_ready()
        self._ensure_open()
        return self.backend.delete_retained(topic)

    # -- reading -------------------------------------------------------------------------------
    def _read_loop(self) -> None:
        fetched: Optional[Tuple[List[InboxEntry], str, int]] = None
        while True:
            try:
                if fetched is None:
                    if self.closing:
                        break
                    with self._backlog_lock:  # a trim in progress must finish first
                        pass
                    registration = self._registration
                    # the wait returns at once when the inbox holds entries after the
                    # cursor; the batch itself is read by the script, atomically with
                    # the trimming of publishes
                    self._blocking(self.backend.wait_for_inbox, self.node_id, self.cursor, self.block_timeout)
                    if self.closing:
                        break
                    entries, cursor = self.backend.read_inbox(self.node_id, self.cursor, _BATCH)
                    fetched = (entries, cursor, registration)
                entries, cursor, registration = fetched
                self._batch_in_flight = bool(entries)
                if entries and not self.closing and not self._lease_fresh():
                    # the lease may have ended while reading: recover before listeners run
                    self._heartbeat(trim=False)
                fetched = None
                self._batch_in_flight = False
                if registration == self._registration:
                    # a batch of a registration replaced meanwhile is read again instead
                    self.cursor = cursor
                    for entry in entries:  # delivered even when closing: close drains
                        self._dispatch(entry)
                if entries and not self.closing and (
                        len(entries) == _BATCH or time.monotonic() - self._trimmed_at >= self.heartbeat_interval / 1000.0):
                    # a full batch: more may be waiting, so the backlog is looked at now;
                    # otherwise the heartbeat trims and looks
                    self._check_backlog()
            except gevent.GreenletExit:
                raise
            except Exception as exc:
                self._batch_in_flight = False
                if self.closing:
                    break
                self._report(EchoMQError(f"relay {self.namespace}/{self.node_id}: reading the inbox failed ({exc}); "
                                         f"retrying in 1 s"))
                self._closed.wait(1.0)

    def _blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._use_thread:
            return gevent.get_hub().threadpool.apply(fn, args)
        return fn(*args)

    def _dispatch(self, entry: InboxEntry) -> None:
        if entry.kind != "msg":  # kinds a newer version adds are not for this node
            return
        for endpoint_id in entry.endpoints:
            endpoint = self._endpoints.get(endpoint_id)
            if endpoint is None or not endpoint.active:
                continue
            if endpoint.pending is not None:
                endpoint.pending.append((entry.topic, entry.mid, entry.ts, entry.data))
            else:
                self._deliver(endpoint, entry.topic, entry.mid, entry.ts, entry.data, False)

    def _deliver(self, endpoint: Endpoint, topic: str, mid: str, ts: int, data: str, retained: bool) -> None:
        if not endpoint.active:
            return
        try:
            value = json.loads(data)
        except ValueError as exc:
            self._report(EchoMQError(f"relay message {mid} on {topic!r} is not JSON ({exc}); not delivered"))
            return
        try:
            endpoint.listener(RelayMessage(topic, str(mid), int(ts), value, retained))
        except Exception as exc:
            self._report(exc)

    # -- heartbeat, backlog, recovery, sweep ------------------------------------------------
    def _heartbeat_tick(self) -> None:
        self._heartbeat(trim=True)

    def _heartbeat(self, trim: bool) -> None:
        if self.closing:
            return
        if self._heartbeat_lock.locked():  # one at a time: wait for the one running
            with self._heartbeat_lock:
                return
        with self._heartbeat_lock:
            sent_at = time.monotonic()
            alive = self.backend.heartbeat(self.node_id, self.lease_duration)
            if alive:
                self._renewed_at = sent_at
            if (not alive or self._recovery_pending) and not self.closing:
                self._recover()
        if trim and not self.closing:
            self._check_backlog()

    def _lease_fresh(self) -> bool:
        """Whether the lease was renewed less than a third of its duration ago, so it
        cannot have ended since (the reader then skips the heartbeat Node sends before
        every batch: a round trip per batch; a node whose lease could have ended still
        recovers before its listeners see the batch)."""
        return not self._recovery_pending and \
            (time.monotonic() - self._renewed_at) * 1000.0 < self.lease_duration / 3.0

    def _check_backlog(self) -> None:
        """Trim what was consumed and what exceeds the max length; ``lag`` at the threshold."""
        if self.closing or self._batch_in_flight or self._backlog_lock.locked():
            return
        with self._backlog_lock:
            self._trimmed_at = time.monotonic()
            backlog = self.backend.trim_inbox(self.node_id, self.cursor, self.inbox_max_length)
        if backlog >= self.lag_threshold:
            self._emit("lag", backlog)

    def _recover(self) -> None:
        """The lease ended (or the node was swept): register again and subscribe every
        endpoint again. Retained messages are not delivered again; if it fails part way,
        the next heartbeat tries again."""
        self._recovery_pending = True
        self._registration += 1
        self._register()
        for endpoint_id, endpoint in list(self._endpoints.items()):
            if endpoint.active:
                self.backend.subscribe(self.node_id, endpoint_id, endpoint.pattern)
            if not endpoint.active:
                self._remove_endpoint(endpoint_id)
        self._recovery_pending = False
        self._emit("recovered")

    def _sweep(self) -> None:
        if self.closing or self._sweeping:
            return
        self._sweeping = True
        try:
            removed = self.backend.sweep(_SWEEP_LIMIT)
        finally:
            self._sweeping = False
        if removed:
            self._emit("swept", removed)

    def sweep(self) -> List[str]:
        """Drop the nodes whose lease ended now (the timer does it every ``sweep_interval``);
        returns their ids (``swept`` is emitted as well)."""
        self.wait_until_ready()
        removed = self.backend.sweep(_SWEEP_LIMIT)
        if removed:
            self._emit("swept", removed)
        return removed

    # -- views (views.py) -------------------------------------------------------------------
    get_counts = forward("views", RelayViews.get_counts)
    get_nodes = forward("views", RelayViews.get_nodes)
    get_subscriptions = forward("views", RelayViews.get_subscriptions)
    get_patterns = forward("views", RelayViews.get_patterns)
    get_retained = forward("views", RelayViews.get_retained)
    get_namespaces = forward("views", RelayViews.get_namespaces)
    get_node_connections = forward("views", RelayViews.get_node_connections)

    # -- closing ---------------------------------------------------------------------------------
    def close(self, timeout: float = 10.0) -> None:
        """Stop the node: no new reads, the batch already read is delivered, then the node
        unregisters (its subscriptions and inbox go) and its connections close. Idempotent."""
        if self.closing:
            return
        self.closing = True
        self._closed.set()
        me = gevent.getcurrent()
        reader = self._reader
        if reader is not None and reader is not me:  # close() from a listener: the reader stops after it
            # end the inbox wait: CLIENT UNBLOCK (again, in case it had not begun yet)
            with gevent.Timeout(timeout, False):
                while not reader.ready():
                    self.backend.interrupt()
                    reader.join(0.05)
            if not reader.ready():
                reader.kill(block=True, timeout=1)
        for greenlet in self._greenlets:
            if greenlet is me:  # close() from a lag/swept handler of the heartbeat or sweep
                continue
            greenlet.join(timeout)
            if not greenlet.ready():
                greenlet.kill(block=True, timeout=1)
        starter = self._starter
        if starter is not None and starter is not me:
            starter.join(timeout)
        registered = self._ready.ready() and self._ready.successful()
        if registered:
            try:
                self.backend.unregister_node(self.node_id)
            except Exception as exc:
                self._report(exc)
        self._endpoints.clear()
        self.backend.close()
        close_client(self.client)

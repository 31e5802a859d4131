"""Cancellations sent from anywhere (``Queue.cancel_job``, ``cancelJob-9``) reaching the
worker that runs the job.

``cancelJob-9`` marks an active job (hash fields ``cancelled`` and ``defa``) and
PUBLISHes ``{"jobId", "reason", "queue"}`` on the queue's channel
(:meth:`~echomq_gevent.protocol.keys.QueueKeys.cancellation_channel`). Two parts here:

* :class:`CancelSubscriber`: ONE subscription per process and Redis server, whatever the
  number of workers: a native OS thread (so a busy hub never delays it, as the lock
  renewal thread) with its own connection, subscribed to the channels of every running
  worker of the process. It hands each message to the hub of the worker that listens on
  that channel (``run_callback_threadsafe``), and resubscribes after a connection error.
* :class:`RemoteCancels`: a worker's listener, on its hub. A message for a job this
  worker runs cancels it as ``Worker.cancel_job`` does, *for good* (no retry: the settler
  fails it whatever attempts are left). When the subscription is (re)confirmed it reads
  the marks of its running jobs, so a cancellation published while it was disconnected
  is honoured too. A job picked up after it was marked carries ``defa`` and is failed
  without running, by any worker (Node's too).

On a Redis Cluster the subscription is a plain connection to one node, logged in as the
cluster's nodes are (:func:`~echomq_gevent.connection.clients.subscriber_client`): a
classic PUBLISH reaches the subscribers of every node, so one node serves every queue of
the process; after a connection error it moves to the next node.

A message that is not JSON, has no job id, or names another queue is ignored with one
log line; the worker goes on.
"""
from __future__ import annotations

import json
import logging
import time
from typing import Any, Dict, Optional, Set, Tuple

import gevent

from ..connection.blocking import native_lock, start_native_thread
from ..connection.clients import close_client, subscriber_client
from .cancel import Canceller
from .context import WorkerContext

log = logging.getLogger("echomq_gevent.worker")

#: the subscribing connection's name (CLIENT LIST)
SUBSCRIBER_NAME = "echomq:cancel"

__all__ = ["CancelSubscriber", "RemoteCancels", "POLL_S"]

#: Longest a subscription change waits for the thread's next look (seconds).
POLL_S = 0.2
#: How long, and for how many jobs at most, a cancellation for a job not running here is
#: kept for a pick-up that may still be on its way (seconds, entries).
REMEMBER_S = 30.0
REMEMBER_MAX = 1000
#: Pause after a connection error before subscribing again (seconds).
RETRY_S = 1.0

_registry: Dict[Tuple[Any, ...], "CancelSubscriber"] = {}
_registry_lock = native_lock()


def _server_key(client: Any) -> Tuple[Any, ...]:
    """What tells two clients of one Redis server apart (one subscription each). The
    clients of one Redis Cluster share one: a PUBLISH reaches every node."""
    try:
        kw = client.connection_pool.connection_kwargs
        return ("server", kw.get("host"), kw.get("port"), kw.get("path"), kw.get("db"), kw.get("username"))
    except AttributeError:  # a cluster client: its nodes and its user name
        names = tuple(sorted(n.name for n in client.get_nodes()))
        kwargs = getattr(client, "get_connection_kwargs", dict)()
        return ("cluster", names, kwargs.get("username"))


class CancelSubscriber:
    """The process's subscription to the cancellation channels of one Redis server.

    Made and shared by :meth:`join`; its thread ends when the last listener
    :meth:`leave`\\ s. Listeners are objects with ``loop`` (their hub's loop),
    ``on_message(data)`` and ``on_subscribed()``; both are called on a new greenlet of
    that hub."""

    def __init__(self, key: Tuple[Any, ...], source: Any, channel: str) -> None:
        self.key = key
        #: the client whose settings each new connection copies (the first worker's)
        self.source = source
        #: the first channel: on a Redis Cluster the subscription goes to the primary of
        #: its slot first (every node hears a PUBLISH; see ``subscriber_client``)
        self.first_channel = channel
        self.client = self._new_client(0)
        #: channel -> listeners (by id)
        self.listeners: Dict[str, Dict[int, Any]] = {}
        self.lock = native_lock()
        self.stopped = False
        #: messages handed to listeners, connection errors met (for tests and status)
        self.delivered = 0
        self.errors = 0

    @classmethod
    def join(cls, client: Any, channel: str, listener: Any) -> "CancelSubscriber":
        """Add ``listener`` on ``channel``, starting the process's subscription to
        ``client``'s server if there is none. Called on the listener's hub."""
        key = _server_key(client)
        with _registry_lock:
            sub = _registry.get(key)
            if sub is None or sub.stopped:
                sub = cls(key, client, channel)
                _registry[key] = sub
                start_native_thread(sub._run)
            with sub.lock:
                sub.listeners.setdefault(channel, {})[id(listener)] = listener
        return sub

    def leave(self, channel: str, listener: Any) -> None:
        """Remove ``listener``; the thread ends at its next look when none is left."""
        with self.lock:
            listeners = self.listeners.get(channel, {})
            listeners.pop(id(listener), None)
            if not listeners:
                self.listeners.pop(channel, None)

    def _new_client(self, attempt: int) -> Any:
        # named, as the marker waits are, so CLIENT LIST tells what each connection is
        return subscriber_client(self.source, self.first_channel, attempt, max_connections=2,
                                 health_check_interval=10, client_name=SUBSCRIBER_NAME)

    def _dispatch(self, channel: str, method: str, *args: Any) -> None:
        with self.lock:
            targets = list(self.listeners.get(channel, {}).values())
        for listener in targets:
            try:
                listener.loop.run_callback_threadsafe(gevent.spawn, getattr(listener, method), *args)
                self.delivered += 1
            except Exception:  # that hub is gone (its worker closed meanwhile)
                pass

    # -- on the thread ---------------------------------------------------------------
    def _run(self) -> None:
        pubsub: Any = None
        subscribed: Set[str] = set()
        failures = 0
        try:
            while True:
                with _registry_lock:
                    with self.lock:
                        wanted = set(self.listeners)
                    if not wanted:
                        self.stopped = True
                        if _registry.get(self.key) is self:
                            del _registry[self.key]
                        return
                try:
                    if pubsub is None:
                        pubsub = self.client.pubsub()
                        subscribed = set()
                    if wanted - subscribed:
                        pubsub.subscribe(*(wanted - subscribed))
                        subscribed |= wanted
                    if subscribed - wanted:
                        pubsub.unsubscribe(*(subscribed - wanted))
                        subscribed &= wanted
                    msg = pubsub.get_message(timeout=POLL_S)
                    if failures:
                        log.info("cancellation channel: subscribed again after %d failure(s)", failures)
                        failures = 0
                except Exception as exc:
                    with self.lock:
                        left = not self.listeners
                    if left:
                        # the last listener left meanwhile, and then the server went (the
                        # command's embedded Redis stops once its workers closed): the loop's
                        # next look ends the thread; nothing failed that anyone waits on
                        continue
                    failures += 1
                    self.errors += 1
                    if failures == 1 or failures % 20 == 0:
                        log.warning("cancellation channel: the subscription failed (%s); subscribing again "
                                    "every %.1f s", exc, RETRY_S)
                    try:
                        if pubsub is not None:
                            pubsub.close()
                        close_client(self.client)
                    except Exception:
                        pass
                    pubsub = None
                    time.sleep(RETRY_S)
                    try:  # a fresh client: nothing of the broken connection is kept
                        self.client = self._new_client(failures)
                    except Exception:
                        pass
                    continue
                if not msg:
                    continue
                channel = msg.get("channel")
                if isinstance(channel, bytes):
                    channel = channel.decode("utf-8", "replace")
                if msg.get("type") == "subscribe":
                    self._dispatch(channel, "on_subscribed")
                elif msg.get("type") == "message":
                    self._dispatch(channel, "on_message", msg.get("data"))
        finally:
            self.stopped = True
            try:
                if pubsub is not None:
                    pubsub.close()
            except Exception:
                pass
            try:
                close_client(self.client)
            except Exception:
                pass


def parse_message(data: Any, queue_base: str) -> Tuple[Optional[str], str, Optional[str]]:
    """(job id, reason, None) for a message meant for the queue whose key prefix is
    ``queue_base``; (None, "", why) for one to ignore. Never raises."""
    if isinstance(data, bytes):
        data = data.decode("utf-8", "replace")
    try:
        msg = json.loads(data)
    except (TypeError, ValueError):
        return None, "", f"not JSON: {str(data)[:80]!r}"
    if not isinstance(msg, dict):
        return None, "", f"not a JSON object: {str(data)[:80]!r}"
    job_id = msg.get("jobId")
    if not isinstance(job_id, str) or not job_id:
        return None, "", f"no job id: {str(data)[:80]!r}"
    queue = msg.get("queue")
    if queue is not None and queue != queue_base:
        return None, "", f"names another queue ({str(queue)[:80]!r})"
    reason = msg.get("reason")
    if reason is None:
        reason = ""
    if not isinstance(reason, str):
        return None, "", f"its reason is not text: {str(data)[:80]!r}"
    return job_id, reason[:1000], None


class RemoteCancels:
    """One worker's listener on its queue's cancellation channel. Made by the worker's
    lifecycle at set-up (:meth:`start`, on the hub) and stopped at tear-down."""

    def __init__(self, ctx: WorkerContext, canceller: Canceller) -> None:
        self.ctx = ctx
        self.canceller = canceller
        self.channel = ctx.keys.cancellation_channel()
        self.loop: Any = None
        self.subscriber: Optional[CancelSubscriber] = None
        #: subscriptions confirmed so far (the first, then one per reconnection)
        self.subscribed = 0

    def start(self) -> None:
        self.loop = gevent.get_hub().loop
        self.subscriber = CancelSubscriber.join(self.ctx.client, self.channel, self)

    def stop(self) -> None:
        if self.subscriber is not None:
            self.subscriber.leave(self.channel, self)
            self.subscriber = None

    def on_message(self, data: Any) -> None:
        """On a greenlet of the worker's hub: one message of the channel."""
        job_id, reason, why = parse_message(data, self.ctx.keys.base)
        if job_id is None:
            log.warning("%s: ignored a message on the cancellation channel: %s", self.ctx.label, why)
            return
        slot = self.ctx.active.get(job_id)
        if slot is None:
            # another worker's job, or one whose pick-up is still on its way here: kept a
            # while, the slot runner honours it before the processor starts
            self._remember(job_id, reason)
            return
        if slot.phase != "running":
            return  # its result is being written
        self.canceller.cancel_slot(slot, reason or None, final=True)

    def _remember(self, job_id: str, reason: str) -> None:
        requests = self.ctx.cancel_requests
        now = time.monotonic()
        if len(requests) >= REMEMBER_MAX:
            for old_id, (_, at) in list(requests.items()):
                if now - at > REMEMBER_S or len(requests) >= REMEMBER_MAX:
                    del requests[old_id]
        requests[job_id] = (reason, now)

    def on_subscribed(self) -> None:
        """On a greenlet of the worker's hub: the subscription is (again) in place; the
        running jobs marked meanwhile are cancelled."""
        self.subscribed += 1
        running = [job_id for job_id, slot in list(self.ctx.active.items()) if slot.phase == "running"]
        if not running:
            return
        keys = self.ctx.keys
        try:
            pipe = self.ctx.client.pipeline(transaction=False)
            for job_id in running:
                pipe.hget(keys.job(job_id), "cancelled")
            marks = pipe.execute()
        except Exception as exc:
            log.warning("%s: could not read the cancellation marks of %d running job(s): %s",
                        self.ctx.label, len(running), exc)
            return
        for job_id, mark in zip(running, marks):
            slot = self.ctx.active.get(job_id)
            if mark is not None and slot is not None and slot.phase == "running":
                reason = mark.decode("utf-8", "replace") if isinstance(mark, bytes) else str(mark)
                self.canceller.cancel_slot(slot, reason or None, final=True)

"""The worker's life around its fetch loop: set-up, signals, the two-stage close, hand-back.

:class:`Lifecycle` is a part of :class:`~echomq_gevent.worker.Worker` (a mixin): its
methods run on the worker's hub and use the worker's state (``_active`` slots, the
``_stop``/``_force``/``_closed`` events, the helpers ``_locks``, ``_stalled``,
``_marker``, ``_hub_monitor``, ``_runtime``, ``_pool``).

* ``_setup``: the job pool, the processor runtime, the blocking connection for the marker
  (named as BullMQ names it, so ``getWorkers()`` lists the worker), the lock renewal
  thread, the hub watchdog and the stalled checker.
* ``_signal_graceful``/``_signal_at_once``: what SIGTERM/SIGINT do when the worker runs
  alone on the main greenlet (:mod:`.signals` installs the handlers).
* ``_do_close``: stop fetching, wait up to the deadline for jobs in flight, hand the rest
  back to ``wait`` (``moveJobFromActiveToWait``), then ``_teardown``.
"""
from __future__ import annotations

import base64
import logging
import time
from typing import Any, Dict

import gevent
import gevent.pool
import redis

from ..connection.cluster import disconnect, is_cluster
from ..connection.slot_client import SlotClient
from ..connection.clients import clone_client, close_client
from ..errors import JobLockMismatch, JobLockNotExist
from .hub import HubMonitor
from .locks import LockRenewer
from .marker import MarkerWaiter
from ..connection.blocking import MAX_BLOCK_S
from .runtime import make_runtime
from ..protocol.scripts import Scripts
from .stalled import StalledChecker
from .options import lock_renew_interval
from .slots import CONNECTION_ERRORS, Slot, SlotGreenlet

log = logging.getLogger("echomq_gevent.worker")

__all__ = ["Lifecycle"]


def _tcp_kwargs(settings: Any) -> Dict[str, Any]:
    kwargs = settings.client_kwargs()
    kwargs.pop("socket_timeout", None)
    return kwargs


class Lifecycle:
    """Set-up, signals, close and hand-back of a :class:`~echomq_gevent.worker.Worker`."""

    def _blocking_client_name(self) -> str:
        name = f"{self.prefix}:{base64.b64encode(self.queue_name.encode('utf-8')).decode('ascii')}"
        if self.name:
            name += f":w:{self.name}"
        return name

    def _unblock_client(self) -> Any:
        """Where ``CLIENT UNBLOCK`` of the marker wait goes: its own node on a cluster."""
        return self._blocking if isinstance(self._blocking, SlotClient) else self.client

    def _setup(self) -> None:
        opts = self.options
        label = f"queue {self.queue_name!r}"
        # a Group, not a bounded Pool: the fetch loop's slot arithmetic is the bound, so
        # ``worker.concurrency = n`` can change it while jobs run
        self._pool = gevent.pool.Group()
        self._pool.greenlet_class = SlotGreenlet
        self._runtime = make_runtime(opts["offload"], self.concurrency, self.scripts)

        # on a cluster, script calls follow redirections through the worker's router: no
        # pick-up is written behind the marker wait there
        marker = MarkerWaiter(None, self.keys.marker, fetch_behind=not is_cluster(self.client))

        def on_connect(conn: Any) -> None:
            conn.on_connect()
            try:
                conn.send_command("CLIENT", "ID")
                marker.connection_id = int(conn.read_response())
            except redis.ResponseError:
                marker.connection_id = None

        settings = self.connection_settings
        if is_cluster(self.client):  # a plain client of the primary serving the marker's slot
            self._blocking = SlotClient(self.client, self.keys.marker, max_connections=2,
                                        **_tcp_kwargs(settings), client_name=self._blocking_client_name(),
                                        socket_timeout=MAX_BLOCK_S + settings.socket_timeout,
                                        redis_connect_func=on_connect)
        else:
            self._blocking = clone_client(self.client, max_connections=2, settings=settings,
                                          client_name=self._blocking_client_name(),
                                          socket_timeout=MAX_BLOCK_S + settings.socket_timeout,
                                          redis_connect_func=on_connect)
        marker.client = self._blocking
        marker.answer_slack = settings.socket_timeout
        self._marker = marker
        try:  # connect now: the worker shows up in getWorkers() from the start
            self._blocking.ping()
        except CONNECTION_ERRORS as exc:
            log.warning("%s: Redis is not reachable yet (%s); the worker keeps trying", label, exc)

        # a renewal must never wait on a dead connection longer than a lock can spare
        lock_timeout = min(settings.socket_timeout, max(1.0, self.lock_duration / 4000.0))
        lock_client = clone_client(self.client, max_connections=2, settings=settings, socket_timeout=lock_timeout)
        if is_cluster(lock_client):
            # a cluster client connects to its nodes as it is made, here on the hub's thread; the
            # renewal thread must use sockets of its own (a gevent socket is tied to its thread's hub)
            disconnect(lock_client)
        lock_scripts = Scripts(lock_client, self.keys, self.scripts.lib)
        self._locks = LockRenewer(lock_scripts, self.lock_duration, lock_renew_interval(opts),
                                  self._on_locks_lost, label=label)
        self._locks.start()

        threshold = opts["hub_block_threshold"]
        if threshold:
            self._hub_monitor = HubMonitor.for_current_hub()
            self._hub_monitor.acquire(float(threshold))

        if not opts["skip_stalled_check"]:
            self._stalled = StalledChecker(self.scripts, opts["max_stalled_count"], opts["stalled_interval"],
                                           self._on_stalled, label=label)
            self._stalled.start(check_now=True)

    def _inside_worker(self) -> bool:
        cur = gevent.getcurrent()
        if cur is self._run_greenlet and self._run_greenlet is not None:
            return True
        return any(slot.greenlet is cur for slot in list(self._active.values()))

    def _signal_graceful(self, signame: str) -> None:
        """First SIGTERM/SIGINT (see :mod:`.signals`): close within ``shutdown_timeout``."""
        log.info("queue %r: %s received; stopping, in-flight jobs get %s s to finish", self.queue_name,
                 signame, self.options["shutdown_timeout"])
        self.close(None, "signal")

    def _signal_at_once(self, signame: str) -> None:
        """A later signal: hand the unfinished jobs back now."""
        log.warning("queue %r: %s received again; handing unfinished jobs back now", self.queue_name, signame)
        self._force.set()
        if not self.closing:
            self.close(0, "signal")

    def _do_close(self, timeout: float, reason: str) -> None:
        label = f"queue {self.queue_name!r}"
        deadline = time.monotonic() + timeout
        try:
            self.plugins.notify("echomq_worker_stopping", worker=self, reason=reason)
            if self._stalled is not None:
                self._stalled.stop()
            if self._marker is not None:
                fetched = self._marker.cancel(self._unblock_client())
                if fetched is not None:  # a job it took is handed straight back (closing)
                    try:
                        self._take_fetched(fetched)
                    except Exception as exc:  # the wait's own error: nothing more to do with it
                        log.debug("%s: the cancelled marker wait failed: %s", label, exc)
            if self.running:  # the loop ends at its next step (at most one Redis call away)
                gevent.wait([self._loop_done, self._force], timeout=max(deadline - time.monotonic(), 1.0),
                            count=1)
            if self._pool is not None and len(self._pool):
                remaining = max(0.0, deadline - time.monotonic())
                if self._active:
                    log.info("%s: waiting up to %.1f s for %d job(s) in flight", label, remaining,
                             len(self._active))
                waiter = gevent.spawn(self._pool.join)
                gevent.wait([waiter, self._force], timeout=remaining, count=1)
                waiter.kill(block=False)
                self._hand_back_all()
                # let jobs that are writing their result finish; then stop what is left
                waiter = gevent.spawn(self._pool.join)
                gevent.wait([waiter], timeout=5.0)
                waiter.kill(block=False)
                if len(self._pool):
                    self._pool.kill(block=True, timeout=2.0)
        except Exception:
            log.exception("%s: error while closing", label)
        finally:
            self._teardown()
            self._closed.set()

    def _teardown(self) -> None:
        if self._locks is not None:
            self._locks.stop()
        if self._runtime is not None:
            self._runtime.close()
        if self._hub_monitor is not None:
            self._hub_monitor.release()
            self._hub_monitor = None
        if self._blocking is not None:
            try:
                self._blocking.connection_pool.disconnect(
                    inuse_connections=not (self._marker is not None and self._marker.use_thread))
            except Exception:
                pass
        self.scripts.release_connections()
        if self._owns_client:
            try:
                close_client(self.client)
            except Exception:
                pass

    def _hand_back_all(self) -> None:
        for slot in list(self._active.values()):
            if slot.phase == "running" and not slot.handed_back:
                self._hand_back(slot)
                if slot.greenlet is not None and slot.greenlet is not gevent.getcurrent():
                    slot.greenlet.kill(block=False)

    def _hand_back(self, slot: Slot) -> None:
        """Put an unfinished job back at the front of wait (``moveJobFromActiveToWait``)."""
        slot.handed_back = True
        job = slot.job
        try:
            self.scripts.move_job_from_active_to_wait(job.id, slot.token)
        except (JobLockMismatch, JobLockNotExist):
            log.warning("queue %r: job %s was not handed back: its lock is no longer ours", self.queue_name, job.id)
        except Exception as exc:
            log.error("queue %r: could not hand job %s back (%s); it stays active and the stalled check "
                      "of any worker will move it back to wait", self.queue_name, job.id, exc)
        else:
            self.counters["handed_back"] += 1
            self.plugins.notify("echomq_job_handed_back", worker=self, job=job)
        finally:
            if self._locks is not None:
                self._locks.untrack(job.id, slot.token)


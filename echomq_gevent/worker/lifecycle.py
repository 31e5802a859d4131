"""The worker's life around its fetch loop: run, set-up, signals, the two-stage close.

:class:`Lifecycle` is the part of a :class:`~echomq_gevent.worker.Worker` that carries
out ``run()``, ``start()`` and ``close()``. The Worker makes it with its
:class:`~echomq_gevent.worker.context.WorkerContext` and the parts it drives: the fetch
loop (:mod:`.fetch`), the settler (hand-back, lost locks; :mod:`.settle`) and the
canceller (a job whose lock is lost is stopped; :mod:`.cancel`). It writes the run's
flags of the context (``running``, ``set_up``, ``closing``, ``force``) and makes and
tears down the run's resources. All of it runs on the worker's hub.

* :meth:`Lifecycle.setup`: the processor runtime, the fetch loop's pool and marker
  connection, the lock renewal thread, the hub watchdog and the stalled checker.
* :meth:`Lifecycle.signal_graceful`/:meth:`Lifecycle.signal_at_once`: what SIGTERM/SIGINT
  do when the worker runs alone on the main greenlet (:mod:`.signals` installs the handlers).
* :meth:`Lifecycle.close`: stop fetching, wait up to the deadline for jobs in flight, hand
  the rest back to ``wait`` (``moveJobFromActiveToWait``), then tear down.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, List, Optional, Tuple

import gevent
import gevent.event

from ..connection.cluster import disconnect, is_cluster
from ..connection.clients import clone_client, close_client
from ..errors import WorkerStateError
from .cancel import Canceller
from .context import WorkerContext
from .fetch import FetchLoop
from .hub import HubMonitor
from .locks import LockRenewer
from .shared_locks import SharedLockRenewal
from .remote_cancel import RemoteCancels
from .runtime import make_runtime
from ..protocol.scripts import Scripts
from .settle import Settler
from .signals import ShutdownSignals
from .stalled import StalledChecker
from .options import lock_renew_interval

log = logging.getLogger("echomq_gevent.worker")

__all__ = ["Lifecycle"]


class Lifecycle:
    """Run, set-up, signals, close and hand-back of one :class:`~echomq_gevent.worker.Worker`.

    Owns: the run greenlet, the ``loop_done`` and ``closed`` events, the close's greenlet,
    the stalled checker. ``owns_client``: the worker made its client (closed at the end);
    ``on_close``: called at every :meth:`close` (manual processing drops its connection).
    """

    def __init__(self, ctx: WorkerContext, fetch: FetchLoop, settler: Settler, canceller: Canceller,
                 connection_settings: Any, owns_client: bool, on_close: Callable[[], None]) -> None:
        self.ctx = ctx
        self.fetch = fetch
        self.settler = settler
        self.canceller = canceller
        self.owns_client = owns_client
        self._connection_settings = connection_settings
        self._on_close = on_close
        #: the greenlet running :meth:`run` (set by ``start()`` or ``run()``)
        self.run_greenlet: Optional[gevent.Greenlet] = None
        #: the fetch loop has ended
        self.loop_done = gevent.event.Event()
        #: the close has finished
        self.closed = gevent.event.Event()
        self.stalled: Optional[StalledChecker] = None
        #: the listener on the queue's cancellation channel (set up with the rest)
        self.remote: Optional[RemoteCancels] = None
        self._close_greenlet: Optional[gevent.Greenlet] = None

    # ------------------------------------------------------------------ run
    def start(self) -> gevent.Greenlet:
        """Run the worker on a new greenlet of the current hub and return that greenlet."""
        self.run_greenlet = gevent.spawn(self.run)
        return self.run_greenlet

    def run(self) -> None:
        """Process jobs until :meth:`close` completes. Blocks the calling greenlet.

        On the main greenlet of the main thread it also installs SIGTERM/SIGINT handlers:
        the first signal closes gracefully (``shutdown_timeout``), the second hands the
        unfinished jobs back at once.
        """
        ctx = self.ctx
        if ctx.running:
            raise WorkerStateError(f"the worker of queue {ctx.queue_name!r} is already running")
        if ctx.closing:
            if self.run_greenlet is not None and gevent.getcurrent() is self.run_greenlet:
                return  # start() then close() before the greenlet ran: nothing to do
            raise WorkerStateError(f"the worker of queue {ctx.queue_name!r} was closed; create a new Worker")
        ctx.running = True
        self.run_greenlet = gevent.getcurrent()
        signals = ShutdownSignals(self.signal_graceful, self.signal_at_once)
        signals.install()
        try:
            self.setup()
            ctx.set_up = True
            ctx.plugins.notify("echomq_worker_started", worker=ctx.worker)
            try:
                self.fetch.run()
            except gevent.GreenletExit:
                if not ctx.closing:  # killed from outside: still hand the jobs back
                    log.warning("queue %r: the worker's greenlet was killed; closing now", ctx.queue_name)
                    gevent.spawn(self.close, 0, "killed")
                raise
            finally:
                self.loop_done.set()
            self.closed.wait()
        finally:
            signals.cancel()
            ctx.running = False
            ctx.set_up = False

    def fetch_loop_alive(self) -> bool:
        """True while the fetch loop runs (set up, not ended, its greenlet not dead).

        Not before the set-up (connections, lock-renewal thread) is done: a readiness
        probe that asks while the set-up waits on Redis must not see a worker without
        its renewal thread as ready."""
        g = self.run_greenlet
        ctx = self.ctx
        return (ctx.running and ctx.set_up and g is not None and not g.dead
                and not self.loop_done.is_set())

    def setup(self) -> None:
        """On the run greenlet: everything a running worker needs, in this order."""
        ctx = self.ctx
        opts = ctx.options
        ctx.runtime = make_runtime(opts["offload"], self.fetch.concurrency, ctx.scripts,
                                   processes=opts["offload_processes"], specs=self.offload_specs(),
                                   label=ctx.label)
        self.fetch.setup()

        # a renewal must never wait on a dead connection longer than a lock can spare
        settings = self._connection_settings
        lock_timeout = min(settings.socket_timeout, max(1.0, ctx.lock_duration / 4000.0))
        shared = self._shared_locks()
        if shared is not None:  # a pool's: one thread and one connection for its queues
            lock_client = shared.client(ctx.client, settings, lock_timeout)
        else:
            lock_client = clone_client(ctx.client, max_connections=2, settings=settings, socket_timeout=lock_timeout)
        if shared is None and is_cluster(lock_client):
            # a cluster client connects to its nodes as it is made, here on the hub's thread; the
            # renewal thread must use sockets of its own (a gevent socket is tied to its thread's hub)
            disconnect(lock_client)
        lock_scripts = Scripts(lock_client, ctx.keys, ctx.scripts.lib)
        ctx.locks = LockRenewer(lock_scripts, ctx.lock_duration, lock_renew_interval(opts),
                                self.on_locks_lost, label=ctx.label, on_marked=self.on_marked_cancelled,
                                shared=shared)
        ctx.locks.start()

        self.remote = RemoteCancels(ctx, self.canceller)
        self.remote.start()

        threshold = opts["hub_block_threshold"]
        if threshold:
            ctx.hub_monitor = HubMonitor.for_current_hub()
            ctx.hub_monitor.acquire(float(threshold))

        if not opts["skip_stalled_check"]:
            self.stalled = StalledChecker(ctx.scripts, opts["max_stalled_count"], opts["stalled_interval"],
                                          self.on_stalled, label=ctx.label)
            self.stalled.start(check_now=True)

    def _shared_locks(self) -> Any:
        """The lock renewal of the pool this queue runs in (made by its first worker), or
        None: no pool, or a Redis Cluster (each queue renews on its own primary there)."""
        member = self.fetch.member
        if member is None or is_cluster(self.ctx.client):
            return None
        budget = member.budget
        if budget.lock_renewal is None:
            budget.lock_renewal = SharedLockRenewal()
        return budget.lock_renewal

    def offload_specs(self) -> List[str]:
        """With ``offload: process``: the names of the processors known at start (the
        worker's ``processor``, else the plugins' registry entries for this queue), which
        every child imports as it starts. Raises ConfigError for one a child cannot find
        (a closure, a lambda, an object of ``__main__``). Empty for the other runtimes."""
        ctx = self.ctx
        if ctx.options["offload"] != "process":
            return []
        from ..errors import ConfigError
        from .offload import processor_spec

        fn = self.fetch.processor
        if fn is not None:
            found = [fn]
        else:
            routes = getattr(getattr(ctx.plugins, "registry", None), "routes", lambda: {})()
            found = [proc for (queue, _name), proc in routes.items() if queue == ctx.queue_name]
        specs = []
        for proc in found:
            try:
                specs.append(processor_spec(proc))
            except ConfigError as exc:
                raise ConfigError(f"{ctx.label}: offload: process: {exc}") from None
        return specs

    # ------------------------------------------------------------------ callbacks
    def on_marked_cancelled(self, marked: List[Tuple[str, str]]) -> None:
        """On the hub: the renewal found these running jobs marked cancelled (``cancelJob-9``)
        though no message reached this worker (a subscription that missed it): they are
        stopped for good, as the message would have."""
        active = self.ctx.active
        for job_id, reason in marked:
            slot = active.get(job_id)
            if slot is not None and slot.phase == "running":
                self.canceller.cancel_slot(slot, reason or None, final=True)

    def on_locks_lost(self, lost: List[Tuple[str, str]]) -> None:
        """On the hub: the renewal thread could not renew these (job id, token) locks."""
        active = self.ctx.active
        for job_id, token in lost:
            slot = active.get(job_id)
            if slot is None or slot.token != token or slot.phase != "running":
                continue
            self.settler.mark_lock_lost(slot, "renewal refused")
            # stop the processor too: another worker may take the job over now
            self.canceller.cancel_slot(slot, "the job's lock was lost")

    def on_stalled(self, ids: List[str]) -> None:
        """On the hub: this worker's stalled check moved these jobs back to wait (or failed them)."""
        ctx = self.ctx
        for job_id in ids:
            ctx.counters["stalled"] += 1
            ctx.plugins.notify("echomq_job_stalled", worker=ctx.worker, queue=ctx.queue_name, job_id=job_id)

    # ------------------------------------------------------------------ close
    def inside_worker(self) -> bool:
        """True on the run greenlet or a job greenlet of this worker."""
        cur = gevent.getcurrent()
        if cur is self.run_greenlet and self.run_greenlet is not None:
            return True
        return any(slot.greenlet is cur for slot in list(self.ctx.active.values()))

    def signal_graceful(self, signame: str) -> None:
        """First SIGTERM/SIGINT (see :mod:`.signals`): close within ``shutdown_timeout``."""
        ctx = self.ctx
        log.info("queue %r: %s received; stopping, in-flight jobs get %s s to finish", ctx.queue_name,
                 signame, ctx.options["shutdown_timeout"])
        self.close(None, "signal")

    def signal_at_once(self, signame: str) -> None:
        """A later signal: hand the unfinished jobs back now."""
        log.warning("queue %r: %s received again; handing unfinished jobs back now", self.ctx.queue_name, signame)
        self.ctx.force.set()
        if not self.ctx.closing:
            self.close(0, "signal")

    def close(self, timeout: Optional[float] = None, reason: str = "close") -> None:
        """Stop taking jobs, let in-flight jobs finish for up to ``timeout`` s (default
        ``shutdown_timeout``), hand the rest back to the front of ``wait``, close the
        connections. Returns when all of that is done.

        Safe to call from any greenlet of the worker's hub, and more than once: a second
        call with a shorter ``timeout`` (``0``: now) shortens the wait. Called from inside
        a job, it returns at once and the close runs on its own greenlet.
        """
        ctx = self.ctx
        if timeout is None:
            timeout = float(ctx.options["shutdown_timeout"])
        self._on_close()
        if ctx.closing:
            if timeout <= 0:
                ctx.force.set()
            else:
                gevent.spawn_later(timeout, ctx.force.set)
            if not self.inside_worker():
                self.closed.wait()
            return
        ctx.closing = True
        self.fetch.stop()
        self._close_greenlet = gevent.spawn(self._do_close, timeout, reason)
        if not self.inside_worker():
            self._close_greenlet.join()

    def _do_close(self, timeout: float, reason: str) -> None:
        ctx = self.ctx
        label = ctx.label
        deadline = time.monotonic() + timeout
        try:
            ctx.plugins.notify("echomq_worker_stopping", worker=ctx.worker, reason=reason)
            if self.stalled is not None:
                self.stalled.stop()
            self.fetch.cancel_wait()
            if ctx.running:  # the loop ends at its next step (at most one Redis call away)
                gevent.wait([self.loop_done, ctx.force], timeout=max(deadline - time.monotonic(), 1.0), count=1)
            pool = self.fetch.pool  # made by the set-up, which may have ended meanwhile
            if pool is not None and len(pool):
                remaining = max(0.0, deadline - time.monotonic())
                if ctx.active:
                    log.info("%s: waiting up to %.1f s for %d job(s) in flight", label, remaining,
                             len(ctx.active))
                waiter = gevent.spawn(pool.join)
                gevent.wait([waiter, ctx.force], timeout=remaining, count=1)
                waiter.kill(block=False)
                self._hand_back_all()
                # let jobs that are writing their result finish; then stop what is left
                waiter = gevent.spawn(pool.join)
                gevent.wait([waiter], timeout=5.0)
                waiter.kill(block=False)
                if len(pool):
                    pool.kill(block=True, timeout=2.0)
        except Exception:
            log.exception("%s: error while closing", label)
        finally:
            self._teardown()
            self.closed.set()

    def _teardown(self) -> None:
        ctx = self.ctx
        if ctx.locks is not None:
            ctx.locks.stop()
        if self.remote is not None:
            self.remote.stop()
        if ctx.runtime is not None:
            ctx.runtime.close()
        if ctx.hub_monitor is not None:
            ctx.hub_monitor.release()
            ctx.hub_monitor = None
        self.fetch.teardown()
        ctx.scripts.release_connections()
        if self.owns_client:
            try:
                close_client(ctx.client)
            except Exception:
                pass

    def _hand_back_all(self) -> None:
        for slot in list(self.ctx.active.values()):
            if slot.phase == "running" and not slot.handed_back:
                self.settler.hand_back(slot)
                if slot.greenlet is not None and slot.greenlet is not gevent.getcurrent():
                    slot.greenlet.kill(block=False)

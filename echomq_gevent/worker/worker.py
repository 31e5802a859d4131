"""The gevent Worker: takes jobs from a BullMQ v6 queue and runs them, one greenlet per job.

:class:`Worker` is the public face. It is made of parts, each an object that owns its
state, made here with what it needs (the shared part is one documented object,
:class:`~echomq_gevent.worker.context.WorkerContext`):

* :class:`~.fetch.FetchLoop` (``worker._fetch``): the fetch loop (slot arithmetic,
  batched pick-ups, the marker wait) and the greenlet that runs each job;
* :class:`~.settle.Settler` (``worker._settler``): writing a job's outcome (complete,
  retry, fail, put back) and the failure decision;
* :class:`~.lifecycle.Lifecycle` (``worker._lifecycle``): run, set-up, signals, the
  two-stage close;
* :class:`~.cancel.Canceller` (``worker._canceller``): cancelling running jobs
  (``cancel_job``, ``cancel_all_jobs``);
* :class:`~.manual.ManualProcessing` (``worker._manual``): processing by hand
  (``get_next_job``, ``job.move_to_completed``...);
* :mod:`.slots`: the per-job slot, the ``active_jobs`` view, the finish batcher.

Around it: locks are renewed from a native thread (:mod:`.locks`), stalled jobs are
recovered (:mod:`.stalled`), the hub is watched (:mod:`.hub`), processors run on the
greenlet or in a thread pool (:mod:`.runtime`), and retries follow BullMQ 6.7.0's rules
(:mod:`~echomq_gevent.protocol.backoff`). Redis is reached only through
:class:`~echomq_gevent.protocol.scripts.Scripts`. ``docs/worker.md`` describes the guarantees.
"""
from __future__ import annotations

import logging
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, Optional

import gevent

from ..connection.clients import DEFAULT_SETTINGS, ConnectionLike, ConnectionSettings, make_client
from ..queue.forward import forward
from ..queue.job import Job
from ..protocol.keys import QueueKeys
from ..plugins.host import PluginHost
from ..protocol.scripts import Scripts
from .cancel import Canceller
from .context import WorkerContext
from .fetch import FetchLoop
from .lifecycle import Lifecycle
from .manual import ManualProcessing
from .options import validate_worker_options
from .settle import RATE_LIMIT_MESSAGE, Settler
from ..protocol.clock import now_ms
from .slots import ActiveJobs

log = logging.getLogger("echomq_gevent.worker")

__all__ = ["Worker", "WorkerHealth", "ActiveJobs", "RATE_LIMIT_MESSAGE"]

#: What ``rate_limit(ms)`` stores in the limiter key (Number.MAX_SAFE_INTEGER, as Node).
_LIMITER_FULL = 9007199254740991


@dataclass(frozen=True)
class WorkerHealth:
    """What :meth:`Worker.health` reports; health endpoints and runners read it."""

    queue: str
    #: between ``run()`` starting and the close finishing
    running: bool
    #: a close has started (no new jobs)
    closing: bool
    #: jobs in flight, and the most the worker runs at once
    active: int
    concurrency: int
    #: the fetch loop's greenlet is running its loop
    fetch_loop_alive: bool
    #: seconds since the fetch loop last heard from Redis (``None`` before the first answer)
    last_fetch_age_s: Optional[float]
    #: the lock-renewal thread runs and ticks
    lock_renewal_alive: bool
    #: seconds the hub has not run its loop (0 when healthy or not watched)
    hub_blocked_for_s: float

    def as_dict(self) -> Dict[str, Any]:
        return asdict(self)


class Worker:
    """Processes the jobs of one queue.

    ``Worker(queue_name, processor=None, connection=..., prefix="bull", plugins=None, **options)``
    where ``options`` are the names of :data:`echomq_gevent.worker.options.WORKER_OPTIONS`
    (``concurrency``, ``lock_duration``, ``stalled_interval``, ``max_stalled_count``,
    ``drain_delay``, ``limiter``, ``remove_on_complete``, ``remove_on_fail``, ``name``,
    ``offload``, ``job_timeout``, ``max_started_attempts``, ``hub_block_threshold``,
    ``shutdown_timeout``...). An unknown or malformed option raises ``ConfigError``.

    ``connection``: a URL, or a client; a decoding client is used as it is and never
    closed by the worker (workers that share one share its script connection).
    ``marker_wait``: a :class:`~echomq_gevent.worker.shared_wait.SharedMarkerWait` on the
    same Redis, for the idle worker to wait in (one blocking connection for many queues)
    instead of on a blocking connection of its own.
    ``pool``: a :class:`~echomq_gevent.worker.pool.budget.PoolBudget` whose slots this
    worker shares with the other queues of the pool; its ``concurrency`` is then its cap
    inside the pool (:class:`~echomq_gevent.worker.pool.Pool` builds such workers).

    ``processor(job)`` is a plain function; its JSON-serialisable return value becomes the
    job's ``returnvalue``. Without one, ``plugins.get_processor(queue, job.name)`` is asked
    per job. Lifecycle events go to the plugins' telemetry hooks.

    Construct anywhere; :meth:`run` (blocking) or :meth:`start` (a greenlet) on the hub
    the worker should live on. A worker that is never run can hand out jobs one at a time
    instead (:meth:`get_next_job`, manual processing). Running jobs can be cancelled
    (:meth:`cancel_job`, :meth:`cancel_all_jobs`) and :attr:`concurrency` changed while it runs.
    """

    def __init__(self, queue_name: str, processor: Optional[Callable[[Job], Any]] = None,
                 connection: ConnectionLike = None, prefix: str = "bull",
                 plugins: Optional[PluginHost] = None,
                 connection_settings: Optional[ConnectionSettings] = None, marker_wait: Any = None,
                 pool: Any = None, **options: Any) -> None:
        self.options = validate_worker_options(options, where=f"Worker for queue {queue_name!r}")
        if processor is not None and not callable(processor):
            raise TypeError(f"Worker for queue {queue_name!r}: processor must be callable, got {processor!r}")
        self.keys = QueueKeys(queue_name, prefix)
        self.queue_name = queue_name
        self.prefix = prefix
        #: socket timeouts, keep-alive and health checks of every client this worker makes
        self.connection_settings = connection_settings or DEFAULT_SETTINGS
        # a decoding client passed in is used as it is (the runner's, shared by the workers
        # of a process); connection_settings apply to the clients the worker makes
        self.client = make_client(connection, settings=connection_settings, reuse=True)
        self.scripts = Scripts(self.client, self.keys)
        self.plugins = plugins if plugins is not None else PluginHost()
        self.id = str(uuid.uuid4())
        concurrency: int = self.options["concurrency"]

        # the parts, each made with what it needs (module notes above)
        ctx = self._ctx = WorkerContext(self, queue_name, prefix, self.keys, self.client, self.scripts,
                                        self.plugins, self.options, self.id)
        self._settler = Settler(ctx, concurrency)
        if pool is not None:
            self._settler.join_pool(pool)
        self._fetch = FetchLoop(ctx, self._settler, processor, concurrency, self.connection_settings,
                                shared_wait=marker_wait, pool=pool)
        self._canceller = Canceller(ctx)
        self._manual = ManualProcessing(ctx, self._settler)
        self._lifecycle = Lifecycle(ctx, self._fetch, self._settler, self._canceller, self.connection_settings,
                                    owns_client=self.client is not connection, on_close=self._manual.close)

        #: counts since start: completed, failed (final), retried, stalled (found by this
        #: worker's check), lock_lost, handed_back
        self.counters: Dict[str, int] = ctx.counters
        #: read-only ``job id -> Job`` of the jobs in flight
        self.active_jobs = ActiveJobs(ctx.active)

    # ------------------------------------------------------------------ public surface
    def __repr__(self) -> str:
        return f"<Worker {self.queue_name!r} prefix={self.prefix!r} concurrency={self.concurrency} id={self.id}>"

    @property
    def concurrency(self) -> int:
        """How many jobs run at once. Assignable while the worker runs: a higher value is
        used at the next fetch (the loop is woken); a lower one lets the running jobs
        finish and fetches again only below it. No job is dropped or interrupted."""
        return self._fetch.concurrency

    @concurrency.setter
    def concurrency(self, value: int) -> None:
        validate_worker_options(dict(self.options, concurrency=value), where=f"Worker for queue {self.queue_name!r}")
        self._fetch.concurrency = value
        if self._fetch.member is not None:  # its cap inside the pool
            self._fetch.member.set_cap(value)
        self.options["concurrency"] = value
        self._settler.concurrency_changed(value)
        runtime_pool = getattr(self._ctx.runtime, "pool", None)
        if runtime_pool is not None:  # thread offload: one native thread per slot
            runtime_pool.maxsize = max(value, 1)
        self._ctx.hints.wake()

    # settings read by the parts where they use them: assignable, as plain attributes were
    @property
    def name(self) -> Optional[str]:
        """The worker's name (option ``name``): in its connection names and finishes."""
        return self._ctx.name

    @name.setter
    def name(self, value: Optional[str]) -> None:
        self._ctx.name = value

    @property
    def lock_duration(self) -> int:
        """Milliseconds a job's lock lasts (option ``lock_duration``)."""
        return self._ctx.lock_duration

    @lock_duration.setter
    def lock_duration(self, value: int) -> None:
        self._ctx.lock_duration = value

    @property
    def limiter(self) -> Optional[Dict[str, int]]:
        """The worker's rate limit ``{"max": n, "duration": ms}``, or None (option ``limiter``)."""
        return self._ctx.limiter

    @limiter.setter
    def limiter(self, value: Optional[Dict[str, int]]) -> None:
        self._ctx.limiter = value

    @property
    def drain_delay(self) -> float:
        """Seconds an idle worker blocks on the marker per wait (option ``drain_delay``)."""
        return self._ctx.drain_delay

    @drain_delay.setter
    def drain_delay(self, value: float) -> None:
        self._ctx.drain_delay = value

    @property
    def processor(self) -> Optional[Callable[[Job], Any]]:
        """The function that runs each job (None: asked of the plugins per job)."""
        return self._fetch.processor

    @processor.setter
    def processor(self, value: Optional[Callable[[Job], Any]]) -> None:
        self._fetch.processor = value

    @property
    def running(self) -> bool:
        """Between ``run()`` starting and the close finishing."""
        return self._ctx.running

    @property
    def closing(self) -> bool:
        """A close has started (no new jobs)."""
        return self._ctx.closing

    @property
    def last_fetch_at(self) -> Optional[float]:
        """Wall-clock time (s) the fetch loop last heard from Redis (fetch or marker wait)."""
        return self._fetch.last_fetch_at

    @property
    def completed_count(self) -> int:
        return self.counters["completed"]

    @property
    def failed_count(self) -> int:
        return self.counters["failed"]

    @property
    def pool(self) -> Any:
        """The :class:`~echomq_gevent.worker.pool.budget.PoolBudget` this worker shares
        slots in, or None."""
        member = self._fetch.member
        return None if member is None else member.budget

    @property
    def paused(self) -> bool:
        return self._fetch.paused

    @property
    def closed(self) -> bool:
        return self._lifecycle.closed.is_set()

    def lock_thread_alive(self) -> bool:
        """True while the lock-renewal thread runs and ticks (health endpoints)."""
        locks = self._ctx.locks
        return locks is not None and locks.alive()

    def hub_blocked_for(self) -> float:
        """Seconds the hub has not run its loop (0 when healthy, or when not watched)."""
        monitor = self._ctx.hub_monitor
        return monitor.blocked_for() if monitor is not None else 0.0

    fetch_loop_alive = forward("_lifecycle", Lifecycle.fetch_loop_alive)

    def health(self) -> WorkerHealth:
        """A snapshot of the worker's health; cheap, no Redis call. Any greenlet."""
        last = self.last_fetch_at
        return WorkerHealth(
            queue=self.queue_name, running=self.running, closing=self.closing,
            active=len(self._ctx.active), concurrency=self.concurrency,
            fetch_loop_alive=self.fetch_loop_alive(),
            last_fetch_age_s=None if last is None else round(max(0.0, time.time() - last), 3),
            lock_renewal_alive=self.lock_thread_alive(),
            hub_blocked_for_s=round(self.hub_blocked_for(), 3))

    start = forward("_lifecycle", Lifecycle.start)
    run = forward("_lifecycle", Lifecycle.run)
    close = forward("_lifecycle", Lifecycle.close)

    def pause(self, wait: bool = False) -> None:
        """Stop taking new jobs in this worker (the queue is not paused); in-flight jobs
        go on. With ``wait`` it returns once they are done."""
        self._fetch.paused = True
        self._ctx.hints.wake()  # out of a marker wait, so the loop sees the pause at once
        if wait:
            while self._ctx.active:
                gevent.sleep(0.01)

    def resume(self) -> None:
        """Take jobs again after :meth:`pause`."""
        self._fetch.paused = False
        self._ctx.hints.wake()

    def rate_limit(self, ms: int) -> None:
        """Block fetching for ``ms`` on every worker of the queue that has a limiter (or when
        the queue has a global rate limit), as Node's ``worker.rateLimit``. Usually followed
        by ``raise RateLimitError()`` in the processor, which puts the job back at the front."""
        if isinstance(ms, bool) or not isinstance(ms, int) or ms <= 0:
            raise ValueError(f"rate_limit(ms): ms must be an integer > 0, got {ms!r}")
        self.client.set(self.keys.limiter, _LIMITER_FULL, px=ms)
        self._ctx.hints.limit(now_ms() + ms)

    cancel_job = forward("_canceller", Canceller.cancel_job)
    cancel_all_jobs = forward("_canceller", Canceller.cancel_all_jobs)
    get_next_job = forward("_manual", ManualProcessing.get_next_job)
    manual_complete = forward("_manual", ManualProcessing.manual_complete)
    manual_fail = forward("_manual", ManualProcessing.manual_fail)

"""The gevent Worker: takes jobs from a BullMQ v6 queue and runs them, one greenlet per job.

:class:`Worker` is the public face; its parts live one concern per module:

* :mod:`.worker_fetch`: the fetch loop (slot arithmetic, batched pick-ups, the marker
  wait) and the greenlet that runs each job;
* :mod:`.worker_settle`: writing a job's outcome (complete, retry, fail, put back) and
  the failure decision;
* :mod:`.worker_lifecycle`: set-up, signals, the two-stage close and the hand-back;
* :mod:`.worker_slots`: the per-job slot, the ``active_jobs`` view, the finish batcher;
* :mod:`.worker_cancel`: cancelling running jobs (``cancel_job``, ``cancel_all_jobs``);
* :mod:`.worker_manual`: processing by hand (``get_next_job``, ``job.move_to_completed``...).

Around it: locks are renewed from a native thread (:mod:`.locks`), stalled jobs are
recovered (:mod:`.stalled`), the hub is watched (:mod:`.hub`), processors run on the
greenlet or in a thread pool (:mod:`.runtime`), and retries follow BullMQ 6.7.0's rules
(:mod:`.backoff`). Redis is reached only through :class:`~echomq_gevent.protocol.scripts.Scripts`.
``docs/worker.md`` describes the guarantees.
"""
from __future__ import annotations

import itertools
import logging
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Optional

import gevent
import gevent.event
import gevent.pool
import redis

from ..connection.clients import DEFAULT_SETTINGS, ConnectionLike, ConnectionSettings, make_client
from ..errors import WorkerStateError
from .hub import HubMonitor
from ..queue.job import Job
from ..protocol.options import keep_jobs
from ..protocol.keys import QueueKeys
from .locks import LockRenewer
from ..plugins.host import PluginHost
from .marker import MarkerWaiter
from ..protocol.scripts import Scripts
from .signals import ShutdownSignals
from .stalled import StalledChecker
from .cancel import Cancelling
from .fetch import FetchLoop
from .lifecycle import Lifecycle
from .manual import ManualProcessing
from .options import validate_worker_options
from .settle import RATE_LIMIT_MESSAGE, Settling
from ..protocol.clock import now_ms
from .slots import ActiveJobs, FinishBatcher, Slot

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


class Worker(Lifecycle, FetchLoop, Settling, Cancelling, ManualProcessing):
    """Processes the jobs of one queue.

    ``Worker(queue_name, processor=None, connection=..., prefix="bull", plugins=None, **options)``
    where ``options`` are the names of :data:`echomq_gevent.worker.options.WORKER_OPTIONS`
    (``concurrency``, ``lock_duration``, ``stalled_interval``, ``max_stalled_count``,
    ``drain_delay``, ``limiter``, ``remove_on_complete``, ``remove_on_fail``, ``name``,
    ``offload``, ``job_timeout``, ``max_started_attempts``, ``hub_block_threshold``,
    ``shutdown_timeout``...). An unknown or malformed option raises ``ConfigError``.

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
                 connection_settings: Optional[ConnectionSettings] = None, **options: Any) -> None:
        self.options = validate_worker_options(options, where=f"Worker for queue {queue_name!r}")
        if processor is not None and not callable(processor):
            raise TypeError(f"Worker for queue {queue_name!r}: processor must be callable, got {processor!r}")
        self.keys = QueueKeys(queue_name, prefix)
        self.queue_name = queue_name
        self.prefix = prefix
        #: socket timeouts, keep-alive and health checks of every client this worker makes
        self.connection_settings = connection_settings or DEFAULT_SETTINGS
        self.client = make_client(connection, settings=connection_settings)
        self._owns_client = self.client is not connection
        self.scripts = Scripts(self.client, self.keys)
        self.plugins = plugins if plugins is not None else PluginHost()
        self.processor = processor
        self.id = str(uuid.uuid4())
        opts = self.options
        self.name: Optional[str] = opts["name"]
        self._concurrency: int = opts["concurrency"]
        self.lock_duration: int = opts["lock_duration"]
        self.drain_delay: float = float(opts["drain_delay"])
        self.limiter: Optional[Dict[str, int]] = (
            {"max": int(opts["limiter"]["max"]), "duration": int(opts["limiter"]["duration"])}
            if opts["limiter"] else None)
        #: keepJobs maps of the worker's own removeOn* options (used when a job has none)
        self._keep = {"completed": keep_jobs(opts["remove_on_complete"]),
                      "failed": keep_jobs(opts["remove_on_fail"])}
        self._timeout_s: Optional[float] = opts["job_timeout"] / 1000.0 if opts["job_timeout"] else None
        #: maxMetricsSize of moveToFinished: "" records no metrics (as Node without opts.metrics)
        self._max_metrics: Any = opts["metrics"]["maxDataPoints"] if opts["metrics"] else ""
        #: ARGV[8] of moveToFinished, packed, by what it is made of (Settling._packed_finish_opts)
        self._packed_finish: Dict[Any, bytes] = {}

        self._active: Dict[str, Slot] = {}
        #: read-only ``job id -> Job`` of the jobs in flight
        self.active_jobs = ActiveJobs(self._active)
        self.running = False
        #: run() finished its set-up (connections made, lock-renewal thread started)
        self._set_up = False
        self.closing = False
        self._paused = False
        #: counts since start: completed, failed (final), retried, stalled (found by this
        #: worker's check), lock_lost, handed_back
        self.counters: Dict[str, int] = dict.fromkeys(
            ("completed", "failed", "retried", "stalled", "lock_lost", "handed_back"), 0)
        #: wall-clock time (s) the fetch loop last heard from Redis (fetch or marker wait)
        self.last_fetch_at: Optional[float] = None

        self._tokens = itertools.count()
        self._kick = gevent.event.Event()      # wakes the fetch loop
        self._stop = gevent.event.Event()      # set once closing starts
        self._force = gevent.event.Event()     # hand unfinished jobs back now
        self._closed = gevent.event.Event()
        self._loop_done = gevent.event.Event()
        self._drained = False
        #: tokens of pick-ups (or fetch-nexts) whose answer was lost; read back by the loop
        self._unknown_pickups: List[str] = []
        self._burst = 1
        self._block_until = 0
        self._limit_until = 0
        self._signals = 0
        self._close_greenlet: Optional[gevent.Greenlet] = None

        # with one slot nothing can finish together: call directly
        self._batcher: Optional[FinishBatcher] = FinishBatcher(self.scripts) if self.concurrency > 1 else None
        self._pool: Optional[gevent.pool.Pool] = None
        self._runtime: Any = None
        self._blocking: Optional[redis.Redis] = None
        self._marker: Optional[MarkerWaiter] = None
        self._locks: Optional[LockRenewer] = None
        self._stalled: Optional[StalledChecker] = None
        self._hub_monitor: Optional[HubMonitor] = None
        self._run_greenlet: Optional[gevent.Greenlet] = None

    # ------------------------------------------------------------------ public surface
    def __repr__(self) -> str:
        return f"<Worker {self.queue_name!r} prefix={self.prefix!r} concurrency={self.concurrency} id={self.id}>"

    @property
    def concurrency(self) -> int:
        """How many jobs run at once. Assignable while the worker runs: a higher value is
        used at the next fetch (the loop is woken); a lower one lets the running jobs
        finish and fetches again only below it. No job is dropped or interrupted."""
        return self._concurrency

    @concurrency.setter
    def concurrency(self, value: int) -> None:
        validate_worker_options(dict(self.options, concurrency=value), where=f"Worker for queue {self.queue_name!r}")
        self._concurrency = value
        self.options["concurrency"] = value
        if getattr(self, "_batcher", 0) is None and value > 1:
            self._batcher = FinishBatcher(self.scripts)
        runtime_pool = getattr(getattr(self, "_runtime", None), "pool", None)
        if runtime_pool is not None:  # thread offload: one native thread per slot
            runtime_pool.maxsize = max(value, 1)
        kick = getattr(self, "_kick", None)
        if kick is not None:
            kick.set()

    @property
    def completed_count(self) -> int:
        return self.counters["completed"]

    @property
    def failed_count(self) -> int:
        return self.counters["failed"]

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def lock_thread_alive(self) -> bool:
        """True while the lock-renewal thread runs and ticks (health endpoints)."""
        return self._locks is not None and self._locks.alive()

    def hub_blocked_for(self) -> float:
        """Seconds the hub has not run its loop (0 when healthy, or when not watched)."""
        return self._hub_monitor.blocked_for() if self._hub_monitor is not None else 0.0

    def fetch_loop_alive(self) -> bool:
        """True while the fetch loop runs (set up, not ended, its greenlet not dead).

        Not before the set-up (connections, lock-renewal thread) is done: a readiness
        probe that asks while the set-up waits on Redis must not see a worker without
        its renewal thread as ready."""
        g = self._run_greenlet
        return (self.running and self._set_up and g is not None and not g.dead
                and not self._loop_done.is_set())

    def health(self) -> WorkerHealth:
        """A snapshot of the worker's health; cheap, no Redis call. Any greenlet."""
        last = self.last_fetch_at
        return WorkerHealth(
            queue=self.queue_name, running=self.running, closing=self.closing,
            active=len(self._active), concurrency=self.concurrency,
            fetch_loop_alive=self.fetch_loop_alive(),
            last_fetch_age_s=None if last is None else round(max(0.0, time.time() - last), 3),
            lock_renewal_alive=self.lock_thread_alive(),
            hub_blocked_for_s=round(self.hub_blocked_for(), 3))

    def start(self) -> gevent.Greenlet:
        """Run the worker on a new greenlet of the current hub and return that greenlet."""
        self._run_greenlet = gevent.spawn(self.run)
        return self._run_greenlet

    def run(self) -> None:
        """Process jobs until :meth:`close` completes. Blocks the calling greenlet.

        On the main greenlet of the main thread it also installs SIGTERM/SIGINT handlers:
        the first signal closes gracefully (``shutdown_timeout``), the second hands the
        unfinished jobs back at once.
        """
        if self.running:
            raise WorkerStateError(f"the worker of queue {self.queue_name!r} is already running")
        if self.closing:
            if self._run_greenlet is not None and gevent.getcurrent() is self._run_greenlet:
                return  # start() then close() before the greenlet ran: nothing to do
            raise WorkerStateError(f"the worker of queue {self.queue_name!r} was closed; create a new Worker")
        self.running = True
        self._run_greenlet = gevent.getcurrent()
        signals = ShutdownSignals(self._signal_graceful, self._signal_at_once)
        signals.install()
        try:
            self._setup()
            self._set_up = True
            self.plugins.notify("echomq_worker_started", worker=self)
            try:
                self._loop()
            except gevent.GreenletExit:
                if not self.closing:  # killed from outside: still hand the jobs back
                    log.warning("queue %r: the worker's greenlet was killed; closing now", self.queue_name)
                    gevent.spawn(self.close, 0, "killed")
                raise
            finally:
                self._loop_done.set()
            self._closed.wait()
        finally:
            signals.cancel()
            self.running = False
            self._set_up = False

    def close(self, timeout: Optional[float] = None, reason: str = "close") -> None:
        """Stop taking jobs, let in-flight jobs finish for up to ``timeout`` s (default
        ``shutdown_timeout``), hand the rest back to the front of ``wait``, close the
        connections. Returns when all of that is done.

        Safe to call from any greenlet of the worker's hub, and more than once: a second
        call with a shorter ``timeout`` (``0``: now) shortens the wait. Called from inside
        a job, it returns at once and the close runs on its own greenlet.
        """
        if timeout is None:
            timeout = float(self.options["shutdown_timeout"])
        self._close_manual()
        if self.closing:
            if timeout <= 0:
                self._force.set()
            else:
                gevent.spawn_later(timeout, self._force.set)
            if not self._inside_worker():
                self._closed.wait()
            return
        self.closing = True
        self._stop.set()
        self._kick.set()
        self._close_greenlet = gevent.spawn(self._do_close, timeout, reason)
        if not self._inside_worker():
            self._close_greenlet.join()

    def pause(self, wait: bool = False) -> None:
        """Stop taking new jobs in this worker (the queue is not paused); in-flight jobs
        go on. With ``wait`` it returns once they are done."""
        self._paused = True
        self._kick.set()  # out of a marker wait, so the loop sees the pause at once
        if wait:
            while self._active:
                gevent.sleep(0.01)

    def resume(self) -> None:
        """Take jobs again after :meth:`pause`."""
        self._paused = False
        self._kick.set()

    def rate_limit(self, ms: int) -> None:
        """Block fetching for ``ms`` on every worker of the queue that has a limiter (or when
        the queue has a global rate limit), as Node's ``worker.rateLimit``. Usually followed
        by ``raise RateLimitError()`` in the processor, which puts the job back at the front."""
        if isinstance(ms, bool) or not isinstance(ms, int) or ms <= 0:
            raise ValueError(f"rate_limit(ms): ms must be an integer > 0, got {ms!r}")
        self.client.set(self.keys.limiter, _LIMITER_FULL, px=ms)
        self._limit_until = max(self._limit_until, now_ms() + ms)


"""The gevent Worker: takes jobs from a BullMQ v6 queue and runs them, one greenlet per job.

The fetch loop is the seed's slot arithmetic::

    available_slots = concurrency - len(active_jobs)

Each free slot is filled by one atomic pickup (``moveToActive-11``); each job runs in
its own greenlet of a ``gevent.pool.Pool(concurrency)`` and is recorded in
``active_jobs`` by id. A finishing job calls ``moveToFinished`` with fetch-next, so a
busy slot is refilled in the same round trip and the same greenlet. When nothing is
waiting the loop blocks on the marker ZSET (``BZPOPMIN``, ``drain_delay``) on its own
connection, honouring delay markers; rate limited, it sleeps the limiter TTL; with a
delayed job pending, it wakes at its due time. A gevent Event wakes it the moment a
slot frees or a state changes; it never spins.

Around it: locks are renewed from a native thread (:mod:`.locks`), stalled jobs are
recovered (:mod:`.stalled`), the hub is watched (:mod:`.hub`), processors run on the
greenlet or in a thread pool (:mod:`.runtime`), and retries follow BullMQ 6.7.0's rules
(:mod:`.backoff`). ``docs/worker.md`` describes the guarantees.
"""
from __future__ import annotations

import base64
import itertools
import json
import logging
import signal
import threading
import time
import traceback
import uuid
from collections.abc import Mapping
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import gevent
import gevent.event
import gevent.pool
import greenlet
import redis

from . import backoff as backoff_mod
from .connection import ConnectionLike, clone_client, make_client
from .errors import (
    DelayedError,
    InvalidJobDataError,
    JobHasFailedChildren,
    JobLockMismatch,
    JobLockNotExist,
    JobNotExist,
    JobNotInState,
    JobPendingChildren,
    RateLimitError,
    UnrecoverableError,
    WaitingChildrenError,
)
from .hookspecs import FailureDecision
from .hub import HubMonitor
from .job import Job
from .job_options import keep_jobs
from .keys import QueueKeys
from .locks import LockRenewer
from .plugins import PluginHost
from .runtime import MAX_BLOCK_S, MIN_BLOCK_S, MarkerWaiter, make_runtime
from .scripts import Scripts, pack
from .stalled import StalledChecker
from .worker_options import lock_renew_interval, validate_worker_options

log = logging.getLogger("echomq_gevent.worker")

__all__ = ["Worker", "RATE_LIMIT_MESSAGE"]

#: The message BullMQ's RateLimitError carries; a processor error with it means "put back".
RATE_LIMIT_MESSAGE = "bullmq:rateLimitExceeded"
#: What ``rate_limit(ms)`` stores in the limiter key (Number.MAX_SAFE_INTEGER, as Node).
_LIMITER_FULL = 9007199254740991
#: Names of processor errors that mean "the processor moved the job itself".
_MOVED_BY_PROCESSOR = ("DelayedError", "WaitingChildrenError", "WaitingError")
_CONNECTION_ERRORS = (redis.ConnectionError, redis.TimeoutError)
#: Most pick-ups the fetch loop pipelines at once when many slots are free.
_MAX_BURST = 64


def _moved_state(err: BaseException) -> str:
    """Where a processor that raised ``err`` has put its job (for ``echomq_job_moved``)."""
    name = type(err).__name__
    if isinstance(err, WaitingChildrenError) or name == "WaitingChildrenError":
        return "waiting-children"
    if name == "WaitingError":
        return "wait"
    return "delayed"


def _now_ms() -> int:
    return int(time.time() * 1000)


class _Gone(Exception):
    """Internal: the job is no longer ours (lock lost, removed, handed back)."""


class _Slot:
    """One in-flight job: what the worker knows about it while it runs."""

    __slots__ = ("job", "token", "started", "phase", "lock_lost", "handed_back", "greenlet")

    def __init__(self, job: Job, token: str) -> None:
        self.job = job
        self.token = token
        self.started = time.monotonic()
        #: "running" (processor), "finishing" (result being written), "done"
        self.phase = "running"
        self.lock_lost = False
        self.handed_back = False
        self.greenlet: Any = None


class _FinishBatcher:
    """Sends the ``moveToFinished`` calls of job greenlets that finish in the same turn
    of the hub as one pipeline (one write, one read), instead of one round trip each.

    A job greenlet calls :meth:`call` and waits for its own answer; the first request of
    a turn spawns the flush greenlet, which runs after every greenlet already woken in
    that turn, so batching adds no latency. Errors reach each caller as exceptions: a
    connection error fails the whole batch (each caller retries on its own), a script
    error only its call.
    """

    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts
        self._pending: List[Tuple[List[str], List[Any], gevent.event.AsyncResult]] = []
        self._scheduled = False
        self.batches = 0
        self.calls = 0

    def call(self, keys: List[str], args: List[Any]) -> Any:
        """On a job greenlet: run ``moveToFinished-14`` with ``keys``/``args``; returns the
        raw answer (negative codes are not checked here)."""
        result = gevent.event.AsyncResult()
        self._pending.append((keys, args, result))
        if not self._scheduled:
            self._scheduled = True
            gevent.spawn(self._flush)
        return result.get()

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        self._scheduled = False
        if not batch:
            return
        self.batches += 1
        self.calls += len(batch)
        if len(batch) == 1:
            keys, args, result = batch[0]
            try:
                result.set(self.scripts.call("moveToFinished-14", keys, args))
            except BaseException as exc:  # handed to the caller
                result.set_exception(exc)
            return
        pipe = self.scripts.client.pipeline(transaction=False)
        for keys, args, _ in batch:
            self.scripts.queue_call(pipe, "moveToFinished-14", keys, args)
        try:
            answers = self.scripts.execute_pipeline(pipe)
        except BaseException as exc:
            for _, _, result in batch:
                result.set_exception(exc)
            return
        finally:
            try:
                pipe.reset()
            except Exception:
                pass
        for (_, _, result), answer in zip(batch, answers):
            if isinstance(answer, BaseException):
                result.set_exception(answer)
            else:
                result.set(answer)


class ActiveJobs(Mapping):
    """Read-only view ``job id -> Job`` of the jobs a worker is running right now."""

    def __init__(self, slots: Dict[str, _Slot]) -> None:
        self._slots = slots

    def __getitem__(self, job_id: str) -> Job:
        return self._slots[job_id].job

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._slots))

    def __len__(self) -> int:
        return len(self._slots)

    def __repr__(self) -> str:
        return f"ActiveJobs({list(self._slots)})"


class Worker:
    """Processes the jobs of one queue.

    ``Worker(queue_name, processor=None, connection=..., prefix="bull", plugins=None, **options)``
    where ``options`` are the names of :data:`echomq_gevent.worker_options.WORKER_OPTIONS`
    (``concurrency``, ``lock_duration``, ``stalled_interval``, ``max_stalled_count``,
    ``drain_delay``, ``limiter``, ``remove_on_complete``, ``remove_on_fail``, ``name``,
    ``offload``, ``job_timeout``, ``max_started_attempts``, ``hub_block_threshold``,
    ``shutdown_timeout``...). An unknown or malformed option raises ``ConfigError``.

    ``processor(job)`` is a plain function; its JSON-serialisable return value becomes the
    job's ``returnvalue``. Without one, ``plugins.get_processor(queue, job.name)`` is asked
    per job. Lifecycle events go to the plugins' telemetry hooks.

    Construct anywhere; :meth:`run` (blocking) or :meth:`start` (a greenlet) on the hub
    the worker should live on.
    """

    def __init__(self, queue_name: str, processor: Optional[Callable[[Job], Any]] = None,
                 connection: ConnectionLike = None, prefix: str = "bull",
                 plugins: Optional[PluginHost] = None, **options: Any) -> None:
        self.options = validate_worker_options(options, where=f"Worker for queue {queue_name!r}")
        if processor is not None and not callable(processor):
            raise TypeError(f"Worker for queue {queue_name!r}: processor must be callable, got {processor!r}")
        self.keys = QueueKeys(queue_name, prefix)
        self.queue_name = queue_name
        self.prefix = prefix
        self.client = make_client(connection)
        self._owns_client = self.client is not connection
        self.scripts = Scripts(self.client, self.keys)
        self.plugins = plugins if plugins is not None else PluginHost()
        self.processor = processor
        self.id = str(uuid.uuid4())
        opts = self.options
        self.name: Optional[str] = opts["name"]
        self.concurrency: int = opts["concurrency"]
        self.lock_duration: int = opts["lock_duration"]
        self.drain_delay: float = float(opts["drain_delay"])
        self.limiter: Optional[Dict[str, int]] = (
            {"max": int(opts["limiter"]["max"]), "duration": int(opts["limiter"]["duration"])}
            if opts["limiter"] else None)
        #: keepJobs maps of the worker's own removeOn* options (used when a job has none)
        self._keep = {"completed": keep_jobs(opts["remove_on_complete"]),
                      "failed": keep_jobs(opts["remove_on_fail"])}
        self._timeout_s: Optional[float] = opts["job_timeout"] / 1000.0 if opts["job_timeout"] else None

        self._active: Dict[str, _Slot] = {}
        #: read-only ``job id -> Job`` of the jobs in flight
        self.active_jobs = ActiveJobs(self._active)
        self.running = False
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
        self._burst = 1
        self._block_until = 0
        self._limit_until = 0
        self._signals = 0
        self._close_greenlet: Optional[gevent.Greenlet] = None

        # with one slot nothing can finish together: call directly
        self._batcher: Optional[_FinishBatcher] = _FinishBatcher(self.scripts) if self.concurrency > 1 else None
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
            raise RuntimeError(f"the worker of queue {self.queue_name!r} is already running")
        if self.closing:
            if self._run_greenlet is not None and gevent.getcurrent() is self._run_greenlet:
                return  # start() then close() before the greenlet ran: nothing to do
            raise RuntimeError(f"the worker of queue {self.queue_name!r} was closed; create a new Worker")
        self.running = True
        self._run_greenlet = gevent.getcurrent()
        handlers = self._install_signal_handlers()
        try:
            self._setup()
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
            for h in handlers:
                try:
                    h.cancel()
                except Exception:
                    pass
            self.running = False

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
        self._limit_until = max(self._limit_until, _now_ms() + ms)

    # ------------------------------------------------------------------ set-up / tear-down
    def _blocking_client_name(self) -> str:
        name = f"{self.prefix}:{base64.b64encode(self.queue_name.encode('utf-8')).decode('ascii')}"
        if self.name:
            name += f":w:{self.name}"
        return name

    def _setup(self) -> None:
        opts = self.options
        label = f"queue {self.queue_name!r}"
        self._pool = gevent.pool.Pool(self.concurrency)
        self._runtime = make_runtime(opts["offload"], self.concurrency, self.scripts)

        marker = MarkerWaiter(None, self.keys.marker)

        def on_connect(conn: Any) -> None:
            conn.on_connect()
            try:
                conn.send_command("CLIENT", "ID")
                marker.connection_id = int(conn.read_response())
            except redis.ResponseError:
                marker.connection_id = None

        self._blocking = clone_client(self.client, max_connections=2, client_name=self._blocking_client_name(),
                                      socket_timeout=MAX_BLOCK_S + 5, redis_connect_func=on_connect)
        marker.client = self._blocking
        self._marker = marker
        try:  # connect now: the worker shows up in getWorkers() from the start
            self._blocking.ping()
        except _CONNECTION_ERRORS as exc:
            log.warning("%s: Redis is not reachable yet (%s); the worker keeps trying", label, exc)

        lock_scripts = Scripts(clone_client(self.client, max_connections=2), self.keys, self.scripts.lib)
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

    def _install_signal_handlers(self) -> List[Any]:
        if greenlet.getcurrent().parent is not None or threading.current_thread() is not threading.main_thread():
            return []
        handlers = []
        for signum in (signal.SIGTERM, signal.SIGINT):
            try:
                handlers.append(gevent.signal_handler(signum, self._on_signal, signum))
            except Exception as exc:  # pragma: no cover - platform without the signal
                log.debug("cannot handle signal %s: %s", signum, exc)
        return handlers

    def _on_signal(self, signum: int) -> None:
        self._signals += 1
        name = signal.Signals(signum).name
        if self._signals == 1:
            log.info("queue %r: %s received; stopping, in-flight jobs get %s s to finish", self.queue_name,
                     name, self.options["shutdown_timeout"])
            gevent.spawn(self.close, None, "signal")
        else:
            log.warning("queue %r: %s received again; handing unfinished jobs back now", self.queue_name, name)
            self._force.set()
            if not self.closing:
                gevent.spawn(self.close, 0, "signal")

    def _do_close(self, timeout: float, reason: str) -> None:
        label = f"queue {self.queue_name!r}"
        deadline = time.monotonic() + timeout
        try:
            self.plugins.notify("echomq_worker_stopping", worker=self, reason=reason)
            if self._stalled is not None:
                self._stalled.stop()
            if self._marker is not None:
                self._marker.cancel(self.client)
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
                self.client.close()
            except Exception:
                pass

    def _hand_back_all(self) -> None:
        for slot in list(self._active.values()):
            if slot.phase == "running" and not slot.handed_back:
                self._hand_back(slot)
                if slot.greenlet is not None and slot.greenlet is not gevent.getcurrent():
                    slot.greenlet.kill(block=False)

    def _hand_back(self, slot: _Slot) -> None:
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

    # ------------------------------------------------------------------ the fetch loop
    def _loop(self) -> None:
        failures = 0
        while not self.closing:
            try:
                self._loop_once()
                failures = 0
            except gevent.GreenletExit:
                raise
            except Exception as exc:
                failures += 1
                delay = min(5.0, 0.1 * (2 ** min(failures - 1, 10)))
                if failures == 1 or failures % 10 == 0:
                    log.warning("queue %r: fetching failed (%s: %s); retrying in %.1f s", self.queue_name,
                                type(exc).__name__, exc, delay)
                else:
                    log.debug("queue %r: fetching failed again (%s)", self.queue_name, exc)
                self._stop.wait(delay)

    def _wait_kick(self, timeout: Optional[float]) -> None:
        self._kick.clear()
        self._kick.wait(timeout)

    def _loop_once(self) -> None:
        if self._paused or len(self._active) >= self.concurrency:
            self._wait_kick(None)
            return
        now = _now_ms()
        if self._limit_until > now:
            wait_ms = min(self._limit_until - now, self.options["max_rate_limit_delay"])
            self._wait_kick(wait_ms / 1000.0)
            return
        if self._drained and not self._wait_for_work():
            return
        self._fetch(min(self._burst, self.concurrency - len(self._active)))

    def _fetch(self, count: int) -> None:
        """``count`` pick-ups (``moveToActive``), pipelined when more than one; start every
        job they bring. The burst doubles while every pick-up brings a job (a backlog and
        free slots: fill them in a few round trips) and falls back to 1 otherwise."""
        tokens = [f"{self.id}:{next(self._tokens)}" for _ in range(max(1, count))]
        now = _now_ms()
        packed = [pack(Scripts.fetch_opts(t, self.lock_duration, self.limiter, self.name)) for t in tokens]
        if len(tokens) == 1:
            answers: List[Any] = [self.scripts.move_to_active(tokens[0], self.lock_duration, now,
                                                              packed_opts=packed[0])]
        else:
            keys = self.scripts._fetch_keys()
            pipe = self.client.pipeline(transaction=False)
            for opts in packed:
                self.scripts.queue_call(pipe, "moveToActive-11", keys, [self.keys.base, now, opts])
            answers = self.scripts.execute_pipeline(pipe)
        self.last_fetch_at = time.time()
        error: Optional[BaseException] = None
        started = 0
        for token, answer in zip(tokens, answers):
            if isinstance(answer, BaseException):
                error = error or answer
                continue
            job = self._next_from(answer, token)
            if job is not None:
                started += 1
                self._start(job, token)
        if started == len(tokens) and error is None:
            self._burst = min(self._burst * 2, _MAX_BURST)
        else:
            self._burst = 1
        if error is not None:
            raise error

    def _wait_for_work(self) -> bool:
        """Block on the marker. True: time to call moveToActive; False: look again."""
        now = _now_ms()
        if self._block_until:
            remaining = self._block_until - now
            if remaining < 1:
                self._block_until = 0
                return True
            timeout = min(max(remaining / 1000.0, MIN_BLOCK_S), MAX_BLOCK_S)
        else:
            timeout = min(max(self.drain_delay, MIN_BLOCK_S), MAX_BLOCK_S)
        assert self._marker is not None
        self._kick.clear()
        outcome, score = self._marker.wait(timeout, self._kick)
        self.last_fetch_at = time.time()
        if outcome == "woken":
            return False
        if outcome == "marker":
            due = int(score)
            if due > 0 and due - _now_ms() >= 1:
                # a delay marker: the earliest delayed job is due at ``due``; wait for it
                if not self._block_until or due < self._block_until:
                    self._block_until = due
                return False
        self._block_until = 0
        return True

    def _next_from(self, res: Any, token: str) -> Optional[Job]:
        """Read a fetch answer (``[fields|0, id|0, ttl, due]``, or 0/None for nothing),
        update the loop's state and return the new job, if any."""
        if not res:
            self._drained = True
            return None
        flat, job_id, ttl, due = res[0], res[1], int(res[2] or 0), int(res[3] or 0)
        now = _now_ms()
        old_block, old_limit = self._block_until, self._limit_until
        self._limit_until = now + ttl if ttl > 0 else 0
        self._block_until = due if due > 0 else 0
        if flat and job_id:
            self._drained = False
            job = Job.from_flat(self.scripts, str(job_id), flat)
            job.token = token
            return job
        self._drained = True
        if (self._block_until and (not old_block or self._block_until < old_block)) or \
                self._limit_until > old_limit:
            self._kick.set()
        return None

    def _start(self, job: Job, token: str) -> None:
        slot = _Slot(job, token)
        self._active[job.id] = slot
        assert self._locks is not None and self._pool is not None
        self._locks.track(job.id, token)
        if self.closing:  # fetched while closing began: give it straight back
            self._hand_back(slot)
            self._release(slot)
            return
        self._pool.spawn(self._run_slot, slot)

    def _can_fetch_next(self) -> bool:
        return self.running and not self.closing and not self._paused

    # ------------------------------------------------------------------ one slot
    def _run_slot(self, slot: _Slot) -> None:
        """A job greenlet: run the job, write its result, and go on with the job that
        fetch-next returned, in the same slot."""
        current = [slot]
        me = gevent.getcurrent()
        monitor = self._hub_monitor
        if monitor is not None:
            monitor.register(me, lambda: self._describe(current[0]))
        try:
            while True:
                slot.greenlet = me
                try:
                    nxt = self._process(slot)
                except gevent.GreenletExit:
                    raise
                except Exception:
                    log.exception("queue %r: job %s: unexpected error in the worker; the job stays active "
                                  "and a stalled check will recover it", self.queue_name, slot.job.id)
                    nxt = None
                finally:
                    self._release(slot)
                if nxt is None:
                    break
                slot = _Slot(nxt, slot.token)
                current[0] = slot
                self._active[nxt.id] = slot
                if self._locks is not None:
                    self._locks.track(nxt.id, slot.token)
        finally:
            if monitor is not None:
                monitor.unregister(me)
            self._kick.set()

    def _describe(self, slot: _Slot) -> str:
        return f"job {slot.job.id} ({slot.job.name!r}) of queue {self.queue_name!r}"

    def _release(self, slot: _Slot) -> None:
        slot.phase = "done"
        if self._active.get(slot.job.id) is slot:
            del self._active[slot.job.id]
        if self._locks is not None:
            self._locks.untrack(slot.job.id, slot.token)

    def _unrecoverable_reason(self, job: Job) -> Optional[str]:
        if job.deferred_failure:
            return job.deferred_failure
        limit = self.options["max_started_attempts"]
        if limit and limit < (job.attempts_started or 0):
            return "job started more than allowable limit"
        if job.decode_error:
            return job.decode_error
        return None

    def _process(self, slot: _Slot) -> Optional[Job]:
        """Run one job and settle it. Returns the next job fetch-next brought, or None."""
        job = slot.job
        self.plugins.notify("echomq_job_active", worker=self, job=job)
        reason = self._unrecoverable_reason(job)
        if reason is not None:
            return self._fail(slot, UnrecoverableError(reason))
        try:
            fn = self.processor or self.plugins.get_processor(self.queue_name, job.name)
        except Exception as exc:
            return self._fail(slot, exc)
        if fn is None:
            return self._fail(slot, UnrecoverableError(
                f"no processor for job name {job.name!r} on queue {self.queue_name!r}: pass processor= to the "
                f"Worker, set processor: in the queue's config, or register one with a plugin"))
        try:
            result = self._runtime.call(fn, job, self._timeout_s)
        except (Exception, gevent.Timeout) as exc:
            if self._discarded(slot):
                return None
            return self._fail(slot, exc)
        if self._discarded(slot):
            return None
        return self._complete(slot, result)

    def _discarded(self, slot: _Slot) -> bool:
        if slot.handed_back or slot.lock_lost:
            log.info("queue %r: job %s finished, but %s; its result is not written", self.queue_name,
                     slot.job.id, "it was handed back" if slot.handed_back else "its lock was lost")
            return True
        return False

    # ------------------------------------------------------------------ settling
    def _settle(self, slot: _Slot, call: Callable[[], Any]) -> Any:
        """Run a state-changing script for the slot's job; retry on connection errors
        (the lock keeps being renewed meanwhile). Raises _Gone when the job is not ours."""
        slot.phase = "finishing"
        failures = 0
        while True:
            try:
                return call()
            except (JobLockMismatch, JobLockNotExist) as exc:
                self._mark_lock_lost(slot, str(exc))
                raise _Gone() from None
            except (JobNotExist, JobNotInState) as exc:
                log.warning("queue %r: job %s is no longer active here (%s); its result is not written",
                            self.queue_name, slot.job.id, exc)
                raise _Gone() from None
            except _CONNECTION_ERRORS as exc:
                failures += 1
                if self._force.is_set() or slot.handed_back:
                    log.error("queue %r: job %s: result not written (%s); the stalled check will recover "
                              "the job", self.queue_name, slot.job.id, exc)
                    raise _Gone() from None
                delay = min(5.0, 0.2 * (2 ** min(failures - 1, 10)))
                log.warning("queue %r: job %s: cannot write the result (%s); retrying in %.1f s",
                            self.queue_name, slot.job.id, exc, delay)
                gevent.sleep(delay)

    def _finish_call(self, keys: List[str], args: List[Any]) -> Any:
        if self._batcher is None:
            return self.scripts.call("moveToFinished-14", keys, args)
        return self._batcher.call(keys, args)

    def _finish_opts(self, job: Job, token: str, target: str) -> Dict[str, Any]:
        value = job.opts.get("removeOnComplete" if target == "completed" else "removeOnFail")
        return {
            "token": token,
            "keepJobs": self._keep[target] if value is None else keep_jobs(value),
            "lockDuration": self.lock_duration,
            "attempts": int(job.opts.get("attempts") or 0),
            "maxMetricsSize": "",
            "limiter": self.limiter,
            "name": self.name,
        }

    def _complete(self, slot: _Slot, result: Any) -> Optional[Job]:
        job = slot.job
        try:
            value = json.dumps(result, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            return self._fail(slot, InvalidJobDataError(
                f"job {job.id} ({job.name!r}) on queue {self.queue_name!r}: the processor's return value is "
                f"not JSON-serialisable ({exc}); return dicts, lists, strings, numbers, booleans or None"))
        fetch = self._can_fetch_next()
        finished = [0]

        def call() -> Any:
            finished[0] = _now_ms()
            keys, args = self.scripts.move_to_finished_args(job.id, finished[0], "returnvalue", value,
                                                            "completed", fetch,
                                                            self._finish_opts(job, slot.token, "completed"))
            return self.scripts._check("moveToFinished-14", self._finish_call(keys, args), job.id)
        try:
            res = self._settle(slot, call)
        except _Gone:
            return None
        except (JobPendingChildren, JobHasFailedChildren) as exc:
            slot.phase = "running"
            return self._fail(slot, exc)
        job.returnvalue = result
        job.finished_on = finished[0]
        job.attempts_made += 1
        self.counters["completed"] += 1
        self.plugins.notify("echomq_job_completed", worker=self, job=job, result=result,
                            duration_ms=(time.monotonic() - slot.started) * 1000.0)
        return self._next_from(res, slot.token) if fetch else None

    def _decide(self, job: Job, err: BaseException) -> Tuple[str, int, Optional[str]]:
        """("retry", delay_ms, None) | ("fail", 0, None) | ("move", 0, queue)."""
        decision = self.plugins.failure_decision(self, job, err)
        if isinstance(decision, FailureDecision):
            if decision.action == "retry":
                return "retry", int(decision.delay or 0), None
            if decision.action == "move":
                return "move", 0, decision.queue
            return "fail", 0, None
        unrecoverable = isinstance(err, UnrecoverableError) or type(err).__name__ == "UnrecoverableError"
        attempts = int(job.opts.get("attempts") or 0)
        limit = self.options["max_started_attempts"]
        started_out = bool(limit) and limit <= (job.attempts_started or 0)
        if job.attempts_made + 1 < attempts and not unrecoverable and not started_out:
            try:
                delay = backoff_mod.compute_delay(job.opts.get("backoff"), job.attempts_made + 1, err, job,
                                                  self.plugins)
            except backoff_mod.UnknownBackoffType as exc:
                log.error("queue %r: %s; the job fails instead of retrying", self.queue_name, exc)
                return "fail", 0, None
            if delay == backoff_mod.NO_RETRY:
                return "fail", 0, None
            return "retry", delay, None
        return "fail", 0, None

    @staticmethod
    def _reason(err: BaseException) -> str:
        return str(err) or type(err).__name__

    def _stacktrace(self, job: Job, err: BaseException) -> List[str]:
        stack = list(job.stacktrace or [])
        stack.append("".join(traceback.format_exception(type(err), err, err.__traceback__)).rstrip("\n"))
        limit = job.opts.get("stackTraceLimit")
        if limit == 0 and limit is not False:
            return []
        if limit:
            stack = stack[-int(limit):]
        return stack

    def _fail(self, slot: _Slot, err: BaseException) -> Optional[Job]:
        job, token = slot.job, slot.token
        now = _now_ms()
        if isinstance(err, RateLimitError) or str(err) == RATE_LIMIT_MESSAGE:
            try:
                ttl = self._settle(slot, lambda: self.scripts.move_job_from_active_to_wait(job.id, token))
            except _Gone:
                return None
            if ttl and ttl > 0:
                self._limit_until = max(self._limit_until, _now_ms() + int(ttl))
            self._drained = False
            self._kick.set()
            self.plugins.notify("echomq_job_moved", worker=self, job=job, state="wait", error=err)
            return None
        fetch = self._can_fetch_next()
        if isinstance(err, (DelayedError, WaitingChildrenError)) or type(err).__name__ in _MOVED_BY_PROCESSOR:
            slot.phase = "finishing"
            if self._locks is not None:
                self._locks.untrack(job.id, token)
            self.plugins.notify("echomq_job_moved", worker=self, job=job, state=_moved_state(err), error=err)
            if not fetch:
                return None
            try:
                res = self.scripts.move_to_active(token, self.lock_duration, _now_ms(), limiter=self.limiter,
                                                  name=self.name)
            except Exception as exc:
                log.warning("queue %r: fetching after job %s moved itself failed: %s", self.queue_name, job.id, exc)
                return None
            return self._next_from(res, token)

        try:
            action, delay, target_queue = self._decide(job, err)
        except Exception:
            log.exception("queue %r: deciding about failed job %s raised; failing it", self.queue_name, job.id)
            action, delay, target_queue = "fail", 0, None
        reason = self._reason(err)
        stack = self._stacktrace(job, err)
        fields = ["failedReason", reason, "stacktrace", json.dumps(stack, ensure_ascii=False)]
        job.failed_reason = reason
        job.stacktrace = stack
        if action == "retry":
            if delay > 0:
                call = lambda: self.scripts.move_to_delayed(  # noqa: E731
                    job.id, _now_ms(), token, delay, skip_attempt=False, fields_to_update=fields, fetch_next=fetch,
                    fetch_opts=Scripts.fetch_opts(token, self.lock_duration, self.limiter, self.name))
            else:
                fetch = False
                call = lambda: self.scripts.retry_job(  # noqa: E731
                    job.id, _now_ms(), token, lifo=bool(job.opts.get("lifo")), fields_to_update=fields)
            try:
                res = self._settle(slot, call)
            except _Gone:
                return None
            job.attempts_made += 1
            if delay > 0:
                job.delay = delay
            else:
                self._drained = False
                self._kick.set()
            self.counters["retried"] += 1
            self.plugins.notify("echomq_job_retried", worker=self, job=job, error=err, delay_ms=delay)
            return self._next_from(res, token) if fetch else None

        if action == "move" and target_queue:
            self._copy_to_queue(job, target_queue)

        def call_failed() -> Any:
            keys, args = self.scripts.move_to_finished_args(job.id, _now_ms(), "failedReason", reason, "failed",
                                                            fetch, self._finish_opts(job, token, "failed"), fields)
            return self.scripts._check("moveToFinished-14", self._finish_call(keys, args), job.id)
        try:
            res = self._settle(slot, call_failed)
        except _Gone:
            return None
        job.attempts_made += 1
        job.finished_on = now
        self.counters["failed"] += 1
        self.plugins.notify("echomq_job_failed", worker=self, job=job, error=err)
        return self._next_from(res, token) if fetch else None

    def _copy_to_queue(self, job: Job, target: str) -> None:
        """The ``move`` failure decision: add a copy of the job (attempts reset) to ``target``."""
        from .queue import Queue

        opts = {k: v for k, v in (job.opts or {}).items() if k not in ("repeat", "prevMillis", "timestamp")}
        queue = Queue(target, connection=self.client, prefix=self.prefix)
        try:
            copy = queue.add(job.name, job.data, opts)
            log.info("queue %r: failed job %s copied to queue %r as job %s", self.queue_name, job.id, target,
                     getattr(copy, "id", "?"))
        except Exception as exc:
            log.error("queue %r: could not copy failed job %s to queue %r: %s", self.queue_name, job.id, target, exc)

    # ------------------------------------------------------------------ callbacks
    def _mark_lock_lost(self, slot: _Slot, how: str) -> None:
        if slot.lock_lost or slot.handed_back:
            return
        slot.lock_lost = True
        self.counters["lock_lost"] += 1
        log.debug("queue %r: job %s lost its lock: %s", self.queue_name, slot.job.id, how)
        self.plugins.notify("echomq_job_lock_lost", worker=self, job=slot.job)

    def _on_locks_lost(self, lost: List[Tuple[str, str]]) -> None:
        """On the hub: the renewal thread could not renew these (job id, token) locks."""
        for job_id, token in lost:
            slot = self._active.get(job_id)
            if slot is None or slot.token != token or slot.phase != "running":
                continue
            self._mark_lock_lost(slot, "renewal refused")

    def _on_stalled(self, ids: List[str]) -> None:
        for job_id in ids:
            self.counters["stalled"] += 1
            self.plugins.notify("echomq_job_stalled", worker=self, queue=self.queue_name, job_id=job_id)

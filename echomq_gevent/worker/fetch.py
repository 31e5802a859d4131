"""The worker's fetch loop and the greenlet that runs each job.

The loop is the seed's slot arithmetic::

    available_slots = concurrency - len(active_jobs)

Each free slot is filled by one atomic pick-up (``moveToActive-11``; several free
slots: one ``moveToActiveMany-11`` call that takes a job for each, as far as jobs are ready);
each job runs in its own greenlet of a ``gevent.pool.Pool(concurrency)``. A finishing
job calls ``moveToFinished`` with fetch-next, so a busy slot is refilled in the same
round trip and the same greenlet (:mod:`.slot_runner`). When nothing is waiting
the loop blocks on the marker ZSET (``BZPOPMIN``, ``drain_delay``) on its own
connection, honouring delay markers; rate limited, it sleeps the limiter TTL; with a
delayed job pending, it wakes at its due time. A gevent Event (``hints.kick``) wakes it
the moment a slot frees or a state changes; it never spins.

:class:`FetchLoop` is the part of a :class:`~echomq_gevent.worker.Worker` that does this.
The Worker makes it with its :class:`~echomq_gevent.worker.context.WorkerContext`, its
:class:`~echomq_gevent.worker.settle.Settler` (which writes each job's outcome and returns
the fetch-next answer) and its processor. It owns the loop's state, the job pool, the
marker wait and its blocking connection (:func:`~.marker.open_marker_wait`), and the
:class:`~.slot_runner.SlotRunner` whose greenlets run the jobs; the jobs of pick-ups whose
answers were lost it finds with :mod:`.lost_pickups`. The lifecycle (:mod:`.lifecycle`) calls
:meth:`FetchLoop.setup`, :meth:`FetchLoop.run`, :meth:`FetchLoop.stop` and
:meth:`FetchLoop.teardown`.
"""
from __future__ import annotations

import itertools
import logging
import time
from typing import Any, Callable, List, Optional

import gevent
import gevent.event
import gevent.pool
import redis

from ..queue.job import Job
from ..connection.kept import AmbiguousCallError
from ..connection.slot_client import SlotClient
from .marker import Fetched, MarkerWaiter, blocking_client_name, open_marker_wait
from ..connection.blocking import MAX_BLOCK_S, MIN_BLOCK_S
from ..protocol.clock import now_ms
from ..protocol.scripts import shared_call
from ..protocol.cron import preload as preload_cron
from .context import WorkerContext
from .due_timer import DueTimer, make_due_timer
from .lock_check import marker_pickup_stamp
from .lost_pickups import lost_pickups
from .next_runs import NextRuns
from .settle import Settler
from .slot_runner import SlotRunner
from .slots import CONNECTION_ERRORS, Slot, SlotGreenlet

log = logging.getLogger("echomq_gevent.worker")

__all__ = ["FetchLoop"]

#: Most pick-ups the fetch loop asks for in one call when many slots are free.
_MAX_BURST = 100
#: Waiting for a delayed job due in less than this (ms), the loop waits on its timer alone
#: instead of also blocking on the marker: a job added meanwhile is taken at that due time, at
#: most this much later. When delayed jobs or scheduler runs fall due every few milliseconds,
#: each would otherwise cost a ``BZPOPMIN`` and a wake-up more: the delay marker the worker's
#: own next run (or any new delayed job) writes ends the wait with nothing new to do.
_TIMER_ONLY_MS = 5


class FetchLoop:
    """The fetch loop and the job greenlets of one :class:`~echomq_gevent.worker.Worker`.

    Owns: ``concurrency`` and ``paused`` (set through the Worker), the loop's own state
    (the pick-up burst, the due time of a delayed job, tokens), ``last_fetch_at``, the
    job pool, the marker wait and its blocking connection, and the :class:`SlotRunner` of
    the job greenlets (``processor`` is its). Shares through ``ctx``: the
    slots of the jobs in flight, the hints others leave for the loop, the lifecycle's
    ``running``/``closing`` flags, the lock renewer and the hub watchdog. Everything runs
    on the worker's hub: the loop on the run greenlet, the jobs on greenlets of the pool.
    """

    def __init__(self, ctx: WorkerContext, settler: Settler, processor: Optional[Callable[[Job], Any]],
                 concurrency: int, connection_settings: Any, shared_wait: Any = None,
                 pool: Any = None) -> None:
        self.ctx = ctx
        #: the :class:`~.pool.budget.PoolMember` of the pool this queue runs in (None: no
        #: pool; its own ``concurrency`` is then its only bound)
        self.member: Any = None
        if pool is not None:
            self.member = pool.join(ctx.queue_name, concurrency, ctx.hints.kick.set)
        #: a :class:`~.shared_wait.SharedMarkerWait` to wait in instead of a wait of its own
        self.shared_wait = shared_wait
        self.settler = settler
        #: how many jobs run at once (``Worker.concurrency``)
        self.concurrency = concurrency
        #: no new jobs while set (``Worker.pause``)
        self.paused = False
        #: wall-clock time (s) the loop last heard from Redis (fetch or marker wait)
        self.last_fetch_at: Optional[float] = None
        self.active = ctx.active
        self.hints = ctx.hints
        self.scripts = ctx.scripts
        self.queue_name = ctx.queue_name
        self._connection_settings = connection_settings
        self.options = ctx.options
        self._tokens = itertools.count()
        self._stopped = gevent.event.Event()  # set once closing starts: ends the pause after a failure
        #: the jobs a pick-up said were still ready after it (moveToActive-11's fifth
        #: element), None when the last answer brought no job or had no such count (a
        #: finish's fetch)
        self._ready: Optional[int] = None
        self._block_until = 0
        #: made by :meth:`setup`
        self.pool: Optional[gevent.pool.Group] = None
        self.marker: Optional[MarkerWaiter] = None
        #: the marker wait's connection (on a cluster, to the primary serving the marker's slot)
        self.blocking: Optional[redis.Redis] = None
        #: creates the next runs of the scheduler runs this worker takes
        self.next_runs = NextRuns(ctx.scripts)
        #: runs the jobs, one greenlet a slot (:mod:`.slot_runner`)
        self.runner = SlotRunner(ctx, settler, processor, self.next_runs, self._can_fetch_next, self._next_from)
        self.runner.member = self.member
        #: what each slot's greenlet runs (bound once: :meth:`_start` spawns it per job)
        self._run_slot = self.runner.run_slot
        #: wakes the loop at a delayed job's due time to a fraction of a millisecond
        #: (:mod:`.due_timer`; made by :meth:`setup`, None where the platform has no timerfd)
        self.due_timer: Optional[DueTimer] = None

    @property
    def processor(self) -> Optional[Callable[[Job], Any]]:
        """The Worker's processor (None: the plugins find one per job name); the runner's."""
        return self.runner.processor

    @processor.setter
    def processor(self, value: Optional[Callable[[Job], Any]]) -> None:
        self.runner.processor = value

    # ------------------------------------------------------------------ set-up and close
    def blocking_client_name(self) -> str:
        """The name of the marker wait's connection, as BullMQ names a worker's
        (``<prefix>:<base64 queue>[:w:<name>]``), so ``getWorkers()`` lists the worker."""
        ctx = self.ctx
        return blocking_client_name(ctx.prefix, ctx.queue_name, ctx.name)

    def unblock_client(self) -> Any:
        """Where ``CLIENT UNBLOCK`` of the marker wait goes: its own node on a cluster."""
        return self.blocking if isinstance(self.blocking, SlotClient) else self.ctx.client

    def setup(self) -> None:
        """On the run greenlet, after the lifecycle made ``ctx.runtime``: the job pool, the
        marker wait and its blocking connection (connected now: the worker shows up in
        ``getWorkers()`` from the start)."""
        ctx = self.ctx
        # a Group, not a bounded Pool: the fetch loop's slot arithmetic is the bound, so
        # ``worker.concurrency = n`` can change it while jobs run
        self.pool = gevent.pool.Group()
        self.pool.greenlet_class = SlotGreenlet
        self.runner.runtime = ctx.runtime
        self.due_timer = make_due_timer(self.hints.kick.set)
        if self.shared_wait is not None:  # one BZPOPMIN for the idle queues of the process
            self.marker = self.shared_wait.attach(ctx.keys.marker)  # type: ignore[assignment]
            try:
                self._preload_cron()
            except CONNECTION_ERRORS as exc:
                log.warning("%s: Redis is not reachable yet (%s); the worker keeps trying", ctx.label, exc)
            return

        # its own connection (on a cluster, to the primary serving the marker's slot, with no
        # pick-up written behind the wait: script calls follow redirections there)
        self.marker = open_marker_wait(ctx.client, ctx.keys.marker, self._connection_settings,
                                       self.blocking_client_name())
        self.blocking = self.marker.client
        try:  # connect now: the worker shows up in getWorkers() from the start
            self.blocking.ping()
            if self.marker.fetch_behind:  # what goes behind the wait finds its script from the first wait
                ctx.scripts.load_wait_scripts()
            self._preload_cron()
        except CONNECTION_ERRORS as exc:
            log.warning("%s: Redis is not reachable yet (%s); the worker keeps trying", ctx.label, exc)

    def _preload_cron(self) -> None:
        """A queue with job schedulers: load the cron library now (about 20 ms of imports),
        not while the first cron run is due. Asked on the script connection: the workers of a
        process share their client, and all of them ask as they start; through the
        client's pool, each would open a connection the pool then keeps."""
        if shared_call(self.ctx.client, "EXISTS", self.ctx.keys.repeat):
            preload_cron()

    def stop(self) -> None:
        """The close began (``ctx.closing`` is set): end the loop at its next step."""
        self._stopped.set()
        self.hints.kick.set()

    def cancel_wait(self) -> None:
        """At the close: end a pending marker wait; a job its pick-up took is handed back."""
        if self.marker is None:
            return
        fetched = self.marker.cancel(self.unblock_client())
        if fetched is not None:  # a job it took is handed straight back (closing)
            try:
                self._take_fetched(fetched)
            except Exception as exc:  # the wait's own error: nothing more to do with it
                log.debug("%s: the cancelled marker wait failed: %s", self.ctx.label, exc)

    def teardown(self) -> None:
        """After the close: drop the blocking connection (or leave the shared wait), and
        leave the pool."""
        if self.member is not None:
            self.member.leave()
        if self.due_timer is not None:
            self.due_timer.close()
        if self.shared_wait is not None:
            if self.marker is not None:
                self.shared_wait.detach(self.marker)
            return
        if self.blocking is not None:
            try:
                self.blocking.connection_pool.disconnect(
                    inuse_connections=not (self.marker is not None and self.marker.use_thread))
            except Exception:
                pass

    # ------------------------------------------------------------------ the loop
    def run(self) -> None:
        """The loop, on the run greenlet, until the close begins. A failing turn (Redis
        unreachable...) is logged and tried again after a growing pause."""
        ctx = self.ctx
        failures = 0
        while not ctx.closing:
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
                self._stopped.wait(delay)

    def _wait_kick(self, timeout: Optional[float]) -> None:
        kick = self.hints.kick
        kick.clear()
        kick.wait(timeout)

    def _loop_once(self) -> None:
        marker = self.marker
        hints = self.hints
        member = self.member
        if marker is not None and marker.answered:  # a pick-up behind a wait the loop left
            self._take_fetched(marker.take())
            return
        if self.paused or len(self.active) >= self.concurrency:
            if member is not None:
                member.withdraw()
            if self.paused and marker is not None and marker.pending:
                # a marker wait left pending would pop a wake-up meant for other workers
                fetched = marker.cancel(self.unblock_client())
                if fetched is not None:  # a job it took is handed straight back (paused)
                    self._take_fetched(fetched)
                # look again before waiting: the cancel yields, and a resume (or a freed
                # slot) meanwhile set the wake-up that the wait below would clear first
                return
            self._wait_kick(None)
            return
        now = now_ms()
        if hints.limit_until > now:
            if member is not None:
                member.withdraw()
            wait_ms = min(hints.limit_until - now, self.options["max_rate_limit_delay"])
            self._wait_kick(wait_ms / 1000.0)
            return
        if hints.unknown_pickups:
            self._claim_unknown_pickups()
            return
        if hints.drained:
            if member is not None:
                member.withdraw()
            if not self._wait_for_work():
                return
        if self.paused or self.ctx.closing:  # paused or closed while blocked on the marker
            return
        count = min(self._next_burst(), self.concurrency - len(self.active))
        if member is None:
            self._fetch(count)
            return
        # in a pool: as many as the pool grants now (pool.budget.py), else wait for a grant
        count = member.request(count)
        if not count:
            # the marker said there is work: keep asking (not back to the marker) until a
            # slot is granted, or something else comes first
            hints.drained = False
            self._wait_kick(None)
            return
        try:
            self._fetch(count)
        finally:
            member.fetched()

    def _fetch(self, count: int) -> None:
        """Up to ``count`` pick-ups: one ``moveToActive``, or when ``count`` is more than one,
        one ``moveToActiveMany`` call that takes jobs until ``count`` are taken or none is
        ready; start every job they bring. How many to ask for next: :meth:`_next_burst`."""
        ctx = self.ctx
        first = next(self._tokens)
        now = now_ms()
        sent = time.monotonic()  # the pick-ups' age is counted from here (lock_check.py)
        try:
            if count <= 1:
                answers: List[Any] = [self.scripts.move_to_active(f"{ctx.id}:{first}", ctx.lock_duration, now,
                                                                  limiter=ctx.limiter, name=ctx.name)]
            else:
                self._tokens = itertools.count(first + count)
                answers = self.scripts.move_to_active_many(f"{ctx.id}:", first, count, ctx.lock_duration, now,
                                                           limiter=ctx.limiter, name=ctx.name)
        except AmbiguousCallError:
            # the pick-ups may have taken jobs: never sent again, read back (next turn)
            self.hints.unknown_pickups.extend(f"{ctx.id}:{first + i}" for i in range(max(1, count)))
            raise
        self.last_fetch_at = time.time()
        error: Optional[BaseException] = None
        for i, answer in enumerate(answers):
            if isinstance(answer, BaseException):
                error = error or answer
                continue
            token = f"{ctx.id}:{first + i}"
            job = self._next_from(answer, token)
            if job is not None:
                self._start(job, token, sent)
        if error is not None:
            raise error

    def _claim_unknown_pickups(self) -> None:
        """After pick-ups whose answer was lost (the connection failed once they were sent):
        find the jobs they took, in ``active`` and locked with one of their tokens, and run
        them, so none waits for its lock to lapse and the stalled check. Also used for the
        next job a finish fetched when the finish's answer was lost. Raises on a connection
        error (the loop tries again after its pause); the locks are renewed meanwhile only
        once the jobs are started, so a read-back that takes longer than ``lock_duration``
        leaves them to the stalled check (:mod:`.lost_pickups`)."""
        hints = self.hints
        claimed = 0
        for job in lost_pickups(self.scripts, set(hints.unknown_pickups), self.active):
            claimed += 1
            self._start(job, job.token)
        hints.unknown_pickups.clear()
        hints.drained = False
        if claimed:
            log.warning("queue %r: %d job(s) taken by a pick-up whose answer was lost were found by their lock "
                        "and started", self.queue_name, claimed)

    def _wait_for_work(self) -> bool:
        """Block on the marker. True: time to call moveToActive; False: look again."""
        ctx = self.ctx
        now = now_ms()
        if self._block_until:
            remaining = self._block_until - now
            if remaining < 1:
                self._block_until = 0
                return True
            if self.due_timer is not None:
                # the loop's own timer below wakes up to 1.4 ms late (libev waits in whole
                # milliseconds); this one ends the wait at the due time itself
                self.due_timer.arm(self._block_until)
            if remaining < _TIMER_ONLY_MS and not (self.marker is not None and self.marker.pending):
                # the due time is close: wait for it on the timer alone (see _TIMER_ONLY_MS)
                self._wait_kick(remaining / 1000.0)
                return False
            timeout = min(max(remaining / 1000.0, MIN_BLOCK_S), MAX_BLOCK_S)
        else:
            timeout = min(max(ctx.drain_delay, MIN_BLOCK_S), MAX_BLOCK_S)
        marker = self.marker
        assert marker is not None
        kick = self.hints.kick
        kick.clear()
        fetch = None
        if not self.active and marker.can_fetch and not self._block_until and self.member is None:
            # nothing in flight: the pick-up goes behind the wait and runs as it ends
            # (marker.py); a pick-up never waits there while jobs of this worker run.
            # Not when waiting for a delayed job's due time: Redis ends a blocked command
            # only at its next clock tick (100 ms apart at the default hz 10), so a pick-up
            # behind it would start the job up to 100 ms late; this loop's own timer wakes
            # on time and picks up the ordinary way. Not in a pool either: a slot is
            # granted by the pool before a pick-up
            token = f"{ctx.id}:{next(self._tokens)}"
            fetch = (token, self.scripts.move_to_active_command(token, ctx.lock_duration, ctx.limiter, ctx.name))
        outcome, score = marker.wait(timeout, kick, fetch)
        self.last_fetch_at = time.time()
        if outcome == "fetched":
            self._take_fetched(score)
            return False
        if outcome == "woken":
            return False
        if outcome == "marker":
            due = int(score)
            if due > 0 and due - now_ms() >= 1:
                # a delay marker: the earliest delayed job is due at ``due``; wait for it
                if not self._block_until or due < self._block_until:
                    self._block_until = due
                return False
        self._block_until = 0
        return True

    def _take_fetched(self, fetched: Fetched) -> None:
        """Start the job a pick-up written behind the marker wait took (handed straight back
        when closing or paused, see :meth:`_start`); on an answer that is an error, pick up
        the ordinary way next (``drained`` off), or find an ambiguous pick-up's job by its
        token (at a close, left to the stalled check). The wait's own error, if it had one,
        is raised after."""
        answer = fetched.answer
        if isinstance(answer, AmbiguousCallError):
            if self.ctx.closing:
                log.warning("queue %r: %s; a job it took stays active until the stalled check of any worker "
                            "moves it back to wait", self.queue_name, answer)
            else:
                self.hints.lost_answer(fetched.token)
        elif isinstance(answer, BaseException):
            # it did not run (NOSCRIPT, a redirection) or failed: the script connection
            # loads a missing script, and raises a failure again for the loop to report
            log.debug("queue %r: the pick-up behind the marker wait answered %s: %s", self.queue_name,
                      type(answer).__name__, answer)
            self._block_until = 0
            self.hints.drained = False
        else:
            job = self._next_from(answer, fetched.token)
            if job is not None:
                self._start(job, fetched.token, marker_pickup_stamp(fetched.read_at, job.processed_on))
        if fetched.pop_error is not None:
            raise fetched.pop_error

    def _next_burst(self) -> int:
        """How many pick-ups to ask for next: as many as the last pick-up said were still
        ready, else (nothing was ready then, the last answer brought no job, or its job came
        from a finish, which does not say) :data:`_MAX_BURST`, since ``moveToActiveMany`` stops by itself once nothing is
        ready. The free slots bound it further."""
        ready = self._ready
        return min(ready, _MAX_BURST) if ready else _MAX_BURST

    def _next_from(self, res: Any, token: str) -> Optional[Job]:
        """Read a fetch answer (``[fields|0, id|0, ttl, due]``, a pick-up's with ``ready``
        fifth, or 0/None for nothing), update the loop's state and return the new job, if
        any."""
        hints = self.hints
        if not res:
            hints.drained = True
            self._ready = None
            return None
        flat, job_id, ttl, due = res[0], res[1], int(res[2] or 0), int(res[3] or 0)
        now = now_ms()
        old_block, old_limit = self._block_until, hints.limit_until
        hints.limit_until = now + ttl if ttl > 0 else 0
        self._block_until = due if due > 0 else 0
        if flat and job_id:
            ready = self._ready = int(res[4]) if len(res) > 4 else None
            # the last ready job (a pick-up's count): wait on the marker next, up to the due
            # time of the earliest delayed job, instead of a pick-up that comes back empty
            hints.drained = ready == 0
            job = Job.from_flat(self.scripts, str(job_id), flat)
            job.token = token
            return job
        hints.drained = True
        self._ready = None
        if (self._block_until and (not old_block or self._block_until < old_block)) or \
                hints.limit_until > old_limit:
            hints.kick.set()
        return None

    # ------------------------------------------------------------------ the slots
    def _start(self, job: Job, token: str, picked_at: Optional[float] = None) -> None:
        """Record ``job`` in a slot, have its lock renewed, and spawn the slot's greenlet
        (:meth:`SlotRunner.run_slot`); fetched as a close or a pause began, hand it back.
        ``picked_at``: the monotonic stamp of its pick-up (None: unknown), see
        :mod:`.lock_check`."""
        slot = Slot(job, token, picked_at)
        self.active[job.id] = slot
        ctx = self.ctx
        assert ctx.locks is not None and self.pool is not None
        ctx.locks.track(job.id, token)
        if self.member is not None:
            self.member.start_slot()
        if ctx.closing or self.paused:  # fetched as a close or a pause began: give it straight back
            self.settler.hand_back(slot)
            self._release(slot)
            return
        if job.repeat_job_key:
            # the call creating its next run goes with those of the other runs taken now,
            # queued before the job can finish (next_runs.py)
            slot.next_run = self.next_runs.add(job)
        # the slot goes in a list the greenlet empties: a greenlet keeps its arguments for
        # life, and this one runs job after job (fetch-next), so the first slot and its job
        # (data and all) would stay in memory until the slot goes idle
        self.pool.spawn(self._run_slot, [slot])

    def _can_fetch_next(self, slot: Slot) -> bool:
        """Whether the finishing job of ``slot`` may take the next one (called by the runner,
        once a job)."""
        # the finishing job still holds its slot: refill it only within the concurrency
        # (which may have been lowered while it ran)
        ctx = self.ctx
        return (ctx.running and not ctx.closing and not self.paused
                and len(self.active) <= self.concurrency and (self.member is None or self.member.keep(slot.streak)))

    def _release(self, slot: Slot) -> None:
        slot.phase = "done"
        if self.active.get(slot.job.id) is slot:
            del self.active[slot.job.id]
        locks = self.ctx.locks
        if locks is not None:
            locks.untrack(slot.job.id, slot.token)
        if self.member is not None:
            self.member.end_slot()

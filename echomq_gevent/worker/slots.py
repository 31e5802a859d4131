"""What the worker keeps per job in flight, and how finishing jobs share a round trip.

* :class:`Slot`: one in-flight job (token, phase, whether its lock was lost or it was
  handed back, the greenlet running it). The worker keeps them in a dict by job id.
* :class:`ActiveJobs`: the read-only ``job id -> Job`` view of that dict that
  ``Worker.active_jobs`` shows.
* :class:`FinishBatcher`: the ``moveToFinished`` calls of job greenlets that finish in
  the same turn of the hub go to Redis together (:meth:`Scripts.run_many
  <echomq_gevent.protocol.scripts.Scripts.run_many>`).
* :func:`now_ms` and :data:`CONNECTION_ERRORS`, shared by the worker's modules.

Nothing here knows the Worker; it uses these from its greenlets on one hub.
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Dict, Iterator, List, Optional, Tuple

import gevent
import gevent.event
import redis

from ..protocol.clock import now_ms
from ..queue.job import Job
from ..protocol.scripts import FINISH_MANY_MAX, ScriptCall, Scripts

__all__ = ["Slot", "SlotGreenlet", "ActiveJobs", "FinishBatcher", "CONNECTION_ERRORS", "now_ms"]


class SlotGreenlet(gevent.Greenlet):
    """The greenlet of a job slot. It records no spawning stack: gevent keeps the ten
    frames that spawned a greenlet (for ``gevent.util.format_run_info``), some 0.6 KB a
    greenlet that says nothing here (every slot is spawned by the fetch loop's ``_start``),
    with a thousand slots at once 0.6 MB. The rest of gevent's greenlet tree (the spawning
    greenlet, its spawn-tree locals) is kept."""

    spawning_stack_limit = 0

#: Errors after which the worker tries a Redis call again (the fetch, a settle).
CONNECTION_ERRORS = (redis.ConnectionError, redis.TimeoutError)


class Slot:
    """One in-flight job: what the worker knows about it while it runs."""

    __slots__ = ("job", "token", "started", "picked_at", "finish_sent", "phase", "lock_lost", "handed_back",
                 "greenlet", "in_processor", "next_run", "streak")

    def __init__(self, job: Job, token: str, picked_at: Optional[float] = None) -> None:
        self.job = job
        self.token = token
        self.started = time.monotonic()
        #: monotonic time of the pick-up that took the job (sent, or for one behind the
        #: marker wait answered); None: unknown, its lock is checked before it starts
        #: (:mod:`.lock_check`)
        self.picked_at = picked_at
        #: monotonic time the finish that may fetch the next job was first sent
        self.finish_sent: Optional[float] = None
        #: "running" (processor), "finishing" (result being written), "done"
        self.phase = "running"
        self.lock_lost = False
        self.handed_back = False
        self.greenlet: Any = None
        #: True only while the processor itself runs (a cancellation may interrupt it then)
        self.in_processor = False
        #: a scheduler's run: the creation of the run after it (a NextRun), waited on before it settles
        self.next_run: Any = None
        #: the jobs of its queue this slot ran before this one, in a row (fetch-next); a
        #: pool's ``turn`` reads it (:meth:`~.pool.budget.PoolMember.keep`)
        self.streak = 0


class ActiveJobs(Mapping):
    """Read-only view ``job id -> Job`` of the jobs a worker is running right now."""

    def __init__(self, slots: Dict[str, Slot]) -> None:
        self._slots = slots

    def __getitem__(self, job_id: str) -> Job:
        return self._slots[job_id].job

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._slots))

    def __len__(self) -> int:
        return len(self._slots)

    def __repr__(self) -> str:
        return f"ActiveJobs({list(self._slots)})"


class FinishBatcher:
    """Sends the ``moveToFinished`` calls of job greenlets that finish in the same turn
    of the hub as script calls of several jobs each (``moveToFinishedMany-11``, up to
    :data:`~echomq_gevent.protocol.scripts.FINISH_MANY_MAX` jobs a call, see
    :meth:`Scripts.move_to_finished_many
    <echomq_gevent.protocol.scripts.Scripts.move_to_finished_many>`), instead of one call
    each: Redis runs one script for several jobs, which costs it about a sixth less per job.

    A job greenlet calls :meth:`run` and waits for its own answer. On the pipelined
    connection the first finish of a turn is sent at once, alone, so Redis works on it
    while the turn's other jobs run; after every greenlet already woken in that turn, a
    flush greenlet (spawned only when there are any) sends the others, in calls that each
    wake their own jobs. A worker of fewer than ``2 * FINISH_MANY_MAX`` slots sends each
    finish on its own (the pipelined connection still writes a turn's calls together).
    Errors reach each caller as exceptions: a connection error fails the whole call (each
    caller retries on its own), a script error or a negative answer (as its typed error)
    only its job.

    A pool's workers on one client share one batcher (``across_queues``, made by
    :meth:`for_pool`): the finishes of every queue of the pool in a turn then go together as
    ``moveToFinishedQueues-0`` calls, so a pool over many queues, each with few jobs in
    flight, still finishes several jobs a script call.
    """

    def __init__(self, scripts: Scripts, concurrency: int, across_queues: bool = False) -> None:
        self.scripts = scripts
        #: the finishes may be of several queues (a pool's): sent as moveToFinishedQueues-0
        self.across_queues = across_queues
        #: the worker's concurrency: below 2 * FINISH_MANY_MAX the calls are not gathered
        self.concurrency = concurrency
        self._pending: List[Tuple[ScriptCall, gevent.event.AsyncResult]] = []
        self._scheduled = False
        #: round trips sent, and calls sent in them
        self.batches = 0
        self.calls = 0

    @classmethod
    def for_pool(cls, budget: Any, scripts: Scripts) -> Optional["FinishBatcher"]:
        """The batcher the workers of pool ``budget`` share, made with the first one's
        ``scripts``; None for a worker on another client than that first one (it batches
        its own finishes) or on a Redis Cluster (the queues' keys are on several slots)."""
        batcher = getattr(budget, "finish_batcher", None)
        if batcher is None:
            if scripts.clustered:
                return None
            batcher = budget.finish_batcher = cls(scripts, budget.concurrency, across_queues=True)
        return batcher if batcher.scripts.client is scripts.client else None

    def run(self, call: ScriptCall) -> Any:
        """On a job greenlet: run ``call`` with the others of this hub turn; returns its
        checked answer or raises its error."""
        if self.scripts.pipelined and self.concurrency < 2 * FINISH_MANY_MAX:
            # few slots: the pipelined connection writes the turn's calls together by itself
            # and wakes each caller on its own answer; gathering them costs more than it
            # saves Redis (measured at 10 slots: 15 % fewer jobs a second)
            return self.scripts.run(call)
        if not self._scheduled:
            self._scheduled = True
            gevent.get_hub().loop.run_callback(self._end_turn)
            if self.scripts.pipelined:
                # the first finish of the turn goes at once, alone: Redis works on it while
                # the turn's other jobs run (they go together when the turn ends)
                return self.scripts.run(call)
        result = gevent.event.AsyncResult()
        self._pending.append((call, result))
        return result.get()

    def _end_turn(self) -> None:
        """In the hub, after the greenlets already woken in the turn of the first finish: the
        flush greenlet only when another finish waits (a lone finish, sent at once, spawns
        none)."""
        if self._pending:
            gevent.spawn(self._flush)
        else:
            self._scheduled = False

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        self._scheduled = False
        self.batches += 1
        self.calls += len(batch)
        if self.scripts.pipelined and len(batch) > FINISH_MANY_MAX:
            # calls of up to FINISH_MANY_MAX jobs, each from a greenlet of its own on the
            # pipelined connection: they leave together, and the jobs of each call go on as
            # soon as its own answer is in (one answer for all would leave Redis idle while
            # the worker reads it, and the worker idle while Redis runs the rest)
            for at in range(FINISH_MANY_MAX, len(batch), FINISH_MANY_MAX):
                gevent.spawn(self._send, batch[at:at + FINISH_MANY_MAX])
            batch = batch[:FINISH_MANY_MAX]
        self._send(batch)

    def _send(self, batch: List[Tuple[ScriptCall, gevent.event.AsyncResult]]) -> None:
        calls = [call for call, _ in batch]
        try:
            if len(calls) > 1 and all(c.name == "moveToFinished-14" for c in calls):
                answers = (self.scripts.move_to_finished_queues(calls) if self.across_queues
                           else self.scripts.move_to_finished_many(calls))
            else:
                answers = self.scripts.run_many(calls)
        except BaseException as exc:  # handed to every caller
            for _, result in batch:
                result.set_exception(exc)
            return
        for (_, result), answer in zip(batch, answers):
            if isinstance(answer, BaseException):
                result.set_exception(answer)
            else:
                result.set(answer)

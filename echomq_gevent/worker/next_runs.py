"""The next runs of the job schedulers' runs a worker takes, created together.

When a worker takes a job scheduler's run, it creates the run after it
(``updateJobScheduler-12``), as Node's worker does, and finishes the run only once that
call went to Redis before the finish. A cron schedule that fires many runs in the same
millisecond makes a worker take them together, and a call and a greenlet for each would
have every run wait for the answers of all the others before it finishes.

:class:`NextRuns` gathers the runs taken in one turn of the hub and sends their calls from
one greenlet, spawned by the first run of the turn, as ``updateJobSchedulerMany-11`` calls of
up to 25 runs, one round trip each: the runs of the first call finish (and their slots take
the jobs still waiting) while Redis creates the next call's runs. That greenlet first lets
the job greenlets of the turn run (the fetch loop spawns them right after it), so their
processors start without waiting for the calls to be built; a run then waits only until its
call is queued on the worker's script connection. On that connection (the pipelined one of
the worker's thread) Redis runs calls in the order they were made, so the run's finish,
made later, cannot reach Redis before its next run, and the run does not wait for the
answer. The call of a run taken alone is written when the hub turn ends, not at once, so
the finish its greenlet makes in that turn leaves in the same send: a run due alone costs
two round trips (its pick-up, then its next run and its finish), not three. Elsewhere (a
worker whose sockets are not patched, a Redis Cluster) the run waits for the answer before
it finishes.

A run whose scheduler id has the shape of a BullMQ 5 repeatable job's key is created alone,
with retries (:func:`~echomq_gevent.queue.schedulers.schedule_next_run`), and its run waits
for it. The runs of a round trip that met a connection error are created again one by one
the same way; on the pipelined connection their runs no longer wait, so one may be finished
(on a new connection) before its next run exists.
Nothing here raises into a job: a run whose next run could not be created is logged and
processed anyway.
"""
from __future__ import annotations

import logging
from typing import Any, List

import gevent
import gevent.event
import redis

from ..errors import EchoMQError
from ..queue.job import Job
from ..queue.schedulers import legacy_key_shape, next_run_call, next_run_not_created, schedule_next_run
from ..protocol.calls import ScriptCall
from ..protocol.schedulers import UPDATE_MANY_MAX
from ..protocol.scripts import Scripts

log = logging.getLogger("echomq_gevent.worker")

__all__ = ["NextRuns", "NextRun"]


class NextRun:
    """The creation of the run after one taken run, for the run to wait on before it
    finishes (:meth:`wait`)."""

    __slots__ = ("job", "ready")

    def __init__(self, job: Job) -> None:
        self.job = job
        #: set when the run may be finished: its next run's call is queued on the pipelined
        #: connection (ahead of any later call of the hub), or has answered
        self.ready = gevent.event.Event()

    def wait(self) -> None:
        """Return once the run may be finished (see :attr:`ready`)."""
        self.ready.wait()


class NextRuns:
    """Creates the next runs of the scheduler runs one worker takes, a round trip for each 25
    runs of a turn of the hub (see the module docstring). ``calls`` and ``batches`` count
    what was sent."""

    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts
        self._pending: List[NextRun] = []
        self._scheduled = False
        #: calls sent together, and the round trips they went in
        self.calls = 0
        self.batches = 0

    def add(self, job: Job) -> NextRun:
        """Create the run after ``job`` (a run of ``job.repeat_job_key``) in this turn's round
        trip; returns what the run waits on before it finishes."""
        run = NextRun(job)
        self._pending.append(run)
        if not self._scheduled:
            self._scheduled = True
            gevent.spawn(self._flush)
        return run

    def _flush(self) -> None:
        # the job greenlets spawned after this one start their processors first
        gevent.sleep(0)
        batch, self._pending = self._pending, []
        self._scheduled = False
        # in chunks, one round trip each: the runs of a chunk finish (their finishes queued
        # behind their next runs) while Redis creates the chunk's next runs, ahead of the
        # next chunk's, so slots free up (and refill) before all the next runs exist
        for at in range(0, len(batch), UPDATE_MANY_MAX):
            self._send(batch[at:at + UPDATE_MANY_MAX])

    def _send(self, batch: List[NextRun]) -> None:
        calls: List[ScriptCall] = []
        sent: List[NextRun] = []
        for run in batch:
            job = run.job
            if legacy_key_shape(job.repeat_job_key or ""):
                gevent.spawn(self._alone, run)
                continue
            try:
                call = next_run_call(self.scripts, job)
            except (EchoMQError, ValueError, TypeError) as exc:
                next_run_not_created(self.scripts, job, exc)
                call = None
            if call is None:
                run.ready.set()
                continue
            calls.append(call)
            sent.append(run)
        if not calls:
            return
        # queued: the calls are put on the connection's queue when they are run, before this
        # greenlet waits for the answers; the runs' greenlets wake only after that
        if self.scripts.pipelined:
            for run in sent:
                run.ready.set()
        self.calls += len(calls)
        self.batches += 1
        if len(calls) == 1:
            # a run alone: its call is written at the end of this hub turn, with the finish
            # its greenlet makes in it (one send and one read less on each side); the first
            # call of a burst goes at once, so Redis starts on it while the turn goes on
            self.scripts.gather_turn()
        try:
            if len(calls) > 1:
                answers: List[Any] = self.scripts.schedulers.update_job_scheduler_many(calls)
            else:
                answers = self.scripts.run_many(calls, check=False)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            log.debug("queue %r: creating %d next run(s) met %s; each is tried again alone", self.scripts.keys.name,
                      len(sent), exc)
            for run in sent:
                gevent.spawn(self._alone, run)
            return
        except Exception as exc:  # not expected: each run is processed anyway
            for run in sent:
                next_run_not_created(self.scripts, run.job, exc)
                run.ready.set()
            return
        for run, answer in zip(sent, answers):
            if isinstance(answer, BaseException):
                next_run_not_created(self.scripts, run.job, answer)
            run.ready.set()

    def _alone(self, run: NextRun) -> None:
        try:
            schedule_next_run(self.scripts, run.job)
        finally:
            run.ready.set()

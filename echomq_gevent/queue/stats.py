"""How far behind a queue is: the age of its oldest ready job, its counts, its paused
flag and its late job schedulers, read for many queues in one round trip.

:class:`QueueAge` is what :meth:`Queue.get_queue_age` answers (script
``getOldestJobTimestamp-1``, read only). :func:`read_queue_stats` is what the status
table, the dashboard and the Prometheus gauges of the queues
(:mod:`echomq_gevent.host.queue_gauges`) read: for every queue two ``getCounts-1``
calls (every state; the delayed jobs already due), the age script and the first
``repeat`` entries (the schedulers whose upcoming run is soonest), all in one pipeline.

A job's age counts from when it became ready: its ``timestamp`` (+ ``delay``) in
``wait`` and ``prioritized``, its due time while it is still in ``delayed``. BullMQ keeps
no record of when a job entered ``wait``, so a job promoted from ``delayed`` or sent
back by a retry counts from when it was added (``docs/observability.md``).
"""
from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Sequence

from ..protocol.admin import AdminScripts
from ..protocol.clock import now_ms
from ..protocol.keys import QueueKeys
from ..protocol.scripts import Scripts

__all__ = ["QueueAge", "QueueStats", "LateScheduler", "read_queue_stats", "COUNT_STATES",
           "MOST_SCHEDULERS"]

#: The states counted for each queue (BullMQ's names, as ``get_job_counts``).
COUNT_STATES = ("waiting", "prioritized", "delayed", "active", "waiting-children", "completed", "failed")
#: How many schedulers :func:`read_queue_stats` reads per queue, soonest run first (so
#: the late ones always come first).
MOST_SCHEDULERS = 1000


class QueueAge(NamedTuple):
    """The oldest job of a queue that is ready to run, at a clock reading.

    ``oldest_timestamp`` (ms) is when it became ready, ``job_id`` and ``state``
    (``wait``, ``prioritized``, ``delayed``) say which job it is; all three are ``None``
    when no job is ready. ``paused``: the queue is paused (its jobs wait anyway, and
    age)."""

    queue: str
    oldest_timestamp: Optional[int]
    job_id: Optional[str]
    state: Optional[str]
    paused: bool
    now_ms: int

    @property
    def age_seconds(self) -> float:
        """Seconds the oldest ready job has waited (0.0 when none is ready; never below 0,
        whatever the producers' clocks)."""
        if self.oldest_timestamp is None:
            return 0.0
        return max(0.0, (self.now_ms - self.oldest_timestamp) / 1000.0)

    #: Prometheus' name for the same number.
    oldest_age_seconds = age_seconds

    def as_dict(self) -> Dict[str, Any]:
        return {"oldest_timestamp": self.oldest_timestamp, "job_id": self.job_id, "state": self.state,
                "paused": self.paused, "age_seconds": round(self.age_seconds, 3)}


class LateScheduler(NamedTuple):
    """A job scheduler and how late its upcoming run is: ``next_ms`` is when the run was
    due; ``overdue_seconds`` how long ago that was (0.0 while it is still ahead). A run
    is late when no worker took it: no worker on the queue, the queue paused, the
    workers busy, or the run's job gone."""

    scheduler_id: str
    next_ms: int
    overdue_seconds: float


class QueueStats(NamedTuple):
    """One queue's numbers from :func:`read_queue_stats`: ``counts`` per state of
    :data:`COUNT_STATES`, ``due_delayed`` (delayed jobs already due, not yet promoted),
    ``age`` and ``schedulers`` (soonest run first)."""

    queue: str
    counts: Dict[str, int]
    due_delayed: int
    age: QueueAge
    schedulers: List[LateScheduler]

    @property
    def ready(self) -> int:
        """Jobs a worker could take now: ``wait``, ``prioritized`` and the due delayed
        jobs (what to scale on; a count of ``wait`` alone misses the other two)."""
        return self.counts.get("waiting", 0) + self.counts.get("prioritized", 0) + self.due_delayed


def _scripts_of(client: Any, keys: Sequence[QueueKeys], scripts: Optional[Scripts]) -> Scripts:
    return scripts if scripts is not None else Scripts(client, keys[0])


def read_queue_stats(client: Any, queues: Sequence[QueueKeys], now: Optional[int] = None,
                     scripts: Optional[Scripts] = None,
                     most_schedulers: int = MOST_SCHEDULERS) -> Dict[str, QueueStats]:
    """The :class:`QueueStats` of each queue (by name), read in one round trip on
    ``client`` (a redis-py pipeline, not a transaction: every call is read only). ``now``
    (ms) defaults to this host's clock. ``scripts``: a :class:`Scripts` on ``client`` to
    send the script calls through (any queue's; the calls name their keys), else one is
    made. Raises redis-py's errors when Redis cannot be read; a queue whose answers are
    errors raises its error."""
    if not queues:
        return {}
    when = now_ms() if now is None else int(now)
    lead = _scripts_of(client, queues, scripts)
    pipe = client.pipeline(transaction=False)
    types = ["wait" if t == "waiting" else t for t in COUNT_STATES]
    for keys in queues:
        lead.queue_call(pipe, "getCounts-1", [keys.base], types)
        lead.queue_call(pipe, "getCounts-1", [keys.base], [when + 1, "delayed"])
        call = lead.admin.oldest_job_call(when, keys.base)
        lead.queue_call(pipe, call.name, call.keys, call.args)
        pipe.zrange(keys.repeat, 0, max(0, most_schedulers - 1), withscores=True)
    answers = lead.execute_pipeline(pipe)
    out: Dict[str, QueueStats] = {}
    for i, keys in enumerate(queues):
        counts, due, oldest, repeat = answers[4 * i:4 * i + 4]
        for answer in (counts, due, oldest, repeat):
            if isinstance(answer, BaseException):
                raise answer
        ts, job_id, state, paused = AdminScripts.read_oldest_job(oldest)
        late = [LateScheduler(str(sid), int(score), max(0.0, (when - score) / 1000.0)) for sid, score in repeat]
        out[keys.name] = QueueStats(
            queue=keys.name,
            counts={name: int(n) for name, n in zip(COUNT_STATES, counts)},
            due_delayed=int(due[0]),
            age=QueueAge(keys.name, ts, job_id, state, paused, when),
            schedulers=late)
    return out

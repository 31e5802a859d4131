"""The jobs that pick-ups took when their answers were lost.

A pick-up (``moveToActive``) whose connection failed after it was sent may have taken a
job: its answer is an :class:`~echomq_gevent.connection.kept.AmbiguousCallError`, and it is
never sent again. The fetch loop (:mod:`.fetch`) then keeps the tokens such pick-ups locked
with (``FetchHints.unknown_pickups``) and, on its next turn, finds their jobs here: in
``active`` and locked with one of those tokens. The same goes for the next job a finish
fetched when the finish's answer was lost. So none of them waits for its lock to lapse
and for the stalled check.
"""
from __future__ import annotations

from typing import Any, Collection, Iterator, List, Mapping

from ..protocol.scripts import Scripts
from ..queue.job import Job

__all__ = ["lost_pickups"]


def lost_pickups(scripts: Scripts, tokens: Collection[str], active: Mapping[str, Any]) -> Iterator[Job]:
    """The jobs in the queue's ``active`` list whose lock holds one of ``tokens`` and that
    are not in ``active`` (the worker's jobs in flight), each with its ``token`` set, one at
    a time as its hash is read (the caller starts each before the next is read, so its lock
    is renewed from then on). Called by the fetch loop on its greenlet; raises on a
    connection error (the loop tries again after its pause). A read-back that takes
    longer than ``lock_duration`` leaves the jobs not yet started to the stalled check."""
    keys = scripts.keys
    client = scripts.client
    ids = client.lrange(keys.active, 0, -1)
    owners: List[Any] = []
    if ids:
        pipe = client.pipeline(transaction=False)
        for job_id in ids:
            pipe.get(keys.lock(job_id))
        owners = pipe.execute()
    for job_id, owner in zip(ids, owners):
        if owner not in tokens or job_id in active:
            continue
        fields = client.hgetall(keys.job(job_id))
        job = Job.from_fields(scripts, job_id, fields)
        job.token = owner
        yield job

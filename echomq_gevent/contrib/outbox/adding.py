"""Turning outbox rows into jobs: one outcome per row, and why.

The relay (:mod:`.relay`) hands :func:`add_rows` the rows of one pass, in the order
they must reach Redis. Each row is checked again (it was written by an app that may run
another version, and the database is input like Redis is), given its job id and the
enqueue time as the job's ``timestamp`` (a ``delay`` counts from the enqueue, not from
the relay), and added with the add scripts; consecutive rows of one queue go in one
round trip. BullMQ refuses a second add of the same job id (the script answers with the
existing id), which makes a row retried after a crash harmless.

Each row's :class:`Outcome` is one of:

* ``added``: the job is in Redis (or was already: the same id);
* ``park``: the add can never succeed as written (options or data Redis-side checks
  refuse, a queue the settings do not declare, a missing parent): kept with the reason;
* ``retry``: an unexpected error; counted, parked after ``max_attempts``;
* ``transient``: Redis cannot take it now (down, loading, read-only after a failover,
  out of memory): the pass stops there and the relay backs off; never parked.

Called on the relay's greenlet; blocking calls yield to other greenlets under gevent.
"""
from __future__ import annotations

import json
from typing import Any, Callable, List, NamedTuple, Optional, Sequence

import redis

from ...errors import ConfigError, EchoMQError, ScriptError, error_for_code
from .rows import Row

__all__ = ["Outcome", "add_rows", "is_transient"]

#: Error replies that say Redis cannot take writes now, not that the command is wrong.
TRANSIENT_REPLIES = ("OOM", "LOADING", "READONLY", "MASTERDOWN", "BUSY", "TRYAGAIN", "CLUSTERDOWN",
                     "NOREPLICAS", "MISCONF")


class Outcome(NamedTuple):
    row: Row
    kind: str  # added | park | retry | transient
    detail: str = ""
    job_id: Optional[str] = None


def is_transient(exc: BaseException) -> bool:
    """True for an error that a later try may not meet (connection, timeout, a server
    that is loading, read-only, out of memory or busy)."""
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError, ConnectionError, TimeoutError, OSError)):
        return True
    if isinstance(exc, redis.ResponseError):
        text = str(exc).lstrip()
        return text.split(" ", 1)[0].upper() in TRANSIENT_REPLIES
    return False


class _Prepared(NamedTuple):
    row: Row
    queue: Any
    job: Any


def _prepare(row: Row, queue_for: Callable[[str], Any]) -> Any:
    """The queue and the prepared job of ``row``, or the park reason (a str)."""
    try:
        queue = queue_for(row.queue)
    except ConfigError as exc:
        return str(exc)
    try:
        data = json.loads(row.data)
    except ValueError as exc:
        return f"column data is not JSON ({exc}): {row.data[:200]!r}"
    try:
        opts = json.loads(row.opts) if row.opts else {}
    except ValueError as exc:
        return f"column opts is not JSON ({exc}): {row.opts[:200]!r}"
    if not isinstance(opts, dict):
        return f"column opts must hold a JSON object of job options, got {row.opts[:200]!r}"
    opts.setdefault("jobId", row.job_id)
    opts.setdefault("timestamp", row.created_ms)
    try:
        return _Prepared(row, queue, queue.prepare_job(row.name, data, opts))
    except (EchoMQError, ValueError, TypeError) as exc:
        return f"{type(exc).__name__}: {exc}"


def add_rows(rows: Sequence[Row], queue_for: Callable[[str], Any]) -> List[Outcome]:
    """Add ``rows`` to Redis in order; one :class:`Outcome` per row handled.

    ``queue_for(name)`` returns the :class:`~echomq_gevent.queue.Queue` of a queue the
    settings declare (ConfigError for another). The list stops after the first
    ``transient`` outcome: the rows after it are left for a later pass."""
    outcomes: List[Outcome] = []
    run: List[_Prepared] = []

    def flush() -> bool:
        """Send the run; False when Redis could not take it."""
        if not run:
            return True
        queue = run[0].queue
        batch = queue.scripts.batch()
        for p in run:
            j = p.job
            queue.scripts.add_job(j.job_id, j.name, j.timestamp, j.data_json, j.encoded, pipe=batch,
                                  **j.script_kwargs)
        try:
            results = batch.execute()
        except Exception as exc:  # nothing of the round trip is known
            kind = "transient" if is_transient(exc) else "retry"
            outcomes.append(Outcome(run[0].row, kind, f"{type(exc).__name__}: {exc}"))
            run.clear()
            return False
        ok = True
        for p, res in zip(run, results):
            outcomes.append(_result(p, res))
            ok = ok and outcomes[-1].kind != "transient"
        run.clear()
        return ok

    for row in rows:
        prepared = _prepare(row, queue_for)
        if isinstance(prepared, str):
            if not flush():
                return outcomes
            outcomes.append(Outcome(row, "park", prepared))
            continue
        if run and run[0].queue is not prepared.queue:
            if not flush():
                return outcomes
        run.append(prepared)
    flush()
    return outcomes


def _result(p: _Prepared, res: Any) -> Outcome:
    if isinstance(res, BaseException):
        detail = f"{type(res).__name__}: {res}"
        return Outcome(p.row, "transient" if is_transient(res) else "retry", detail)
    if isinstance(res, int) and res < 0:
        script = p.queue.scripts.add_script_for(p.job.encoded)[0]
        err: ScriptError = error_for_code(res, script, p.job.job_id)
        return Outcome(p.row, "park", f"{type(err).__name__}: {err}")
    return Outcome(p.row, "added", job_id=str(res))

"""The worker's calls of :class:`~echomq_gevent.protocol.scripts.Scripts` (docs/protocol.md,
"Fetching and finishing"): the pick-ups (one, several in one call, or the one written behind
the marker wait), the finishes (one, or a hub turn's together), moving a job to delayed or
back to wait, renewing locks, the stalled check and handing a job back.

They are methods of ``Scripts``, whose class body names each of them, written here so that
``scripts.py`` stays about calling scripts at all (connections, NOSCRIPT, batches). They are
not a part made on use as :attr:`Scripts.admin` is: the worker makes these calls for every
job, and a part would add a lookup to each. Each takes the ``Scripts`` object as ``self``
and runs on whichever greenlet or thread calls it, as every ``Scripts`` method does.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union

from redis.exceptions import NoScriptError, ResponseError

from ..errors import error_for_code
from .calls import ScriptCall
from .library import pack

if TYPE_CHECKING:  # pragma: no cover
    import redis

    from .scripts import Scripts

__all__ = ["FINISH_MANY_MAX", "BEHIND_WAIT_SCRIPTS", "load_wait_scripts", "fetch_opts", "move_to_active",
           "move_to_active_command", "move_to_active_many", "move_to_finished_args", "move_to_finished_call",
           "move_to_finished_many", "move_to_finished_queues", "move_to_finished", "move_to_delayed", "retry_job",
           "extend_lock", "extend_locks", "extend_locks_reading_marks", "move_stalled_jobs_to_wait",
           "move_job_from_active_to_wait"]

#: Most jobs one ``moveToFinishedMany-11`` call finishes (about 0.2 ms of Redis time at
#: no-op jobs): larger calls save Redis little more, and the jobs of a call all wait for
#: its answer, so the worker keeps several smaller calls in flight instead.
FINISH_MANY_MAX = 10


def _int(v: Any) -> int:
    return int(v) if v is not None else 0


def _fetch_keys(self: "Scripts") -> List[str]:
    k = self.keys
    return [k.wait, k.active, k.prioritized, k.events, k.stalled, k.limiter, k.delayed,
            k.paused, k.meta, k.pc, k.marker]


def fetch_opts(token: Optional[str], lock_duration: int, limiter: Optional[Dict[str, int]] = None,
               name: Optional[str] = None) -> Dict[str, Any]:
    """The worker's options of a fetch (msgpack ARGV of the pick-ups); no token (None)
    for ``moveToActiveMany-11``, which numbers its own."""
    opts: Dict[str, Any] = {"lockDuration": int(lock_duration)} if token is None else \
        {"token": token, "lockDuration": int(lock_duration)}
    if limiter:
        opts["limiter"] = {"max": int(limiter["max"]), "duration": int(limiter["duration"])}
    if name:
        opts["name"] = name
    return opts


def move_to_active(self: "Scripts", token: str, lock_duration: int, now_ms: int,
                   limiter: Optional[Dict[str, int]] = None, name: Optional[str] = None,
                   client: Optional["redis.Redis"] = None, packed_opts: Optional[bytes] = None) -> List[Any]:
    """``moveToActive-11``: ``[flat job hash | 0, job id | 0, rate-limit ttl, next delayed ts]``."""
    if packed_opts is None:
        packed_opts = pack(fetch_opts(token, lock_duration, limiter, name))
    return self.call("moveToActive-11", _fetch_keys(self),
                     [self.keys.base, now_ms, packed_opts], client=client)


def move_to_active_command(self: "Scripts", token: str, lock_duration: int, limiter: Optional[Dict[str, int]] = None,
                           name: Optional[str] = None) -> Tuple[Any, ...]:
    """The ``EVALSHA`` of a ``moveToActive-11`` pick-up that reads the time on the server
    (an empty ``now``): the command the worker writes behind its marker wait
    (:mod:`echomq_gevent.worker.marker`), which Redis runs only when the wait ends."""
    return self._evalsha(ScriptCall("moveToActive-11", _fetch_keys(self),
                                    [self.keys.base, "", pack(fetch_opts(token, lock_duration, limiter, name))]))


#: The scripts a worker writes behind its marker wait (:func:`move_to_active_command`),
#: where a NOSCRIPT costs the wake-up a round trip more (the pick-up goes again through the
#: script connection, which loads it): loaded when the worker starts.
BEHIND_WAIT_SCRIPTS = ("moveToActive-11",)


def load_wait_scripts(self: "Scripts") -> None:
    """SCRIPT LOAD the scripts of :data:`BEHIND_WAIT_SCRIPTS`, one round trip (the worker's
    set-up, on its run greenlet). A later SCRIPT FLUSH is still met by the reload on
    NOSCRIPT."""
    self.load(BEHIND_WAIT_SCRIPTS)


def move_to_active_many(self: "Scripts", token_prefix: str, first: int, most: int, lock_duration: int, now_ms: int,
                        limiter: Optional[Dict[str, int]] = None,
                        name: Optional[str] = None) -> List[Any]:
    """``moveToActiveMany-11``: up to ``most`` pick-ups in one script call, the i-th
    (from 0) locking its job with the token ``f"{token_prefix}{first + i}"``. The answers
    in order, each as :meth:`move_to_active` gives it; they end with the first pick-up
    that took no job, the one that left nothing ready (its ``ready`` is 0), or the
    ``most``-th. A pick-up that failed ends them with its error (a ``ResponseError``)
    in its place; the jobs taken before it are in the answers."""
    answers = self.call("moveToActiveMany-11", _fetch_keys(self),
                        [self.keys.base, now_ms, pack(fetch_opts(None, lock_duration, limiter, name)),
                         token_prefix, int(first), int(most)])
    if not isinstance(answers, list) or not answers or len(answers) > most + 1:
        raise ResponseError(f"moveToActiveMany-11 answered {most} pick-ups with {answers!r}")
    return answers


def move_to_finished_args(self: "Scripts", job_id: str, now_ms: int, field: str, value: str, target: str,
                          fetch_next: bool, finish_opts: Union[Dict[str, Any], bytes],
                          fields_to_update: Optional[Sequence[Any]] = None) -> Tuple[List[str], List[Any]]:
    k = self.keys
    keys = [k.wait, k.active, k.prioritized, k.events, k.stalled, k.limiter, k.delayed,
            k.paused, k.meta, k.pc, k.completed if target == "completed" else k.failed,
            k.job(job_id), k.metrics(target), k.marker]
    args: List[Any] = [job_id, now_ms, field, value, target, "1" if fetch_next else "0",
                       k.base, finish_opts if isinstance(finish_opts, bytes) else pack(finish_opts)]
    if fields_to_update:
        args.append(pack(list(fields_to_update)))
    return keys, args


def move_to_finished_call(self: "Scripts", job_id: str, now_ms: int, field: str, value: str, target: str,
                          fetch_next: bool, finish_opts: Union[Dict[str, Any], bytes],
                          fields_to_update: Optional[Sequence[Any]] = None) -> ScriptCall:
    """The ``moveToFinished-14`` call :meth:`move_to_finished` makes, for :meth:`run`
    or :meth:`run_many` (the worker sends the finishes of one hub turn together).
    ``finish_opts`` may come packed already (the bytes of ARGV[8])."""
    keys, args = move_to_finished_args(self, job_id, now_ms, field, value, target, fetch_next,
                                            finish_opts, fields_to_update)
    return ScriptCall("moveToFinished-14", keys, args, job_id)


def move_to_finished_many(self: "Scripts", calls: Sequence[ScriptCall]) -> List[Any]:
    """Several ``moveToFinished-14`` calls of this queue (from
    :meth:`move_to_finished_call`) as ``moveToFinishedMany-11``: each job finished as
    its own call would finish it, one after the other, in calls of at most
    :data:`FINISH_MANY_MAX` jobs sent in one round trip. The answers in order, as
    :meth:`run_many` gives them: a script error, or a negative code's typed error, in
    place of its answer. A connection error raises (none of the answers is known)."""
    # moveToFinished-14's ARGV without the prefix (7th), which is said once
    rows = [(a[0], a[1], a[2], a[3], a[4], a[5], a[7], a[8] if len(a) > 8 else "")
            for a in (c.args for c in calls)]
    answers = self.run_rows("moveToFinishedMany-11", _fetch_keys(self), [self.keys.base], rows,
                            FINISH_MANY_MAX)
    return [error_for_code(res, c.name, c.job_id) if isinstance(res, int) and res < 0 else res
            for c, res in zip(calls, answers)]


def move_to_finished_queues(self: "Scripts", calls: Sequence[ScriptCall]) -> List[Any]:
    """``moveToFinished-14`` calls of one or several queues on this Redis (each from its
    own queue's :meth:`move_to_finished_call`) as one ``moveToFinishedQueues-0`` call:
    each job finished as its own call would finish it, the jobs of a queue together, the
    queues in the order they first appear; the script makes each queue's keys from its
    prefix (ARGV[7] of its calls). Sent on this object's connection (the queues' clients
    must be this one's); never on a Redis Cluster. The answers in the order of
    ``calls``, as :meth:`run_many` gives them: a script error, or a negative code's typed
    error, in place of its answer. A connection error raises (none of the answers is known)."""
    groups: Dict[str, List[int]] = {}
    for i, c in enumerate(calls):
        groups.setdefault(c.args[6], []).append(i)  # ARGV[7], the queue's key prefix
    args: List[Any] = []
    order: List[int] = []
    for prefix, members in groups.items():
        args.append(prefix)
        args.append(len(members))
        for i in members:
            a = calls[i].args
            args.extend((a[0], a[1], a[2], a[3], a[4], a[5], a[7], a[8] if len(a) > 8 else ""))
            order.append(i)
    answers = self.run_many([ScriptCall("moveToFinishedQueues-0", [], args)], check=False)[0]
    if isinstance(answers, BaseException):  # the call did not run, or failed as a whole
        return [answers] * len(calls)
    if not isinstance(answers, list) or len(answers) != len(calls):
        raise ResponseError(f"moveToFinishedQueues-0 answered {len(calls)} finishes with {answers!r}")
    out: List[Any] = [None] * len(calls)
    for i, res in zip(order, answers):
        c = calls[i]
        out[i] = error_for_code(res, c.name, c.job_id) if isinstance(res, int) and res < 0 else res
    return out


def move_to_finished(self: "Scripts", job_id: str, now_ms: int, field: str, value: str, target: str,
                     fetch_next: bool, finish_opts: Dict[str, Any],
                     fields_to_update: Optional[Sequence[Any]] = None,
                     client: Optional["redis.Redis"] = None) -> Any:
    """``moveToFinished-14``. ``finish_opts`` is the ARGV[8] map: token, keepJobs,
    lockDuration, attempts, maxMetricsSize, limiter, name. Returns 0, or with
    ``fetch_next`` the next job 4-tuple (or ``None``/0 when there is none)."""
    keys, args = move_to_finished_args(self, job_id, now_ms, field, value, target, fetch_next,
                                            finish_opts, fields_to_update)
    return self.check("moveToFinished-14", self.call("moveToFinished-14", keys, args, client), job_id)


def move_to_delayed(self: "Scripts", job_id: str, now_ms: int, token: str, delay_ms: int,
                    skip_attempt: bool = False, fields_to_update: Optional[Sequence[Any]] = None,
                    fetch_next: bool = False, fetch_opts: Optional[Dict[str, Any]] = None,
                    client: Optional["redis.Redis"] = None) -> Any:
    """``moveToDelayed-11``: 0, or the next job 4-tuple when ``fetch_next`` found one."""
    k = self.keys
    keys = [k.marker, k.active, k.prioritized, k.delayed, k.job(job_id), k.events, k.meta,
            k.stalled, k.wait, k.limiter, k.pc]
    args: List[Any] = [k.base, now_ms, job_id, token, int(delay_ms), "1" if skip_attempt else "0",
                       pack(list(fields_to_update or [])), "1" if fetch_next else "0"]
    if fetch_next:
        args.append(pack(fetch_opts or {}))
    return self.check("moveToDelayed-11", self.call("moveToDelayed-11", keys, args, client), job_id)


def retry_job(self: "Scripts", job_id: str, now_ms: int, token: str, lifo: bool = False,
              fields_to_update: Optional[Sequence[Any]] = None,
              client: Optional["redis.Redis"] = None) -> int:
    """``retryJob-11``: move an active job straight back to wait/prioritized."""
    k = self.keys
    keys = [k.active, k.wait, k.paused, k.job(job_id), k.meta, k.events, k.delayed,
            k.prioritized, k.pc, k.marker, k.stalled]
    args: List[Any] = [k.base, now_ms, "RPUSH" if lifo else "LPUSH", job_id, token]
    if fields_to_update:
        args.append(pack(list(fields_to_update)))
    return self.check("retryJob-11", self.call("retryJob-11", keys, args, client), job_id)


def extend_lock(self: "Scripts", job_id: str, token: str, duration_ms: int,
                client: Optional["redis.Redis"] = None) -> bool:
    """``extendLock-2``: True if the lock was ours and is renewed."""
    k = self.keys
    return bool(self.call("extendLock-2", [k.lock(job_id), k.stalled],
                          [token, int(duration_ms), job_id], client))


def extend_locks(self: "Scripts", job_ids: Sequence[str], tokens: Sequence[str], duration_ms: int,
                 client: Optional["redis.Redis"] = None) -> List[str]:
    """``extendLocks-1``: renew many locks; returns the ids whose renewal failed."""
    if not job_ids:
        return []
    res = self.call("extendLocks-1", [self.keys.stalled],
                    [self.keys.base, pack(list(tokens)), pack(list(job_ids)), int(duration_ms)], client)
    return [str(x) for x in (res or [])]


def extend_locks_reading_marks(self: "Scripts", job_ids: Sequence[str], tokens: Sequence[str],
                               duration_ms: int) -> Tuple[List[str], Dict[str, str]]:
    """``extendLocks-1`` and, written in the same send, ``HGET <job> cancelled`` of each
    job (``cancelJob-9``'s mark): the ids whose renewal failed, and the jobs marked, by id
    with their reason (``""`` for none). ``extendLocks-1`` stays BullMQ's: its answer is
    the same for a Node caller, the marks come beside it in the same round trip."""
    if not job_ids:
        return [], {}
    k = self.keys
    renew = ("EVALSHA", self.lib.shas["extendLocks-1"], 1, k.stalled,
             k.base, pack(list(tokens)), pack(list(job_ids)), int(duration_ms))
    answers = self.send([renew, *(("HGET", k.job(job_id), "cancelled") for job_id in job_ids)], True)
    failed = answers[0]
    if isinstance(failed, NoScriptError):  # loaded on this server now; once
        failed = self.call("extendLocks-1", [k.stalled], list(renew[4:]))
    elif isinstance(failed, BaseException):
        raise failed
    marks: Dict[str, str] = {}
    for job_id, mark in zip(job_ids, answers[1:]):
        if isinstance(mark, str):
            marks[job_id] = mark
    return [str(x) for x in (failed or [])], marks


def move_stalled_jobs_to_wait(self: "Scripts", max_stalled_count: int, now_ms: int, stalled_interval_ms: int,
                              client: Optional["redis.Redis"] = None) -> List[str]:
    """``moveStalledJobsToWait-9``: the ids found stalled (empty when another worker
    checked within the interval)."""
    k = self.keys
    keys = [k.stalled, k.wait, k.active, k.stalled_check, k.meta, k.paused, k.marker,
            k.events, k.repeat]
    res = self.call("moveStalledJobsToWait-9", keys,
                    [int(max_stalled_count), k.base, now_ms, int(stalled_interval_ms)], client)
    return [str(x) for x in (res or [])]


def move_job_from_active_to_wait(self: "Scripts", job_id: str, token: str,
                                 client: Optional["redis.Redis"] = None) -> int:
    """``moveJobFromActiveToWait-9``: hand an active job back to the front of wait.
    Returns the limiter's PTTL (ms) or 0."""
    k = self.keys
    keys = [k.active, k.wait, k.stalled, k.paused, k.meta, k.limiter, k.prioritized,
            k.marker, k.events]
    res = self.call("moveJobFromActiveToWait-9", keys, [job_id, token, k.job(job_id)], client)
    return _int(self.check("moveJobFromActiveToWait-9", res, job_id))

"""Job hashes a foreign producer could write, garbage of every kind: each job ends exactly
once (one end event, the processor run at most once), a job that cannot be run fails
before its processor with a reason naming the field, a harmless oddity runs normally,
nothing stays in ``active``, and the worker goes on serving."""
from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

from echomq_gevent import Queue, Worker
from echomq_gevent.protocol.keys import QueueKeys

from chaos_helpers import end_events, good_fields, write_job


def fields(**changes: Any) -> Dict[str, Any]:
    """Good fields with some replaced (``None`` removes one); dict/list values become JSON."""
    out: Dict[str, Any] = good_fields()
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, (dict, list)):
            out[key] = json.dumps(value)
        else:
            out[key] = value
    return out


def opts(**o: Any) -> Dict[str, Any]:
    return fields(opts=o)


# name -> (fields, or a raw writer of the job key, or None for no hash; expected end state;
#          words the failed reason must hold; whether the processor may run)
Case = Tuple[Any, str, Optional[str], bool]
CASES: Dict[str, Case] = {
    "data-not-json": (fields(data="{oops"), "failed", "'data'", False),
    "data-nan": (fields(data="NaN"), "failed", "'data'", False),
    "opts-not-json": (fields(opts="{"), "failed", "'opts'", False),
    "opts-a-list": (fields(opts=[1, 2]), "failed", "'opts'", False),
    "opts-a-string": (fields(opts='"attempts"'), "failed", "'opts'", False),
    "attempts-three": (opts(attempts="three"), "failed", "'attempts'", False),
    "attempts-float": (opts(attempts=2.5), "failed", "'attempts'", False),
    "attempts-negative": (opts(attempts=-1), "failed", "'attempts'", False),
    "remove-on-complete-yes": (opts(removeOnComplete="yes"), "failed", "'removeOnComplete'", False),
    "remove-on-complete-bad-age": (opts(removeOnComplete={"age": "old"}), "failed", "'removeOnComplete'", False),
    "remove-on-fail-negative": (opts(attempts=1, removeOnFail=-3), "failed", "'removeOnFail'", False),
    "backoff-string": (opts(attempts=3, backoff="soon"), "failed", "'backoff'", False),
    "backoff-type-number": (opts(attempts=3, backoff={"type": 5}), "failed", "'backoff'", False),
    "stacktrace-limit-string": (opts(stackTraceLimit="all"), "failed", "'stackTraceLimit'", False),
    "lifo-string": (opts(lifo="yes"), "failed", "'lifo'", False),
    "keep-logs-negative": (opts(kl=-1), "failed", "'keepLogs'", False),
    "priority-text": (opts(priority="high"), "failed", "'priority'", False),
    "parent-flags-together": (opts(fpof=True, idof=True), "failed", "together", False),
    "progress-not-json": (fields(progress="{"), "failed", "'progress'", False),
    "no-hash": (None, "failed", "no job hash", False),
    "only-foreign-fields": (fields(name=None, data=None, opts=None, timestamp=None, delay=None,
                                   priority=None, colour="blue"), "failed", "no job hash", False),
    "ats-not-integer": (fields(ats="many"), "failed", "'ats'", False),
    "atm-not-integer": (fields(atm="lots"), "failed", "'atm'", False),
    "stc-not-integer": (fields(stc="x"), "completed", None, True),
    "not-a-hash": (lambda r, key: r.set(key, "just a string"), "gone", None, False),
    # harmless oddities: the job runs once and completes
    "unknown-option": (opts(attempts=1, someNewerOption={"x": 1}), "completed", None, True),
    "name-missing": (fields(name=None), "completed", None, True),
    "timestamp-garbage": (fields(timestamp="yesterday"), "completed", None, True),
    "returnvalue-garbage": (fields(returnvalue="{"), "completed", None, True),
    "stacktrace-garbage": (fields(stacktrace="nope"), "completed", None, True),
    "failed-reason-leftover": (fields(failedReason="old"), "completed", None, True),
    "parent-garbage": (fields(parent="{", parentKey="nowhere"), "completed", None, True),
}


def test_every_garbage_hash_ends_once_with_its_reason(r, redis_url, prefix, qname, wait_for):
    keys = QueueKeys(qname, prefix)
    runs: List[str] = []

    def processor(job):
        runs.append(job.id)
        return "ran"

    ids = {name: write_job(r, keys, *((None, None, case[0]) if callable(case[0]) else (case[0],)))
           for name, case in CASES.items()}
    worker = Worker(qname, processor, connection=redis_url, prefix=prefix, concurrency=4, drain_delay=0.2,
                    lock_duration=1000, stalled_interval=300, max_stalled_count=1)
    queue = Queue(qname, connection=redis_url, prefix=prefix)
    worker.start()
    try:
        def settled() -> bool:
            if r.llen(keys.active) or r.llen(keys.wait):
                return False
            return all(r.zscore(keys.completed, i) is not None or r.zscore(keys.failed, i) is not None
                       or CASES[n][1] == "gone" for n, i in ids.items())

        wait_for(settled, timeout=30, what="every garbage job to end")
        # the worker still serves: a good job added now completes
        good = queue.add("task", {"after": True})
        wait_for(lambda: r.zscore(keys.completed, good.id) is not None, what="a good job after the garbage")
        assert worker.running and not worker.closed
    finally:
        worker.close(timeout=5)
        queue.close()

    events = end_events(r, keys)
    problems = []
    for name, (_f, expected, words, may_run) in CASES.items():
        job_id = ids[name]
        ran = runs.count(job_id)
        got = events.get(job_id, [])
        if expected == "gone":
            if got or ran or r.lpos(keys.active, job_id) is not None:
                problems.append(f"{name}: expected to be dropped, events {got}, runs {ran}")
            continue
        if got != [expected]:
            problems.append(f"{name}: end events {got}, expected exactly [{expected!r}]")
        if ran > (1 if may_run else 0):
            problems.append(f"{name}: processor ran {ran} time(s)")
        if expected == "failed":
            reason = r.hget(keys.job(job_id), "failedReason") or ""
            if words not in reason:
                problems.append(f"{name}: failedReason {reason!r} does not name {words!r}")
        if r.exists(keys.lock(job_id)):
            problems.append(f"{name}: its lock is still held")
    assert not problems, "\n".join(problems)
    assert r.llen(keys.active) == 0


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("even the message is broken")


def test_settling_never_throws_whatever_the_processor_does(r, redis_url, prefix, qname, wait_for):
    """A processor that raises an exception whose message cannot be read, or scribbles
    garbage into ``job.opts`` before it returns or raises: each job still ends once."""
    keys = QueueKeys(qname, prefix)

    def processor(job):
        kind = job.data["kind"]
        if kind == "unprintable":
            raise Unprintable()
        if kind == "opts-then-return":
            job.opts["removeOnComplete"] = "yes"
            job.opts["attempts"] = "many"
            return "done"
        if kind == "opts-then-raise":
            job.opts["stackTraceLimit"] = "x"
            job.opts["removeOnFail"] = {"age": "old"}
            job.stacktrace = [1, None, {"not": "text"}]
            raise ValueError("plain failure")
        if kind == "return-unserialisable":
            return {1, 2}
        raise AssertionError(kind)

    expected = {"unprintable": ("failed", "Unprintable"), "opts-then-return": ("completed", None),
                "opts-then-raise": ("failed", "plain failure"),
                "return-unserialisable": ("failed", "not JSON-serialisable")}
    ids = {kind: write_job(r, keys, good_fields(data={"kind": kind})) for kind in expected}
    worker = Worker(qname, processor, connection=redis_url, prefix=prefix, concurrency=2, drain_delay=0.2,
                    lock_duration=1000, stalled_interval=300)
    worker.start()
    try:
        wait_for(lambda: r.zcard(keys.completed) + r.zcard(keys.failed) == len(ids) and not r.llen(keys.active),
                 what="every job to end")
    finally:
        worker.close(timeout=5)
    events = end_events(r, keys)
    for kind, (state, words) in expected.items():
        job_id = ids[kind]
        assert events.get(job_id) == [state], (kind, events.get(job_id))
        if words:
            assert words in (r.hget(keys.job(job_id), "failedReason") or ""), kind

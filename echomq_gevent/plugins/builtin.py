"""The built-in plugin: BullMQ's failure rule, its backoff types and lifecycle logging.

It is registered first and its decision hooks are ``trylast``, so any user plugin that
answers the same firstresult hook is asked before it; a user plugin that answers
``None`` leaves the decision to these.
"""
from __future__ import annotations

import logging
from typing import Any, Optional

from .hookspecs import FailureDecision, hookimpl

log = logging.getLogger("echomq_gevent.worker")


def builtin_backoff(backoff_type: str, attempts_made: int, delay: int, jitter: float = 0) -> Optional[int]:
    """BullMQ's ``fixed`` and ``exponential`` backoff (:mod:`echomq_gevent.protocol.backoff`); ``None``
    for other types. ``attempts_made`` counts the failed attempt (1 after the first failure),
    so exponential waits ``delay``, ``2*delay``, ``4*delay``..."""
    from ..protocol.backoff import builtin_delay

    return builtin_delay(backoff_type, attempts_made, delay, jitter)


@hookimpl(trylast=True)
def echomq_add_job(queue: Any, name: str, data: Any, opts: Any, add: Any) -> Any:
    """The add itself; producer-side plugins wrap this call."""
    return add(name, data, opts)


@hookimpl(trylast=True)
def echomq_add_bulk(queue: Any, jobs: Any, add_bulk: Any) -> Any:
    """The bulk add itself; producer-side plugins wrap this call."""
    return add_bulk(jobs)


@hookimpl(trylast=True)
def echomq_add_flows(producer: Any, operation: str, flows: Any, add: Any) -> Any:
    """The flow add itself; producer-side plugins wrap this call."""
    return add(flows)


@hookimpl(trylast=True)
def echomq_backoff_delay(backoff_type: str, attempts_made: int, delay: int, error: BaseException,
                         job: Any) -> Optional[int]:
    jitter = 0.0
    backoff = (getattr(job, "opts", None) or {}).get("backoff")
    if isinstance(backoff, dict):
        jitter = float(backoff.get("jitter") or 0)
    return builtin_backoff(backoff_type, attempts_made, delay, jitter)


def default_failure_decision(worker: Any, job: Any, error: BaseException) -> FailureDecision:
    """BullMQ's rule: retry while ``attemptsMade + 1 < attempts`` after the job's backoff,
    unless the error is unrecoverable or the worker's ``max_started_attempts`` is used up;
    an unknown backoff type, or a strategy answering ``-1``, fails the job.

    Called on the job's greenlet (through the ``echomq_failure_decision`` hook) when no
    user plugin decided. ``worker`` supplies ``options`` and ``plugins`` (for custom
    backoff types); either may be missing.
    """
    from ..protocol import backoff as backoff_mod
    from ..errors import UnrecoverableError

    if isinstance(error, UnrecoverableError) or type(error).__name__ == "UnrecoverableError":
        return FailureDecision.unrecoverable()
    opts = getattr(job, "opts", None) or {}
    attempts = int(opts.get("attempts") or 0)
    made = int(getattr(job, "attempts_made", 0) or 0)
    limit = (getattr(worker, "options", None) or {}).get("max_started_attempts")
    if limit and limit <= int(getattr(job, "attempts_started", 0) or 0):
        return FailureDecision.fail()
    if made + 1 >= attempts:
        return FailureDecision.fail()
    try:
        delay = backoff_mod.compute_delay(opts.get("backoff"), made + 1, error, job,
                                          getattr(worker, "plugins", None))
    except backoff_mod.UnknownBackoffType as exc:
        log.error("queue %r: %s; the job fails instead of retrying", getattr(job, "queue_name", "?"), exc)
        return FailureDecision.fail()
    if delay == backoff_mod.NO_RETRY:
        return FailureDecision.fail()
    return FailureDecision.retry(delay=int(delay))


@hookimpl(trylast=True)
def echomq_failure_decision(worker: Any, job: Any, error: BaseException) -> Optional[FailureDecision]:
    return default_failure_decision(worker, job, error)


class BuiltinLogging:
    """The built-in log lines for failures, retries, stalls and lost locks.

    Registered beside the built-in plugin as ``echomq_gevent.builtin_logging``. A plugin
    module that sets ``REPLACES_BUILTIN_LOGGING = True`` (the shipped ``echomq_logging``
    does) makes :func:`~echomq_gevent.plugins.make_plugin_manager` unregister it, so each
    event is logged once.
    """

    @hookimpl
    def echomq_job_failed(self, worker: Any, job: Any, error: BaseException) -> None:
        log.warning("job %s (%s) on %s failed: %s", job.id, job.name, job.queue_name, error)

    @hookimpl
    def echomq_job_retried(self, worker: Any, job: Any, error: BaseException, delay_ms: int) -> None:
        log.info("job %s (%s) on %s failed, retrying in %d ms: %s", job.id, job.name, job.queue_name,
                 delay_ms, error)

    @hookimpl
    def echomq_job_lock_lost(self, worker: Any, job: Any) -> None:
        log.error("job %s (%s) on %s lost its lock; its result was not written", job.id, job.name,
                  job.queue_name)

    @hookimpl
    def echomq_job_stalled(self, worker: Any, queue: str, job_id: str) -> None:
        log.warning("job %s on %s stalled and was moved back to wait", job_id, queue)

"""The built-in plugin: BullMQ's backoff types and lifecycle logging.

It is registered first, so any user plugin that answers the same firstresult hook
is asked before it.
"""
from __future__ import annotations

import logging
import random
from typing import Any, Optional

from .hookspecs import hookimpl

log = logging.getLogger("echomq_gevent.worker")


def _jittered(value: float, jitter: float) -> int:
    if jitter and jitter > 0:
        low = value * (1 - jitter)
        return int(low + random.random() * (value - low))
    return int(round(value))


def builtin_backoff(backoff_type: str, attempts_made: int, delay: int, jitter: float = 0) -> Optional[int]:
    """BullMQ's ``fixed`` and ``exponential`` backoff; ``None`` for other types.

    ``attempts_made`` counts the failed attempt (1 after the first failure), so
    exponential waits ``delay``, ``2*delay``, ``4*delay``...
    """
    if backoff_type == "fixed":
        return _jittered(delay, jitter)
    if backoff_type == "exponential":
        return _jittered((2 ** (attempts_made - 1)) * delay, jitter)
    return None


@hookimpl(trylast=True)
def echomq_backoff_delay(backoff_type: str, attempts_made: int, delay: int, error: BaseException,
                         job: Any) -> Optional[int]:
    jitter = 0.0
    backoff = (getattr(job, "opts", None) or {}).get("backoff")
    if isinstance(backoff, dict):
        jitter = float(backoff.get("jitter") or 0)
    return builtin_backoff(backoff_type, attempts_made, delay, jitter)


@hookimpl
def echomq_job_failed(worker: Any, job: Any, error: BaseException) -> None:
    log.warning("job %s (%s) on %s failed: %s", job.id, job.name, job.queue_name, error)


@hookimpl
def echomq_job_retried(worker: Any, job: Any, error: BaseException, delay_ms: int) -> None:
    log.info("job %s (%s) on %s failed, retrying in %d ms: %s", job.id, job.name, job.queue_name,
             delay_ms, error)


@hookimpl
def echomq_job_lock_lost(worker: Any, job: Any) -> None:
    log.error("job %s (%s) on %s lost its lock; its result was not written", job.id, job.name,
              job.queue_name)


@hookimpl
def echomq_job_stalled(worker: Any, queue: str, job_id: str) -> None:
    log.warning("job %s on %s stalled and was moved back to wait", job_id, queue)

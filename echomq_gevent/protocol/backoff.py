"""Backoff: how long a failed job waits before its next attempt.

The rules are BullMQ 6.7.0's (``Backoffs``): ``opts.backoff`` is a number (a fixed
delay in ms) or ``{type, delay, jitter}``; ``fixed`` waits ``delay``, ``exponential``
waits ``round(2 ** (attempt - 1) * delay)``; a ``jitter`` j in (0, 1] draws the wait
uniformly from ``[max * (1 - j), max)`` and floors it. Other types are asked of the
plugins (``echomq_backoff_delay``); ``-1`` from a plugin means "do not retry".

Pure functions, no I/O: called by the worker on the job's greenlet after a failure.
"""
from __future__ import annotations

import math
import random
from typing import Any, Callable, Dict, Optional

from ..errors import EchoMQError

__all__ = ["normalize", "fixed_delay", "exponential_delay", "builtin_delay", "compute_delay",
           "UnknownBackoffType", "NO_RETRY"]

#: What a backoff strategy answers to say "fail the job instead of retrying".
NO_RETRY = -1


class UnknownBackoffType(EchoMQError):
    """``opts.backoff.type`` is neither built in nor answered by a plugin."""


def normalize(backoff: Any) -> Optional[Dict[str, Any]]:
    """``5000`` -> ``{"type": "fixed", "delay": 5000}``; a mapping as is; nothing -> ``None``."""
    if isinstance(backoff, bool):
        return None
    if isinstance(backoff, (int, float)):
        if math.isfinite(backoff):
            return {"type": "fixed", "delay": backoff}
        return None
    if isinstance(backoff, dict) and backoff:
        return backoff
    return None


def fixed_delay(delay: float, jitter: float = 0, rand: Callable[[], float] = random.random) -> int:
    """BullMQ's ``fixed`` strategy (ms)."""
    if jitter and jitter > 0:
        low = delay * (1 - jitter)
        return int(math.floor(rand() * delay * jitter + low))
    return int(delay)


def _js_round(x: float) -> int:
    """``Math.round``: halves go up (Python's ``round`` goes to even)."""
    return int(math.floor(x + 0.5))


def exponential_delay(delay: float, attempts_made: int, jitter: float = 0,
                      rand: Callable[[], float] = random.random) -> int:
    """BullMQ's ``exponential`` strategy (ms); ``attempts_made`` counts the failed attempt (1, 2, ...)."""
    top = _js_round((2 ** (attempts_made - 1)) * delay)
    if jitter and jitter > 0:
        low = top * (1 - jitter)
        return int(math.floor(rand() * top * jitter + low))
    return top


def builtin_delay(backoff_type: str, attempts_made: int, delay: float, jitter: float = 0,
                  rand: Callable[[], float] = random.random) -> Optional[int]:
    """``fixed``/``exponential``; ``None`` for any other type."""
    if backoff_type == "fixed":
        return fixed_delay(delay, jitter, rand)
    if backoff_type == "exponential":
        return exponential_delay(delay, attempts_made, jitter, rand)
    return None


def compute_delay(backoff: Any, attempts_made: int, error: BaseException, job: Any,
                  plugins: Any = None) -> int:
    """The wait (ms) before the next attempt, ``0`` for "at once", ``-1`` for "do not retry".

    ``backoff`` is the job's ``opts.backoff``; ``attempts_made`` counts the attempt that
    just failed. Plugins are asked first (``plugins.backoff_delay``: a user plugin may
    override a built-in type); the built-in math answers when no plugin does. Raises
    :class:`UnknownBackoffType` naming the job and the type when nobody knows it.
    """
    spec = normalize(backoff)
    if spec is None:
        return 0
    btype = spec.get("type")
    delay = spec.get("delay") or 0
    jitter = spec.get("jitter") or 0
    answer: Optional[int] = None
    if plugins is not None:
        answer = plugins.backoff_delay(str(btype), attempts_made, delay, error, job)
    if answer is None:
        answer = builtin_delay(str(btype), attempts_made, delay, jitter)
    if answer is None:
        raise UnknownBackoffType(
            f"job {getattr(job, 'id', '?')}: unknown backoff type {btype!r}; use 'fixed' or "
            f"'exponential', or install a plugin that implements echomq_backoff_delay for it"
        )
    answer = int(answer)
    if answer < 0:
        return NO_RETRY
    return answer

"""Script wrappers for the getters and admin calls BullMQ's ``Queue`` has beyond the
worker's hot path (metrics, rate-limit TTL, counts per priority, global concurrency,
orphaned jobs).

:class:`AdminScripts` is mixed into :class:`~echomq_gevent.scripts.Scripts`, so callers
use them like every other script method (``queue.scripts.get_metrics("completed")``); it
relies on the host's ``keys`` and ``call``.
"""
from __future__ import annotations

from typing import Any, List, Sequence

__all__ = ["AdminScripts", "METRICS_TYPES"]

#: What ``getMetrics`` reads: the per-minute counts of completed or failed jobs.
METRICS_TYPES = ("completed", "failed")


class AdminScripts:
    """Mixin of :class:`~echomq_gevent.scripts.Scripts` (needs ``self.keys``, ``self.call``)."""

    keys: Any
    call: Any

    def get_metrics(self, kind: str, start: int = 0, end: int = -1) -> List[Any]:
        """``getMetrics-2``: ``[[count, prevTS, prevCount], data points, data length]``
        (missing hash fields are ``None``)."""
        metrics_key = self.keys.metrics(kind)
        return self.call("getMetrics-2", [metrics_key, metrics_key + ":data"], [start, end])

    def get_rate_limit_ttl(self, max_jobs: int = 0) -> int:
        """``getRateLimitTtl-2``: remaining limiter ms once ``max_jobs`` (0 = meta "max")
        is reached, else 0; the plain PTTL when neither limit exists."""
        k = self.keys
        return int(self.call("getRateLimitTtl-2", [k.limiter, k.meta], [max_jobs]))

    def get_counts_per_priority(self, priorities: Sequence[int]) -> List[int]:
        """``getCountsPerPriority-2``: ready jobs per priority (0 = the wait list)."""
        k = self.keys
        return [int(c) for c in self.call("getCountsPerPriority-2", [k.wait, k.prioritized], list(priorities))]

    def is_maxed(self) -> bool:
        """``isMaxed-2``: the active list has reached meta "concurrency"."""
        k = self.keys
        return bool(self.call("isMaxed-2", [k.meta, k.active], []))

    def remove_orphaned_jobs(self, state_suffixes: Sequence[str], sub_keys: Sequence[str],
                             candidate_ids: Sequence[str]) -> int:
        """``removeOrphanedJobs-1``: delete the candidates no state key refers to; returns
        how many were deleted."""
        args: List[Any] = [len(state_suffixes), *state_suffixes, len(sub_keys), *sub_keys, *candidate_ids]
        return int(self.call("removeOrphanedJobs-1", [self.keys.base], args))

    def remove_deduplication_key(self, dedup_id: str, job_id: str) -> bool:
        """``removeDeduplicationKey-1``: delete ``de:<dedup_id>`` if it names ``job_id``."""
        return bool(self.call("removeDeduplicationKey-1", [self.keys.dedup(dedup_id)], [job_id]))

"""Script wrappers for the getters and admin calls BullMQ's ``Queue`` has beyond the
worker's hot path (metrics, rate-limit TTL, counts per priority, ...).

:class:`AdminScripts` is mixed into :class:`~echomq_gevent.scripts.Scripts`, so callers
use them like every other script method (``queue.scripts.get_metrics("completed")``); it
relies on the host's ``keys`` and ``call``.
"""
from __future__ import annotations

from typing import Any, List

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

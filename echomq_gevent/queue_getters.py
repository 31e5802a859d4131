"""The BullMQ ``Queue`` getters and admin calls beyond adding and reading jobs.

:class:`QueueGetters` is mixed into :class:`~echomq_gevent.queue.Queue`; it uses the
queue's ``keys``, ``client`` and ``scripts``. Answers have Node's shapes (dicts with
Node's key names), so code ported from Node reads the same values.
"""
from __future__ import annotations

from typing import Any, Dict

from .admin_scripts import METRICS_TYPES

__all__ = ["QueueGetters"]


def _int_or_zero(value: Any) -> int:
    """Node's ``parseInt(x || '0', 10)`` / ``+x || 0`` for a value read from Redis."""
    if value is None or value == "":
        return 0
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return 0


def _index(label: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{label} must be an integer list index (0 = newest, -1 = last), got {value!r}")
    return value


class QueueGetters:
    """Mixin of :class:`~echomq_gevent.queue.Queue` (needs ``keys``, ``client``, ``scripts``)."""

    keys: Any
    client: Any
    scripts: Any

    def get_metrics(self, type: str, start: int = 0, end: int = -1) -> Dict[str, Any]:
        """The per-minute metrics workers record for ``completed`` or ``failed`` jobs when
        they run with ``metrics={"maxDataPoints": N}`` (ours or Node's).

        Node's shape: ``{"meta": {"count", "prevTS", "prevCount"}, "data": [...], "count": n}``:
        ``meta.count`` is the total recorded, ``data`` the jobs per minute, newest first,
        from index ``start`` to ``end`` (inclusive, -1 = the oldest kept), ``count`` the
        number of data points kept. Nothing recorded yet reads as zeros and ``[]``.
        """
        if type not in METRICS_TYPES:
            raise ValueError(f"get_metrics: type must be 'completed' or 'failed', got {type!r}")
        summary, data, length = self.scripts.get_metrics(type, _index("get_metrics: start", start),
                                                         _index("get_metrics: end", end))
        summary = list(summary or []) + [None] * 3
        return {
            "meta": {"count": _int_or_zero(summary[0]), "prevTS": _int_or_zero(summary[1]),
                     "prevCount": _int_or_zero(summary[2])},
            "data": [_int_or_zero(point) for point in (data or [])],
            "count": int(length or 0),
        }

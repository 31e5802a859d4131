"""The one clock of the protocol: wall-clock milliseconds since the epoch, which BullMQ's
scripts, job timestamps, delays and locks all use."""
from __future__ import annotations

import time

__all__ = ["now_ms"]


def now_ms() -> int:
    """Wall-clock milliseconds (``Date.now()`` in Node)."""
    return int(time.time() * 1000)

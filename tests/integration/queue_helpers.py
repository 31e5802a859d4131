"""Helpers shared by the Queue tests: take a job the way a worker does."""
from __future__ import annotations

import time

from echomq_gevent.protocol.clock import now_ms
from echomq_gevent import Queue

TOKEN = "tok:0"


def take(q: Queue) -> str:
    """Move the next job to active with a lock, as a worker does."""
    res = q.scripts.move_to_active(TOKEN, 30000, now_ms())
    assert res[1], f"no job to take: {res}"
    return str(res[1])

"""What the cases of the scale section share: the fill (``scale_fill.lua``, N jobs written
straight into Redis in the shape an add leaves), the command of the admin driver, the
configuration of a worker driver that writes a report, and Redis's CPU."""
from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Optional

from ..harness import PREFIX, Bench
from ..impls import DRIVERS, Impl, node_binary, ours_python
from echomq_gevent.protocol.keys import QueueKeys

#: the bench's folder, where ``scale_fill.lua`` is
BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILL_CHUNK = 5000


# -- the fill --------------------------------------------------------------------------------
class Filler:
    """Loads ``scale_fill.lua`` once and writes N jobs into one state, in chunks."""

    def __init__(self, bench: Bench) -> None:
        assert bench.client is not None
        self.client = bench.client
        with open(os.path.join(BENCH, "scale_fill.lua"), encoding="utf-8") as fh:
            self.sha = self.client.script_load(fh.read())

    def fill(self, keys: QueueKeys, state: str, n: int, ts: Optional[int] = None,
             due0: float = 0.0, step_ms: float = 0.0, pad: int = 0, priorities: int = 0) -> None:
        """``n`` jobs into ``state``; ``pad`` bytes of padding in each job's data;
        ``priorities`` (state ``prioritized``): how many priorities the jobs spread over."""
        ts = int(time.time() * 1000) - 1000 if ts is None else ts
        target = {"wait": keys.wait, "completed": keys.completed, "failed": keys.failed,
                  "delayed": keys.delayed, "prioritized": keys.prioritized}[state]
        if state == "prioritized":
            due0 = float(priorities)
        # a chunk of padded jobs is one script call: keep each call's writes near 50 MB
        chunk = max(1, min(FILL_CHUNK, (50 << 20) // max(pad, 1)))
        pipe = self.client.pipeline(transaction=False)
        for start in range(0, n, chunk):
            count = min(chunk, n - start)
            pipe.evalsha(self.sha, 4, target, keys.id, keys.marker, keys.pc, keys.base, start + 1, count, state, ts,
                         due0 + start * step_ms, step_ms, pad)
            if len(pipe) >= 8 or pad:
                pipe.execute()
        pipe.execute()

    def used_memory(self) -> int:
        return int(self.client.info("memory")["used_memory"])


# -- the drivers -----------------------------------------------------------------------------
def admin_cmd(impl: Impl) -> List[str]:
    """The admin driver of ``impl`` (``scale_admin_*``): one JSON request a line on stdin."""
    if impl.key == "node":
        return [node_binary(), os.path.join(DRIVERS, "scale_admin_node.js")]
    return [ours_python(), os.path.join(DRIVERS, "scale_admin_ours.py")]


def reporting_worker(bench: Bench, queue: str, mode: str, concurrency: int, **more: Any) -> Dict[str, Any]:
    """The configuration of a worker driver in ``mode`` that writes its report (latencies
    and the like) into a fresh temporary file, ``cfg["report"]``, which the caller removes."""
    import tempfile

    fd, path = tempfile.mkstemp(prefix="echomq-bench-", suffix=".json")
    os.close(fd)
    return {"url": bench.url, "queue": queue, "prefix": PREFIX, "concurrency": concurrency, "mode": mode,
            "sleep_ms": 0, "report": path, **more}


def redis_cpu(bench: Bench) -> float:
    """Redis's CPU so far (system and user), in seconds."""
    assert bench.client is not None
    cpu = bench.client.info("cpu")
    return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])

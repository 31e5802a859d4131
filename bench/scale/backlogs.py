"""The throughput cases of the scale section: N waiting no-op jobs through one worker at
concurrency 100 (:meth:`bench.harness.Bench.run_worker`, the queue filled straight into
Redis): the **backlog**, the **prioritized** jobs with their start order, and the
**payloads** of 100 KB and 1 MB."""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

from ..harness import Bench, BenchError
from ..impls import Impl
from .tools import Filler
from echomq_gevent.protocol.keys import QueueKeys

#: backlogs of at most this many jobs (seconds long) run in alternated rounds (``rounds``)
SHORT_BACKLOG = 100000


# -- backlog ---------------------------------------------------------------------------------
def measure_backlog(bench: Bench, filler: Filler, impl: Impl, n: int, concurrency: int = 100) -> Dict[str, Any]:
    mem: Dict[str, int] = {}

    def fill(queue: str, keys: QueueKeys) -> None:
        assert bench.client is not None
        bench.client.hset(keys.meta, "paused", 1)
        before = filler.used_memory()
        filler.fill(keys, "wait", n)
        mem["bytes"] = filler.used_memory() - before

    row = bench.run_worker(impl, n, concurrency, "noop", fill=fill, timeout=1800)
    if row["completed"] != n or row["failed"]:
        raise BenchError(f"{impl.key} backlog {n}: {row['completed']} completed, {row['failed']} failed")
    row["memory_per_waiting_job_b"] = mem["bytes"] / n
    row["commands"] = dict(sorted(row["commands"].items(), key=lambda kv: -kv[1])[:12])
    return row


# -- prioritized -----------------------------------------------------------------------------
def out_of_order(order: List[int], window: int) -> Tuple[int, int]:
    """How far a start order is from the priority order, allowing for ``window`` jobs in
    flight: (starts of a job whose priority number is strictly lower than that of a job
    started more than ``window`` starts before it, the same with no window at all)."""
    late = strict = 0
    top = 0  # the highest priority number started more than ``window`` starts ago
    seen = 0  # the same, with no window
    for i, p in enumerate(order):
        if i > window:
            top = max(top, order[i - window - 1])
        if p < top:
            late += 1
        if p < seen:
            strict += 1
        seen = max(seen, p)
    return late, strict


def measure_prioritized(bench: Bench, filler: Filler, impl: Impl, n: int, priorities: int,
                        concurrency: int = 100) -> Dict[str, Any]:
    """N waiting no-op jobs spread over ``priorities`` priorities (in no id order), at
    ``concurrency``: jobs/s and CPU per job as the backlog, and the start order: the driver
    records each job's priority as it starts (mode ``order``)."""
    def fill(queue: str, keys: QueueKeys) -> None:
        assert bench.client is not None
        bench.client.hset(keys.meta, "paused", 1)
        filler.fill(keys, "prioritized", n, priorities=priorities)

    row = bench.run_worker(impl, n, concurrency, "order", fill=fill, timeout=1800)
    order = [int(p) for p in row.pop("order", [])]
    if row["completed"] != n or row["failed"] or len(order) != n:
        raise BenchError(f"{impl.key} prioritized {n}: {row['completed']} completed, {row['failed']} failed, "
                         f"{len(order)} starts recorded")
    row["out_of_order"], row["inversions"] = out_of_order(order, concurrency)
    row["priorities"] = priorities
    row["window"] = concurrency
    row["commands"] = dict(sorted(row["commands"].items(), key=lambda kv: -kv[1])[:12])
    return row


# -- payloads --------------------------------------------------------------------------------
def measure_payload(bench: Bench, filler: Filler, impl: Impl, n: int, pad: int,
                    concurrency: int = 100) -> Dict[str, Any]:
    """N waiting no-op jobs whose data carries ``pad`` bytes, at ``concurrency``: jobs/s and
    the worker's peak RSS."""
    def fill(queue: str, keys: QueueKeys) -> None:
        assert bench.client is not None
        bench.client.hset(keys.meta, "paused", 1)
        filler.fill(keys, "wait", n, pad=pad)

    row = bench.run_worker(impl, n, concurrency, "noop", fill=fill, timeout=1800)
    if row["completed"] != n or row["failed"]:
        raise BenchError(f"{impl.key} payload {pad} B × {n}: {row['completed']} completed, {row['failed']} failed")
    row["payload_b"] = pad
    row["commands"] = dict(sorted(row["commands"].items(), key=lambda kv: -kv[1])[:12])
    return row

"""``pools:`` in the configuration: several queues served from one concurrency budget.

::

    pools:
      default:
        concurrency: 50                    # the pool's slots
        queues: [emails, reports, thumbnails]
        order: weighted                    # or strict, round_robin
        weights: {emails: 5, reports: 1, thumbnails: 2}

Every queue a pool names is declared under ``queues:`` as usual, with its own options
(processor, limiter, offload...); its ``concurrency`` (its own, or from ``defaults:``) is
its cap inside the pool, and without one it may use all the pool's slots. A queue is in
at most one pool; a queue in none runs as before. :func:`parse_pools` checks the section
for :func:`~echomq_gevent.host.config.parse_config`, each error at its file, line and key;
the runner makes one :class:`~echomq_gevent.worker.pool.PoolBudget` per pool.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional

from .located import suggest
from ..worker.options import OptionError, validate_worker_options
from ..worker.pool.budget import check_pool

if TYPE_CHECKING:  # pragma: no cover
    from .config import Config

__all__ = ["PoolConfig", "POOL_KEYS", "parse_pools", "describe_pools", "pool_usage"]

#: The keys of one pool.
POOL_KEYS = ("concurrency", "queues", "order", "weights")


@dataclass
class PoolConfig:
    """One pool of the file: its slots, its queues in order, the order and the weights."""

    name: str
    concurrency: int
    queues: List[str]
    order: str = "weighted"
    weights: Dict[str, int] = field(default_factory=dict)
    line: Optional[int] = None


def parse_pools(cfg: "Config", value: Any) -> Dict[str, PoolConfig]:
    """Check ``pools:`` (after ``queues:``) and give each pooled queue its cap: a queue
    with no ``concurrency`` of its own (nor in ``defaults:``) gets the pool's. Raises
    ConfigError at the line of the key that is wrong."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise cfg.error(("pools",), f"must be a mapping from pool name to {{concurrency, queues, order, weights}}, "
                                    f"got {value!r}")
    pools: Dict[str, PoolConfig] = {}
    pooled: Dict[str, str] = {}
    for name, spec in value.items():
        path = ("pools", name)
        if not isinstance(spec, dict):
            raise cfg.error(path, f"must be a mapping with concurrency and queues, got {spec!r}")
        for key in spec:
            if key not in POOL_KEYS:
                raise cfg.error(path + (key,), suggest(key, POOL_KEYS))
        for key in ("concurrency", "queues"):
            if key not in spec:
                raise cfg.error(path, f"needs {key}: e.g. concurrency: 50 and queues: [emails, reports]")
        queues = spec["queues"]
        if not isinstance(queues, list) or not queues:
            raise cfg.error(path + ("queues",), f"must be a non-empty list of queue names, got {queues!r}")
        for i, queue in enumerate(queues):
            at = path + ("queues", i)
            if not isinstance(queue, str) or queue not in cfg.queues:
                hint = (" (queue families, names with *, are not supported yet: list the queues)"
                        if isinstance(queue, str) and "*" in queue else "")
                raise cfg.error(at, f"{queue!r} is not a declared queue{hint}; declare it under queues: "
                                    f"(declared: {', '.join(cfg.queues)})")
            if queue in pooled:
                raise cfg.error(at, f"queue {queue!r} is in pool {pooled[queue]!r} already; a queue is in one "
                                    f"pool at most")
            pooled[queue] = name
        order = spec.get("order", "weighted")
        weights = spec.get("weights")
        problem = check_pool(spec["concurrency"], order, weights, queues)
        if problem is not None:
            key, message = problem
            raise cfg.error(path + (key if isinstance(key, tuple) else (key,)), message)
        pools[name] = PoolConfig(name=name, concurrency=spec["concurrency"], queues=list(queues), order=order,
                                 weights=dict(weights or {}), line=cfg.marks.line(path))
        _cap_queues(cfg, pools[name])
    return pools


def _cap_queues(cfg: "Config", pool: PoolConfig) -> None:
    """A pooled queue without a ``concurrency`` of its own may use every slot of the pool."""
    raw_queues = cfg.raw.get("queues") or {}
    for queue in pool.queues:
        own = raw_queues.get(queue) or {}
        if "concurrency" in own or "concurrency" in cfg.defaults:
            continue
        q = cfg.queues[queue]
        try:
            q.options = validate_worker_options(dict(q.options, concurrency=pool.concurrency),
                                                where=f"queue {queue!r}")
        except OptionError as exc:
            raise cfg.error(("pools", pool.name, "concurrency"),
                            f"queue {queue!r} has no concurrency of its own, so it may use all "
                            f"{pool.concurrency} slots of the pool, and then: {str(exc).split(': ', 1)[-1]}; "
                            f"give the queue a concurrency (its cap in the pool)") from None


def describe_pools(cfg: "Config", names: Optional[List[str]] = None) -> List[Dict[str, Any]]:
    """The file's pools as plain values for ``status`` and the dashboard: ``{name, order,
    concurrency, processes, budget, queues: [{queue, weight, cap}]}``; ``budget`` is the
    slots of all the worker processes the file runs (``concurrency`` a process). With
    ``names``, only the pools that serve one of those queues."""
    out = []
    for pool in cfg.pools.values():
        if names is not None and not any(q in names for q in pool.queues):
            continue
        out.append({"name": pool.name, "order": pool.order, "concurrency": pool.concurrency,
                    "processes": cfg.processes, "budget": pool.concurrency * cfg.processes,
                    "queues": [{"queue": q, "weight": pool.weights.get(q, 1) if pool.order == "weighted" else None,
                                "cap": cfg.queues[q].options["concurrency"] if q in cfg.queues else None}
                               for q in pool.queues]})
    return out


def pool_usage(pool: Mapping[str, Any], counts: Mapping[str, Mapping[str, int]]) -> Dict[str, Any]:
    """``pool`` (one of :func:`describe_pools`) with what each queue uses, from its job
    counts in Redis (``counts[queue]``): ``active`` (jobs running, by any worker of the
    queue) and ``ready`` (waiting and prioritized), and ``in_use``, the pool's active sum."""
    queues = []
    for row in pool["queues"]:
        c = counts.get(row["queue"]) or {}
        queues.append(dict(row, active=int(c.get("active", 0)),
                           ready=int(c.get("waiting", 0)) + int(c.get("prioritized", 0))))
    return dict(pool, queues=queues, in_use=sum(q["active"] for q in queues))

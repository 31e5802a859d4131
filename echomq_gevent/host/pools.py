"""``pools:`` in the configuration: several queues served from one concurrency budget.

::

    pools:
      default:
        concurrency: 50                    # the pool's slots
        queues: [emails, reports, thumbnails]
        order: weighted                    # or strict, round_robin
        weights: {emails: 5, reports: 1, thumbnails: 2}
        turn: 1                            # jobs a slot runs for its queue in a row

Every queue a pool names is declared under ``queues:`` as usual, with its own options
(processor, limiter, offload...); its ``concurrency`` (its own, or from ``defaults:``) is
its cap inside the pool, and without one it may use all the pool's slots. A queue is in
at most one pool; a queue in none runs as before. :func:`parse_pools` checks the section
for :func:`~echomq_gevent.host.config.parse_config`, each error at its file, line and key;
the runner makes one :class:`~echomq_gevent.worker.pool.PoolBudget` per pool.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional

from .located import suggest
from ..worker.options import OptionError, validate_worker_options
from ..worker.pool.budget import DEFAULT_TURN, check_pool
from ..worker.pool.watch import DISCOVER_EVERY_S, is_pattern

if TYPE_CHECKING:  # pragma: no cover
    from .config import Config

__all__ = ["PoolConfig", "POOL_KEYS", "FAMILY_KEYS", "parse_pools", "describe_pools", "pool_usage", "is_pattern", "has_patterns"]

#: The keys of one pool.
POOL_KEYS = ("concurrency", "queues", "order", "weights", "turn", "max_per_queue", "processor", "discover_every")
#: The keys that only a pool with a pattern in ``queues`` takes (a queue family).
FAMILY_KEYS = ("max_per_queue", "processor", "discover_every")
def has_patterns(pools: Any) -> bool:
    """Whether a (not yet checked) ``pools:`` value holds a pattern: then the file may
    declare no ``queues:`` of its own."""
    return isinstance(pools, dict) and any(
        isinstance(spec, dict) and isinstance(spec.get("queues"), list)
        and any(isinstance(q, str) and is_pattern(q) for q in spec["queues"]) for spec in pools.values())


@dataclass
class PoolConfig:
    """One pool of the file: its slots, its queues in order, the order and the weights."""

    name: str
    concurrency: int
    queues: List[str]
    order: str = "weighted"
    weights: Dict[str, int] = field(default_factory=dict)
    line: Optional[int] = None
    #: the patterns of ``queues`` (``tenant-*``): the queues they find join the pool
    patterns: List[str] = field(default_factory=list)
    #: the worker options of a queue a pattern finds (``defaults:``, its cap ``max_per_queue``)
    family_options: Dict[str, Any] = field(default_factory=dict)
    #: ``processor:`` of those queues (``module:function``), or None (the plugins decide)
    processor: Optional[str] = None
    #: seconds between two looks for them
    discover_every: float = DISCOVER_EVERY_S
    #: the jobs a slot runs for its queue in a row before the order may move it
    turn: int = DEFAULT_TURN


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
        entries = spec["queues"]
        if not isinstance(entries, list) or not entries:
            raise cfg.error(path + ("queues",), f"must be a non-empty list of queue names, got {entries!r}")
        queues: List[str] = []
        patterns: List[str] = []
        for i, queue in enumerate(entries):
            at = path + ("queues", i)
            if is_pattern(queue):
                if queue in patterns:
                    raise cfg.error(at, f"pattern {queue!r} is listed twice")
                patterns.append(queue)
                continue
            if not isinstance(queue, str) or queue not in cfg.queues:
                raise cfg.error(at, f"{queue!r} is not a declared queue; declare it under queues: (declared: "
                                    f"{', '.join(cfg.queues)}), or give a pattern such as tenant-*")
            queues.append(queue)
            if queue in pooled:
                raise cfg.error(at, f"queue {queue!r} is in pool {pooled[queue]!r} already; a queue is in one "
                                    f"pool at most")
            pooled[queue] = name
        order = spec.get("order", "weighted")
        weights = spec.get("weights")
        turn = spec.get("turn", DEFAULT_TURN)
        problem = check_pool(spec["concurrency"], order, weights, queues + patterns, turn)
        if problem is not None:
            key, message = problem
            raise cfg.error(path + (key if isinstance(key, tuple) else (key,)), message)
        pool = pools[name] = PoolConfig(name=name, concurrency=spec["concurrency"], queues=queues, order=order,
                                        weights=dict(weights or {}), line=cfg.marks.line(path), patterns=patterns,
                                        turn=turn)
        _cap_queues(cfg, pool)
        _parse_family(cfg, pool, spec, path)
    return pools


def _parse_family(cfg: "Config", pool: PoolConfig, spec: Mapping[str, Any], path: tuple) -> None:
    """The keys of a queue family (a pattern in ``queues``): the cap of each queue found,
    its processor, how often to look; refused on a pool without a pattern."""
    if not pool.patterns:
        for key in FAMILY_KEYS:
            if key in spec:
                raise cfg.error(path + (key,), f"{key} is for the queues a pattern finds; this pool's queues "
                                               f"hold no pattern (such as tenant-*)")
        return
    cap = spec.get("max_per_queue", pool.concurrency)
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise cfg.error(path + ("max_per_queue",), f"must be a whole number of slots, at least 1, got {cap!r}")
    processor = spec.get("processor")
    if processor is not None and (not isinstance(processor, str)
                                  or not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*", processor)):
        raise cfg.error(path + ("processor",), f"must be 'module:function', got {processor!r}")
    every = spec.get("discover_every", DISCOVER_EVERY_S)
    if isinstance(every, bool) or not isinstance(every, (int, float)) or not 0.1 <= every <= 3600:
        raise cfg.error(path + ("discover_every",), f"must be a number of seconds from 0.1 to 3600, got {every!r}")
    try:
        pool.family_options = validate_worker_options(dict(cfg.defaults, concurrency=cap),
                                                      where=f"the queues of pool {pool.name!r}")
    except OptionError as exc:
        raise cfg.error(path + ("max_per_queue",), str(exc).split(": ", 1)[-1]) from None
    pool.processor = processor
    pool.discover_every = float(every)


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
    ``names``, only the pools that serve one of those queues (and those with patterns,
    which also carry ``patterns``, ``max_per_queue`` and the ``declared`` queues, which a
    pattern never takes)."""
    out = []
    for pool in cfg.pools.values():
        if names is not None and not pool.patterns and not any(q in names for q in pool.queues):
            continue
        out.append({"name": pool.name, "order": pool.order, "concurrency": pool.concurrency, "turn": pool.turn,
                    "processes": cfg.processes, "budget": pool.concurrency * cfg.processes,
                    "queues": [{"queue": q, "weight": pool.weights.get(q, 1) if pool.order == "weighted" else None,
                                "cap": cfg.queues[q].options["concurrency"] if q in cfg.queues else None}
                               for q in pool.queues],
                    "patterns": list(pool.patterns),
                    "max_per_queue": pool.family_options.get("concurrency") if pool.patterns else None})
        if pool.patterns:  # a declared queue is never one a pattern finds
            out[-1]["declared"] = list(cfg.queues)
            out[-1]["pattern_weights"] = {p: pool.weights[p] for p in pool.patterns if p in pool.weights}
    return out


def add_found_queues(pools: List[Dict[str, Any]], client: Any, prefix: str, exclude: Any = ()) -> List[str]:
    """Add to each pool of :func:`describe_pools` the queues its patterns find now (as the
    running pool finds them; not the ``exclude`` names, the declared queues); returns their
    names, for the caller to read their counts too."""
    from ..queue.discovery import find_queues

    added: List[str] = []
    taken = set(exclude)
    for pool in pools:
        found: Dict[str, str] = {}
        for pattern in pool.get("patterns") or ():
            for name in find_queues(client, prefix, pattern):
                found.setdefault(name, pattern)
        weights = pool.get("pattern_weights") or {}
        for name in sorted(set(found) - taken):
            taken.add(name)
            added.append(name)
            weight = weights.get(found[name], 1) if pool["order"] == "weighted" else None
            pool["queues"].append({"queue": name, "weight": weight, "cap": pool.get("max_per_queue"), "found": True})
    return added


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

"""Pools: several queues served from one concurrency budget (``pools:`` in the YAML file).

:class:`~.pool.Pool` is the Python face (a set of workers, one per queue, sharing a budget
and their connections); :class:`~.budget.PoolBudget` hands the shared slots to the queues
that have work, in the pool's order. Loaded on first use: reading a configuration needs
the budget's checks, not redis.
"""
from ..._lazy import lazy_exports

_EXPORTS = {
    "Pool": ".pool",
    "pool_usage": ".pool",
    "PoolBudget": ".budget",
    "PoolMember": ".budget",
    "POOL_ORDERS": ".budget",
    "check_pool": ".budget",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)

"""Pools: several queues served from one concurrency budget (``pools:`` in the YAML file).

:class:`~.pool.Pool` is the Python face (a set of workers, one per queue, sharing a budget
and their connections); :class:`~.budget.PoolBudget` hands the shared slots to the queues
that have work, in the pool's order.
"""
from .budget import POOL_ORDERS, PoolBudget, PoolMember, check_pool
from .pool import Pool, pool_usage

__all__ = ["Pool", "PoolBudget", "PoolMember", "POOL_ORDERS", "check_pool", "pool_usage"]

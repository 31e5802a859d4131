"""Redis Cluster: its clients, the slot of a key and the reads that need every primary.

A queue's scripts touch many of its keys in one call (``moveToActive-11`` takes eleven
and builds job keys inside Lua), so on a cluster every key of a queue must live in one
hash slot. Redis hashes only the part of a key between the first ``{`` and the next
``}`` when there is one (a *hash tag*); BullMQ's convention is a tag in the prefix
(``{bull}``: every queue in one slot) or in the queue name (``{orders}``: each queue in
its own slot, so queues spread over the primaries). :func:`~echomq_gevent.protocol.keys.require_hash_tag` refuses a
queue whose keys carry no tag, naming both fixes; :func:`require_same_slot` refuses a
flow whose queues are in different slots.

This module builds the ``RedisCluster`` clients (:func:`cluster_client` for a
``redis+cluster://`` URL, parsed in :mod:`.redis_urls`; :func:`clone_cluster`) and holds
the calls that must reach every primary (``CLIENT LIST``, a key scan, closing). Calls
that must reach the primary serving one slot are in :mod:`.cluster_routing` (a queue's
script calls, following ``MOVED``/``ASK`` and failovers) and :mod:`.cluster_slot_client`
(the worker's marker wait). redis-py's own ``RedisCluster`` serves everything else
(plain reads and writes, which it routes by key and retries itself).
"""
from __future__ import annotations

from typing import Any, Dict, Iterator, List

from .urls import CLUSTER_SCHEME, CLUSTER_TLS_SCHEME, ClusterURL, parse_cluster_url  # noqa: F401

try:  # redis-py >= 4.1
    from redis.cluster import ClusterNode, RedisCluster
except ImportError:  # pragma: no cover - redis-py without cluster support
    RedisCluster = None  # type: ignore
    ClusterNode = None  # type: ignore

__all__ = ["CLUSTER_SCHEME", "CLUSTER_TLS_SCHEME", "ClusterURL", "parse_cluster_url", "cluster_client",
           "clone_cluster", "is_cluster", "key_slot", "node_client",
           "CrossSlotError", "require_same_slot", "disconnect", "client_list_all", "scan_keys", "ping_primaries"]


class CrossSlotError(ValueError):
    """One call would touch keys of two hash slots (a flow whose jobs are in queues with
    different hash tags): a cluster cannot run it atomically, so it is refused before
    anything is written."""


def require_same_slot(what: str, key: str, other: str) -> None:
    """Refuse ``what`` when ``key`` and ``other`` hash to different slots."""
    if key_slot(key) != key_slot(other):
        raise CrossSlotError(
            f"{what}: {key!r} and {other!r} are in different hash slots of the Redis Cluster, and one "
            f"script cannot reach both. Give the queues of a flow the same hash tag (e.g. prefix "
            f"'{{bull}}' for all of them); BullMQ has the same rule")


def disconnect(client: Any) -> None:
    """Close the connections of every node's pool of a ``RedisCluster``."""
    for node in client.get_nodes():
        if node.redis_connection is not None:
            try:
                node.redis_connection.connection_pool.disconnect()
            except Exception:  # pragma: no cover - best effort
                pass


def client_list_all(client: Any) -> List[Dict[str, Any]]:
    """CLIENT LIST of every primary of a ``RedisCluster`` (a worker's blocking connection
    is on the primary serving its queue's slot)."""
    entries: List[Dict[str, Any]] = []
    for node in client.get_primaries():
        entries.extend(client.get_redis_connection(node).client_list())
    return entries


def scan_keys(client: Any, match: str, count: int = 500) -> Iterator[str]:
    """The keys matching ``match`` (a SCAN pattern): on a ``RedisCluster`` from every
    primary in turn, each scanned through its own client to the end of its cursor (a key
    seen twice while a slot moves between them is given once); on a plain client its
    ``scan_iter``."""
    if not is_cluster(client):
        yield from client.scan_iter(match=match, count=count)
        return
    seen = set()
    for node in client.get_primaries():
        for key in client.get_redis_connection(node).scan_iter(match=match, count=count):
            if key not in seen:
                seen.add(key)
                yield key


def ping_primaries(client: Any) -> None:
    """PING every primary the client knows of; raises the first error."""
    client.ping(target_nodes=RedisCluster.PRIMARIES)


def is_cluster(client: Any) -> bool:
    """Whether ``client`` is a redis-py ``RedisCluster``."""
    return RedisCluster is not None and isinstance(client, RedisCluster)


#: RedisCluster's own keyword arguments besides those of the nodes' connections.
_CLUSTER_KWARGS = ("require_full_coverage", "reinitialize_steps", "dynamic_startup_nodes",
                   "address_remap", "cluster_error_retry_attempts")


def cluster_client(url: str, kwargs: Dict[str, Any]) -> Any:
    """A decoding ``RedisCluster`` for a ``redis+cluster://`` URL; ``kwargs`` are the
    nodes' connection settings (see :func:`~echomq_gevent.connection.clients.make_client`)."""
    if RedisCluster is None:  # pragma: no cover
        raise ValueError("this redis-py has no Redis Cluster client; install redis>=4.6")
    parsed = parse_cluster_url(url)
    kwargs = dict(kwargs)
    kwargs.pop("db", None)
    if parsed.username:
        kwargs.setdefault("username", parsed.username)
    if parsed.password:
        kwargs.setdefault("password", parsed.password)
    if parsed.tls:
        kwargs.setdefault("ssl", True)
    kwargs.setdefault("require_full_coverage", False)  # a slot being failed over is not a reason to refuse
    return _new_cluster([ClusterNode(h, p) for h, p in parsed.nodes], kwargs)


def _new_cluster(startup: List[Any], kwargs: Dict[str, Any]) -> Any:
    # max_connections is per node in redis-py; one kept connection per node is taken
    client = RedisCluster(startup_nodes=startup, **kwargs)
    client._echomq_kwargs = dict(kwargs)  # what clone_cluster builds its clones from
    return client


def clone_cluster(client: Any, settings: Any = None, defaults: Any = None, **overrides: Any) -> Any:
    """A new ``RedisCluster`` (own connections) to the cluster ``client`` talks to,
    decoding responses: built with the same arguments when we made ``client``, else with
    its nodes' credentials, TLS and socket options. ``settings`` (ConnectionSettings)
    and ``overrides`` win; ``defaults`` (ConnectionSettings) fill the socket options a
    client passed in left unset."""
    kwargs = getattr(client, "_echomq_kwargs", None)
    if kwargs is None:
        from redis.cluster import cleanup_kwargs

        kwargs = cleanup_kwargs(**client.get_connection_kwargs())
        for key in ("connection_pool", "redis_connect_func", "driver_info", "lib_name", "lib_version",
                    "maint_notifications_config", "cache", "cache_config", "connection_pool_class"):
            kwargs.pop(key, None)
        if isinstance(kwargs.get("socket_keepalive_options"), dict) is False:
            kwargs.pop("socket_keepalive_options", None)
        for key, value in (defaults.client_kwargs().items() if defaults is not None else ()):
            if not kwargs.get(key):
                kwargs[key] = value
        kwargs.setdefault("require_full_coverage", False)
    kwargs = dict(kwargs)
    kwargs["decode_responses"] = True
    if settings is not None:
        kwargs.update(settings.client_kwargs())
    kwargs.update(overrides)
    startup = [ClusterNode(n.host, n.port) for n in client.get_nodes()] or \
        [ClusterNode(n.host, n.port) for n in client.nodes_manager.startup_nodes.values()]
    return _new_cluster(startup, kwargs)


#: What a node's connection settings hold for its cluster client only (its hooks, its
#: maintenance handler), left out of a plain client to one node.
_NODE_ONLY_KWARGS = ("redis_connect_func", "oss_cluster_maint_notifications_handler", "maint_notifications_config",
                     "himport_registry", "connection_pool", "retry")


def node_client(client: Any, key: str, attempt: int = 0, **overrides: Any) -> Any:
    """A plain ``redis.Redis`` (own pool) to one node of the cluster ``client`` talks to,
    logged in and encrypted as ``client``'s connections to its nodes are (username,
    password, TLS and socket settings). ``overrides`` win (``client_name``, ...).

    For a subscription: classic ``PUBLISH`` (from a script too) on a cluster reaches the
    subscribers of every node, the primaries' and the replicas', so any node serves.
    ``attempt`` 0 is the primary serving ``key``'s slot (where a script of that slot
    publishes: heard even when the cluster bus is slow); a later attempt (after a
    connection error) takes the next node the client knows of, in turn, so a node that
    died is not asked for ever while the client's map is stale. Makes no connection:
    reads the settings ``client`` holds, so any thread may call it."""
    import redis

    nodes = list(client.get_nodes())
    try:
        owner = client.get_node_from_key(key)
    except Exception:  # the slot not covered now (a failover under way)
        owner = None
    ordered = ([owner] if owner is not None else []) + \
        sorted((n for n in nodes if owner is None or n.name != owner.name), key=lambda n: n.name)
    if not ordered:
        raise ValueError(f"the Redis Cluster client knows no node to subscribe to for {key!r}")
    node = ordered[attempt % len(ordered)]
    pool = client.get_redis_connection(node).connection_pool
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if k not in _NODE_ONLY_KWARGS}
    kwargs.update(overrides)
    max_connections = kwargs.pop("max_connections", None)
    return redis.Redis(connection_pool=redis.ConnectionPool(
        connection_class=pool.connection_class, max_connections=max_connections, **kwargs))


def key_slot(key: str) -> int:
    """The cluster slot of ``key`` (CRC16 of its hash tag or of the whole key, mod 16384)."""
    from redis.crc import key_slot as _slot

    return int(_slot(key.encode("utf-8")))

"""Redis Cluster: the worker's marker wait on the primary serving the marker's slot.

``BZPOPMIN`` blocks on one node, the one owning the marker key, and a blocked call is
not something to route call by call: :class:`SlotClient` is a plain ``redis.Redis`` of
that primary, rebuilt when the slot moves (``MOVED``, a failover). Its ``MOVED``
handling and layout refreshes are :class:`~echomq_gevent.connection.routing.ClusterRouter`'s.
"""
from __future__ import annotations

from typing import Any, Optional

import redis
from redis.exceptions import ResponseError

from .cluster import key_slot
from .routing import CONNECTION_ERRORS, ClusterRouter, pause, redirect_kind, redirect_target

__all__ = ["SlotClient"]


class SlotClient:
    """A plain client of the primary that serves one key's slot, for the worker's marker
    wait (``BZPOPMIN`` blocks on one node: the one owning the marker key).

    ``kwargs`` are ``redis.Redis`` keyword arguments (client name, socket timeout, the
    connect hook); the connection settings come from the cluster's nodes. When the slot
    moves (``MOVED``, a failover) the client is rebuilt for the new owner. Used by the
    fetch loop's greenlet (or a pool thread) and, for ``CLIENT UNBLOCK``, by ``close``.
    """

    def __init__(self, cluster: Any, key: str, max_connections: int = 2, **kwargs: Any) -> None:
        self.cluster = cluster
        self.key = key
        self.slot = key_slot(key)
        base = dict(cluster.get_connection_kwargs())
        for name in ("host", "port", "connection_pool", "redis_connect_func", "retry", "cache",
                     "connection_pool_class", "maint_notifications_config", "himport_registry",
                     "oss_cluster_maint_notifications_handler"):
            base.pop(name, None)
        for name in list(base):
            if name.startswith("orig_"):
                base.pop(name)
        if not isinstance(base.get("socket_keepalive_options"), dict):
            base.pop("socket_keepalive_options", None)
        base.update(kwargs)
        base["decode_responses"] = True
        self._kwargs = base
        self._max_connections = max_connections
        self._client: Any = None
        self._node: Optional[str] = None
        self._router = ClusterRouter(cluster, budget_s=1.0)

    def _current(self) -> Any:
        node = self.cluster.nodes_manager.get_node_from_slot(self.slot)
        if self._client is None or node.name != self._node:
            old = self._client
            pool = redis.ConnectionPool(connection_class=node.redis_connection.connection_pool.connection_class,
                                        host=node.host, port=node.port,
                                        max_connections=self._max_connections, **self._kwargs)
            self._client, self._node = redis.Redis(connection_pool=pool), node.name
            if old is not None:
                try:
                    old.connection_pool.disconnect(inuse_connections=False)
                except Exception:  # pragma: no cover
                    pass
        return self._client

    @property
    def node(self) -> Optional[str]:
        """``host:port`` of the node the client talks to now."""
        return self._node

    @property
    def connection_pool(self) -> Any:
        return self._current().connection_pool if self._client is None else self._client.connection_pool

    def _follow(self, exc: BaseException) -> str:
        kind = redirect_kind(exc) if isinstance(exc, ResponseError) else None
        if kind == "moved":
            self._router.moved(*redirect_target(exc))
        elif kind is None or kind == "wait":
            self._router.refresh()
        return kind or "error"

    def bzpopmin(self, key: str, timeout: float) -> Any:
        """``BZPOPMIN key timeout`` on the slot's owner. A slot that moved is followed
        at once; during a migration (ASK, TRYAGAIN) the wait ends empty after a short
        pause (the fetch loop then tries a pick-up, which follows the migration)."""
        for _ in range(3):
            try:
                return self._current().bzpopmin(key, timeout)
            except ResponseError as exc:
                kind = self._follow(exc)
                if kind == "moved":
                    continue
                if kind in ("ask", "wait"):
                    pause(min(0.1, timeout))
                    return None
                raise
            except CONNECTION_ERRORS:
                self._router.refresh()
                raise
        return None

    def ping(self) -> Any:
        return self._current().ping()

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        """On the node the marker wait talks to (``CLIENT UNBLOCK`` must go there)."""
        return self._current().execute_command(*args, **kwargs)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

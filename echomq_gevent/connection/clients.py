"""Building Redis clients from what users pass as ``connection``.

Every client the package uses answers ``str`` (``decode_responses=True``): job
fields are UTF-8 text in BullMQ. A ``redis.Redis`` instance given by the user is
reused when it already decodes; otherwise a client with the same connection
settings (host, port, db, password, TLS) but decoding on is built beside it.

Every client the package creates gets :class:`ConnectionSettings`: a socket timeout
(longer than any of our scripts takes), TCP keep-alive and a health check of idle
connections, so a connection that died without FIN or RST (a NAT or a failover that
dropped its state) is noticed within a bounded time instead of leaving a call waiting
on ``recv`` for ever. ``docs/reliability.md`` lists the defaults and what they bound.

A Redis Cluster is named by a ``redis+cluster://`` URL or passed as a ``RedisCluster``
(:mod:`.cluster`); its clones are cluster clients too.

Redis behind Sentinel is named by a ``redis+sentinel://`` URL
(:func:`~echomq_gevent.connection.urls.parse_sentinel_url`);
its clients ask the sentinels where the primary is on every new connection, so after a
failover they reconnect to the promoted replica. :func:`clone_client` keeps that for the
worker's blocking client and the lock-renewal thread's client.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Union

import redis
from redis.sentinel import Sentinel, SentinelConnectionPool

from .cluster import clone_cluster, cluster_client, disconnect, is_cluster, node_client, ping_primaries
# the settings live apart so a configuration loads without redis; named here too for the
# callers of this module
from .settings import (DEFAULT_SETTINGS, SETTING_KEYS, ConnectionSettingError,  # noqa: F401
                                  ConnectionSettings)
from .urls import (CLUSTER_SCHEME, CLUSTER_TLS_SCHEME, SENTINEL_QUERY_KEYS, SENTINEL_SCHEME,  # noqa: F401
                         SentinelURL, parse_sentinel_url, redact_url)

__all__ = ["ConnectionLike", "ConnectionSettings", "DEFAULT_SETTINGS", "make_client", "clone_client", "close_client",
           "subscriber_client",
           "ReadinessProbe",
           "url_settings", "DEFAULT_URL", "SETTING_KEYS", "SENTINEL_SCHEME", "SentinelURL",
           "parse_sentinel_url", "redact_url"]

#: Socket timeouts (seconds) for the questions put to the sentinels: a dead sentinel is
#: skipped quickly and the next one asked.
SENTINEL_SOCKET_TIMEOUT = 2.0


def _sentinel_client(url: str, kwargs: Dict[str, Any]) -> "redis.Redis":
    """A client of the primary the sentinels of ``url`` name, following failovers."""
    parsed = parse_sentinel_url(url)
    sentinel_kwargs: Dict[str, Any] = {"socket_timeout": SENTINEL_SOCKET_TIMEOUT,
                                       "socket_connect_timeout": SENTINEL_SOCKET_TIMEOUT}
    if parsed.sentinel_username:
        sentinel_kwargs["username"] = parsed.sentinel_username
    if parsed.sentinel_password:
        sentinel_kwargs["password"] = parsed.sentinel_password
    kwargs = dict(kwargs)
    kwargs.setdefault("db", parsed.db)
    if parsed.username:
        kwargs.setdefault("username", parsed.username)
    if parsed.password:
        kwargs.setdefault("password", parsed.password)
    manager = Sentinel(parsed.sentinels, sentinel_kwargs=sentinel_kwargs)
    return manager.master_for(parsed.service, redis_class=redis.Redis, **kwargs)

DEFAULT_URL = "redis://127.0.0.1:6379/0"

ConnectionLike = Union[str, "redis.Redis", "redis.cluster.RedisCluster", None]


def _accepted_by(connection_class: Any, kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """The settings ``connection_class`` takes (a unix-socket connection of redis-py 4.5
    has no ``socket_connect_timeout``, none has keep-alive): its ``__init__`` and those
    it passes ``**kwargs`` on to."""
    import inspect

    names = set()
    for klass in getattr(connection_class, "__mro__", ()):
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        try:
            params = inspect.signature(init).parameters
        except (TypeError, ValueError):  # pragma: no cover - a C-level __init__
            return dict(kwargs)
        names.update(params)
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            break
    return {k: v for k, v in kwargs.items() if k in names}



def url_settings(url: str, settings: Optional[ConnectionSettings] = None) -> Dict[str, Any]:
    """The keyword arguments ``settings`` (default :data:`DEFAULT_SETTINGS`) give a client
    or pool built with ``from_url(url, ...)``: what its connection class takes."""
    unix = url.startswith("unix:")
    conn_class = redis.UnixDomainSocketConnection if unix else redis.Connection
    return _accepted_by(conn_class, (settings or DEFAULT_SETTINGS).client_kwargs(tcp=not unix))


#: How the clients the package builds decode answers: bytes that are not UTF-8 (a foreign
#: producer's) arrive as lone surrogates instead of failing the whole answer they are in,
#: so the job they belong to can be failed with a reason naming its field (``Job``).
DECODE_ERRORS = "surrogateescape"


def make_client(connection: ConnectionLike = None, max_connections: Optional[int] = None,
                settings: Optional[ConnectionSettings] = None, reuse: bool = False,
                **extra: Any) -> "redis.Redis":
    """A decoding ``redis.Redis`` for a URL (``redis+sentinel://`` too), an existing
    client, or ``None`` (the default URL).

    A client built from a URL gets ``settings`` (default :data:`DEFAULT_SETTINGS`);
    options in the URL's query (``?socket_timeout=3``) win over them, as in redis-py.
    A decoding client passed in is used as it is (its owner chose its settings) when
    nothing else is asked of it; with ``reuse`` also when ``settings`` are given (they are
    its owner's: the runner's client, shared by the workers of a process).
    Raises ``ValueError`` naming the value when it is neither.
    """
    if connection is None:
        connection = DEFAULT_URL
    if isinstance(connection, str):
        kwargs: dict = {"decode_responses": True, "encoding_errors": DECODE_ERRORS}
        kwargs.update(url_settings(connection, settings))
        if max_connections:
            kwargs["max_connections"] = max_connections
        kwargs.update(extra)
        if connection.startswith(SENTINEL_SCHEME + "://"):
            return _sentinel_client(connection, kwargs)
        if connection.startswith((CLUSTER_SCHEME + "://", CLUSTER_TLS_SCHEME + "://")):
            return cluster_client(connection, kwargs)
        return redis.Redis.from_url(connection, **kwargs)
    if is_cluster(connection):
        kwargs_now = connection.get_connection_kwargs()
        if kwargs_now.get("decode_responses") and not extra and not max_connections and (settings is None or reuse):
            return connection
        return clone_cluster(connection, settings=settings, defaults=DEFAULT_SETTINGS, **extra)
    if isinstance(connection, redis.Redis):
        pool_kwargs = dict(connection.connection_pool.connection_kwargs)
        if pool_kwargs.get("decode_responses") and not extra and not max_connections and (settings is None or reuse):
            return connection
        return clone_client(connection, max_connections=max_connections, settings=settings, **extra)
    raise ValueError(
        f"connection must be a redis URL (redis://host:port/db, rediss:// for TLS, "
        f"redis+sentinel://host:port,host:port/service_name/db, redis+cluster://host:port,host:port/), "
        f"a redis.Redis or a redis.cluster.RedisCluster instance, got {type(connection).__name__}"
    )


def clone_client(client: "redis.Redis", max_connections: Optional[int] = None,
                 settings: Optional[ConnectionSettings] = None, **overrides: Any) -> "redis.Redis":
    """A new client (own pool) to the same server as ``client``, decoding responses.

    Used for the blocking connection, the lock-renewal thread and offloaded processors,
    which must never share sockets with the job greenlets. With ``settings`` the clone
    uses them; without, it keeps ``client``'s socket options and fills those it left
    unset (no timeout, no keep-alive, no health check) from :data:`DEFAULT_SETTINGS`.
    ``overrides`` win over both. A ``RedisCluster`` is cloned as a cluster client.
    """
    if is_cluster(client):
        return clone_cluster(client, settings=settings, defaults=DEFAULT_SETTINGS, **overrides)
    pool = client.connection_pool
    kwargs = dict(pool.connection_kwargs)
    kwargs["decode_responses"] = True
    kwargs["encoding_errors"] = DECODE_ERRORS
    tcp = not issubclass(pool.connection_class, redis.UnixDomainSocketConnection)
    if settings is not None:
        kwargs.update(_accepted_by(pool.connection_class, settings.client_kwargs(tcp=tcp)))
    else:
        for key, value in _accepted_by(pool.connection_class, DEFAULT_SETTINGS.client_kwargs(tcp=tcp)).items():
            current = kwargs.get(key)
            if key == "socket_keepalive_options":
                unset = not isinstance(current, dict) or not current  # redis-py's sentinel, or none
            else:
                unset = not current
            if unset:
                kwargs[key] = value
    kwargs.update(overrides)
    if isinstance(pool, SentinelConnectionPool):  # ask the same sentinels for the primary
        kwargs.pop("connection_pool", None)  # the pool's own back-reference
        sentinel_pool = SentinelConnectionPool(
            pool.service_name, _own_sentinel_manager(pool.sentinel_manager),
            connection_class=pool.connection_class, is_master=pool.is_master,
            check_connection=pool.check_connection,
            max_connections=max_connections or pool.max_connections, **kwargs,
        )
        return redis.Redis(connection_pool=sentinel_pool)
    new_pool = redis.ConnectionPool(
        connection_class=pool.connection_class,
        max_connections=max_connections or pool.max_connections,
        **kwargs,
    )
    return redis.Redis(connection_pool=new_pool)


def subscriber_client(client: Any, channel: str, attempt: int = 0, max_connections: Optional[int] = None,
                      **overrides: Any) -> "redis.Redis":
    """A client of its own for a subscription to ``channel``: a clone of ``client``
    (:func:`clone_client`), and for a Redis Cluster a plain client to one of its nodes that
    logs in and encrypts as the cluster's connections do (:func:`~.cluster.node_client`;
    ``attempt`` counts the connection errors met so far, each one moving to the next node).
    A plain client, not a cluster's pub/sub, because a classic ``PUBLISH`` reaches every
    node's subscribers and one connection to one node is all a subscription needs."""
    if is_cluster(client):
        node = node_client(client, channel, attempt)
        try:
            return clone_client(node, max_connections=max_connections, **overrides)
        finally:
            node.close()
    return clone_client(client, max_connections=max_connections, **overrides)


def _own_sentinel_manager(manager: Sentinel) -> Sentinel:
    """A new ``Sentinel`` asking the same sentinels as ``manager``, with its own connections.

    A clone may be used on another OS thread (the lock-renewal thread, an offloaded
    processor): had it shared ``manager``, the first failover would make that thread ask
    the sentinels on a socket made on the hub's thread, which gevent refuses ("Cannot
    switch to a different thread"), and the two threads would reorder one list of sentinels.
    """
    addresses = [(s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"])
                 for s in manager.sentinels]
    extra: Dict[str, Any] = {}
    force_master_ip = getattr(manager, "_force_master_ip", None)
    if force_master_ip is not None:
        extra["force_master_ip"] = force_master_ip
    return Sentinel(addresses, min_other_sentinels=manager.min_other_sentinels,
                    sentinel_kwargs=dict(manager.sentinel_kwargs), **extra, **manager.connection_kwargs)


def close_client(client: Any) -> None:
    """Close a client the package made, its sockets now: every connection of its pool
    (of every node's pool, on a Redis Cluster). redis-py before 5.0 closes a client
    without closing its pool's sockets, leaving them to the garbage collector."""
    try:
        if is_cluster(client):
            disconnect(client)
        else:
            client.connection_pool.disconnect()
    finally:
        client.close()


class ReadinessProbe:
    """Answers "does Redis answer?" for a readiness endpoint: ``check()`` is ``None`` when
    every server the queues may live on answers PING within ``timeout`` seconds (the
    server, the primary behind Sentinel, every primary of a Redis Cluster), else the
    reason. A failed check drops its client, so the next one starts from the URL again.
    On a cluster every check starts from the URL: a cluster client keeps its map of the
    primaries until a command it routes fails, and a PING of every primary is not such a
    command, so a kept client would keep asking a primary demoted by a failover."""

    def __init__(self, url: str, timeout: float = 1.0) -> None:
        self.url = url
        self.timeout = timeout
        self._client: Any = None

    def check(self) -> Optional[str]:
        try:
            if self._client is None:
                self._client = make_client(self.url, max_connections=4, socket_timeout=self.timeout,
                                           socket_connect_timeout=self.timeout)
            if is_cluster(self._client):
                try:
                    ping_primaries(self._client)
                finally:
                    self.close()
            else:
                self._client.ping()
            return None
        except Exception as exc:
            self.close()
            return f"{type(exc).__name__}: {exc}"

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                close_client(client)
            except Exception:
                pass

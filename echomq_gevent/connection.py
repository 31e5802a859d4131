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
(:func:`~echomq_gevent.redis_urls.parse_sentinel_url`);
its clients ask the sentinels where the primary is on every new connection, so after a
failover they reconnect to the promoted replica. :func:`clone_client` keeps that for the
worker's blocking client and the lock-renewal thread's client.
"""
from __future__ import annotations

import socket
from dataclasses import dataclass, fields, replace
from typing import Any, Dict, Mapping, Optional, Union

import redis
from redis.sentinel import Sentinel, SentinelConnectionPool

from .cluster import clone_cluster, cluster_client, is_cluster
from .errors import ConfigError
from .redis_urls import (CLUSTER_SCHEME, CLUSTER_TLS_SCHEME, SENTINEL_QUERY_KEYS, SENTINEL_SCHEME,  # noqa: F401
                         SentinelURL, parse_sentinel_url, redact_url)

__all__ = ["ConnectionLike", "ConnectionSettings", "DEFAULT_SETTINGS", "make_client", "clone_client",
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


class ConnectionSettingError(ConfigError):
    """A connection setting is wrong; ``option`` names it."""

    def __init__(self, message: str, option: str) -> None:
        super().__init__(message)
        self.option = option


@dataclass(frozen=True)
class ConnectionSettings:
    """How the clients the package creates treat their sockets.

    * ``socket_timeout`` (s): longest wait for a reply. Our scripts answer in
      milliseconds (the slowest, a stalled check over a very large ``active`` list or an
      obliterate batch, in well under a second), so 10 s only trips on a dead peer.
      The worker's blocking connection waits ``drain_delay`` plus this; its lock-renewal
      connection uses at most a quarter of ``lock_duration`` (and at least 1 s).
    * ``socket_connect_timeout`` (s): longest wait for a TCP connect.
    * ``tcp_keepalive``: kernel keep-alive probes on every socket; ``keepalive_idle`` s
      of silence, then a probe every ``keepalive_interval`` s, dead after
      ``keepalive_count`` unanswered ones (Linux; elsewhere the system's timings).
    * ``health_check_interval`` (s): a connection idle longer than this is PINGed before
      it is used again; 0 turns the check off.
    """

    socket_timeout: float = 10.0
    socket_connect_timeout: float = 5.0
    tcp_keepalive: bool = True
    keepalive_idle: int = 10
    keepalive_interval: int = 5
    keepalive_count: int = 3
    health_check_interval: float = 15.0

    def __post_init__(self) -> None:
        for f in fields(self):
            _check_setting(f.name, getattr(self, f.name))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], base: Optional["ConnectionSettings"] = None
                     ) -> "ConnectionSettings":
        """Settings from a mapping (the YAML ``redis:`` section), over ``base`` (the
        defaults). Raises :class:`ConnectionSettingError` naming the key."""
        known = {f.name for f in fields(cls)}
        for key in values:
            if key not in known:
                import difflib

                near = difflib.get_close_matches(key, sorted(known), n=1)
                hint = f"; did you mean {near[0]!r}?" if near else f"; valid: {', '.join(sorted(known))}"
                raise ConnectionSettingError(f"unknown connection setting {key!r}{hint}", key)
            _check_setting(key, values[key])
        return replace(base or DEFAULT_SETTINGS, **dict(values))

    def client_kwargs(self, tcp: bool = True) -> Dict[str, Any]:
        """Keyword arguments of ``redis.Redis``/``ConnectionPool`` for these settings;
        without ``tcp`` (a unix socket) the keep-alive ones are left out."""
        kwargs: Dict[str, Any] = {
            "socket_timeout": self.socket_timeout,
            "socket_connect_timeout": self.socket_connect_timeout,
            "health_check_interval": self.health_check_interval,
        }
        if not tcp:
            return kwargs
        kwargs["socket_keepalive"] = self.tcp_keepalive
        if self.tcp_keepalive:
            opts = _keepalive_options(self.keepalive_idle, self.keepalive_interval, self.keepalive_count)
            if opts:
                kwargs["socket_keepalive_options"] = opts
        return kwargs


_POSITIVE = ("socket_timeout", "socket_connect_timeout")
_COUNTS = ("keepalive_idle", "keepalive_interval", "keepalive_count")


def _check_setting(name: str, value: Any) -> None:
    if name in _POSITIVE:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ConnectionSettingError(f"{name} must be a number of seconds > 0, got {value!r}", name)
    elif name in _COUNTS:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConnectionSettingError(f"{name} must be an integer >= 1, got {value!r}", name)
    elif name == "tcp_keepalive":
        if not isinstance(value, bool):
            raise ConnectionSettingError(f"{name} must be true or false, got {value!r}", name)
    elif name == "health_check_interval":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConnectionSettingError(f"{name} must be a number of seconds >= 0 (0: off), got {value!r}",
                                         name)


def _keepalive_options(idle: int, interval: int, count: int) -> Dict[int, int]:
    opts: Dict[int, int] = {}
    idle_opt = getattr(socket, "TCP_KEEPIDLE", None) or getattr(socket, "TCP_KEEPALIVE", None)
    if idle_opt is not None:
        opts[idle_opt] = idle
    if hasattr(socket, "TCP_KEEPINTVL"):
        opts[socket.TCP_KEEPINTVL] = interval
    if hasattr(socket, "TCP_KEEPCNT"):
        opts[socket.TCP_KEEPCNT] = count
    return opts


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


#: The defaults (``ConnectionSettings()``).
DEFAULT_SETTINGS = ConnectionSettings()
#: The names a YAML ``redis:`` section takes besides ``url`` and ``embedded``.
SETTING_KEYS = tuple(f.name for f in fields(ConnectionSettings))


def url_settings(url: str, settings: Optional[ConnectionSettings] = None) -> Dict[str, Any]:
    """The keyword arguments ``settings`` (default :data:`DEFAULT_SETTINGS`) give a client
    or pool built with ``from_url(url, ...)``: what its connection class takes."""
    unix = url.startswith("unix:")
    conn_class = redis.UnixDomainSocketConnection if unix else redis.Connection
    return _accepted_by(conn_class, (settings or DEFAULT_SETTINGS).client_kwargs(tcp=not unix))


def make_client(connection: ConnectionLike = None, max_connections: Optional[int] = None,
                settings: Optional[ConnectionSettings] = None, **extra: Any) -> "redis.Redis":
    """A decoding ``redis.Redis`` for a URL (``redis+sentinel://`` too), an existing
    client, or ``None`` (the default URL).

    A client built from a URL gets ``settings`` (default :data:`DEFAULT_SETTINGS`);
    options in the URL's query (``?socket_timeout=3``) win over them, as in redis-py.
    A decoding client passed in is used as it is (its owner chose its settings).
    Raises ``ValueError`` naming the value when it is neither.
    """
    if connection is None:
        connection = DEFAULT_URL
    if isinstance(connection, str):
        kwargs: dict = {"decode_responses": True}
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
        if kwargs_now.get("decode_responses") and not extra and not max_connections and settings is None:
            return connection
        return clone_cluster(connection, settings=settings, defaults=DEFAULT_SETTINGS, **extra)
    if isinstance(connection, redis.Redis):
        pool_kwargs = dict(connection.connection_pool.connection_kwargs)
        if pool_kwargs.get("decode_responses") and not extra and not max_connections and settings is None:
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
            pool.service_name, pool.sentinel_manager,
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

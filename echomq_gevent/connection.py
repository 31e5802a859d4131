"""Building Redis clients from what users pass as ``connection``.

Every client the package uses answers ``str`` (``decode_responses=True``): job
fields are UTF-8 text in BullMQ. A ``redis.Redis`` instance given by the user is
reused when it already decodes; otherwise a client with the same connection
settings (host, port, db, password, TLS) but decoding on is built beside it.
"""
from __future__ import annotations

from typing import Any, Optional, Union

import redis

__all__ = ["ConnectionLike", "make_client", "clone_client", "DEFAULT_URL"]

DEFAULT_URL = "redis://127.0.0.1:6379/0"

ConnectionLike = Union[str, "redis.Redis", None]


def make_client(connection: ConnectionLike = None, max_connections: Optional[int] = None,
                **extra: Any) -> "redis.Redis":
    """A decoding ``redis.Redis`` for a URL, an existing client, or ``None`` (the default URL).

    Raises ``ValueError`` naming the value when it is neither.
    """
    if connection is None:
        connection = DEFAULT_URL
    if isinstance(connection, str):
        kwargs: dict = {"decode_responses": True, "health_check_interval": 30}
        if max_connections:
            kwargs["max_connections"] = max_connections
        kwargs.update(extra)
        return redis.Redis.from_url(connection, **kwargs)
    if isinstance(connection, redis.Redis):
        pool_kwargs = dict(connection.connection_pool.connection_kwargs)
        if pool_kwargs.get("decode_responses") and not extra and not max_connections:
            return connection
        return clone_client(connection, max_connections=max_connections, **extra)
    raise ValueError(
        f"connection must be a redis URL (redis://host:port/db, rediss:// for TLS) or a "
        f"redis.Redis instance, got {type(connection).__name__}"
    )


def clone_client(client: "redis.Redis", max_connections: Optional[int] = None,
                 **overrides: Any) -> "redis.Redis":
    """A new client (own pool) to the same server as ``client``, decoding responses.

    Used for the blocking connection and for the lock-renewal thread, which must never
    share sockets with the job greenlets.
    """
    pool = client.connection_pool
    kwargs = dict(pool.connection_kwargs)
    kwargs["decode_responses"] = True
    kwargs.update(overrides)
    new_pool = redis.ConnectionPool(
        connection_class=pool.connection_class,
        max_connections=max_connections or pool.max_connections,
        **kwargs,
    )
    return redis.Redis(connection_pool=new_pool)

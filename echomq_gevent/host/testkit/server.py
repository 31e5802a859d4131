"""A Redis for a test run: ``REDIS_URL`` when it is set, else a throwaway
``redis-server`` (the ``embedded`` extra's binary, or one on ``PATH``) in a folder of its
own, kept in memory and stopped when the run ends (or when the process dies: the
embedded server's watchdog sees to that)."""
from __future__ import annotations

import os
import uuid
from typing import Any, Optional, Tuple

__all__ = ["start_test_redis", "new_prefix", "delete_prefix"]


def start_test_redis(directory: str) -> Tuple[str, Optional[Any]]:
    """``(url, server)``: ``$REDIS_URL`` and None, or a fresh server's URL and the server
    (``server.stop()`` ends it)."""
    url = os.environ.get("REDIS_URL")
    if url:
        return url, None
    from ..embedded import EmbeddedRedis

    server = EmbeddedRedis(directory=directory, persist=False).start()
    return server.url, server


def new_prefix() -> str:
    """A key prefix no other test uses (tests in parallel share one Redis)."""
    return f"t{uuid.uuid4().hex[:12]}"


def delete_prefix(url: str, prefix: str) -> None:
    """Remove every key under ``prefix`` (SCAN and UNLINK: the rest of the server stays)."""
    from ...connection.clients import make_client

    client = make_client(url)
    try:
        batch = []
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            batch.append(key)
            if len(batch) >= 500:
                client.unlink(*batch)
                batch = []
        if batch:
            client.unlink(*batch)
    finally:
        client.close()

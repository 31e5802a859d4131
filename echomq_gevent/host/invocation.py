"""What the subcommands of ``echomq-gevent`` start from: their exit codes, the file they
read (``-c``, ``$ECHOMQ_CONFIG``, ``conf/worker.yaml`` or the demo's) and where Redis is
for them (a URL, or the embedded server the command starts and stops).

Used by :mod:`.cli`, :mod:`.launch` and :mod:`.subcommands`; imports no redis itself
(a :class:`CommandRedis` imports it when it pings).
"""
from __future__ import annotations

import argparse
import logging
import os
from typing import Any, Optional

from .config import Config, load_config

log = logging.getLogger("echomq_gevent.cli")

__all__ = ["EXIT_OK", "EXIT_FAILURE", "EXIT_CONFIG", "EXIT_REDIS", "DEFAULT_CONFIG", "DEMO_PLUGIN",
           "CommandRedis", "load_command_config", "redis_url_for", "embedded_for"]

#: The command's exit codes (the supervisor passes a child's on).
EXIT_OK, EXIT_FAILURE, EXIT_CONFIG, EXIT_REDIS = 0, 1, 2, 3
DEFAULT_CONFIG = "conf/worker.yaml"
DEMO_PLUGIN = "echomq_gevent.contrib.demo"


def redis_url_for(cfg: Optional[Config], override: Optional[str]) -> str:
    if override:
        return override
    if cfg is None:
        from .config import DEFAULT_REDIS_URL

        return DEFAULT_REDIS_URL
    return cfg.redis.url


def embedded_for(cfg: Config) -> Any:
    from .embedded import EmbeddedRedis

    return EmbeddedRedis(directory=cfg.redis.embedded_dir, port=cfg.redis.embedded_port,
                         persist=cfg.redis.embedded_persist)


class CommandRedis:
    """Where Redis is for this command: a URL, plus the embedded server when this process
    started one (stopped by :meth:`close`)."""

    def __init__(self, cfg: Optional[Config], override: Optional[str]) -> None:
        self.embedded: Any = None
        url = redis_url_for(cfg, override)
        if url == "embedded":
            assert cfg is not None
            self.embedded = embedded_for(cfg).start()
            url = self.embedded.url
            if self.embedded.owned:
                log.info("started the embedded Redis at %s (data in %s)", url, self.embedded.directory)
            else:
                log.info("using the embedded Redis already running at %s", url)
        self.url = url

    def ping(self) -> None:
        from ..connection.clients import make_client

        client = make_client(self.url, socket_connect_timeout=5, socket_timeout=5)
        try:
            client.ping()
        finally:
            client.close()

    def close(self) -> None:
        if self.embedded is not None and self.embedded.owned:
            self.embedded.stop()
            log.info("stopped the embedded Redis")


def load_command_config(args: argparse.Namespace, required: bool = True) -> Optional[Config]:
    path = args.config or os.environ.get("ECHOMQ_CONFIG")
    if not path:
        if os.path.exists(DEFAULT_CONFIG):
            path = DEFAULT_CONFIG
        elif getattr(args, "demo", False):  # no file of the user's: the demo's own, shipped with the package
            from ..contrib import demo

            path = demo.CONFIG
        elif required:
            path = DEFAULT_CONFIG
        else:
            return None
    cfg = load_config(path)
    cfg.activate_paths()
    return cfg

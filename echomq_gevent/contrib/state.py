"""The process-wide state of the gunicorn integration, in one place.

:func:`echomq_gevent.contrib.gunicorn.install` fills it in the gunicorn master (the
settings, the embedded Redis, the metrics directory); every forked worker process inherits
it and adds its own job workers (:class:`~echomq_gevent.contrib.cohost.CoHost`) and the
shared queues request handlers enqueue with (:func:`echomq_gevent.contrib.wsgi.get_queue`).
The WSGI middleware and the hooks read it from here, so neither module imports the other's
internals.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from ..host.config import Config
from ..errors import ConfigError

__all__ = ["Settings", "ProcessState", "process", "settings", "current", "PROM_DIR_ENV"]

#: Name of the environment variable prometheus_client reads for multiprocess mode.
PROM_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"


class Settings:
    """What ``install()`` decided, made in the master and inherited by every forked
    worker process (read by the CoHost and by the WSGI middleware)."""

    def __init__(self, config_path: str, config: Config, drain_margin: Optional[float],
                 metrics: bool, poll_interval: float, extra_plugins: tuple,
                 gc_freeze: bool = True, endpoints: bool = True, dashboard: Any = None) -> None:
        self.config_path = config_path
        self.config = config
        self.drain_margin = drain_margin
        self.metrics = metrics
        self.poll_interval = poll_interval
        self.extra_plugins = extra_plugins
        self.gc_freeze = gc_freeze
        self.endpoints = endpoints
        self.dashboard = dashboard

    @property
    def redis_url(self) -> str:
        """The Redis URL the workers and the shared queues use (the embedded server's
        URL once the master started it)."""
        if self.config.redis.embedded:
            if process.embedded_url is None:
                raise ConfigError(
                    f"{self.config_path}: redis.url is 'embedded' but the embedded Redis has not "
                    f"started in the gunicorn master (on_starting did not run): set a redis:// URL "
                    f"or run under gunicorn with install() in the config file"
                )
            return process.embedded_url
        return self.config.redis.url

    @property
    def prefix(self) -> str:
        return self.config.prefix


class ProcessState:
    """Everything the integration keeps per process (one instance: :data:`process`)."""

    def __init__(self) -> None:
        #: what install() decided (master, inherited by the workers)
        self.settings: Optional[Settings] = None
        #: this gunicorn worker process's job workers (after post_worker_init)
        self.cohost: Any = None
        #: the embedded Redis the master started, and its URL
        self.embedded: Any = None
        self.embedded_url: Optional[str] = None
        #: the prometheus multiprocess directory install() made (removed at exit)
        self.owned_prom_dir: Optional[str] = None
        #: get_queue's shared queues by (name, url, prefix), and the pid that made them
        self.queues: Dict[Tuple[str, str, str], Any] = {}
        self.queues_pid: Optional[int] = None


#: The one :class:`ProcessState` of this process.
process = ProcessState()


def settings() -> Optional[Settings]:
    """The settings ``install()`` made in this process tree, or ``None``."""
    return process.settings


def current() -> Any:
    """The job workers of this gunicorn worker process (a CoHost), or ``None`` before
    ``post_worker_init`` (or outside gunicorn). Called by the WSGI middleware on request
    greenlets."""
    return process.cohost

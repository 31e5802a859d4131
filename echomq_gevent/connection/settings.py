"""The connection settings of every client the package creates, without importing redis.

:class:`ConnectionSettings` (socket timeouts, TCP keep-alive, health checks) is what the
``redis:`` section of the configuration holds; it lives apart from the clients of
:mod:`echomq_gevent.connection.clients` so loading a configuration imports neither redis nor ssl.
The gunicorn integration loads the YAML in the master, before gevent patches the workers,
and a module imported there keeps the unpatched ``ssl`` in every worker.
"""
from __future__ import annotations

import socket
from dataclasses import dataclass, fields, replace
from typing import Any, Dict, Mapping, Optional

from ..errors import ConfigError

__all__ = ["ConnectionSettings", "ConnectionSettingError", "DEFAULT_SETTINGS", "SETTING_KEYS"]


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
      The worker's blocking connection waits the longest marker wait (10 s) plus this;
      its lock-renewal connection at most a quarter of ``lock_duration`` (at least 1 s).
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


#: The defaults (``ConnectionSettings()``).
DEFAULT_SETTINGS = ConnectionSettings()
#: The names a YAML ``redis:`` section takes besides ``url`` and ``embedded``.
SETTING_KEYS = tuple(f.name for f in fields(ConnectionSettings))

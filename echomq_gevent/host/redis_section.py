"""The ``redis:`` section of the configuration: where Redis is (a URL, the embedded
server, or sentinels) and the connection settings of every client the workers make."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

from .located import Marks, Path, suggest
from ..connection.settings import DEFAULT_SETTINGS, SETTING_KEYS, ConnectionSettingError, ConnectionSettings
from ..errors import ConfigError
from ..connection.urls import parse_cluster_url, parse_sentinel_url, redact_url

#: ``error(path, message)``: the ConfigError naming the file, line and key of ``path``
ErrorFactory = Callable[[Path, str], ConfigError]

__all__ = ["RedisSettings", "parse_redis", "EMBEDDED", "DEFAULT_REDIS_URL", "REDIS_KEYS",
           "SENTINEL_KEYS", "EMBEDDED_KEYS", "CLUSTER_KEYS"]

EMBEDDED = "embedded"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
REDIS_KEYS = ("url", "embedded", "sentinel", "cluster") + SETTING_KEYS
SENTINEL_KEYS = ("sentinels", "service", "db", "username", "password", "sentinel_username",
                 "sentinel_password")
EMBEDDED_KEYS = ("dir", "port", "persist")
CLUSTER_KEYS = ("nodes", "username", "password", "tls")


@dataclass
class RedisSettings:
    """Where Redis is. ``url == "embedded"`` means: start a private server
    (:mod:`echomq_gevent.host.embedded`) with its data in ``embedded_dir``."""

    url: str = DEFAULT_REDIS_URL
    embedded_dir: str = "var"
    embedded_port: Optional[int] = None
    embedded_persist: bool = True
    #: socket timeouts, TCP keep-alive and health checks of every client the workers make
    connection: ConnectionSettings = DEFAULT_SETTINGS

    @property
    def embedded(self) -> bool:
        return self.url == EMBEDDED


def parse_redis(value: Any, error: ErrorFactory, marks: Marks) -> RedisSettings:
    """Validate the ``redis:`` section (a URL string or a mapping; None for the default)."""
    settings = RedisSettings()
    if value is None:
        return settings
    if isinstance(value, str):
        value = {"url": value}
        marks.value_line.setdefault(("redis", "url"), marks.line(("redis",)) or 0)
    if not isinstance(value, dict):
        raise error(("redis",), f"must be a mapping with url (and embedded), got {value!r}")
    for key in value:
        if key not in REDIS_KEYS:
            raise error(("redis", key), suggest(key, REDIS_KEYS))
    given_forms = [k for k in ("url", "sentinel", "cluster") if k in value]
    if len(given_forms) > 1:
        raise error(("redis", given_forms[1]), f"give either {given_forms[0]} or {given_forms[1]}, not both")
    if "sentinel" in value:
        value = dict(value, url=_sentinel_mapping_url(error, value["sentinel"]))
    if "cluster" in value:
        value = dict(value, url=_cluster_mapping_url(error, value["cluster"]))
    url = value.get("url", DEFAULT_REDIS_URL)
    if not isinstance(url, str) or not (url == EMBEDDED
                                        or re.match(r"(redis|rediss|unix|redis\+sentinel|rediss?\+cluster)://", url)):
        raise error(("redis", "url"), f"must be 'embedded' or a redis://, rediss://, unix://, "
                                      f"redis+sentinel:// or redis+cluster:// URL, got {redact_url(str(url))!r}")
    if url.startswith("redis+sentinel://"):
        try:
            parse_sentinel_url(url)
        except ValueError as exc:
            raise error(("redis", "url"), str(exc)) from None
    if re.match(r"rediss?\+cluster://", url):
        try:
            parse_cluster_url(url)
        except ValueError as exc:
            raise error(("redis", "url"), str(exc)) from None
    settings.url = url
    given = {k: v for k, v in value.items() if k in SETTING_KEYS}
    if given:
        try:
            settings.connection = ConnectionSettings.from_mapping(given)
        except ConnectionSettingError as exc:
            raise error(("redis", exc.option), str(exc)) from None
    emb = value.get("embedded")
    if emb is None:
        return settings
    if url != EMBEDDED:
        raise error(("redis", "embedded"), f"embedded settings only apply with url: embedded, "
                                           f"but url is {url!r}; remove one of them")
    if not isinstance(emb, dict):
        raise error(("redis", "embedded"), f"must be a mapping with {', '.join(EMBEDDED_KEYS)}")
    for key, v in emb.items():
        path = ("redis", "embedded", key)
        if key not in EMBEDDED_KEYS:
            raise error(path, suggest(key, EMBEDDED_KEYS))
        if key == "dir":
            if not isinstance(v, str) or not v:
                raise error(path, f"must be a folder name, got {v!r}")
            settings.embedded_dir = v
        elif key == "port":
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 < v < 65536):
                raise error(path, f"must be a TCP port 1..65535 or null (unix socket), got {v!r}")
            settings.embedded_port = v
        elif key == "persist":
            if not isinstance(v, bool):
                raise error(path, f"must be true or false, got {v!r}")
            settings.embedded_persist = v
    return settings


def _check_host_ports(error: ErrorFactory, path: Path, items: List[Any]) -> None:
    """Every item of a sentinels or nodes list is ``host:port``."""
    for i, item in enumerate(items):
        if not isinstance(item, str) or not re.fullmatch(r"[^\s,/@]+:\d{1,5}", item):
            raise error(path + (i,), f"must be host:port, got {item!r}")


def _quoted_secrets(error: ErrorFactory, path: Path, value: Dict[str, Any],
                    keys: Sequence[str]) -> Dict[str, str]:
    """The credentials ``keys`` of a mapping, each a string, quoted for a URL ("" when absent)."""
    from urllib.parse import quote

    secrets = {}
    for key in keys:
        v = value.get(key)
        if v is not None and not isinstance(v, str):
            raise error(path + (key,), "must be a string")
        secrets[key] = quote(v, safe="") if v else ""
    return secrets


def _userinfo(secrets: Dict[str, str]) -> str:
    """``user:password@`` (either part may be missing) for a URL, or "" without credentials."""
    if not (secrets["username"] or secrets["password"]):
        return ""
    return secrets["username"] + (":" + secrets["password"] if secrets["password"] else "") + "@"


def _sentinel_mapping_url(error: ErrorFactory, value: Any) -> str:
    """The ``redis+sentinel://`` URL a ``redis.sentinel`` mapping stands for."""
    from urllib.parse import quote

    if not isinstance(value, dict):
        raise error(("redis", "sentinel"), f"must be a mapping with sentinels and service, got {value!r}")
    for key in value:
        if key not in SENTINEL_KEYS:
            raise error(("redis", "sentinel", key), suggest(key, SENTINEL_KEYS))
    hosts = value.get("sentinels")
    if not isinstance(hosts, list) or not hosts:
        raise error(("redis", "sentinel", "sentinels"),
                        f"must be a list of host:port strings (the sentinels), got {hosts!r}")
    _check_host_ports(error, ("redis", "sentinel", "sentinels"), hosts)
    service = value.get("service")
    if not isinstance(service, str) or not service.strip():
        raise error(("redis", "sentinel", "service"),
                        f"must be the sentinels' name of the primary (e.g. mymaster), got {service!r}")
    db = value.get("db", 0)
    if isinstance(db, bool) or not isinstance(db, int) or db < 0:
        raise error(("redis", "sentinel", "db"), f"must be a database number 0.., got {db!r}")
    secrets = _quoted_secrets(error, ("redis", "sentinel"), value,
                              ("username", "password", "sentinel_username", "sentinel_password"))
    auth = _userinfo(secrets)
    query = "&".join(f"{k}={secrets[k]}" for k in ("sentinel_username", "sentinel_password") if secrets[k])
    return (f"redis+sentinel://{auth}{','.join(hosts)}/{quote(service.strip(), safe='')}/{db}"
            + (f"?{query}" if query else ""))


def _cluster_mapping_url(error: ErrorFactory, value: Any) -> str:
    """The ``redis+cluster://`` URL a ``redis.cluster`` list of nodes (or mapping with
    ``nodes`` and credentials) stands for."""
    path: Path = ("redis", "cluster")
    if isinstance(value, list):
        value = {"nodes": value}
    elif isinstance(value, dict):
        for key in value:
            if key not in CLUSTER_KEYS:
                raise error(path + (key,), suggest(key, CLUSTER_KEYS))
        path = path + ("nodes",)
    else:
        raise error(path, f"must be a list of host:port strings (some nodes of the cluster), or a mapping "
                          f"with nodes (and username, password, tls), got {value!r}")
    nodes = value.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        raise error(path, f"must be a list of host:port strings (some nodes of the cluster), got {nodes!r}")
    _check_host_ports(error, path, nodes)
    secrets = _quoted_secrets(error, ("redis", "cluster"), value, ("username", "password"))
    tls = value.get("tls", False)
    if not isinstance(tls, bool):
        raise error(("redis", "cluster", "tls"), f"must be true or false, got {tls!r}")
    return f"{'rediss' if tls else 'redis'}+cluster://{_userinfo(secrets)}{','.join(nodes)}/"

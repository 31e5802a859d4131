"""Redis connections: clients from URLs and settings, the kept and pipelined
connections the script calls go on, Redis Cluster and Sentinel routing, and how a
blocking call waits (greenlet or native thread). Nothing here knows BullMQ.
"""
from .._lazy import lazy_exports

#: what the module of this name exported in 0.1, loaded on first use
_EXPORTS = {
    "ConnectionLike": ".clients",
    "ConnectionSettings": ".clients",
    "DEFAULT_SETTINGS": ".clients",
    "make_client": ".clients",
    "clone_client": ".clients",
    "close_client": ".clients",
    "ReadinessProbe": ".clients",
    "url_settings": ".clients",
    "DEFAULT_URL": ".clients",
    "SETTING_KEYS": ".clients",
    "SENTINEL_SCHEME": ".clients",
    "SentinelURL": ".clients",
    "parse_sentinel_url": ".clients",
    "redact_url": ".clients",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)

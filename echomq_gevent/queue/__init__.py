"""The producer and admin side: :class:`Queue`, :class:`Job`, flows, events and job
schedulers.
"""
from .._lazy import lazy_exports

#: what the module of this name exported in 0.1, loaded on first use
_EXPORTS = {
    "Queue": ".queue",
    "JOB_TYPES": ".queue",
    "DEFAULT_COUNT_TYPES": ".queue",
    "CLEAN_TYPES": ".queue",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)

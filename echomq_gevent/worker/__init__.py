"""The worker: the fetch loop, job slots, settling, lock renewal, the stalled check,
the marker wait, the hub watchdog and the close; :class:`Worker` is its face.
"""
from .._lazy import lazy_exports

#: what the module of this name exported in 0.1, loaded on first use
_EXPORTS = {
    "Worker": ".worker",
    "WorkerHealth": ".worker",
    "ActiveJobs": ".worker",
    "RATE_LIMIT_MESSAGE": ".worker",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)

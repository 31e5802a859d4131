"""``offload: process``: the pool of child processes that run a queue's processors.

* :mod:`.pool`: :class:`ProcessRuntime` (the worker's side: starting, feeding, killing
  and replacing the children), :func:`processor_spec`, the errors a job fails with;
* :mod:`.child`: the child process (``python -m echomq_gevent.worker.offload.child``);
* :mod:`.wire`: the length-prefixed msgpack frames both sides speak.

Names load on first use, so the child does not import the worker's side (gevent).
"""
from ..._lazy import lazy_exports

_EXPORTS = {
    "ProcessRuntime": ".pool",
    "OffloadedError": ".pool",
    "ProcessorDied": ".pool",
    "processor_spec": ".pool",
    "OffloadCallError": ".child",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)

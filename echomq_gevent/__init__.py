"""echomq-gevent: a gevent job worker that speaks BullMQ v6's Redis protocol.

Public names are re-exported here; see ``docs/`` for the guides.
"""
__version__ = "0.1.0"

from .errors import (  # noqa: E402
    ConfigError,
    DelayedError,
    EchoMQError,
    InvalidJobDataError,
    InvalidJobIdError,
    InvalidOptionError,
    JobCancelled,
    JobLockedError,
    JobLockMismatch,
    JobLockNotExist,
    JobNotExist,
    JobNotInState,
    RateLimitError,
    ScriptError,
    UnrecoverableError,
    WaitingChildrenError,
    WorkerStateError,
)
from .keys import QueueKeys  # noqa: E402

# Names whose modules import redis (and with it socket/ssl) load on first use, so
# ``echomq-gevent`` and gunicorn can monkey-patch with gevent before any of that is
# imported. Add such names here, not as eager imports above.
_LAZY = {
    "Job": ".job",
    "Queue": ".queue",
    "Worker": ".worker",
    "FlowProducer": ".flow",
    "JobTimeoutError": ".runtime",
    "QueueEvents": ".events",
    "QueueEventsProducer": ".events",
    "JobFailedError": ".events",
    "JobScheduler": ".schedulers",
    "CronError": ".cron",
    "ConnectionSettings": ".connection",
    "Relay": ".relay",
    # pluggy is imported by the first plugin or worker, not by a process that only enqueues
    "hookimpl": ".hookspecs",
    "FailureDecision": ".hookspecs",
}


def __getattr__(name: str):  # PEP 562
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'echomq_gevent' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value

__all__ = [
    "__version__",
    "QueueKeys",
    "Queue",
    "Job",
    "Worker",
    "ConnectionSettings",
    "Relay",
    "FlowProducer",
    "JobTimeoutError",
    "QueueEvents",
    "QueueEventsProducer",
    "JobFailedError",
    "JobScheduler",
    "CronError",
    "hookimpl",
    "FailureDecision",
    "EchoMQError",
    "ScriptError",
    "JobNotExist",
    "JobLockNotExist",
    "JobNotInState",
    "JobLockMismatch",
    "JobLockedError",
    "InvalidOptionError",
    "JobCancelled",
    "InvalidJobIdError",
    "InvalidJobDataError",
    "UnrecoverableError",
    "DelayedError",
    "RateLimitError",
    "WaitingChildrenError",
    "ConfigError",
    "WorkerStateError",
]

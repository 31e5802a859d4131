"""echomq-gevent: a gevent job worker that speaks BullMQ v6's Redis protocol.

Public names are re-exported here; see ``docs/`` for the guides.
"""
__version__ = "0.1.0"

from typing import TYPE_CHECKING  # noqa: E402

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
from .protocol.keys import QueueKeys  # noqa: E402
from ._lazy import MovedModules, lazy_exports  # noqa: E402

# Names whose modules import redis (and with it socket/ssl) load on first use, so
# ``echomq-gevent`` and gunicorn can monkey-patch with gevent before any of that is
# imported. Add such names here, not as eager imports above.
_LAZY = {
    "Job": ".queue.job",
    "Queue": ".queue.queue",
    "Worker": ".worker.worker",
    "Pool": ".worker.pool.pool",
    "FlowProducer": ".queue.flows",
    "JobTimeoutError": ".worker.runtime",
    "QueueEvents": ".queue.events",
    "QueueEventsProducer": ".queue.events",
    "JobFailedError": ".queue.events",
    "JobScheduler": ".queue.schedulers",
    "CronError": ".protocol.cron",
    "ConnectionSettings": ".connection.settings",
    "Relay": ".relay.relay",
    # pluggy is imported by the first plugin or worker, not by a process that only enqueues
    "hookimpl": ".plugins.hookspecs",
    "FailureDecision": ".plugins.hookspecs",
}

__getattr__ = lazy_exports(__name__, _LAZY)

if TYPE_CHECKING:  # what type checkers see of the lazy names (py.typed: the package is typed)
    from .connection.settings import ConnectionSettings
    from .plugins.hookspecs import FailureDecision, hookimpl
    from .protocol.cron import CronError
    from .queue.events import JobFailedError, QueueEvents, QueueEventsProducer
    from .queue.flows import FlowProducer
    from .queue.job import Job
    from .worker.pool.pool import Pool
    from .queue.queue import Queue
    from .queue.schedulers import JobScheduler
    from .relay.relay import Relay
    from .worker.runtime import JobTimeoutError
    from .worker.worker import Worker

#: The flat modules of 0.1 and the modules they became; the old names
#: still import (with a DeprecationWarning) through :class:`~._lazy.MovedModules`.
MOVED_MODULES = {
    "echomq_gevent.redis_urls": "echomq_gevent.connection.urls",
    "echomq_gevent.connection_settings": "echomq_gevent.connection.settings",
    "echomq_gevent.kept_connection": "echomq_gevent.connection.kept",
    "echomq_gevent.pipelined": "echomq_gevent.connection.pipelined",
    "echomq_gevent.pipelined_wire": "echomq_gevent.connection.wire",
    "echomq_gevent.cluster": "echomq_gevent.connection.cluster",
    "echomq_gevent.cluster_routing": "echomq_gevent.connection.routing",
    "echomq_gevent.cluster_slot_client": "echomq_gevent.connection.slot_client",
    "echomq_gevent.keys": "echomq_gevent.protocol.keys",
    "echomq_gevent.clock": "echomq_gevent.protocol.clock",
    "echomq_gevent.job_options": "echomq_gevent.protocol.options",
    "echomq_gevent.backoff": "echomq_gevent.protocol.backoff",
    "echomq_gevent.cron": "echomq_gevent.protocol.cron",
    "echomq_gevent.script_library": "echomq_gevent.protocol.library",
    "echomq_gevent.script_calls": "echomq_gevent.protocol.calls",
    "echomq_gevent.scripts": "echomq_gevent.protocol.scripts",
    "echomq_gevent.admin_scripts": "echomq_gevent.protocol.admin",
    "echomq_gevent.flow_scripts": "echomq_gevent.protocol.flows",
    "echomq_gevent.scheduler_scripts": "echomq_gevent.protocol.schedulers",
    "echomq_gevent.queue_getters": "echomq_gevent.queue.getters",
    "echomq_gevent.queue_admin": "echomq_gevent.queue.admin",
    "echomq_gevent.job": "echomq_gevent.queue.job",
    "echomq_gevent.job_control": "echomq_gevent.queue.control",
    "echomq_gevent.job_flow": "echomq_gevent.queue.children",
    "echomq_gevent.flow": "echomq_gevent.queue.flows",
    "echomq_gevent.flow_getters": "echomq_gevent.queue.dependencies",
    "echomq_gevent.events": "echomq_gevent.queue.events",
    "echomq_gevent.schedulers": "echomq_gevent.queue.schedulers",
    "echomq_gevent.hookspecs": "echomq_gevent.plugins.hookspecs",
    "echomq_gevent.builtin": "echomq_gevent.plugins.builtin",
    "echomq_gevent.worker_fetch": "echomq_gevent.worker.fetch",
    "echomq_gevent.worker_settle": "echomq_gevent.worker.settle",
    "echomq_gevent.worker_lifecycle": "echomq_gevent.worker.lifecycle",
    "echomq_gevent.worker_slots": "echomq_gevent.worker.slots",
    "echomq_gevent.worker_cancel": "echomq_gevent.worker.cancel",
    "echomq_gevent.worker_manual": "echomq_gevent.worker.manual",
    "echomq_gevent.worker_options": "echomq_gevent.worker.options",
    "echomq_gevent.locks": "echomq_gevent.worker.locks",
    "echomq_gevent.stalled": "echomq_gevent.worker.stalled",
    "echomq_gevent.marker_wait": "echomq_gevent.worker.marker",
    "echomq_gevent.runtime": "echomq_gevent.worker.runtime",
    "echomq_gevent.hub": "echomq_gevent.worker.hub",
    "echomq_gevent.signals": "echomq_gevent.worker.signals",
    "echomq_gevent.tracebacks": "echomq_gevent.worker.tracebacks",
    "echomq_gevent.config": "echomq_gevent.host.config",
    "echomq_gevent.config_yaml": "echomq_gevent.host.located",
    "echomq_gevent.config_redis": "echomq_gevent.host.redis_section",
    "echomq_gevent.runner": "echomq_gevent.host.runner",
    "echomq_gevent.cli": "echomq_gevent.host.cli",
    "echomq_gevent.embedded": "echomq_gevent.host.embedded",
    "echomq_gevent.status": "echomq_gevent.host.status",
    "echomq_gevent.logfmt": "echomq_gevent.host.logs",
}
MovedModules.install(MOVED_MODULES)

__all__ = [
    "__version__",
    "QueueKeys",
    "Queue",
    "Job",
    "Worker",
    "Pool",
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

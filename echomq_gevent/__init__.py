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
    JobLockMismatch,
    JobLockNotExist,
    JobNotExist,
    JobNotInState,
    RateLimitError,
    ScriptError,
    UnrecoverableError,
)
from .hookspecs import FailureDecision, hookimpl  # noqa: E402
from .keys import QueueKeys  # noqa: E402
from .job import Job  # noqa: E402
from .queue import Queue  # noqa: E402

__all__ = [
    "__version__",
    "QueueKeys",
    "Queue",
    "Job",
    "hookimpl",
    "FailureDecision",
    "EchoMQError",
    "ScriptError",
    "JobNotExist",
    "JobLockNotExist",
    "JobNotInState",
    "JobLockMismatch",
    "InvalidOptionError",
    "InvalidJobIdError",
    "InvalidJobDataError",
    "UnrecoverableError",
    "DelayedError",
    "RateLimitError",
    "ConfigError",
]

"""The BullMQ v6 key layout: the one place in the project that spells key names.

Every key of a queue starts with the base ``"{prefix}:{queue}:"`` (``bull:emails:``).
Lua scripts receive the base as their "key prefix" argument and append job ids or
suffixes to it, so a Redis Cluster deployment only needs a hash-tag prefix such as
``{bull}`` for all of a queue's keys to land in one slot.
"""
from __future__ import annotations

import re
from typing import Iterator, Optional

from ..errors import ConfigError

__all__ = ["QueueKeys", "validate_queue_name", "validate_prefix", "DEFAULT_PREFIX", "hash_tag", "require_hash_tag",
           "ClusterHashTagError"]

DEFAULT_PREFIX = "bull"

#: The fixed keys of a queue, by attribute name -> key suffix.
FIXED_SUFFIXES = {
    "wait": "wait",
    "active": "active",
    "waiting_children": "waiting-children",
    "paused": "paused",
    "id": "id",
    "delayed": "delayed",
    "prioritized": "prioritized",
    "stalled_check": "stalled-check",
    "completed": "completed",
    "failed": "failed",
    "stalled": "stalled",
    "repeat": "repeat",
    "limiter": "limiter",
    "meta": "meta",
    "events": "events",
    "pc": "pc",
    "marker": "marker",
    "de": "de",
    "metrics_completed": "metrics:completed",
    "metrics_failed": "metrics:failed",
}

_BAD_PREFIX = re.compile(r"\s")


def validate_queue_name(name: str) -> str:
    """Return ``name`` if BullMQ accepts it as a queue name, else raise ValueError."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"queue name must be a non-empty string, got {name!r}")
    if ":" in name:
        raise ValueError(f"queue name {name!r} must not contain ':' (BullMQ uses it as the key separator)")
    return name


def validate_prefix(prefix: str) -> str:
    """Return ``prefix`` if it can start a key, else raise ValueError."""
    if not isinstance(prefix, str) or not prefix:
        raise ValueError(f"key prefix must be a non-empty string, got {prefix!r}")
    if _BAD_PREFIX.search(prefix):
        raise ValueError(f"key prefix {prefix!r} must not contain white space")
    return prefix


class QueueKeys:
    """Key names of one queue.

    Built once per Queue/Worker and shared; every attribute is a plain ``str``.
    ``QueueKeys("mail").wait == "bull:mail:wait"``; ``.job("7") == "bull:mail:7"``.
    """

    __slots__ = ("name", "prefix", "base", "queue_key") + tuple(FIXED_SUFFIXES)

    def __init__(self, name: str, prefix: str = DEFAULT_PREFIX) -> None:
        self.name = validate_queue_name(name)
        self.prefix = validate_prefix(prefix)
        #: "bull:mail" — what BullMQ calls the queue key (``parent.queueKey``).
        self.queue_key = f"{prefix}:{name}"
        #: "bull:mail:" — the key prefix handed to the scripts.
        self.base = self.queue_key + ":"
        for attr, suffix in FIXED_SUFFIXES.items():
            object.__setattr__(self, attr, self.base + suffix)

    def __repr__(self) -> str:
        return f"QueueKeys({self.name!r}, prefix={self.prefix!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, QueueKeys) and (self.name, self.prefix) == (other.name, other.prefix)

    def __hash__(self) -> int:
        return hash((self.name, self.prefix))

    # -- per-job keys -----------------------------------------------------------------
    def job(self, job_id: str) -> str:
        """The job hash, ``bull:q:<id>``."""
        return self.base + job_id

    def lock(self, job_id: str) -> str:
        return f"{self.base}{job_id}:lock"

    def logs(self, job_id: str) -> str:
        return f"{self.base}{job_id}:logs"

    def dependencies(self, job_id: str) -> str:
        return f"{self.base}{job_id}:dependencies"

    def processed(self, job_id: str) -> str:
        return f"{self.base}{job_id}:processed"

    def failed_children(self, job_id: str) -> str:
        return f"{self.base}{job_id}:failed"

    def unsuccessful(self, job_id: str) -> str:
        return f"{self.base}{job_id}:unsuccessful"

    def dedup(self, dedup_id: str) -> str:
        """``bull:q:de:<id>``: the job that owns a deduplication id."""
        return f"{self.base}de:{dedup_id}"

    def cancellation_channel(self) -> str:
        """``bull:q:cancellation``: the Pub/Sub channel ``cancelJob-9`` publishes a running
        job's cancellation on (a channel, not a key: nothing is stored under it)."""
        return self.base + "cancellation"

    def scheduler(self, scheduler_id: str) -> str:
        return f"{self.base}repeat:{scheduler_id}"

    def metrics(self, kind: str) -> str:
        """``metrics:completed`` or ``metrics:failed``."""
        if kind not in ("completed", "failed"):
            raise ValueError(f"metrics kind must be 'completed' or 'failed', got {kind!r}")
        return f"{self.base}metrics:{kind}"

    def state_key(self, state: str) -> str:
        """Key of a state list/set by BullMQ's type names (``waiting`` maps to ``wait``)."""
        if state == "waiting":
            state = "wait"
        attr = state.replace("-", "_")
        if attr not in FIXED_SUFFIXES or state not in (
            "wait", "active", "paused", "delayed", "prioritized", "completed", "failed",
            "waiting-children",
        ):
            raise ValueError(f"unknown job state {state!r}")
        return getattr(self, attr)

    def all_fixed(self) -> Iterator[str]:
        for attr in FIXED_SUFFIXES:
            yield getattr(self, attr)


class ClusterHashTagError(ConfigError):
    """A queue's keys carry no hash tag, so on a cluster they would spread over slots."""


# -- hash tags (Redis Cluster) ----------------------------------------------------------------
def hash_tag(key: str) -> Optional[str]:
    """The part of ``key`` Redis Cluster hashes when it is not the whole key: the text
    between the first ``{`` and the next ``}``, if that text is not empty."""
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    if end <= start + 1:
        return None
    return key[start + 1:end]


def require_hash_tag(prefix: str, queue: str) -> str:
    """Refuse a queue whose keys (``prefix:queue:...``) carry no hash tag: on a cluster
    its keys would hash to different slots and every script call would fail with
    ``CROSSSLOT``. Returns the tag. Raises :class:`ClusterHashTagError` naming the fixes."""
    tag = hash_tag(f"{prefix}:{queue}:")
    if tag is not None:
        return tag
    raise ClusterHashTagError(
        f"queue {queue!r} with prefix {prefix!r} is on a Redis Cluster, but its keys "
        f"({prefix}:{queue}:...) carry no hash tag, so they would land in different slots. "
        f"Put a hash tag in the prefix (prefix '{{{prefix}}}': every queue of that prefix in one "
        f"slot, as BullMQ's docs suggest) or in the queue name ('{{{queue}}}': each queue in its own "
        f"slot, spread over the primaries); Node producers and workers must use the same names")

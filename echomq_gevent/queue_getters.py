"""The BullMQ ``Queue`` getters and admin calls beyond adding and reading jobs.

:class:`QueueGetters` is mixed into :class:`~echomq_gevent.queue.Queue`; it uses the
queue's ``keys``, ``client`` and ``scripts``. Answers have Node's shapes (dicts with
Node's key names), so code ported from Node reads the same values.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional

from .admin_scripts import METRICS_TYPES
from .flow_getters import queue_dependencies
from .keys import FIXED_SUFFIXES

__all__ = ["QueueGetters", "events_max_len"]

#: BullMQ's highest job priority (2^21).
_MAX_PRIORITY = 2_097_152
#: The key suffixes of Node's queue key map: checked as states, never taken for job ids.
_NODE_KEY_SUFFIXES = ("active", "wait", "waiting-children", "paused", "id", "delayed", "prioritized",
                      "stalled-check", "completed", "failed", "stalled", "repeat", "limiter", "meta",
                      "events", "pc", "marker", "de")
#: The sub-keys a job may own (deleted with an orphaned job).
_JOB_SUB_KEYS = ("logs", "dependencies", "processed", "failed", "unsuccessful", "lock")


def _text(label: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{label} must be a non-empty string, got {value!r}")
    return value


def _number_or_none(value: Any) -> Optional[int]:
    """Node's ``Number(x)`` for a meta field holding an integer; ``None`` when absent or junk."""
    if value is None or value == "":
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def events_max_len(streams: Any) -> int:
    """N of the Queue option ``streams={"events": {"maxLen": N}}``; a clear error otherwise."""
    events = streams.get("events") if isinstance(streams, Mapping) else None
    if not isinstance(events, Mapping) or set(streams) != {"events"} or set(events) != {"maxLen"}:
        raise ValueError(f"streams must be {{'events': {{'maxLen': N}}}}, got {streams!r}")
    return events["maxLen"]


def _label(value: Any) -> str:
    """A Prometheus label value: backslash, double quote and newline escaped."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _glob_escape(text: str) -> str:
    """``text`` as a literal in a SCAN MATCH pattern."""
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


def _int_or_zero(value: Any) -> int:
    """Node's ``parseInt(x || '0', 10)`` / ``+x || 0`` for a value read from Redis."""
    if value is None or value == "":
        return 0
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return 0


def _index(label: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{label} must be an integer list index (0 = newest, -1 = last), got {value!r}")
    return value


class QueueGetters:
    """Mixin of :class:`~echomq_gevent.queue.Queue` (needs ``keys``, ``client``, ``scripts``)."""

    keys: Any
    client: Any
    scripts: Any

    def get_dependencies(self, parent_id: str, kind: str = "processed", start: int = 0,
                         end: int = -1) -> Dict[str, Any]:
        """One page of a parent's ``processed`` or ``pending`` children with their jobs
        (Node's ``queue.getDependencies``); see :func:`echomq_gevent.flow_getters.queue_dependencies`."""
        return queue_dependencies(self, parent_id, kind, start, end)

    def get_metrics(self, type: str, start: int = 0, end: int = -1) -> Dict[str, Any]:
        """The per-minute metrics workers record for ``completed`` or ``failed`` jobs when
        they run with ``metrics={"maxDataPoints": N}`` (ours or Node's).

        Node's shape: ``{"meta": {"count", "prevTS", "prevCount"}, "data": [...], "count": n}``:
        ``meta.count`` is the total recorded, ``data`` the jobs per minute, newest first,
        from index ``start`` to ``end`` (inclusive, -1 = the oldest kept), ``count`` the
        number of data points kept. Nothing recorded yet reads as zeros and ``[]``.
        """
        if type not in METRICS_TYPES:
            raise ValueError(f"get_metrics: type must be 'completed' or 'failed', got {type!r}")
        summary, data, length = self.scripts.get_metrics(type, _index("get_metrics: start", start),
                                                         _index("get_metrics: end", end))
        summary = list(summary or []) + [None] * 3
        return {
            "meta": {"count": _int_or_zero(summary[0]), "prevTS": _int_or_zero(summary[1]),
                     "prevCount": _int_or_zero(summary[2])},
            "data": [_int_or_zero(point) for point in (data or [])],
            "count": int(length or 0),
        }

    # -- deduplication ------------------------------------------------------------------
    def get_deduplication_job_id(self, deduplication_id: str) -> Optional[str]:
        """The id of the job that owns ``deduplication_id`` now, or ``None``."""
        return self.client.get(self.keys.dedup(_text("deduplication_id", deduplication_id)))

    def remove_deduplication_key(self, deduplication_id: str) -> int:
        """End deduplication for this id at once (Node's ``removeDeduplicationKey``):
        the next add with it creates a job. Returns 1 if a key was deleted, else 0."""
        return int(self.client.delete(self.keys.dedup(_text("deduplication_id", deduplication_id))))

    # -- global limits --------------------------------------------------------------------
    def get_global_concurrency(self) -> Optional[int]:
        """meta ``concurrency`` as a number, ``None`` when unset (or not a number)."""
        return _number_or_none(self.client.hget(self.keys.meta, "concurrency"))

    def get_global_rate_limit(self) -> Optional[Dict[str, int]]:
        """``{"max", "duration"}`` from meta, ``None`` unless both are set."""
        max_jobs, duration = self.client.hmget(self.keys.meta, "max", "duration")
        max_jobs, duration = _number_or_none(max_jobs), _number_or_none(duration)
        if not max_jobs or not duration:
            return None
        return {"max": max_jobs, "duration": duration}

    def remove_rate_limit_key(self) -> int:
        """Delete the limiter key: rate-limited workers may fetch again at once. Returns
        1 if there was one, else 0."""
        return int(self.client.delete(self.keys.limiter))

    def get_rate_limit_ttl(self, max_jobs: Optional[int] = None) -> int:
        """Milliseconds until the rate limiter lets workers fetch again, as Node's
        ``getRateLimitTtl(maxJobs)``: with ``max_jobs`` (or, without it, the global limit
        ``max`` of :meth:`set_global_rate_limit`) the limiter's TTL once that many jobs
        started in the window, else 0. With neither it is the limiter key's plain PTTL:
        what a manual :meth:`rate_limit` left (-2 no key, -1 no expiry)."""
        if max_jobs is not None:
            if isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or max_jobs < 1:
                raise ValueError(f"get_rate_limit_ttl: max_jobs must be an integer >= 1 or None, got {max_jobs!r}")
        return self.scripts.get_rate_limit_ttl(max_jobs or 0)

    def is_maxed(self) -> bool:
        """True when the queue has as many active jobs as its global concurrency allows."""
        return self.scripts.is_maxed()

    # -- counts ---------------------------------------------------------------------------
    def get_counts_per_priority(self, priorities: Iterable[int]) -> Dict[str, int]:
        """Ready jobs per priority, keyed by the priority as text (Node's shape):
        ``{"0": jobs in wait, "3": prioritized jobs with priority 3, ...}``. Repeated
        priorities are counted once."""
        unique: List[int] = []
        for p in priorities:
            if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= _MAX_PRIORITY:
                raise ValueError(f"get_counts_per_priority: priorities must be integers 0..{_MAX_PRIORITY}, got {p!r}")
            if p not in unique:
                unique.append(p)
        if not unique:
            return {}
        counts = self.scripts.get_counts_per_priority(unique)
        return {str(p): int(c or 0) for p, c in zip(unique, counts)}

    def get_workers_count(self) -> int:
        """How many worker connections (Node's or ours) serve this queue (CLIENT LIST)."""
        return len(self.get_workers())

    # -- events stream --------------------------------------------------------------------
    def trim_events(self, max_length: int) -> int:
        """Trim the events stream to about ``max_length`` entries (``XTRIM MAXLEN ~``);
        returns how many were removed. Scripts keep trimming to meta ``opts.maxLenEvents``
        (the ``streams`` option of the constructor)."""
        if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 0:
            raise ValueError(f"trim_events: max_length must be an integer >= 0, got {max_length!r}")
        return int(self.client.xtrim(self.keys.events, maxlen=max_length, approximate=True))

    def set_events_max_len(self, max_len: int) -> None:
        """Store meta ``opts.maxLenEvents``: the scripts trim the events stream to about
        this many entries (what Node's ``streams.events.maxLen`` queue option writes)."""
        if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
            raise ValueError(f"streams.events.maxLen must be an integer >= 1, got {max_len!r}")
        self.client.hset(self.keys.meta, "opts.maxLenEvents", max_len)

    # -- orphaned jobs --------------------------------------------------------------------
    def remove_orphaned_jobs(self, count: int = 1000, limit: int = 0) -> int:
        """Delete job hashes (and their sub-keys) that no state of the queue refers to,
        as Node's ``removeOrphanedJobs(count, limit)``: the queue's keys are scanned
        ``count`` at a time and each batch of candidates is checked and deleted in one
        script; ``limit`` > 0 stops once that many were removed. Returns how many were
        removed. Not needed in normal operation (a clean-up after lost state updates)."""
        for label, value, low in (("count", count, 1), ("limit", limit, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"remove_orphaned_jobs: {label} must be an integer >= {low}, got {value!r}")
        base = self.keys.base
        known = set(_NODE_KEY_SUFFIXES) | set(FIXED_SUFFIXES.values())
        states = list(_NODE_KEY_SUFFIXES)
        removed = 0
        cursor = 0
        while True:
            cursor, found = self.client.scan(cursor, match=_glob_escape(base) + "*", count=count)
            candidates: List[str] = []
            for key in found:
                suffix = key[len(base):]
                head, sep, tail = suffix.partition(":")
                if suffix in known or (sep and head in known):
                    continue
                if sep and tail not in _JOB_SUB_KEYS:
                    continue
                if head and head not in candidates:
                    candidates.append(head)
            if candidates:
                removed += self.scripts.remove_orphaned_jobs(states, _JOB_SUB_KEYS, candidates)
                if limit and removed >= limit:
                    break
            if not cursor:
                break
        return removed

    # -- Prometheus -------------------------------------------------------------------------
    def export_prometheus_metrics(self, global_variables: Optional[Mapping[str, Any]] = None) -> str:
        """The queue's job counts and finished totals in Prometheus' text format, with the
        metric names and labels of Node's ``exportPrometheusMetrics``: ``bullmq_job_count``
        (gauge, one sample per state), ``bullmq_job_completed_total`` and
        ``bullmq_job_failed_total`` (counters, from the metrics workers record with
        ``metrics={"maxDataPoints": N}``). ``global_variables`` become extra labels on
        every sample."""
        extra = ""
        for key, value in (global_variables or {}).items():
            if not isinstance(key, str) or not key.replace("_", "a").isalnum() or key[0].isdigit():
                raise ValueError(f"export_prometheus_metrics: label name {key!r} is not a Prometheus label name")
            extra += f', {key}="{_label(value)}"'
        queue = _label(self.name)
        lines = ["# HELP bullmq_job_count Jobs of the queue per state",
                 "# TYPE bullmq_job_count gauge"]
        for state, count in self.get_job_counts().items():
            lines.append(f'bullmq_job_count{{queue="{queue}", state="{state}"{extra}}} {count}')
        for kind in METRICS_TYPES:
            total = self.get_metrics(kind, 0, 0)["meta"]["count"]
            lines += [f"# HELP bullmq_job_{kind}_total Jobs {kind} since metrics were first recorded",
                      f"# TYPE bullmq_job_{kind}_total counter",
                      f'bullmq_job_{kind}_total{{queue="{queue}"{extra}}} {total}']
        return "\n".join(lines)

    # -- Node's one-state shortcuts -----------------------------------------------------------
    def get_waiting_count(self) -> int:
        return self.get_job_count_by_types("waiting")

    def get_waiting_children_count(self) -> int:
        return self.get_job_count_by_types("waiting-children")

    def get_active_count(self) -> int:
        return self.get_job_count_by_types("active")

    def get_delayed_count(self, timestamp: Optional[int] = None) -> int:
        """Delayed jobs; with ``timestamp`` (ms) only those due strictly before it."""
        if timestamp is None:
            return self.get_job_count_by_types("delayed")
        if isinstance(timestamp, bool) or not isinstance(timestamp, int) or timestamp < 0:
            raise ValueError(f"get_delayed_count: timestamp must be milliseconds as an integer >= 0, got {timestamp!r}")
        return int(self.scripts.get_counts(["delayed"], timestamp)[0] or 0)

    def get_prioritized_count(self) -> int:
        return self.get_job_count_by_types("prioritized")

    def get_completed_count(self) -> int:
        return self.get_job_count_by_types("completed")

    def get_failed_count(self) -> int:
        return self.get_job_count_by_types("failed")

    def get_waiting(self, start: int = 0, end: int = -1) -> List[Any]:
        """Waiting jobs, oldest first (as Node's ``getWaiting``); the others below likewise,
        finished ones newest first."""
        return self.get_jobs("waiting", start, end, asc=True)

    def get_waiting_children(self, start: int = 0, end: int = -1) -> List[Any]:
        return self.get_jobs("waiting-children", start, end, asc=True)

    def get_active(self, start: int = 0, end: int = -1) -> List[Any]:
        return self.get_jobs("active", start, end, asc=True)

    def get_delayed(self, start: int = 0, end: int = -1) -> List[Any]:
        return self.get_jobs("delayed", start, end, asc=True)

    def get_prioritized(self, start: int = 0, end: int = -1) -> List[Any]:
        return self.get_jobs("prioritized", start, end, asc=True)

    def get_completed(self, start: int = 0, end: int = -1) -> List[Any]:
        return self.get_jobs("completed", start, end, asc=False)

    def get_failed(self, start: int = 0, end: int = -1) -> List[Any]:
        return self.get_jobs("failed", start, end, asc=False)

    def get_version(self) -> Optional[str]:
        """meta ``version`` (``bullmq:6.7.0`` once a Node Queue has met this queue), or ``None``."""
        return self.client.hget(self.keys.meta, "version")

    def update_job_progress(self, job_id: str, progress: Any) -> None:
        """Node's ``queue.updateJobProgress``: ``job.update_progress`` without reading the job."""
        from .job import Job

        Job(self.scripts, _text("job_id", str(job_id))).update_progress(progress)

    def add_job_log(self, job_id: str, line: str, keep_logs: Optional[int] = None) -> int:
        """Node's ``queue.addJobLog``: append a log line to a job; returns the lines kept."""
        if keep_logs is not None and (isinstance(keep_logs, bool) or not isinstance(keep_logs, int) or keep_logs < 0):
            raise ValueError(f"add_job_log: keep_logs must be an integer >= 0 or None, got {keep_logs!r}")
        return int(self.scripts.add_log(_text("job_id", str(job_id)), str(line), keep_logs))

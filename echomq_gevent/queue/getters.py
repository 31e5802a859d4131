"""The reads of a queue: jobs by id and by state, counts, logs, workers, and the rest of
BullMQ's ``Queue`` getters (metrics, rate-limit TTL, global limits, dependencies...).

:class:`QueueGetters` is a part of :class:`~echomq_gevent.queue.queue.Queue`, made with
the queue's keys, client and scripts. Answers have Node's shapes (dicts with Node's key
names), so code ported from Node reads the same values.
"""
from __future__ import annotations

import base64
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

from ..protocol.admin import METRICS_TYPES
from .dependencies import queue_dependencies
from .discovery import glob_escape
from ..connection.cluster import client_list_all, is_cluster
from ..errors import close_matches
from ..protocol.clock import now_ms
from ..protocol.keys import FIXED_SUFFIXES, QueueKeys
from ..protocol.scripts import Scripts
from .job import Job, job_state
from .stats import QueueAge

__all__ = ["QueueGetters", "events_max_len", "JOB_TYPES", "DEFAULT_COUNT_TYPES"]

#: Job types accepted by the getters (BullMQ names; ``waiting`` is the ``wait`` list).
JOB_TYPES = ("active", "completed", "delayed", "failed", "prioritized", "waiting", "wait",
             "waiting-children", "paused")
#: What ``get_job_counts()`` counts when no type is named (as Node v6).
DEFAULT_COUNT_TYPES = ("active", "completed", "delayed", "failed", "prioritized", "waiting",
                       "waiting-children")
_LIST_TYPES = ("wait", "paused", "active")

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
    """The reads of one queue: jobs, states, counts, logs, workers, metrics, limits
    (Node's getters). Made by :class:`~echomq_gevent.queue.queue.Queue`, whose methods of
    the same names call these; usable alone with a queue's keys, client and scripts."""

    def __init__(self, keys: QueueKeys, client: Any, scripts: Scripts) -> None:
        self.keys = keys
        self.client = client
        self.scripts = scripts
        self.name = keys.name
        self.prefix = keys.prefix

    # -- jobs, states and counts -------------------------------------------------------
    def get_job(self, job_id: str) -> Optional[Job]:
        """The job with this id, or ``None`` when its hash does not exist."""
        fields = self.client.hgetall(self.keys.job(str(job_id)))
        if not fields:
            return None
        return Job.from_fields(self.scripts, str(job_id), fields)

    def get_job_state(self, job_id: str) -> str:
        """``completed``, ``failed``, ``delayed``, ``prioritized``, ``active``, ``waiting``,
        ``waiting-children`` or ``unknown``.

        Uses ``getStateV2-8``, or ``getState-8`` when the server is older than Redis
        6.0.6 (no LPOS; the version is read once per client with INFO server).
        """
        return job_state(self.scripts, str(job_id))

    @staticmethod
    def _types(types: Sequence[Any], default: Sequence[str]) -> List[str]:
        flat: List[str] = []
        for t in types:
            if isinstance(t, (list, tuple)):
                flat.extend(t)
            elif t is not None:
                flat.append(t)
        if not flat:
            return list(default)
        seen: List[str] = []
        for t in flat:
            if t not in JOB_TYPES:
                near = close_matches(str(t), JOB_TYPES)
                hint = f" (did you mean {near[0]!r}?)" if near else ""
                raise ValueError(f"unknown job type {t!r}{hint}; use one of {', '.join(JOB_TYPES)}")
            if t not in seen:
                seen.append(t)
        return seen

    def get_job_counts(self, *types: Any) -> Dict[str, int]:
        """Counts per job type, keyed by the names asked (default: Node v6's seven types)."""
        names = self._types(types, DEFAULT_COUNT_TYPES)
        counts = self.scripts.get_counts(["wait" if t == "waiting" else t for t in names])
        return {name: int(c or 0) for name, c in zip(names, counts)}

    def get_oldest_job_timestamp(self) -> Optional[int]:
        """When the oldest job ready to run became ready (ms), or ``None`` when no job is
        ready: the jobs in ``wait``, in ``prioritized`` and the delayed jobs already due
        but not yet promoted (no worker has looked). Script ``getOldestJobTimestamp-1``
        (read only, a bounded number of reads whatever the queue's size); what it reads
        and where it can only give a lower bound: ``docs/observability.md``."""
        return self.get_queue_age().oldest_timestamp

    def get_queue_age(self) -> QueueAge:
        """:class:`~echomq_gevent.queue.stats.QueueAge` now: the oldest ready job (its ready
        time, id and state), its ``age_seconds``, and whether the queue is paused, in one
        call of ``getOldestJobTimestamp-1``."""
        when = now_ms()
        ts, job_id, state, paused = self.scripts.admin.get_oldest_job(when)
        return QueueAge(self.name, ts, job_id, state, paused, when)

    def get_job_count_by_types(self, *types: Any) -> int:
        """Sum of :meth:`get_job_counts` over the given types."""
        return sum(self.get_job_counts(*types).values())

    def count(self) -> int:
        """Jobs not yet processed: waiting, delayed, prioritized and waiting-children."""
        return self.get_job_count_by_types("waiting", "delayed", "prioritized", "waiting-children")

    def get_job_ids(self, types: Any = None, start: int = 0, end: int = -1, asc: bool = False) -> List[str]:
        """Job ids per type, ranges as BullMQ's ``getRanges`` (one pipeline).

        ``asc=False`` lists newest first. Lists (wait, active) are read from the
        right end when ascending; zsets by score.
        """
        names = self._types([types], DEFAULT_COUNT_TYPES)
        states: List[str] = []
        for t in names:
            s = "wait" if t == "waiting" else t
            if s not in states:
                states.append(s)
        pipe = self.client.pipeline(transaction=False)
        for s in states:
            key = self.keys.state_key(s)
            if s in _LIST_TYPES:
                if asc:
                    lo = 0 if end == -1 else -(end + 1)
                    hi = 0 if start == -1 else -(start + 1)
                    pipe.lrange(key, lo, hi)
                else:
                    pipe.lrange(key, start, end)
            elif asc:
                pipe.zrange(key, start, end)
            else:
                pipe.zrevrange(key, start, end)
        ids: List[str] = []
        seen = set()
        for s, found in zip(states, pipe.execute()):
            if s in _LIST_TYPES and asc:
                found = list(reversed(found))
            for job_id in found:
                if job_id.startswith("0:") or job_id in seen:
                    continue
                seen.add(job_id)
                ids.append(job_id)
        return ids

    def get_jobs(self, types: Any = None, start: int = 0, end: int = -1, asc: bool = False) -> List[Job]:
        """Jobs of the given types (a name or a list; default: all types) in BullMQ's
        order; ids whose hash is gone are skipped. Two round trips."""
        ids = self.get_job_ids(types, start, end, asc)
        if not ids:
            return []
        pipe = self.client.pipeline(transaction=False)
        for job_id in ids:
            pipe.hgetall(self.keys.job(job_id))
        return [Job.from_fields(self.scripts, job_id, fields)
                for job_id, fields in zip(ids, pipe.execute()) if fields]

    def get_job_logs(self, job_id: str, start: int = 0, end: int = -1, asc: bool = True) -> Dict[str, Any]:
        """``{"logs": [...], "count": n}`` for a job (oldest first unless ``asc=False``)."""
        key = self.keys.logs(str(job_id))
        pipe = self.client.pipeline(transaction=False)
        if asc:
            pipe.lrange(key, start, end)
        else:
            pipe.lrange(key, -(end + 1), -(start + 1))
        pipe.llen(key)
        logs, count = pipe.execute()
        if not asc:
            logs = list(reversed(logs))
        return {"logs": logs, "count": int(count)}

    def client_name(self) -> str:
        """The CLIENT SETNAME a BullMQ worker of this queue uses: ``<prefix>:<base64(name)>``."""
        encoded = base64.b64encode(self.name.encode("utf-8")).decode("ascii")
        return f"{self.prefix}:{encoded}"

    def get_workers(self) -> List[Dict[str, Any]]:
        """Connections of workers (Node's or ours) serving this queue, from CLIENT LIST.

        Each entry is CLIENT LIST's fields, with ``name`` = the queue name and
        ``rawname`` = the connection name (``...:w:<worker name>`` for named workers).
        """
        base = self.client_name()
        named = base + ":w:"
        found = []
        entries = client_list_all(self.client) if is_cluster(self.client) else self.client.client_list()
        for entry in entries:
            raw = entry.get("name") or ""
            if raw == base or raw.startswith(named):
                item = dict(entry)
                item["name"] = self.name
                item["rawname"] = raw
                found.append(item)
        return found

    # -- Node's other getters ----------------------------------------------------------
    def get_dependencies(self, parent_id: str, kind: str = "processed", start: int = 0,
                         end: int = -1) -> Dict[str, Any]:
        """One page of a parent's ``processed`` or ``pending`` children with their jobs
        (Node's ``queue.getDependencies``); see :func:`echomq_gevent.queue.dependencies.queue_dependencies`."""
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
        summary, data, length = self.scripts.admin.get_metrics(type, _index("get_metrics: start", start),
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
        return self.scripts.admin.get_rate_limit_ttl(max_jobs or 0)

    def is_maxed(self) -> bool:
        """True when the queue has as many active jobs as its global concurrency allows."""
        return self.scripts.admin.is_maxed()

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
        counts = self.scripts.admin.get_counts_per_priority(unique)
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
            cursor, found = self.client.scan(cursor, match=glob_escape(base) + "*", count=count)
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
                removed += self.scripts.admin.remove_orphaned_jobs(states, _JOB_SUB_KEYS, candidates)
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

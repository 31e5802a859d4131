"""The Job: a decoded view of one job hash, with the calls a processor makes on it.

Built by :class:`~echomq_gevent.queue.Queue` (``add``, ``get_job``...) and by the
worker for every job it fetches (:meth:`Job.from_flat`, on the hot path). Decoding
follows BullMQ exactly (protocol §2): ``data``/``opts``/``progress`` are JSON,
``failedReason`` is plain text, ``atm``/``ats``/``stc`` are the attempt counters.
Invalid JSON never raises while decoding; :attr:`Job.decode_error` says what was
wrong so the worker can fail the job with that reason.

The methods (``update_progress``, ``log``...) talk to Redis through the queue's
:class:`~echomq_gevent.scripts.Scripts`; call them from the job's greenlet (or any
greenlet/thread: a redis-py client is safe to share).
"""
from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from .job_options import decode_job_options, encode_job_data

if TYPE_CHECKING:  # pragma: no cover
    from .scripts import Scripts

__all__ = ["Job"]



def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (Node's JSON.parse rejects it)")


#: Decoding as strict as Node's JSON.parse (no NaN/Infinity); built once, reused.
_decoder = json.JSONDecoder(parse_constant=_reject_constant)
_scan_once = _decoder.scan_once
_full_decode = _decoder.decode


def _loads(text: str) -> Any:
    """``json.loads`` without its per-call wrapper cost (the worker decodes every job).

    The C scanner reads one value from position 0; anything else (leading or trailing
    white space, garbage) goes through the full decoder, which raises a precise error.
    """
    try:
        value, end = _scan_once(text, 0)
    except StopIteration:
        return _full_decode(text)
    if end != len(text):
        return _full_decode(text)
    return value


def _to_int(value: Optional[str], default: int = 0) -> int:
    """``parseInt``-like: decimal text to int, tolerating float text; ``default`` when absent/bad."""
    if value is None or value == "":
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return default


def _to_opt_int(value: Optional[str]) -> Optional[int]:
    if value is None or value == "":
        return None
    return _to_int(value)


def _json_problem(job_id: str, field: str, exc: Exception) -> str:
    return f"job {job_id}: field {field!r} is not valid JSON ({exc})"


class Job:
    """One BullMQ job, decoded from its hash.

    Attributes use Python names for BullMQ's fields (``attempts_made`` for
    ``attemptsMade``/``atm``...). ``opts`` keeps BullMQ's long option names.
    ``token`` is set by the worker that holds the job's lock.
    """

    __slots__ = (
        "scripts", "id", "name", "data", "opts", "progress", "attempts_made", "attempts_started",
        "stalled_counter", "timestamp", "processed_on", "finished_on", "returnvalue",
        "failed_reason", "stacktrace", "delay", "priority", "parent_key", "parent",
        "repeat_job_key", "deferred_failure", "processed_by", "deduplication_id",
        "queue_name", "prefix", "queue_qualified_name", "token", "decode_error", "__weakref__",
    )

    def __init__(self, scripts: "Scripts", job_id: str, name: str = "", data: Any = None,
                 opts: Optional[Dict[str, Any]] = None, timestamp: int = 0) -> None:
        keys = scripts.keys
        self.scripts = scripts
        self.id = job_id
        self.name = name
        self.data = data
        self.opts: Dict[str, Any] = opts if opts is not None else {}
        self.progress: Any = 0
        self.attempts_made = 0
        self.attempts_started = 0
        self.stalled_counter = 0
        self.timestamp = timestamp
        self.processed_on: Optional[int] = None
        self.finished_on: Optional[int] = None
        self.returnvalue: Any = None
        self.failed_reason: Optional[str] = None
        self.stacktrace: List[str] = []
        self.delay = int(self.opts.get("delay") or 0)
        self.priority = int(self.opts.get("priority") or 0)
        self.parent_key: Optional[str] = None
        self.parent: Optional[Dict[str, Any]] = None
        self.repeat_job_key: Optional[str] = None
        self.deferred_failure: Optional[str] = None
        self.processed_by: Optional[str] = None
        self.deduplication_id: Optional[str] = None
        self.queue_name = keys.name
        self.prefix = keys.prefix
        self.queue_qualified_name = keys.queue_key
        self.token: Optional[str] = None
        self.decode_error: Optional[str] = None

    # -- decoding ---------------------------------------------------------------------
    @classmethod
    def from_fields(cls, scripts: "Scripts", job_id: str, fields: Dict[str, str]) -> "Job":
        """Decode a job hash (``HGETALL`` as a dict of str). Never raises for bad JSON:
        ``decode_error`` names the first field that was not valid JSON."""
        job = cls.__new__(cls)
        keys = scripts.keys
        job.scripts = scripts
        job.id = str(job_id)
        job.name = fields.get("name", "")
        job.token = None
        job.decode_error = None
        get = fields.get

        raw = get("data")
        try:
            job.data = _loads(raw) if raw else {}
        except ValueError as exc:
            job.data = None
            job.decode_error = _json_problem(job.id, "data", exc)

        raw = get("opts")
        try:
            stored = _loads(raw) if raw else {}
            if not isinstance(stored, dict):
                raise ValueError(f"expected an object, got {type(stored).__name__}")
            job.opts = decode_job_options(stored)
        except ValueError as exc:
            job.opts = {}
            job.decode_error = job.decode_error or _json_problem(job.id, "opts", exc)

        raw = get("progress")
        try:
            job.progress = _loads(raw) if raw else 0
        except ValueError as exc:
            job.progress = 0
            job.decode_error = job.decode_error or _json_problem(job.id, "progress", exc)

        job.attempts_made = _to_int(get("attemptsMade") or get("atm"))
        job.attempts_started = _to_int(get("ats"))
        job.stalled_counter = _to_int(get("stc"))
        job.timestamp = _to_int(get("timestamp"))
        job.processed_on = _to_opt_int(get("processedOn"))
        job.finished_on = _to_opt_int(get("finishedOn"))
        job.delay = _to_int(get("delay"))
        job.priority = _to_int(get("priority"))

        raw = get("returnvalue")
        job.returnvalue = None
        if raw is not None:
            try:
                job.returnvalue = _loads(raw)
            except ValueError:
                job.returnvalue = None  # Node also gives up on a corrupted returnvalue
        job.failed_reason = get("failedReason")
        raw = get("stacktrace")
        traces: Any = []
        if raw:
            try:
                traces = _loads(raw)
            except ValueError:
                traces = []
        job.stacktrace = traces if isinstance(traces, list) else []

        job.parent_key = get("parentKey") or None
        raw = get("parent")
        job.parent = None
        if raw:
            try:
                job.parent = _loads(raw)
            except ValueError:
                job.parent = None
        job.repeat_job_key = get("rjk")
        job.deferred_failure = get("defa")
        job.processed_by = get("pb")
        job.deduplication_id = get("deid")
        job.queue_name = keys.name
        job.prefix = keys.prefix
        job.queue_qualified_name = keys.queue_key
        return job

    @classmethod
    def from_flat(cls, scripts: "Scripts", job_id: str, flat: Sequence[str]) -> "Job":
        """Decode the flat ``[field, value, ...]`` list moveToActive returns."""
        it = iter(flat)
        return cls.from_fields(scripts, job_id, dict(zip(it, it)))

    # -- calls a processor makes -----------------------------------------------------
    def update_progress(self, value: Any) -> None:
        """Store progress (a number or a JSON object) and emit a ``progress`` event.

        Raises InvalidJobDataError when ``value`` is not JSON-serialisable, JobNotExist
        when the job is gone.
        """
        text = encode_job_data(value, self.name, what="progress")
        self.scripts.update_progress(self.id, text)
        self.progress = value

    def log(self, line: str) -> int:
        """Append a line to the job's log (trimmed to ``opts.keepLogs``); returns how many lines are kept."""
        keep = self.opts.get("keepLogs")
        return int(self.scripts.add_log(self.id, str(line), keep))

    def update_data(self, data: Any) -> None:
        """Replace the job's data (JSON) in Redis and here."""
        text = encode_job_data(data, self.name)
        self.scripts.update_data(self.id, text)
        self.data = data

    def move_to_delayed(self, timestamp_ms: int, token: Optional[str] = None) -> None:
        """Move this active job to delayed until ``timestamp_ms`` without counting an attempt.

        Use it in a processor, then raise :class:`~echomq_gevent.errors.DelayedError`.
        ``token`` defaults to the worker's lock token on this job.
        """
        now = int(time.time() * 1000)
        delay = max(0, int(timestamp_ms) - now)
        self.scripts.move_to_delayed(self.id, now, token or self.token or "0", delay, skip_attempt=True)
        self.delay = delay

    def get_state(self) -> str:
        """``completed``, ``failed``, ``delayed``, ``prioritized``, ``active``, ``waiting``,
        ``waiting-children`` or ``unknown``."""
        return self.scripts.get_state(self.id)

    def is_completed(self) -> bool:
        return self.get_state() == "completed"

    def is_failed(self) -> bool:
        return self.get_state() == "failed"

    def is_active(self) -> bool:
        return self.get_state() == "active"

    def is_waiting(self) -> bool:
        return self.get_state() == "waiting"

    def is_delayed(self) -> bool:
        return self.get_state() == "delayed"

    def remove(self, remove_children: bool = True) -> None:
        """Remove the job (and, by default, its pending children).

        Raises RuntimeError when a worker holds its lock (it is active).
        """
        if not self.scripts.remove_job(self.id, remove_children):
            raise RuntimeError(f"job {self.id} could not be removed because it is locked by a worker; "
                               f"wait until it finishes")

    # -- views -------------------------------------------------------------------------
    def to_dict(self) -> Dict[str, Any]:
        """A JSON-able view (for logs and the CLI)."""
        return {
            "id": self.id, "name": self.name, "data": self.data, "opts": self.opts,
            "progress": self.progress, "attemptsMade": self.attempts_made,
            "attemptsStarted": self.attempts_started, "stalledCounter": self.stalled_counter,
            "timestamp": self.timestamp, "processedOn": self.processed_on,
            "finishedOn": self.finished_on, "returnvalue": self.returnvalue,
            "failedReason": self.failed_reason, "stacktrace": self.stacktrace,
            "delay": self.delay, "priority": self.priority, "parentKey": self.parent_key,
            "parent": self.parent, "repeatJobKey": self.repeat_job_key,
            "deferredFailure": self.deferred_failure, "processedBy": self.processed_by,
            "deduplicationId": self.deduplication_id, "queueName": self.queue_name,
            "queueQualifiedName": self.queue_qualified_name, "decodeError": self.decode_error,
        }

    def __repr__(self) -> str:
        return f"Job(id={self.id!r}, name={self.name!r}, queue={self.queue_qualified_name!r})"

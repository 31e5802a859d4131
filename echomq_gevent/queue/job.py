"""The Job: a decoded view of one job hash, with the calls a processor makes on it.

Built by :class:`~echomq_gevent.queue.Queue` (``add``, ``get_job``...) and by the
worker for every job it fetches (:meth:`Job.from_flat`, on the hot path). Decoding
follows BullMQ exactly (docs/protocol.md, "The job hash"): ``data``/``opts``/``progress`` are JSON,
``failedReason`` is plain text, ``atm``/``ats``/``stc`` are the attempt counters.
Nothing read from Redis raises while decoding: invalid JSON, stored options that
``Queue.add`` would refuse (same rules, checked once here), a counter that is not an
integer or an id without a job hash set :attr:`Job.decode_error`, which names the field,
and the worker fails the job with that reason before its processor runs.

The methods (``update_progress``, ``log``...) talk to Redis through the queue's
:class:`~echomq_gevent.protocol.scripts.Scripts`; call them from the job's greenlet (or any
greenlet/thread: a redis-py client is safe to share).
"""
from __future__ import annotations

import json
import re
import threading
import weakref
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Set, Tuple

from redis.exceptions import ResponseError

from ..protocol.clock import now_ms
from ..errors import JobCancelled, JobLockedError, ScriptError
from .children import JobChildren
from .control import JobControl
from .explain import explain
from .forward import forward
from ..protocol.options import decode_job_options, encode_job_data, stored_options_problems, validate_job_options, wire_text

if TYPE_CHECKING:  # pragma: no cover
    from ..protocol.scripts import Scripts

__all__ = ["Job", "job_state", "server_has_lpos", "parse_redis_version"]

#: The first Redis version with LPOS; older servers get ``getState-8`` instead of ``getStateV2-8``.
LPOS_SINCE = (6, 0, 6)

#: client -> whether its server has LPOS (asked once per client with INFO server).
_lpos_support: "weakref.WeakKeyDictionary[Any, bool]" = weakref.WeakKeyDictionary()
_lpos_lock = threading.Lock()

#: States a job can be asked to be in (``is_*``), list-backed ones first.
_LIST_STATES = ("wait", "active", "paused")
_ZSET_STATES = ("completed", "failed", "delayed", "prioritized", "waiting-children")


def parse_redis_version(text: str) -> Tuple[int, ...]:
    """``"6.0.5"`` -> ``(6, 0, 5)``; non-numeric parts (``"7.2.4-rc1"``) stop the tuple."""
    parts: List[int] = []
    for piece in str(text).split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(piece):
            break
    return tuple(parts)


def server_has_lpos(client: Any) -> bool:
    """Whether the server behind ``client`` has LPOS (Redis >= 6.0.6).

    Asked once per client object with ``INFO server`` and remembered; a server that
    refuses INFO or reports no ``redis_version`` is taken to be recent. Called by
    :func:`job_state` and the ``Job.is_*`` checks, from any greenlet.
    """
    known = _lpos_support.get(client)
    if known is not None:
        return known
    try:
        version = client.info("server").get("redis_version")
    except ResponseError:
        version = None
    known = version is None or parse_redis_version(version) >= LPOS_SINCE
    with _lpos_lock:
        _lpos_support[client] = known
    return known


def job_state(scripts: "Scripts", job_id: str) -> str:
    """A job's state through ``getStateV2-8``, or ``getState-8`` on Redis < 6.0.6.

    Answers ``completed``, ``failed``, ``delayed``, ``prioritized``, ``active``,
    ``waiting``, ``waiting-children`` or ``unknown``. Used by ``Queue.get_job_state``
    and ``Job.get_state``.
    """
    if server_has_lpos(scripts.client):
        return scripts.get_state(str(job_id))
    return scripts.admin.get_state_without_lpos(str(job_id))



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


#: A counter field as HINCRBY can increment it.
_INTEGER_TEXT = re.compile(r"^-?\d+$")


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


#: ``opts`` texts whose options passed :func:`stored_options_problems` (a producer writes the
#: same few over and over; the check is skipped for them). Cleared when it holds this many.
_CHECKED_OPTS: Set[str] = set()
_CHECKED_OPTS_MAX = 1024


def _json_problem(job_id: str, field: str, exc: Exception) -> str:
    return f"job {job_id}: field {field!r} is not valid JSON ({exc})"


def _not_utf8(job_id: str, fields: Dict[str, str]) -> Optional[str]:
    """The problem of the first field of a job hash that held bytes that are not UTF-8, or
    None. The clients the package builds decode with ``surrogateescape`` (and so does the
    pipelined connection's reader), so such bytes arrive as lone surrogates instead of
    failing the whole answer they came in; a field that Redis holds as valid UTF-8 never
    holds one (an escaped surrogate in JSON text is ASCII)."""
    try:
        if "".join(fields.values()).isascii() and "".join(fields).isascii():
            return None
    except TypeError:  # not all str: not an answer decoded by a client
        return None
    for key, value in fields.items():
        for what, text in (("name", key), ("value", value)):
            if isinstance(text, str) and wire_text(text) != text:
                return (f"job {job_id}: field {wire_text(key)!r} holds bytes that are not UTF-8 in its {what} "
                        f"(shown with \\udcXX escapes: {wire_text(text)[:120]}); producers must write UTF-8 text")
    return None


class Job:
    """One BullMQ job, decoded from its hash.

    Attributes use Python names for BullMQ's fields (``attempts_made`` for
    ``attemptsMade``/``atm``...). ``opts`` keeps BullMQ's long option names.
    ``token`` is set by the worker that holds the job's lock. Two parts carry out
    the calls beyond one job's own: :attr:`control`
    (:class:`~echomq_gevent.queue.control.JobControl`: settling by hand, waiting for the
    result, handing back) and :attr:`children`
    (:class:`~echomq_gevent.queue.children.JobChildren`: a parent's children).
    """

    __slots__ = (
        "scripts", "id", "name", "data", "opts", "progress", "attempts_made", "attempts_started",
        "stalled_counter", "timestamp", "processed_on", "finished_on", "returnvalue",
        "failed_reason", "stacktrace", "delay", "priority", "parent_key", "parent",
        "repeat_job_key", "deferred_failure", "processed_by", "deduplication_id",
        "queue_name", "prefix", "queue_qualified_name", "token", "decode_error", "_cancel_reason", "_cancel_final", "_worker",
        "__weakref__",
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
        """Decode a job hash (``HGETALL`` as a dict of str). Never raises for garbage:
        ``decode_error`` names the first field that held bytes that are not UTF-8, else the
        first field that is not valid JSON, every stored option
        that ``Queue.add`` would refuse (those are left out of ``opts``, so settling the
        job uses defaults for them), a non-integer ``atm``, or a hash holding none of the
        fields a producer writes."""
        job = cls.__new__(cls)
        keys = scripts.keys
        job.scripts = scripts
        job.id = str(job_id)
        job.name = fields.get("name", "")
        job.token = None
        job.decode_error = _not_utf8(job.id, fields)
        get = fields.get

        raw = get("data")
        try:
            job.data = _loads(raw) if raw else {}
        except ValueError as exc:
            job.data = None
            job.decode_error = job.decode_error or _json_problem(job.id, "data", exc)

        raw = get("opts")
        try:
            stored = _loads(raw) if raw else {}
            if not isinstance(stored, dict):
                raise ValueError(f"expected an object, got {type(stored).__name__}")
            opts = decode_job_options(stored)
        except ValueError as exc:
            job.opts = {}
            job.decode_error = job.decode_error or _json_problem(job.id, "opts", exc)
        else:
            checked = not opts or raw in _CHECKED_OPTS
            bad = None if checked else stored_options_problems(opts)
            if bad:
                # keep the good ones, so settling the failure uses defaults for the bad
                job.opts = {k: v for k, v in opts.items() if k not in bad}
                job.decode_error = job.decode_error or (
                    f"job {job.id}: invalid stored options: " + "; ".join(bad.values()))
            else:
                job.opts = opts
                if not checked:
                    if len(_CHECKED_OPTS) >= _CHECKED_OPTS_MAX:
                        _CHECKED_OPTS.clear()
                    _CHECKED_OPTS.add(raw)

        raw = get("progress")
        try:
            job.progress = _loads(raw) if raw else 0
        except ValueError as exc:
            job.progress = 0
            job.decode_error = job.decode_error or _json_problem(job.id, "progress", exc)

        raw = get("atm")
        if raw is not None and not _INTEGER_TEXT.match(raw):
            job.decode_error = job.decode_error or f"job {job.id}: field 'atm' is not an integer ({raw!r})"
        job.attempts_made = _to_int(get("attemptsMade") or raw)
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
        if "name" not in fields and "data" not in fields and "opts" not in fields and "timestamp" not in fields:
            job.decode_error = (f"job {job.id}: no job hash was written for it (none of name, data, opts, "
                                f"timestamp); its id reached the queue without the job")
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
        """Append a line to the job's log (trimmed to ``opts.keepLogs``); returns how many lines
        are kept. A lone surrogate in the line is written as its ``\\udXXX`` escape."""
        keep = self.opts.get("keepLogs")
        return int(self.scripts.add_log(self.id, wire_text(str(line)), keep))

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
        now = now_ms()
        delay = max(0, int(timestamp_ms) - now)
        self.scripts.move_to_delayed(self.id, now, token or self.token or "0", delay, skip_attempt=True)
        self.delay = delay

    # -- admin calls (Node's job.retry(), promote(), changeDelay() ...) -------------------
    def retry(self, state: str = "failed", reset_attempts_made: bool = False,
              reset_attempts_started: bool = False) -> None:
        """Run a finished job again (Node's ``job.retry(state, opts)``).

        ``state`` is the set the job must be in: ``"failed"`` (default) or
        ``"completed"``. The job loses its result, ``finishedOn`` and ``processedOn``
        and goes back to wait (the front with ``opts.lifo``, or prioritized); a
        ``waiting`` event is written. Resetting ``attemptsMade`` gives a failed job its
        full number of attempts again. Raises JobNotExist when the job is gone,
        JobNotInState when it is not in ``state`` (the message says where it is).
        """
        if state not in ("completed", "failed"):
            raise ValueError(f"job {self.id}: retry state must be 'completed' or 'failed', got {state!r}")
        try:
            self.scripts.admin.reprocess_job(self.id, state, lifo=bool(self.opts.get("lifo")),
                                       reset_attempts_made=reset_attempts_made,
                                       reset_attempts_started=reset_attempts_started)
        except ScriptError as exc:
            raise explain(self, exc, "retry it", state) from None
        self.failed_reason = None
        self.finished_on = None
        self.processed_on = None
        self.returnvalue = None
        if reset_attempts_made:
            self.attempts_made = 0
        if reset_attempts_started:
            self.attempts_started = 0

    def promote(self) -> None:
        """Make a delayed job ready now (Node's ``job.promote()``); ``delay`` becomes 0.

        Raises JobNotInState when the job is not delayed (also when it no longer exists).
        """
        try:
            self.scripts.promote(self.id)
        except ScriptError as exc:
            raise explain(self, exc, "promote it", "delayed") from None
        self.delay = 0

    def change_delay(self, delay_ms: int) -> None:
        """Reschedule a delayed job to run ``delay_ms`` milliseconds from now (Node's
        ``job.changeDelay(delay)``: counted from now, not from the original add).

        Raises JobNotExist when the job is gone, JobNotInState when it is not delayed.
        """
        if isinstance(delay_ms, bool) or not isinstance(delay_ms, int) or delay_ms < 0:
            raise ValueError(f"job {self.id}: delay must be an integer number of milliseconds >= 0, "
                             f"got {delay_ms!r}")
        try:
            self.scripts.admin.change_delay(self.id, delay_ms, now_ms())
        except ScriptError as exc:
            raise explain(self, exc, "change its delay", "delayed") from None
        self.delay = delay_ms

    def change_priority(self, priority: int = 0, lifo: bool = False) -> None:
        """Give the job a new priority (Node's ``job.changePriority({priority, lifo})``).

        ``priority`` is validated like the job option (an integer, 0 to 2 097 151;
        0 = no priority). A job that is ready to run is re-queued at once (``lifo``: at
        the front of its band); a delayed or active job keeps its place and uses the
        new priority when it next becomes ready. Raises InvalidOptionError for a bad
        value, JobNotExist when the job is gone.
        """
        validate_job_options({"priority": priority, "lifo": lifo}, self.name or self.id)
        try:
            self.scripts.change_priority(self.id, priority, lifo)
        except ScriptError as exc:
            raise explain(self, exc, "change its priority") from None
        self.priority = priority

    # -- state ---------------------------------------------------------------------------
    def get_state(self) -> str:
        """``completed``, ``failed``, ``delayed``, ``prioritized``, ``active``, ``waiting``,
        ``waiting-children`` or ``unknown`` (``getState-8`` on Redis < 6.0.6)."""
        return job_state(self.scripts, self.id)

    def is_in_state(self, state: str) -> bool:
        """Whether the job's id is in the list or set of ``state`` (one probe, as Node's
        ``isInState``: LPOS for lists, ZSCORE for sets). ``waiting`` means the wait list
        or the legacy paused list; a prioritized job is not ``waiting``."""
        if state == "waiting":
            return self.is_in_state("wait") or self.is_in_state("paused")
        client = self.scripts.client
        if state in _LIST_STATES:
            key = self.scripts.keys.state_key(state)
            if server_has_lpos(client):
                return client.lpos(key, self.id) is not None
            return self.id in client.lrange(key, 0, -1)
        if state in _ZSET_STATES:
            return client.zscore(self.scripts.keys.state_key(state), self.id) is not None
        raise ValueError(f"job {self.id}: unknown job state {state!r}; use one of waiting, "
                         f"{', '.join(_LIST_STATES + _ZSET_STATES)}")

    def is_completed(self) -> bool:
        return self.is_in_state("completed")

    def is_failed(self) -> bool:
        return self.is_in_state("failed")

    def is_active(self) -> bool:
        return self.is_in_state("active")

    def is_waiting(self) -> bool:
        return self.is_in_state("waiting")

    def is_delayed(self) -> bool:
        return self.is_in_state("delayed")

    def is_prioritized(self) -> bool:
        return self.is_in_state("prioritized")

    def is_waiting_children(self) -> bool:
        return self.is_in_state("waiting-children")

    def remove(self, remove_children: bool = True) -> None:
        """Remove the job (and, by default, its pending children).

        Raises JobLockedError (a RuntimeError) when a worker holds its lock (it is active), and
        JobBelongsToJobScheduler for a scheduler's upcoming job.
        """
        try:
            removed = self.scripts.remove_job(self.id, remove_children)
        except ScriptError as exc:
            raise explain(self, exc, "remove it") from None
        if not removed:
            raise JobLockedError(f"job {self.id} could not be removed because it is locked by a worker; "
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

    # -- the parts ------------------------------------------------------------------------
    @property
    def control(self) -> JobControl:
        """Settling by hand, the lock, waiting for the result, handing back (:mod:`.control`)."""
        return JobControl(self)

    @property
    def children(self) -> JobChildren:
        """A parent's calls on its children (:mod:`.children`)."""
        return JobChildren(self)

    # -- the worker that settles this job, and cancellation -----------------------------------
    def attach_worker(self, worker: Any) -> None:
        """Called by ``Worker.get_next_job``: the worker whose options settle this job."""
        self._worker = worker

    @property
    def cancelled(self) -> bool:
        """True once the worker running this job cancelled it (``Worker.cancel_job``,
        ``cancel_all_jobs``, or its lock was lost). A processor offloaded to a thread polls
        it (or :meth:`check_cancelled`) and stops; a greenlet processor is interrupted
        with :class:`~echomq_gevent.errors.JobCancelled` anyway."""
        return getattr(self, "_cancel_reason", None) is not None

    @property
    def cancel_reason(self) -> Optional[str]:
        """Why the job was cancelled ("" when no reason was given), or ``None``."""
        return getattr(self, "_cancel_reason", None)

    def check_cancelled(self) -> None:
        """Raise :class:`~echomq_gevent.errors.JobCancelled` if the job was cancelled."""
        reason = getattr(self, "_cancel_reason", None)
        if reason is not None:
            raise JobCancelled(reason or None)

    @property
    def cancel_is_final(self) -> bool:
        """True when it was cancelled from anywhere (``Queue.cancel_job``): no retry."""
        return getattr(self, "_cancel_final", False)

    def mark_cancelled(self, reason: Optional[str], final: bool = False) -> None:
        """Called by the worker (any greenlet of its hub): set :attr:`cancelled`."""
        if getattr(self, "_cancel_reason", None) is None:
            self._cancel_reason = reason or ""
        self._cancel_final = final or self.cancel_is_final

    # -- control (JobControl) ---------------------------------------------------------------
    remove_deduplication_key = forward("control", JobControl.remove_deduplication_key)
    move_to_completed = forward("control", JobControl.move_to_completed)
    move_to_failed = forward("control", JobControl.move_to_failed)
    extend_lock = forward("control", JobControl.extend_lock)
    wait_until_finished = forward("control", JobControl.wait_until_finished)
    move_to_wait = forward("control", JobControl.move_to_wait)
    clear_logs = forward("control", JobControl.clear_logs)

    # -- children (JobChildren) -------------------------------------------------------------
    get_children_values = forward("children", JobChildren.get_children_values)
    get_ignored_children_failures = forward("children", JobChildren.get_ignored_children_failures)
    get_failed_children_values = forward("children", JobChildren.get_failed_children_values)
    get_dependencies = forward("children", JobChildren.get_dependencies)
    get_dependencies_count = forward("children", JobChildren.get_dependencies_count)
    move_to_waiting_children = forward("children", JobChildren.move_to_waiting_children)
    remove_child_dependency = forward("children", JobChildren.remove_child_dependency)
    remove_unprocessed_children = forward("children", JobChildren.remove_unprocessed_children)

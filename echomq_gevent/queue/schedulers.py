"""Job schedulers: BullMQ 6's job factories (``upsertJobScheduler``), on the same keys.

A scheduler ``<id>`` lives in the queue's ``repeat`` ZSET (score: millis of its upcoming
run) and the hash ``repeat:<id>`` (name, pattern or every, tz, limits, template data and
options, iteration count ``ic``). Exactly one upcoming run exists at a time, the job
``repeat:<id>:<millis>``. Whoever takes that run (a Node worker or ours) creates the run
after it, at pick-up and before processing, with ``updateJobScheduler-12``; the script
only accepts the scheduler's upcoming run as producer, so a run is never created twice.

:class:`QueueSchedulers` is the part of :class:`~echomq_gevent.queue.queue.Queue` behind its
``upsert_job_scheduler`` / ``get_job_scheduler(s)`` / ``remove_job_scheduler`` methods;
:func:`schedule_next_run` is what the worker calls for each job it takes. Next run times
of cron patterns come from :mod:`echomq_gevent.protocol.cron`.
"""
from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from typing import Any, Dict, List, Mapping, Optional, Tuple

import gevent
import redis

from ..protocol.clock import now_ms
from ..protocol.cron import next_run, validate_pattern, validate_tz
from ..errors import EchoMQError, InvalidOptionError
from .job import Job
from ..protocol.options import _suggest, decode_job_options, encode_job_data, stored_form, validate_job_options
from ..protocol.scripts import ScriptCall, Scripts

__all__ = ["REPEAT_OPTIONS", "JobScheduler", "QueueSchedulers", "validate_repeat", "validate_template",
           "validate_scheduler_id", "schedule_next_run", "next_run_call", "next_run_not_created", "legacy_key_shape",
           "ensure_job_scheduler"]

log = logging.getLogger("echomq_gevent.schedulers")

#: The RepeatOptions a scheduler takes (BullMQ's names).
REPEAT_OPTIONS = ("every", "pattern", "tz", "startDate", "endDate", "limit", "immediately", "offset", "count")
#: Template options that make no sense for a scheduler's runs (the scheduler sets them).
_TEMPLATE_REFUSED = ("jobId", "repeat", "delay", "prevMillis", "repeatJobKey", "parent", "deduplication",
                     "timestamp")
_RETRIES = 5


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _bad(field: str, message: str) -> InvalidOptionError:
    return InvalidOptionError(f"job scheduler option {field!r}: {message}")


def _to_ms(value: Any, field: str) -> int:
    """A date given as ms since the epoch, an aware datetime or an ISO 8601 string."""
    if _is_int(value) and value >= 0:
        return value
    if isinstance(value, float) and value >= 0 and value == int(value):
        return int(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise _bad(field, f"a datetime needs a time zone (e.g. tzinfo=timezone.utc), got {value!r}")
        return int(value.timestamp() * 1000)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            parsed = None
        if parsed is not None:
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=timezone.utc)
            return int(parsed.timestamp() * 1000)
    raise _bad(field, f"must be ms since the epoch, an aware datetime or an ISO 8601 string, got {value!r}")


def validate_repeat(repeat: Any, strict: bool = True) -> Dict[str, Any]:
    """Check RepeatOptions; return a copy with dates as ms and without ``None`` values.

    Raises InvalidOptionError (a CronError for a bad pattern or time zone) naming the field.
    ``strict=False`` (a run written by another producer) skips keys it does not know.
    """
    if not isinstance(repeat, Mapping):
        raise InvalidOptionError(f"job scheduler repeat options must be a mapping such as "
                                 f"{{'every': 60000}} or {{'pattern': '0 9 * * *'}}, got {repeat!r}")
    out: Dict[str, Any] = {}
    for key, value in repeat.items():
        if key not in REPEAT_OPTIONS:
            if not strict:
                continue
            raise _bad(key, f"is not a repeat option{_suggest(key, REPEAT_OPTIONS)}; use "
                            f"{', '.join(REPEAT_OPTIONS)}")
        if value is not None:
            out[key] = value
    if "every" in out and "pattern" in out:
        raise _bad("every", "'every' and 'pattern' cannot be used together (Both .pattern and .every "
                            "options are defined for this repeatable job); keep one")
    if "every" not in out and "pattern" not in out:
        raise _bad("pattern", "give 'every' (ms between runs) or 'pattern' (a cron pattern)")
    if "every" in out and (not _is_int(out["every"]) or out["every"] < 1):
        raise _bad("every", f"must be an integer number of ms >= 1, got {out['every']!r}")
    if "pattern" in out:
        validate_pattern(out["pattern"], "repeat.pattern")
    if "tz" in out:
        validate_tz(out["tz"], "repeat.tz")
    for key in ("limit", "count", "offset"):
        if key in out and (not _is_int(out[key]) or out[key] < 0):
            raise _bad(key, f"must be an integer >= 0, got {out[key]!r}")
    if "immediately" in out and not isinstance(out["immediately"], bool):
        raise _bad("immediately", f"must be true or false, got {out['immediately']!r}")
    for key in ("startDate", "endDate"):
        if key in out:
            out[key] = _to_ms(out[key], key)
    if out.get("immediately") and "startDate" in out:
        raise _bad("immediately", "'immediately' and 'startDate' cannot be used together")
    return out


def validate_scheduler_id(scheduler_id: Any) -> str:
    if not isinstance(scheduler_id, str) or not scheduler_id:
        raise InvalidOptionError(f"job scheduler id must be a non-empty string, got {scheduler_id!r}")
    return scheduler_id


def validate_template(template: Optional[Mapping[str, Any]], scheduler_id: str,
                      defaults: Optional[Mapping[str, Any]] = None) -> Tuple[str, Any, str, Dict[str, Any]]:
    """Check a scheduler's job template ``{name, data, opts}``; returns (name, data, data as
    JSON, options merged over ``defaults``, long names). Raises InvalidOptionError."""
    if template is None:
        template = {}
    if not isinstance(template, Mapping):
        raise InvalidOptionError(f"job scheduler template must be a mapping with name, data and opts, "
                                 f"got {template!r}")
    for key in template:
        if key not in ("name", "data", "opts"):
            raise InvalidOptionError(f"job scheduler template key {key!r}: the template takes name, data "
                                     f"and opts{_suggest(key, ('name', 'data', 'opts'))}")
    name = template.get("name") if template.get("name") is not None else scheduler_id
    if not isinstance(name, str):
        raise InvalidOptionError(f"job scheduler template 'name' must be a string, got {name!r}")
    data = template.get("data") if template.get("data") is not None else {}
    job_opts = template.get("opts") or {}
    if not isinstance(job_opts, Mapping):
        raise InvalidOptionError(f"job scheduler template 'opts' must be a mapping of job options, got {job_opts!r}")
    for key in _TEMPLATE_REFUSED:
        if key in job_opts:
            raise InvalidOptionError(f"job scheduler template option {key!r}: a scheduler sets it for each "
                                     f"run; leave it out")
    merged = {k: v for k, v in (defaults or {}).items() if k not in _TEMPLATE_REFUSED}
    merged.update(validate_job_options(job_opts, name))
    merged = validate_job_options(merged, name)
    data_json = encode_job_data(data, name, merged.get("sizeLimit"))
    return name, data, data_json, merged


def _next_opts(opts: Mapping[str, Any], repeat: Mapping[str, Any], scheduler_id: str,
               next_millis: Optional[int], count: int, offset: Optional[int], now: int) -> Dict[str, Any]:
    """The options of the run to create, as Node's ``getNextJobOpts`` builds them."""
    run = dict(opts)
    run["repeat"] = {k: v for k, v in repeat.items() if k != "immediately"}
    run["repeat"].update(offset=offset, count=count, startDate=repeat.get("startDate"),
                         endDate=repeat.get("endDate"))
    run["repeat"] = {k: v for k, v in run["repeat"].items() if v is not None}
    run.update(timestamp=now, repeatJobKey=scheduler_id)
    if next_millis is not None:
        run.update(jobId=f"repeat:{scheduler_id}:{next_millis}", delay=max(0, next_millis - now),
                   prevMillis=next_millis)
    else:  # an "every" run: the script computes the time, id and delay
        run.pop("prevMillis", None)
    return run


class JobScheduler:
    """One scheduler as read back (Node's JobSchedulerJson, snake_case attributes).

    ``next`` is the millis of its upcoming run; ``template`` holds ``data`` and ``opts``
    (long option names) when the scheduler has them. :meth:`as_dict` gives Node's shape.
    """

    __slots__ = ("key", "name", "next", "iteration_count", "limit", "start_date", "end_date", "tz",
                 "pattern", "every", "offset", "template")

    def __init__(self, key: str, fields: Mapping[str, str], next_millis: Optional[int]) -> None:
        def num(name: str) -> Optional[int]:
            raw = fields.get(name)
            try:
                return int(float(raw)) if raw not in (None, "") else None
            except ValueError:
                return None

        self.key = key
        self.name = fields.get("name")
        self.next = next_millis
        self.iteration_count = num("ic")
        self.limit = num("limit")
        self.start_date = num("startDate")
        self.end_date = num("endDate")
        self.tz = fields.get("tz") or None
        self.pattern = fields.get("pattern") or None
        self.every = num("every")
        self.offset = num("offset")
        self.template: Optional[Dict[str, Any]] = None
        if fields.get("data") or fields.get("opts"):
            self.template = {}
            if fields.get("data"):
                try:
                    self.template["data"] = json.loads(fields["data"])
                except ValueError:
                    self.template["data"] = None
            if fields.get("opts"):
                try:
                    stored = json.loads(fields["opts"])
                    self.template["opts"] = decode_job_options(stored) if isinstance(stored, dict) else {}
                except ValueError:
                    self.template["opts"] = {}

    def as_dict(self) -> Dict[str, Any]:
        """Node's ``getJobScheduler`` shape (fields the hash does not have are left out)."""
        out: Dict[str, Any] = {"key": self.key, "name": self.name, "next": self.next}
        for attr, name in (("iteration_count", "iterationCount"), ("limit", "limit"),
                           ("start_date", "startDate"), ("end_date", "endDate"), ("tz", "tz"),
                           ("pattern", "pattern"), ("every", "every"), ("offset", "offset"),
                           ("template", "template")):
            value = getattr(self, attr)
            if value is not None:
                out[name] = value
        return out

    def __repr__(self) -> str:
        how = f"pattern={self.pattern!r}" if self.pattern else f"every={self.every}"
        return f"JobScheduler({self.key!r}, {how}, next={self.next})"


def legacy_key_shape(key: str) -> bool:
    """A BullMQ 5 repeatable-job key (``name:id:endDate:tz:<cron or every>``)."""
    parts = key.split(":", 4)
    if len(parts) < 5 or not parts[4]:
        return False
    if parts[2] and not parts[2].isdigit():
        return False
    return " " in parts[4] or parts[4].isdigit()


def schedule_next_run(scripts: Scripts, job: Job, now: Optional[int] = None) -> Optional[str]:
    """Create the run after ``job`` if it is a scheduler's run, as Node's worker does when it
    takes a job (``nextJobFromJobData``), in a call of its own. The worker creates the next
    runs of the runs it takes together (:mod:`echomq_gevent.worker.next_runs`) and uses this
    for a run that needs a call alone: one whose scheduler id has the shape of a BullMQ 5
    repeatable job's key, or one whose creation met a connection error. Returns the id of
    the run created, or None.

    Never raises: connection errors are retried a few times, anything else (a scheduler
    written with options no BullMQ accepts) is logged, and the job is processed anyway.
    """
    scheduler_id = job.repeat_job_key
    if not scheduler_id:
        return None
    for attempt in range(_RETRIES):
        try:
            if legacy_key_shape(scheduler_id) and not scripts.client.hexists(
                    scripts.keys.scheduler(scheduler_id), "ic"):
                log.error("queue %r: job %s belongs to the BullMQ 5 repeatable job %r, which BullMQ 6 no longer "
                          "repeats; migrate it to a job scheduler (Queue.upsert_job_scheduler)",
                          scripts.keys.name, job.id, scheduler_id)
                return None
            return _update(scripts, job, scheduler_id, now)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            if attempt + 1 == _RETRIES:
                log.error("queue %r: job %s: the next run of job scheduler %r was not created (%s); the "
                          "schedule stops until it is upserted again", scripts.keys.name, job.id, scheduler_id, exc)
                return None
            gevent.sleep(min(2.0, 0.1 * 2 ** attempt))
        except (EchoMQError, ValueError, TypeError, redis.ResponseError) as exc:
            next_run_not_created(scripts, job, exc)
            return None
    return None


def next_run_not_created(scripts: Scripts, job: Job, exc: BaseException) -> None:
    """Log that the run after ``job`` was not created (a scheduler written with options no
    BullMQ accepts, a script error); the run itself is processed anyway."""
    log.error("queue %r: job %s: the next run of job scheduler %r was not created: %s", scripts.keys.name,
              job.id, job.repeat_job_key, exc)


def _update(scripts: Scripts, job: Job, scheduler_id: str, now: Optional[int]) -> Optional[str]:
    call = next_run_call(scripts, job, now)
    if call is None:
        return None
    res = scripts.call(call.name, call.keys, call.args)
    return None if res is None else str(res)


def next_run_call(scripts: Scripts, job: Job, now: Optional[int] = None) -> Optional[ScriptCall]:
    """The ``updateJobScheduler-12`` call that creates the run after ``job``, a run of the
    job scheduler ``job.repeat_job_key``; None when no run follows (its limit is reached,
    its end date passed, its cron pattern has no later time). Raises
    :class:`~echomq_gevent.errors.InvalidOptionError` (or ``ValueError``/``TypeError``) for a
    run whose options no BullMQ accepts."""
    scheduler_id = job.repeat_job_key
    if not scheduler_id:
        return None
    raw_repeat = job.opts.get("repeat")
    if not isinstance(raw_repeat, Mapping):
        raise InvalidOptionError(f"its options have no 'repeat' map (got {raw_repeat!r})")
    repeat = validate_repeat(raw_repeat, strict=False)
    count = repeat["count"] + 1 if repeat.get("count") else 1
    if "limit" in repeat and count > repeat["limit"]:
        return None
    now = now_ms() if now is None else now
    if repeat.get("endDate") is not None and now > repeat["endDate"]:
        return None
    prev = job.opts.get("prevMillis")
    if _is_int(prev) and prev > now:
        now = prev
    every = repeat.get("every")
    offset = repeat.get("offset") if every and repeat.get("offset") else None
    next_millis: Optional[int] = None
    if not every:
        next_millis = next_run(repeat["pattern"], now, repeat.get("tz"), repeat.get("startDate"),
                               repeat.get("endDate"))
        if next_millis is None:
            return None
        next_millis = max(next_millis, now)
    # keys this client does not know travel on unchanged, as Node passes them on
    passed = {k: v for k, v in raw_repeat.items() if v is not None}
    passed.update(repeat)
    run = _next_opts(job.opts, passed, scheduler_id, next_millis, count, offset, now_ms())
    return scripts.schedulers.update_job_scheduler_call(scheduler_id, next_millis, stored_form(run), now_ms(),
                                                        job.id)


class QueueSchedulers:
    """The job schedulers of one queue (Node's names in snake_case). Made by
    :class:`~echomq_gevent.queue.queue.Queue`, whose methods of the same names call these;
    ``getters`` reads a run back, ``default_job_options`` go under every template's options."""

    def __init__(self, keys: Any, client: Any, scripts: Scripts, getters: Any,
                 default_job_options: Dict[str, Any]) -> None:
        self.keys = keys
        self.client = client
        self.scripts = scripts
        self.getters = getters
        self.default_job_options = default_job_options

    def upsert_job_scheduler(self, scheduler_id: str, repeat: Mapping[str, Any],
                             template: Optional[Mapping[str, Any]] = None) -> Optional[Job]:
        """Create or update the job scheduler ``scheduler_id``; returns its upcoming run.

        ``repeat`` is BullMQ's RepeatOptions: ``every`` (ms) or ``pattern`` (cron, 5 or 6
        fields, with ``tz``), and optionally ``startDate``, ``endDate`` (ms, aware datetime or
        ISO string), ``limit`` (most runs), ``immediately`` (a cron scheduler's first run now),
        ``offset``. ``template`` is ``{"name", "data", "opts"}`` for every run (name defaults to
        the scheduler id; ``opts`` merged over the queue's default job options). Upserting an
        existing id replaces its settings and its upcoming run (if no worker took it yet).
        Returns None when ``limit`` is 0 or a cron scheduler has no run before ``endDate``.
        Raises InvalidOptionError / CronError naming the field before writing anything.
        """
        validate_scheduler_id(scheduler_id)
        opts = validate_repeat(repeat)
        name, data, data_json, merged = validate_template(template, scheduler_id, self.default_job_options)
        now = now_ms()
        if opts.get("endDate") is not None and opts["endDate"] < now:
            raise _bad("endDate", "End date must be greater than current timestamp")
        count = opts["count"] + 1 if opts.get("count") else 1
        if "limit" in opts and count > opts["limit"]:
            return None
        every = opts.get("every")
        offset = opts.get("offset") if every and opts.get("offset") else None
        next_millis: Optional[int] = None
        if not every:
            if opts.get("immediately"):
                next_millis = now_ms()
            else:
                next_millis = next_run(opts["pattern"], now, opts.get("tz"), opts.get("startDate"),
                                       opts.get("endDate"))
                if next_millis is None:
                    return None
            next_millis = max(next_millis, now)
        run = _next_opts(merged, opts, scheduler_id, next_millis, count, offset, now_ms())
        scheduler = {"name": name, "startDate": opts.get("startDate"), "endDate": opts.get("endDate"),
                     "tz": opts.get("tz"), "pattern": opts.get("pattern"), "every": every,
                     "limit": opts.get("limit"), "offset": offset}
        scheduler = {k: v for k, v in scheduler.items() if v is not None}
        job_id, delay = self.scripts.schedulers.add_job_scheduler(scheduler_id, next_millis, scheduler, data_json,
                                                       stored_form(merged), stored_form(run), now_ms())
        return self.getters.get_job(job_id) or Job(self.scripts, job_id, name, data, dict(run, delay=delay))

    def get_job_scheduler(self, scheduler_id: str) -> Optional[JobScheduler]:
        """The scheduler ``scheduler_id``, or None."""
        fields, next_millis = self.scripts.schedulers.get_job_scheduler(scheduler_id)
        if not fields:
            return None
        return JobScheduler(scheduler_id, fields, next_millis)

    def get_job_schedulers(self, start: int = 0, end: int = -1, asc: bool = False) -> List[JobScheduler]:
        """Schedulers by the time of their upcoming run (latest first unless ``asc``); ``start``
        and ``end`` are ZRANGE offsets. Ids without a scheduler hash (e.g. BullMQ 5 repeatable
        jobs) are left out."""
        key = self.keys.repeat
        pairs = (self.client.zrange(key, start, end, withscores=True) if asc
                 else self.client.zrevrange(key, start, end, withscores=True))
        if not pairs:
            return []
        pipe = self.client.pipeline(transaction=False)
        for scheduler_id, _ in pairs:
            pipe.hgetall(self.keys.scheduler(scheduler_id))
        out = []
        for (scheduler_id, score), fields in zip(pairs, pipe.execute()):
            if fields:
                out.append(JobScheduler(scheduler_id, fields, int(score)))
        return out

    def get_job_schedulers_count(self) -> int:
        """How many schedulers the queue has (the ``repeat`` ZSET's size)."""
        return int(self.client.zcard(self.keys.repeat))

    def remove_job_scheduler(self, scheduler_id: str) -> bool:
        """Delete a scheduler and its upcoming run if that is still delayed; True when it
        existed. A run already waiting or active still runs, and creates no further run."""
        return self.scripts.schedulers.remove_job_scheduler(scheduler_id)


def _unchanged(queue: Any, scheduler_id: str, repeat: Mapping[str, Any], name: str, data_json: str,
               merged: Mapping[str, Any]) -> bool:
    """Whether the stored scheduler already has these settings and its upcoming run exists."""
    fields, next_millis = queue.scripts.schedulers.get_job_scheduler(scheduler_id)
    if not fields or next_millis is None:
        return False
    if not queue.client.exists(queue.keys.job(f"repeat:{scheduler_id}:{next_millis}")):
        return False

    def num(key: str) -> Optional[int]:
        raw = fields.get(key)
        try:
            return int(float(raw)) if raw not in (None, "") else None
        except ValueError:
            return None

    if fields.get("name") != name or fields.get("pattern") != repeat.get("pattern") or \
            fields.get("tz") != repeat.get("tz"):
        return False
    for key in ("every", "limit", "startDate", "endDate"):
        if num(key) != repeat.get(key):
            return False
    if repeat.get("every") and repeat.get("offset") and num("offset") != repeat["offset"]:
        return False
    if fields.get("data", "{}") != data_json:
        return False
    try:
        stored_opts = json.loads(fields.get("opts", "{}"))
    except ValueError:
        return False
    return bool(stored_opts == stored_form(merged))


def ensure_job_scheduler(queue: Any, scheduler_id: str, repeat: Mapping[str, Any],
                         template: Optional[Mapping[str, Any]] = None) -> str:
    """Upsert a scheduler unless it is stored with exactly these settings (so a restart does
    not shift its runs). Returns ``"unchanged"``, ``"upserted"`` or ``"no run"`` (limit or end
    date leave no run). Raises like :meth:`QueueSchedulers.upsert_job_scheduler`."""
    validate_scheduler_id(scheduler_id)
    opts = validate_repeat(repeat)
    name, _data, data_json, merged = validate_template(template, scheduler_id, queue.default_job_options)
    if _unchanged(queue, scheduler_id, opts, name, data_json, merged):
        return "unchanged"
    return "upserted" if queue.upsert_job_scheduler(scheduler_id, repeat, template) is not None else "no run"

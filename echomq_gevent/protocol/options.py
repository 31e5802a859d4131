"""Job options: validation, the short-key encoding BullMQ stores, and keepJobs maps.

Producers (``Queue.add``/``add_bulk``, the CLI's ``add``) call
:func:`validate_job_options` and :func:`encode_job_options` before anything is
written; :class:`~echomq_gevent.queue.job.Job` calls :func:`decode_job_options` on the
``opts`` JSON of a job hash; the worker calls :func:`keep_jobs` to build the
``keepJobs`` map of ``moveToFinished``. Everything here is pure Python (no Redis),
safe from any greenlet or thread.

Option names are BullMQ's (``removeOnComplete``, not ``remove_on_complete``), so an
options dict written for Node works unchanged. The stored form follows docs/protocol.md, "The job hash":
six long names are shortened (``keepLogs`` -> ``kl`` ...), ``telemetry`` is split
into ``tm``/``omc``, a numeric ``backoff`` becomes ``{"type": "fixed", "delay": N}``,
``attempts`` defaults to 0 and ``repeatJobKey`` leaves the options (it is stored in
the hash field ``rjk``).
"""
from __future__ import annotations

import json
import math
import re
from typing import Any, Callable, Dict, Mapping, Optional

from ..errors import InvalidJobDataError, InvalidJobIdError, InvalidOptionError, close_matches

__all__ = [
    "PRIORITY_LIMIT", "SHORT_KEYS", "stored_form", "LONG_KEYS", "JOB_OPTION_NAMES",
    "validate_job_options", "encode_job_options", "decode_job_options", "keep_jobs",
    "validate_job_id", "encode_job_data", "compact_json", "stored_options_problems", "wire_text",
]

#: Highest priority BullMQ accepts (2^21 - 1).
PRIORITY_LIMIT = 2 ** 21 - 1

#: Long option name -> key stored in the ``opts`` JSON (docs/protocol.md, "The job hash").
SHORT_KEYS: Dict[str, str] = {
    "deduplication": "de",
    "failParentOnFailure": "fpof",
    "continueParentOnFailure": "cpof",
    "ignoreDependencyOnFailure": "idof",
    "keepLogs": "kl",
    "removeDependencyOnFailure": "rdof",
}
#: Stored key -> long option name.
LONG_KEYS: Dict[str, str] = {v: k for k, v in SHORT_KEYS.items()}

_PARENT_FLAGS = ("failParentOnFailure", "continueParentOnFailure",
                 "ignoreDependencyOnFailure", "removeDependencyOnFailure")

_INTEGER_ID = re.compile(r"^[+-]?\d+$")


def _fail(option: str, message: str, job_name: Optional[str]) -> InvalidOptionError:
    where = f" (job {job_name!r})" if job_name is not None else ""
    return InvalidOptionError(f"job option {option!r}{where}: {message}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def _int_in(low: int, high: Optional[int] = None) -> Callable[[str, Any, Optional[str]], None]:
    def check(name: str, v: Any, job_name: Optional[str]) -> None:
        if not _is_int(v):
            raise _fail(name, f"must be an integer, got {v!r}", job_name)
        if v < low or (high is not None and v > high):
            bound = f"between {low} and {high}" if high is not None else f">= {low}"
            raise _fail(name, f"must be {bound}, got {v}", job_name)
    return check


def _bool(name: str, v: Any, job_name: Optional[str]) -> None:
    if not isinstance(v, bool):
        raise _fail(name, f"must be true or false, got {v!r}", job_name)


def _check_keys(name: str, value: Mapping, allowed: tuple, job_name: Optional[str]) -> None:
    for key in value:
        if key not in allowed:
            raise _fail(name, f"unknown key {key!r}{_suggest(key, allowed)}; it takes {', '.join(allowed)}",
                        job_name)


def _suggest(word: Any, choices: Any) -> str:
    if not isinstance(word, str):
        return ""
    near = close_matches(word, choices)
    if not near:
        lowered = {c.lower(): c for c in choices}
        if word.lower() in lowered:
            near = [lowered[word.lower()]]
        else:
            camel = word.replace("_", "").lower()
            near = [c for c in choices if c.lower() == camel]
    return f" (did you mean {near[0]!r}?)" if near else ""


def _backoff(name: str, v: Any, job_name: Optional[str]) -> None:
    if _is_number(v):
        if v < 0:
            raise _fail(name, f"a backoff delay must be >= 0 ms, got {v}", job_name)
        return
    if not isinstance(v, Mapping):
        raise _fail(name, f"must be a delay in ms or {{type, delay, jitter}}, got {v!r}", job_name)
    _check_keys(name, v, ("type", "delay", "jitter"), job_name)
    if not isinstance(v.get("type"), str) or not v.get("type"):
        raise _fail(name, f"needs a 'type' string ('fixed', 'exponential' or a custom strategy), got {v.get('type')!r}",
                    job_name)
    if "delay" in v and (not _is_number(v["delay"]) or v["delay"] < 0):
        raise _fail(name, f"'delay' must be a number of ms >= 0, got {v['delay']!r}", job_name)
    if "jitter" in v and (not _is_number(v["jitter"]) or not 0 <= v["jitter"] <= 1):
        raise _fail(name, f"'jitter' must be a number between 0 and 1, got {v['jitter']!r}", job_name)


def _keep(name: str, v: Any, job_name: Optional[str]) -> None:
    if isinstance(v, bool):
        return
    if _is_int(v):
        if v < 0:
            raise _fail(name, f"a count of jobs to keep must be >= 0, got {v}", job_name)
        return
    if not isinstance(v, Mapping):
        raise _fail(name, f"must be true, false, a count, or {{age, count, limit}}, got {v!r}", job_name)
    _check_keys(name, v, ("age", "count", "limit"), job_name)
    if "age" not in v and "count" not in v:
        raise _fail(name, "needs 'age' (seconds) or 'count'", job_name)
    if "age" in v and (not _is_number(v["age"]) or v["age"] < 0):
        raise _fail(name, f"'age' must be a number of seconds >= 0, got {v['age']!r}", job_name)
    for key in ("count", "limit"):
        if key in v and (not _is_int(v[key]) or v[key] < 0):
            raise _fail(name, f"{key!r} must be an integer >= 0, got {v[key]!r}", job_name)


def _parent(name: str, v: Any, job_name: Optional[str]) -> None:
    if not isinstance(v, Mapping):
        raise _fail(name, f"must be {{id, queue}} (queue as '<prefix>:<name>'), got {v!r}", job_name)
    _check_keys(name, v, ("id", "queue"), job_name)
    if not isinstance(v.get("id"), str) or not v.get("id"):
        raise _fail(name, f"'id' must be the parent job's id as a non-empty string, got {v.get('id')!r}", job_name)
    queue = v.get("queue")
    if not isinstance(queue, str) or ":" not in queue or queue.startswith(":") or queue.endswith(":"):
        raise _fail(name, f"'queue' must be the parent's qualified queue name '<prefix>:<name>' "
                          f"(e.g. 'bull:parents'), got {queue!r}", job_name)


def _dedup(name: str, v: Any, job_name: Optional[str]) -> None:
    if not isinstance(v, Mapping):
        raise _fail(name, f"must be {{id, ttl?, extend?, replace?, reschedule?, keepLastIfActive?}}, got {v!r}",
                    job_name)
    _check_keys(name, v, ("id", "ttl", "extend", "replace", "reschedule", "keepLastIfActive"), job_name)
    if not isinstance(v.get("id"), str) or not v.get("id"):
        raise _fail(name, f"'id' must be a non-empty string (deduplication id must be provided), got {v.get('id')!r}",
                    job_name)
    if "ttl" in v and (not _is_int(v["ttl"]) or v["ttl"] < 1):
        raise _fail(name, f"'ttl' must be an integer number of ms >= 1, got {v['ttl']!r}", job_name)
    for key in ("extend", "replace", "reschedule", "keepLastIfActive"):
        if key in v and not isinstance(v[key], bool):
            raise _fail(name, f"{key!r} must be true or false, got {v[key]!r}", job_name)


def _telemetry(name: str, v: Any, job_name: Optional[str]) -> None:
    if not isinstance(v, Mapping):
        raise _fail(name, f"must be {{metadata, omitContext}}, got {v!r}", job_name)
    _check_keys(name, v, ("metadata", "omitContext"), job_name)
    if "metadata" in v and v["metadata"] is not None and not isinstance(v["metadata"], str):
        raise _fail(name, f"'metadata' must be a string, got {v['metadata']!r}", job_name)
    if "omitContext" in v and v["omitContext"] is not None and not isinstance(v["omitContext"], bool):
        raise _fail(name, f"'omitContext' must be true or false, got {v['omitContext']!r}", job_name)


def _job_id(name: str, v: Any, job_name: Optional[str]) -> None:
    validate_job_id(v)


def _non_empty_str(name: str, v: Any, job_name: Optional[str]) -> None:
    if not isinstance(v, str) or not v:
        raise _fail(name, f"must be a non-empty string, got {v!r}", job_name)


def _json_mapping(name: str, v: Any, job_name: Optional[str]) -> None:
    if not isinstance(v, Mapping):
        raise _fail(name, f"must be a mapping, got {v!r}", job_name)


_CHECKS: Dict[str, Callable[[str, Any, Optional[str]], None]] = {
    "timestamp": _int_in(0),
    "priority": _int_in(0, PRIORITY_LIMIT),
    "delay": _int_in(0),
    "attempts": _int_in(0),
    "backoff": _backoff,
    "lifo": _bool,
    "removeOnComplete": _keep,
    "removeOnFail": _keep,
    "keepLogs": _int_in(1),
    "stackTraceLimit": _int_in(0),
    "sizeLimit": _int_in(1),
    "jobId": _job_id,
    "parent": _parent,
    "failParentOnFailure": _bool,
    "continueParentOnFailure": _bool,
    "ignoreDependencyOnFailure": _bool,
    "removeDependencyOnFailure": _bool,
    "deduplication": _dedup,
    "telemetry": _telemetry,
    # Passed through for job schedulers (not acted on by this client yet).
    "repeat": _json_mapping,
    "prevMillis": _int_in(0),
    "repeatJobKey": _non_empty_str,
}

#: Every option name ``Queue.add`` accepts.
JOB_OPTION_NAMES = tuple(_CHECKS)


def validate_job_id(job_id: Any) -> str:
    """Check a custom job id against BullMQ's rules (docs/protocol.md, "Keys and conventions"); return it.

    Raises :class:`InvalidJobIdError` naming the id and the rule it breaks.
    """
    if not isinstance(job_id, str):
        raise InvalidJobIdError(
            f"custom job id {job_id!r} must be a string (integer ids are reserved for the "
            f"queue's own counter); pass e.g. 'order-{job_id}'")
    if not job_id:
        raise InvalidJobIdError("custom job id must not be empty; leave jobId out for an automatic id")
    if job_id == "0" or job_id.startswith("0:"):
        raise InvalidJobIdError(f"custom job id {job_id!r} cannot be '0' or start with '0:' "
                                f"(BullMQ reserves those for queue markers)")
    if _INTEGER_ID.match(job_id):
        raise InvalidJobIdError(f"custom job id {job_id!r} cannot be an integer string: it could "
                                f"collide with the queue's automatic ids; add a prefix such as 'job-{job_id}'")
    if ":" in job_id:
        raise InvalidJobIdError(f"custom job id {job_id!r} cannot contain ':' (it separates key parts)")
    return job_id


def validate_job_options(opts: Optional[Mapping[str, Any]], job_name: Optional[str] = None) -> Dict[str, Any]:
    """Check a job's options (BullMQ's long names); return a plain copy without ``None`` values.

    Called by the producer before it writes anything. Raises
    :class:`InvalidOptionError` (or :class:`InvalidJobIdError`) naming the option, the
    job name and what is wrong; unknown names get the nearest valid name suggested.
    """
    if opts is None:
        return {}
    if not isinstance(opts, Mapping):
        raise InvalidOptionError(
            f"job options{' of job ' + repr(job_name) if job_name is not None else ''} must be a "
            f"mapping of BullMQ option names, got {type(opts).__name__}")
    clean: Dict[str, Any] = {}
    for name, value in opts.items():
        if name == "debounce":
            raise _fail(name, "was removed in BullMQ v6; use 'deduplication' instead", job_name)
        check = _CHECKS.get(name)
        if check is None:
            raise _fail(name, f"is not a BullMQ job option{_suggest(name, _CHECKS)}", job_name)
        if value is None:
            continue
        check(name, value, job_name)
        clean[name] = value
    flags = [f for f in _PARENT_FLAGS if clean.get(f)]
    if len(flags) > 1:
        raise _fail(flags[1], f"cannot be used together with {', '.join(flags[:1])} "
                              f"(the following options cannot be used together: {', '.join(flags)})", job_name)
    if "deduplication" in clean and "parent" in clean:
        raise _fail("deduplication", "cannot be used together with 'parent'", job_name)
    return clean


#: Stored options the load check leaves alone: the id already is the job's key (Node's
#: repeatable jobs carry ids with ':' that ``Queue.add`` would refuse).
_NOT_CHECKED_ON_LOAD = ("jobId",)


def stored_options_problems(opts: Mapping[str, Any]) -> Dict[str, str]:
    """Check options decoded from a job hash with the rules of :func:`validate_job_options`.

    Called once per job when it is loaded (:meth:`Job.from_fields`), on the worker's
    greenlet. Returns ``{option: what is wrong}`` for each bad option (empty when all are
    good). Names this client does not know (a newer BullMQ's) pass unchecked, as do
    ``None`` values (Node's JSON never stores ``undefined``).
    """
    problems: Dict[str, str] = {}
    for name, value in opts.items():
        if value is None or name in _NOT_CHECKED_ON_LOAD:
            continue
        check = _CHECKS.get(name)
        if check is None:
            continue
        try:
            check(name, value, None)
        except (InvalidOptionError, InvalidJobIdError) as exc:
            problems[name] = str(exc)
    flags = [f for f in _PARENT_FLAGS if opts.get(f) is True]
    if len(flags) > 1:
        problems[flags[1]] = f"job option {flags[1]!r}: cannot be used together with {flags[0]!r}"
    return problems


def stored_form(opts: Mapping[str, Any]) -> Dict[str, Any]:
    """Options under the names stored in Redis (Node's ``optsAsJSON``): short keys,
    ``telemetry`` split into ``tm``/``omc``, ``None`` values dropped, no defaults added."""
    out: Dict[str, Any] = {}
    for name, value in opts.items():
        if value is None:
            continue
        if name == "telemetry" and isinstance(value, Mapping):
            if value.get("metadata") is not None:
                out["tm"] = value["metadata"]
            if value.get("omitContext") is not None:
                out["omc"] = value["omitContext"]
            continue
        out[SHORT_KEYS.get(name, name)] = value
    return out


def encode_job_options(opts: Mapping[str, Any]) -> Dict[str, Any]:
    """The stored (short-key) form of validated options, as Node's client packs them.

    As :func:`stored_form`, and besides: ``attempts`` defaults to 0, a numeric ``backoff``
    becomes a fixed backoff, ``repeatJobKey`` is dropped (it goes into the ``rjk`` field).
    """
    out: Dict[str, Any] = {"attempts": 0}
    rest = {name: value for name, value in opts.items() if name != "repeatJobKey"}
    if _is_number(rest.get("backoff")):
        rest["backoff"] = {"type": "fixed", "delay": rest["backoff"]}
    out.update(stored_form(rest))
    return out


def decode_job_options(stored: Mapping[str, Any]) -> Dict[str, Any]:
    """Long-name options from the ``opts`` JSON of a job hash (Node's ``optsFromJSON``)."""
    out: Dict[str, Any] = {}
    for key, value in stored.items():
        if key in LONG_KEYS:
            out[LONG_KEYS[key]] = value
        elif key == "tm":
            out.setdefault("telemetry", {})["metadata"] = value
        elif key == "omc":
            out.setdefault("telemetry", {})["omitContext"] = value
        else:
            out[key] = value
    return out


def keep_jobs(value: Any) -> Dict[str, Any]:
    """The ``keepJobs`` map of moveToFinished for a removeOnComplete/removeOnFail value.

    ``True`` -> ``{"count": 0}`` (remove at once), ``False``/``None`` -> ``{"count": -1}``
    (keep all), ``n`` -> ``{"count": n}`` (keep the newest n), a mapping as is.
    """
    if value is None or value is False:
        return {"count": -1}
    if value is True:
        return {"count": 0}
    if _is_int(value):
        return {"count": value}
    if isinstance(value, Mapping):
        return dict(value)
    raise InvalidOptionError(
        f"removeOnComplete/removeOnFail must be true, false, a count or {{age, count, limit}}, got {value!r}")


#: Compact JSON as Node's ``JSON.stringify`` writes it, NaN and Infinity refused: one encoder
#: for every call (``json.dumps`` with these arguments builds a new one each time).
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


#: A UTF-16 surrogate code point: a Python str may hold one alone (bytes decoded with
#: ``surrogateescape``, a JSON ``"\\ud800"`` read back), UTF-8 cannot encode it.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escaped(match: "re.Match[str]") -> str:
    return "\\u%04x" % ord(match.group())


def wire_text(text: str) -> str:
    """``text`` as it can be written to Redis: a lone surrogate, which UTF-8 cannot encode
    (a str holding one makes the command that carries it unwritable), becomes the escape
    ``\\udXXX`` that Node's ``JSON.stringify`` writes for one. Any other text is returned
    as it is (the check is free for ASCII text)."""
    if text.isascii():
        return text
    return _SURROGATE.sub(_escaped, text)


def compact_json(value: Any) -> str:
    """``value`` as compact JSON text (``json.dumps(value, separators=(",", ":"),
    ensure_ascii=False, allow_nan=False)``); raises what that raises. A lone surrogate in
    a string is written as its ``\\udXXX`` escape, as Node's ``JSON.stringify`` writes it:
    the text is valid UTF-8 and reads back as the same string."""
    if value is None:  # what most processors return
        return "null"
    return wire_text(_COMPACT.encode(value))


def encode_job_data(data: Any, job_name: str, size_limit: Optional[int] = None, what: str = "data") -> str:
    """JSON text of job data (or of a progress value: ``what``) exactly as Node's
    ``JSON.stringify`` writes it (compact).

    Raises :class:`InvalidJobDataError` naming the job when the data is not
    JSON-serialisable (NaN and Infinity included: Node's ``JSON.parse`` rejects them),
    or when it is longer than ``size_limit`` UTF-8 bytes.
    """
    try:
        text = compact_json(data)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidJobDataError(
            f"{what} of job {job_name!r} cannot be stored as JSON ({exc}); pass dicts, lists, str, "
            f"int, float (finite), bool or None") from None
    if size_limit and len(text.encode("utf-8")) > size_limit:
        raise InvalidJobDataError(
            f"the size of job {job_name!r} exceeds the limit {size_limit} bytes "
            f"({len(text.encode('utf-8'))} bytes of JSON data); raise sizeLimit or send less data")
    return text

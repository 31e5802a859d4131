"""The one table of worker options.

It feeds three things that must never drift apart: the checks of ``Worker(...)``'s
keyword arguments, the validation of a queue's options in the YAML file, and the
configuration reference (``docs/configuration.md`` is checked against it by a test).

Each :class:`Option` has a name, the accepted types, a default, a validator and a
one-line doc. :func:`validate_worker_options` returns the full, checked option dict
or raises :class:`~echomq_gevent.errors.ConfigError` naming the option.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from ..errors import ConfigError

__all__ = ["Option", "OptionError", "WORKER_OPTIONS", "validate_worker_options", "check_worker_option",
           "check_combinations", "option_defaults", "check_keep_jobs"]


def _positive_int(name: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(f"{name} must be an integer >= 1, got {v!r}")


def _non_negative_int(name: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ConfigError(f"{name} must be an integer >= 0, got {v!r}")


def _non_negative_number(name: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise ConfigError(f"{name} must be a number >= 0, got {v!r}")


def _optional(check: Callable[[str, Any], None]) -> Callable[[str, Any], None]:
    def inner(name: str, v: Any) -> None:
        if v is not None:
            check(name, v)
    return inner


def _limiter(name: str, v: Any) -> None:
    if v is None:
        return
    if not isinstance(v, Mapping):
        raise ConfigError(f"{name} must be a mapping {{max, duration}}, got {v!r}")
    unknown = set(v) - {"max", "duration"}
    if unknown:
        raise ConfigError(f"{name} has unknown key(s) {sorted(unknown)}; it takes max and duration")
    for k in ("max", "duration"):
        if k not in v:
            raise ConfigError(f"{name}.{k} is missing (limiter needs max jobs per duration ms)")
        _positive_int(f"{name}.{k}", v[k])


def check_keep_jobs(name: str, v: Any) -> None:
    """``removeOnComplete``/``removeOnFail``: bool, count >= 0, or {age, count, limit}."""
    if v is None or isinstance(v, bool):
        return
    if isinstance(v, int):
        if v < 0:
            raise ConfigError(f"{name} must be true, false, a count >= 0 or {{age, count}}, got {v!r}")
        return
    if isinstance(v, Mapping):
        unknown = set(v) - {"age", "count", "limit"}
        if unknown:
            raise ConfigError(f"{name} has unknown key(s) {sorted(unknown)}; it takes age (s), count and limit")
        if not v:
            raise ConfigError(f"{name} needs at least one of age (seconds) or count")
        for k, val in v.items():
            if isinstance(val, bool) or not isinstance(val, int) or val < (-1 if k == "count" else 0):
                raise ConfigError(f"{name}.{k} must be an integer >= 0, got {val!r}")
        return
    raise ConfigError(f"{name} must be true, false, a count or {{age, count}}, got {v!r}")


def _metrics(name: str, v: Any) -> None:
    if v is None:
        return
    if not isinstance(v, Mapping):
        raise ConfigError(f"{name} must be a mapping {{maxDataPoints: N}}, got {v!r}")
    unknown = set(v) - {"maxDataPoints"}
    if unknown:
        raise ConfigError(f"{name} has unknown key(s) {sorted(unknown)}; it takes maxDataPoints "
                          f"(minutes of per-minute counts to keep)")
    if "maxDataPoints" not in v:
        raise ConfigError(f"{name}.maxDataPoints is missing (how many minutes of counts to keep)")
    _positive_int(f"{name}.maxDataPoints", v["maxDataPoints"])


def _offload(name: str, v: Any) -> None:
    if v not in (None, "thread", "process"):
        raise ConfigError(f"{name} must be 'thread', 'process' or left out, got {v!r}")


def _name(name: str, v: Any) -> None:
    if v is not None and (not isinstance(v, str) or not v):
        raise ConfigError(f"{name} must be a non-empty string, got {v!r}")


@dataclass(frozen=True)
class Option:
    name: str
    types: Tuple[type, ...]
    default: Any
    doc: str
    check: Callable[[str, Any], None]
    unit: str = ""


WORKER_OPTIONS: Dict[str, Option] = {o.name: o for o in (
    Option("concurrency", (int,), 1, "How many jobs run at once (greenlets in the pool).",
           _positive_int),
    Option("lock_duration", (int,), 30000, "How long a job's lock lasts without renewal.",
           _positive_int, "ms"),
    Option("lock_renew_time", (int, type(None)), None,
           "How often locks are renewed; default lock_duration / 2. Must be below lock_duration.",
           _optional(_positive_int), "ms"),
    Option("stalled_interval", (int,), 30000, "How often this worker checks for stalled jobs.",
           _positive_int, "ms"),
    Option("max_stalled_count", (int,), 1,
           "How many times a job may stall before it is failed ('job stalled more than allowable limit').",
           _non_negative_int),
    Option("skip_stalled_check", (bool,), False, "Do not run stalled checks from this worker.",
           lambda n, v: None),
    Option("drain_delay", (int, float), 5, "How long an idle worker blocks on the marker before it asks again.",
           _non_negative_number, "s"),
    Option("limiter", (dict, type(None)), None,
           "Rate limit shared by every worker of the queue: at most max jobs per duration ms.",
           _limiter),
    Option("remove_on_complete", (bool, int, dict, type(None)), None,
           "Keep-jobs policy for completed jobs when the job has none: true, false, a count or {age, count}.",
           check_keep_jobs),
    Option("remove_on_fail", (bool, int, dict, type(None)), None,
           "Keep-jobs policy for failed jobs when the job has none.", check_keep_jobs),
    Option("name", (str, type(None)), None, "Worker name, stored as processedBy (pb) on the jobs it takes.",
           _name),
    Option("offload", (str, type(None)), None,
           "'thread' runs the processor in gevent's native thread pool (for blocking code); 'process' in a "
           "pool of child processes (CPU-bound code on every core; job_timeout and cancel_job kill it).",
           _offload),
    Option("offload_processes", (int, type(None)), None,
           "With offload: process, how many child processes run processors; default the concurrency, "
           "at most the concurrency.", _optional(_positive_int)),
    Option("job_timeout", (int, type(None)), None,
           "Fail a job whose processor runs longer than this (retries apply).", _optional(_positive_int), "ms"),
    Option("max_started_attempts", (int, type(None)), None,
           "Fail a job taken more than this many times ('job started more than allowable limit').",
           _optional(_positive_int)),
    Option("hub_block_threshold", (int, float, type(None)), 1.0,
           "Warn (naming the job) when a greenlet blocks the hub longer than this; null turns it off.",
           _optional(_non_negative_number), "s"),
    Option("shutdown_timeout", (int, float), 30,
           "On close/SIGTERM, how long in-flight jobs may run before they are handed back to wait.",
           _non_negative_number, "s"),
    Option("max_rate_limit_delay", (int,), 30000,
           "Longest sleep when rate limited before asking again.", _positive_int, "ms"),
    Option("metrics", (dict, type(None)), None,
           "Record BullMQ's per-minute counts of completed and failed jobs: {maxDataPoints: N} minutes kept.",
           _metrics),
)}


def option_defaults() -> Dict[str, Any]:
    return {name: opt.default for name, opt in WORKER_OPTIONS.items()}


class OptionError(ConfigError):
    """A worker option is wrong; ``option`` names the key the message is about (the YAML
    loader points at that key's line)."""

    def __init__(self, message: str, option: Optional[str] = None) -> None:
        super().__init__(message)
        self.option = option


def check_worker_option(key: str, value: Any) -> None:
    """Check one option on its own (type and range); raise :class:`OptionError` naming it.

    Used by :func:`validate_worker_options` and, key by key, by the YAML loader.
    """
    opt = WORKER_OPTIONS.get(key)
    if opt is None:
        import difflib

        near = difflib.get_close_matches(key, list(WORKER_OPTIONS), n=1)
        hint = f"; did you mean {near[0]!r}?" if near else f"; valid options: {', '.join(WORKER_OPTIONS)}"
        raise OptionError(f"unknown option {key!r}{hint}", key)
    if value is not None and (not isinstance(value, opt.types) or (isinstance(value, bool)
                                                                   and bool not in opt.types)):
        raise OptionError(f"{key} must be {_type_names(opt.types)}, got {value!r}", key)
    try:
        opt.check(key, value)
    except ConfigError as exc:
        raise OptionError(str(exc), key) from None


#: Shortest lock a worker accepts: no renewal can arrive in time below it.
MIN_LOCK_DURATION_MS = 100
#: Most native threads ``offload: thread`` may start (one per job in flight).
MAX_OFFLOAD_THREADS = 1000
#: Most child processes ``offload: process`` may start.
MAX_OFFLOAD_PROCESSES = 256


def check_combinations(out: Mapping[str, Any]) -> None:
    """Refuse combinations of (complete) options that cannot work; the error's ``option``
    is the key to change."""
    lock = out["lock_duration"]
    renew = out["lock_renew_time"]
    if renew is not None and renew >= lock:
        raise OptionError(f"lock_renew_time ({renew} ms) must be below lock_duration ({lock} ms), "
                          f"or locks expire before they are renewed", "lock_renew_time")
    if lock < MIN_LOCK_DURATION_MS:
        raise OptionError(f"lock_duration {lock} ms is too short for any renewal to arrive in time; "
                          f"use at least {MIN_LOCK_DURATION_MS} ms (1000 ms or more in practice)", "lock_duration")
    if out["drain_delay"] == 0:
        raise OptionError("drain_delay 0 would block on the marker forever (BZPOPMIN timeout 0) and the "
                          "worker could not notice a close; use a value > 0, e.g. 5", "drain_delay")
    if out["offload"] == "thread" and out["concurrency"] > MAX_OFFLOAD_THREADS:
        raise OptionError(f"offload: thread runs each job in a native thread; concurrency "
                          f"{out['concurrency']} threads is more than {MAX_OFFLOAD_THREADS}; lower it or "
                          f"drop offload", "concurrency")
    processes = out["offload_processes"]
    if processes is not None:
        if out["offload"] != "process":
            raise OptionError(f"offload_processes ({processes}) is for offload: process; set offload: process "
                              f"or remove it", "offload_processes")
        if processes > out["concurrency"]:
            raise OptionError(f"offload_processes ({processes}) is more than concurrency "
                              f"({out['concurrency']}): at most concurrency jobs run at once, the other "
                              f"processes would never be used; lower it or raise concurrency",
                              "offload_processes")
    if out["offload"] == "process" and (processes or out["concurrency"]) > MAX_OFFLOAD_PROCESSES:
        raise OptionError(f"offload: process starts one child process per slot; {processes or out['concurrency']} "
                          f"is more than {MAX_OFFLOAD_PROCESSES}; set offload_processes lower",
                          "offload_processes")


def validate_worker_options(options: Mapping[str, Any], where: str = "worker option") -> Dict[str, Any]:
    """Check ``options`` against the table; return every option with defaults filled in.

    The one validator of worker options: ``Worker(...)`` calls it with its keyword
    arguments and the YAML loader with each queue's merged options, so both accept and
    refuse the same values. ``where`` prefixes messages (``"queue 'mail'"``). Unknown
    names are refused with the nearest valid name suggested; combinations that cannot
    work are refused too (:func:`check_combinations`). Raises :class:`OptionError`.
    """
    out = option_defaults()
    for key, value in options.items():
        try:
            check_worker_option(key, value)
        except OptionError as exc:
            raise OptionError(f"{where}: {exc}", exc.option) from None
        out[key] = value
    try:
        check_combinations(out)
    except OptionError as exc:
        raise OptionError(f"{where}: {exc}", exc.option) from None
    return out


def _type_names(types: Tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", bool: "true/false", str: "a string",
             dict: "a mapping", type(None): "null"}
    return " or ".join(names.get(t, t.__name__) for t in types)


def lock_renew_interval(options: Mapping[str, Any]) -> Optional[float]:
    """Seconds between renewal ticks: lock_renew_time (default lock_duration/2), halved like BullMQ's timer."""
    renew = options.get("lock_renew_time") or options["lock_duration"] / 2
    return renew / 2 / 1000.0

"""Next run times of cron patterns, as a BullMQ 6.7.0 scheduler computes them.

A job scheduler with a ``pattern`` creates each run at the next time the pattern
matches after the previous run. Node's BullMQ computes that time with its pinned
``cron-parser`` (5.x); whichever runtime serves a schedule must compute the same
instant, or a mixed fleet would create two runs (or none) for one slot. The pattern
itself is matched by the `croniter` library; this module adds what cron-parser does
differently around it:

- **Fields.** 5 fields (minute first) or 6 (second first), names (``JAN``, ``MON``),
  ranges, steps, lists, ``?``, ``L`` (last day of the month), ``<day>L`` (last such
  weekday of the month), ``<day>#<n>`` (n-th such weekday) and the ``@daily``-style
  aliases cron-parser knows. cron-parser's ``H`` (a random value per parse) and patterns
  of fewer than 5 fields are refused here (see ``docs/schedulers.md``).
- **Time zones.** A pattern is matched on the wall clock of ``tz`` (an IANA name), or of
  the machine's local zone when there is none (as Node does: set ``tz``).
- **DST.** A wall time that a spring-forward skips runs at the same minute after the
  jump (02:30 becomes 03:30). A wall time that a fall-back repeats runs once, in its first
  occurrence (unless the schedule is already inside the repeated hour), except when the
  hour field is ``*``: then both occurrences run, as cron-parser does.
- **Whole seconds.** The next run is the first matching whole second strictly after the
  given instant.

Pure functions, no I/O; called by the scheduler code on any greenlet. A worker calls
:func:`next_run` for each cron run it takes, often for many runs of one pattern due in the
same second, so two bounded caches keep that cheap: the parsed pattern (a croniter built
once per pattern, copied per search) and the answer per (pattern, zone, whole second of the
search start), which is all the answer depends on besides ``end_date`` (checked after).
"""
from __future__ import annotations

import os
import re
import threading
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, Optional, Tuple

from ..errors import EchoMQError


def _croniter() -> Tuple[Any, Any]:
    """``(croniter, CroniterError)``, imported on first use: only a process that handles a
    cron schedule pays for croniter and dateutil (about 2 MB of a worker's memory)."""
    from croniter import croniter
    from croniter.croniter import CroniterError

    return croniter, CroniterError

__all__ = ["CronError", "ALIASES", "validate_pattern", "validate_tz", "next_run", "local_zone", "preload"]


def preload() -> None:
    """Import croniter now: a worker whose queue has job schedulers calls this at its start,
    so its first cron run does not wait for the import."""
    _croniter()


#: cron-parser's predefined expressions (6 fields, seconds first).
ALIASES: Dict[str, str] = {
    "@yearly": "0 0 0 1 1 *",
    "@annually": "0 0 0 1 1 *",
    "@monthly": "0 0 0 1 * *",
    "@weekly": "0 0 0 * * 0",
    "@daily": "0 0 0 * * *",
    "@hourly": "0 0 * * * *",
    "@minutely": "0 * * * * *",
    "@secondly": "* * * * * *",
    "@weekdays": "0 0 0 * * 1-5",
    "@weekends": "0 0 0 * * 0,6",
}

#: cron-parser refuses longer expressions.
MAX_PATTERN_LENGTH = 1024
#: How many candidates a search may reject (DST folds) before giving up.
_MAX_CANDIDATES = 1000
_LAST_WEEKDAY = re.compile(r"^([A-Za-z0-9]+)L$")
_HASHED = re.compile(r"^H($|[(/])", re.I)
_DAY_NUMBERS = {"sun": "0", "mon": "1", "tue": "2", "wed": "3", "thu": "4", "fri": "5", "sat": "6"}
_MONTH_NUMBERS = {name: str(i + 1) for i, name in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"))}
_FIELD_NAMES = ("second", "minute", "hour", "day of month", "month", "day of week")


class CronError(EchoMQError, ValueError):
    """A cron pattern or time zone that cannot be used; the message names it."""


_zone_cache: Dict[str, Any] = {}
_zone_lock = threading.Lock()


def _zone(name: str) -> Any:
    """The ``ZoneInfo`` of an IANA name; raises ``zoneinfo.ZoneInfoNotFoundError`` (a
    ``KeyError``), ``ValueError`` or ``OSError``. ``zoneinfo`` (and the ``sysconfig`` it
    reads the zone path from, about 0.8 MB) is imported on first use."""
    zone = _zone_cache.get(name)
    if zone is None:
        from zoneinfo import ZoneInfo

        zone = ZoneInfo(name)
        with _zone_lock:
            _zone_cache[name] = zone
    return zone


def local_zone() -> Any:
    """The machine's local time zone (``TZ``, else ``/etc/localtime``, else UTC), read anew
    on each call so a changed ``TZ`` is seen, as Node reads it."""
    name = os.environ.get("TZ", "").lstrip(":")
    if name:
        try:
            return _zone(name)
        except (KeyError, ValueError, OSError):  # KeyError: ZoneInfoNotFoundError
            return timezone.utc
    cached = _zone_cache.get("\0localtime")
    if cached is not None:
        return cached
    zone: Any = timezone.utc
    try:
        with open("/etc/localtime", "rb") as fh:
            from zoneinfo import ZoneInfo

            zone = ZoneInfo.from_file(fh, key="localtime")
    except (OSError, ValueError):
        pass
    with _zone_lock:
        _zone_cache["\0localtime"] = zone
    return zone


def validate_tz(tz: Any, what: str = "repeat.tz") -> Any:
    """The ``ZoneInfo`` for an IANA zone name; raises CronError naming ``what``."""
    if not isinstance(tz, str) or not tz:
        raise CronError(f"{what} must be an IANA time zone name such as 'Europe/Paris', got {tz!r}")
    try:
        return _zone(tz)
    except (KeyError, ValueError, OSError):  # KeyError: ZoneInfoNotFoundError
        raise CronError(f"{what}: unknown time zone {tz!r}; use an IANA name such as 'Europe/Paris' "
                        f"or 'America/New_York'") from None


_parsed_cache: Dict[str, Tuple[str, bool]] = {}
#: croniter objects by (expression, seconds-first), built once and copied for each search.
_iter_cache: Dict[Tuple[str, bool], Any] = {}
#: next_run's search result (before the end date check) by (expression, seconds-first, zone,
#: whole second it searches after): runs of one pattern due together ask the same question.
_next_cache: Dict[Tuple[str, bool, Any, int], Optional[int]] = {}
_ITER_CACHE_MAX = 1024
_MISS: Any = object()
_NEXT_CACHE_MAX = 4096


def _clear_caches() -> None:
    """Forget every parsed pattern and answer (tests compare the cold path with the warm)."""
    _parsed_cache.clear()
    _iter_cache.clear()
    _next_cache.clear()


def _remember(cache: Dict[Any, Any], key: Any, value: Any, most: int) -> None:
    """Store ``key`` in a cache bounded to ``most`` entries, dropping the oldest first."""
    if len(cache) >= most:
        try:
            del cache[next(iter(cache))]
        except (StopIteration, KeyError, RuntimeError):  # emptied or changed by another thread
            pass
    cache[key] = value


def _iterator(expr: str, seconds: bool, start: datetime) -> Any:
    """A croniter of ``expr`` set at ``start``: a copy of one built once per pattern (its
    parsed fields are shared, read only; its position is its own)."""
    template = _iter_cache.get((expr, seconds))
    if template is None:
        croniter, _ = _croniter()
        template = croniter(expr, datetime(2000, 1, 1), second_at_beginning=seconds)
        _remember(_iter_cache, (expr, seconds), template, _ITER_CACHE_MAX)
    it = object.__new__(type(template))
    it.__dict__.update(template.__dict__)
    it.set_current(start, force=True)
    return it


def _prepare(pattern: Any, what: str) -> Tuple[str, bool]:
    """(croniter expression, seconds-first) for a cron-parser pattern; raises CronError."""
    if not isinstance(pattern, str) or not pattern.strip():
        raise CronError(f"{what} must be a cron pattern such as '0 9 * * 1-5', got {pattern!r}")
    cached = _parsed_cache.get(pattern)
    if cached is not None:
        return cached
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise CronError(f"{what}: the pattern is longer than {MAX_PATTERN_LENGTH} characters")
    text = ALIASES.get(pattern, pattern)
    fields = text.split()
    if len(fields) not in (5, 6):
        raise CronError(f"{what}: invalid cron pattern {pattern!r}: it has {len(fields)} fields; write 5 "
                        f"(minute hour day-of-month month day-of-week) or 6 (a second first)")
    names = _FIELD_NAMES if len(fields) == 6 else _FIELD_NAMES[1:]
    for name, field in zip(names, fields):
        for atom in field.split(","):
            if _HASHED.match(atom):
                raise CronError(f"{what}: invalid cron pattern {pattern!r}: the {name} field uses 'H' (a "
                                f"random value), which echomq-gevent does not support; write the value")
            _check_range(pattern, name, atom, what)
    if "W" in fields[-3].upper():
        raise CronError(f"{what}: invalid cron pattern {pattern!r}: 'W' (nearest weekday) in the day of "
                        f"month field is not supported by BullMQ's cron parser")
    dow_atoms = []
    for atom in fields[-1].split(","):
        m = _LAST_WEEKDAY.match(atom)
        if m:
            day = m.group(1).lower()
            atom = f"L{_DAY_NUMBERS.get(day, day)}"
        dow_atoms.append(atom)
    fields[-1] = ",".join(dow_atoms)
    expr = " ".join(fields)
    seconds = len(fields) == 6
    croniter, CroniterError = _croniter()
    try:
        # a day that never comes (30 February) is refused here, as cron-parser refuses it
        _iterator(expr, seconds, datetime(2000, 1, 1)).get_next(datetime)
    except (CroniterError, ValueError, KeyError, TypeError, IndexError) as exc:
        _iter_cache.pop((expr, seconds), None)
        raise CronError(f"{what}: invalid cron pattern {pattern!r}: {exc}") from None
    result = (expr, seconds)
    _remember(_parsed_cache, pattern, result, _ITER_CACHE_MAX)
    return result


def _check_range(pattern: str, name: str, atom: str, what: str) -> None:
    """cron-parser refuses a range that runs backwards (``5-1``, ``FRI-MON``); croniter would
    wrap it around, so it is refused here first."""
    span = atom.split("/", 1)[0]
    if "-" not in span:
        return
    low, _, high = span.partition("-")
    names = _DAY_NUMBERS if name == "day of week" else _MONTH_NUMBERS if name == "month" else {}
    low, high = names.get(low.lower(), low), names.get(high.lower(), high)
    if low.isdigit() and high.isdigit() and int(low) > int(high):
        raise CronError(f"{what}: invalid cron pattern {pattern!r}: the range {span!r} in the {name} field "
                        f"runs backwards")


def validate_pattern(pattern: Any, what: str = "repeat.pattern") -> str:
    """Check a cron pattern; returns it unchanged or raises CronError naming ``what``."""
    _prepare(pattern, what)
    return pattern


def _wall(ms: int, zone: Any) -> datetime:
    """The naive wall-clock reading of ``ms`` in ``zone``, whole seconds."""
    return datetime.fromtimestamp(ms // 1000, zone).replace(tzinfo=None, fold=0)


def _instant_ms(wall: datetime, zone: Any, fold: int) -> int:
    return int(wall.replace(tzinfo=zone, fold=fold).timestamp()) * 1000


def next_run(pattern: str, after_ms: int, tz: Optional[str] = None, start_date: Optional[int] = None,
             end_date: Optional[int] = None) -> Optional[int]:
    """The first run (ms since the epoch) of ``pattern`` strictly after ``after_ms``, as
    BullMQ's default repeat strategy returns it: the search starts at ``start_date`` when
    that is later, and ``None`` comes back when the run would fall after ``end_date``."""
    expr, seconds = _prepare(pattern, "repeat.pattern")
    zone = validate_tz(tz) if tz else local_zone()
    current = int(after_ms)
    if start_date is not None and int(start_date) > current:
        current = int(start_date)
    if end_date is not None and current > int(end_date):
        current = int(end_date)
    key = (expr, seconds, zone, current // 1000)
    found = _next_cache.get(key, _MISS)
    if found is _MISS:
        found = _search(expr, seconds, zone, current)
        _remember(_next_cache, key, found, _NEXT_CACHE_MAX)
    if found is None:
        return None
    if end_date is not None and found > int(end_date):
        return None
    return found


def _search(expr: str, seconds: bool, zone: Any, current: int) -> Optional[int]:
    """The first run strictly after ``current`` (ms), or None. Depends on ``current`` only
    through its whole second: every instant compared with it is a whole second."""
    wall = _wall(current, zone)
    _, CroniterError = _croniter()
    it = _iterator(expr, seconds, wall)
    found: Optional[int] = None
    for _ in range(_MAX_CANDIDATES):
        try:
            candidate = it.get_next(datetime)
        except CroniterError:
            return None
        # the first occurrence of a repeated wall time; a skipped one moves past the gap
        found = _instant_ms(candidate, zone, 0)
        if found <= current:
            # inside a repeated hour the schedule already reached: its second occurrence
            found = _instant_ms(candidate, zone, 1)
            if found <= current:
                found = None
                continue
        break
    if found is None:
        return None
    if _every_hour(it) and _offset(zone, found) < _offset(zone, current):
        # cron-parser runs a repeated hour twice when the hour field is "*" (and once otherwise)
        found = _second_occurrence(expr, seconds, zone, current, found)
    return found


def _every_hour(it: Any) -> bool:
    hours = it.expanded[1]
    return hours == ["*"] or len(hours) == 24


def _offset(zone: Any, ms: int) -> Any:
    return datetime.fromtimestamp(ms // 1000, zone).utcoffset()


def _second_occurrence(expr: str, seconds: bool, zone: Any, current: int, found: int) -> int:
    """A clock went back between ``current`` and ``found``: the first match in the repeated
    wall time after the change, if it comes before ``found``."""
    before, after = current // 1000, found // 1000
    first = _offset(zone, current)
    while after - before > 1:  # the first second on the new offset
        mid = (before + after) // 2
        if _offset(zone, mid * 1000) == first:
            before = mid
        else:
            after = mid
    wall = datetime.fromtimestamp(after, zone).replace(tzinfo=None, fold=0)
    start = wall - timedelta(seconds=1)
    _, CroniterError = _croniter()
    try:
        candidate = _iterator(expr, seconds, start).get_next(datetime)
    except CroniterError:
        return found
    again = _instant_ms(candidate, zone, 1)
    return again if current < again < found else found

"""The outbox's settings: one typed table, validated where the framework reads them.

Each integration switches the outbox on with its own setting (``settings.ECHOMQ['outbox']``,
``app.config['ECHOMQ_OUTBOX']``, ``echomq.outbox`` in the ``.ini``): ``True``, or a
mapping of the options below (``{"batch_size": 200}`` switches it on too; ``False`` or
``{"enabled": False}`` leaves it off). :func:`outbox_settings` checks the value and
names the setting in its errors; :data:`OPTIONS` also feeds ``docs/configuration.md``.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from ...errors import ConfigError, close_matches

__all__ = ["OutboxSettings", "OPTIONS", "outbox_settings", "checked_fields"]


@dataclasses.dataclass(frozen=True)
class OutboxSettings:
    """What one app's outbox does (see :data:`OPTIONS` for each field's meaning)."""

    enabled: bool = False
    batch_size: int = 100
    poll_interval: float = 1.0
    linger: float = 0.02
    order: str = "commit"
    keep_days: float = 0.0
    max_age: float = 60.0
    max_attempts: int = 10
    lease: float = 10.0
    relay: bool = True
    database: Optional[str] = None
    session: str = "dbsession"

    @property
    def notifies(self) -> bool:
        """Whether rows carry their NOTIFY on PostgreSQL (``order: "commit"``), so the relay
        listens and goes by commit order."""
        return self.order == "commit"


def _int_range(lo: int, hi: int) -> Callable[[Any], Optional[str]]:
    def check(v: Any) -> Optional[str]:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            return f"must be a whole number from {lo} to {hi}"
        return None
    return check


def _number_range(lo: float, hi: float, open_low: bool = False) -> Callable[[Any], Optional[str]]:
    def check(v: Any) -> Optional[str]:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v > hi or (v <= lo if open_low else v < lo):
            return f"must be a number {'above' if open_low else 'from'} {lo:g} {'and at most' if open_low else 'to'} {hi:g}"
        return None
    return check


#: ``order``: ``commit`` (PostgreSQL: each row notifies its id, the relay goes by commit
#: order) or ``id`` (no notification: by id, found by polling; cheaper, see :mod:`.order`).
ORDERS = ("commit", "id")


def _order(v: Any) -> Optional[str]:
    return None if v in ORDERS else f"must be one of {', '.join(repr(o) for o in ORDERS)}"


def _bool(v: Any) -> Optional[str]:
    return None if isinstance(v, bool) else "must be true or false"


def _name(v: Any) -> Optional[str]:
    return None if v is None or (isinstance(v, str) and v) else "must be a non-empty name"


#: name -> (check, doc). The defaults are :class:`OutboxSettings`'s.
OPTIONS: Dict[str, Tuple[Callable[[Any], Optional[str]], str]] = {
    "enabled": (_bool, "switch the outbox on (a mapping of options switches it on unless this is false)"),
    "batch_size": (_int_range(1, 10000), "rows the relay moves to Redis per database transaction"),
    "poll_interval": (_number_range(0.0, 3600.0, open_low=True),
                      "seconds between two looks at the table when no wake-up came (the fallback)"),
    "linger": (_number_range(0.0, 1.0),
               "seconds a busy relay (its last pass took more than one row) lets pass from the start "
               "of one pass to the next, so the rows committed meanwhile go out together; rows that "
               "come one at a time are not delayed; 0 runs a pass per wake-up"),
    "order": (_order,
              "PostgreSQL: 'commit' adds jobs in the order their transactions committed (each row "
              "notifies the relay); 'id' writes rows without a notification and adds them by id, found "
              "every poll_interval (linger while busy): cheaper, but jobs of overlapping transactions may "
              "come in insert order; set the same value in every process"),
    "keep_days": (_number_range(0.0, 3650.0),
                  "days an added row is kept (state 'added') before it is deleted; 0 deletes it at once"),
    "max_age": (_number_range(0.0, 86400.0, open_low=True),
                "seconds the oldest waiting row may be old before /_echomq/ready answers 503"),
    "max_attempts": (_int_range(1, 1000),
                     "tries of a row whose add fails for an unknown reason before it is parked"),
    "lease": (_number_range(1.0, 3600.0),
              "seconds a relay holds the relay lease on a database without row locks (SQLite)"),
    "relay": (_bool, "run the relay in this app's worker processes (false: another process relays)"),
    "database": (_name, "Django: the database alias of the outbox table (default 'default')"),
    "session": (_name, "Pyramid: the request attribute of the SQLAlchemy session (default 'dbsession')"),
}


def outbox_settings(value: Any, where: Callable[[Tuple[Any, ...]], str]) -> OutboxSettings:
    """The checked settings from a framework's ``outbox`` setting (``None``: off).

    ``where(path)`` spells the setting for an error (``where(("batch_size",))`` ->
    ``settings.ECHOMQ['outbox']['batch_size']``). Raises ConfigError naming it."""
    if value is None or value is False:
        return OutboxSettings()
    if value is True:
        return OutboxSettings(enabled=True)
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where(())}: must be true, false or a mapping of outbox options "
                          f"({', '.join(OPTIONS)}), got {value!r}")
    fields: Dict[str, Any] = {"enabled": True}
    fields.update(checked_fields(value, OPTIONS, OutboxSettings, where, "outbox"))
    return OutboxSettings(**fields)


def checked_fields(value: Mapping[str, Any], options: Mapping[str, Tuple[Callable[[Any], Optional[str]], str]],
                   dataclass: Any, where: Callable[[Tuple[Any, ...]], str], kind: str) -> Dict[str, Any]:
    """The fields of ``dataclass`` from a mapping of ``options`` (name -> (check, doc)):
    each key known and its value passing its check, a float field's value as a float.
    Raises ConfigError naming the setting (``where((key,))``) and, for an unknown key, the
    closest known one. The outbox's and the ledger's settings share it."""
    fields: Dict[str, Any] = {}
    for key, v in value.items():
        if key not in options:
            near = close_matches(str(key), options)
            hint = f"; did you mean {near[0]!r}?" if near else f"; the options are {', '.join(options)}"
            raise ConfigError(f"{where((key,))}: unknown {kind} option {key!r}{hint}")
        problem = options[key][0](v)
        if problem:
            raise ConfigError(f"{where((key,))}: {problem}, got {v!r}")
        fields[key] = float(v) if isinstance(dataclass.__dataclass_fields__[key].default, float) else v
    return fields

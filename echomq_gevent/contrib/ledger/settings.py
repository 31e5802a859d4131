"""The effect ledger's settings: one typed table, checked where the framework reads them.

Each integration reads its own setting (``settings.ECHOMQ['ledger']``,
``app.config['ECHOMQ_LEDGER']``, ``echomq.ledger.*`` in the ``.ini``): a mapping of the
options below, or nothing for the defaults. The ledger itself is switched on per
processor (``atomic=True``), not here. :data:`OPTIONS` also feeds
``docs/configuration.md``.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Optional, Tuple

from ...errors import ConfigError
from ..outbox.settings import _name, _number_range, checked_fields
from .core import DEFAULT_KEEP_DAYS

__all__ = ["LedgerSettings", "OPTIONS", "ledger_settings"]


@dataclasses.dataclass(frozen=True)
class LedgerSettings:
    """How one app's ledger is kept (see :data:`OPTIONS`)."""

    keep_days: float = DEFAULT_KEEP_DAYS
    prune_interval: float = 3600.0
    database: Optional[str] = None


#: name -> (check, doc). The defaults are :class:`LedgerSettings`'s.
OPTIONS: Dict[str, Tuple[Callable[[Any], Optional[str]], str]] = {
    "keep_days": (_number_range(0.0, 3650.0, open_low=True),
                  "days a ledger row is kept; longer than any job's retry window (from its first attempt "
                  "to its last delivery: attempts, backoff, stalled checks), or a job delivered again after "
                  "its row went would run again"),
    "prune_interval": (_number_range(1.0, 86400.0),
                       "seconds between two prunes by each worker process (0 rows: nothing else happens)"),
    "database": (_name, "Django: the database alias processors marked atomic write to (default 'default'); "
                        "a processor may name its own with atomic='alias'"),
}


def ledger_settings(value: Any, where: Callable[[Tuple[Any, ...]], str]) -> LedgerSettings:
    """The checked settings from a framework's ``ledger`` setting (``None``: defaults).
    Raises ConfigError naming the setting (``where(path)`` spells it)."""
    if value is None:
        return LedgerSettings()
    if not isinstance(value, dict):
        raise ConfigError(f"{where(())}: must be a mapping of ledger options ({', '.join(OPTIONS)}), got {value!r}")
    return LedgerSettings(**checked_fields(value, OPTIONS, LedgerSettings, where, "ledger"))

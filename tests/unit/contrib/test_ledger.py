"""The effect ledger's pure parts: its settings (errors naming the setting), the key a job
gets (a job id used again is a new key), and reading a stored return value."""
from __future__ import annotations

import types

import pytest

from echomq_gevent.contrib.ledger import LedgerSettings, key_of, ledger_settings
from echomq_gevent.contrib.ledger.core import _stored
from echomq_gevent.errors import ConfigError, UnrecoverableError


def where(path):
    return "settings.ECHOMQ['ledger']" + "".join(f"[{p!r}]" for p in path)


def test_settings_default_and_checked():
    assert ledger_settings(None, where) == LedgerSettings()
    assert ledger_settings({"keep_days": 30, "prune_interval": 60, "database": "billing"}, where) == \
        LedgerSettings(keep_days=30.0, prune_interval=60.0, database="billing")


@pytest.mark.parametrize("value, named", [
    ({"keep_day": 3}, "settings.ECHOMQ['ledger']['keep_day']: unknown ledger option 'keep_day'; did you mean 'keep_days'?"),
    ({"keep_days": 0}, "settings.ECHOMQ['ledger']['keep_days']: must be a number above 0"),
    ({"prune_interval": "1h"}, "settings.ECHOMQ['ledger']['prune_interval']: must be a number"),
    ({"database": ""}, "settings.ECHOMQ['ledger']['database']: must be a non-empty name"),
    (True, "settings.ECHOMQ['ledger']: must be a mapping of ledger options"),
])
def test_bad_settings_name_the_setting(value, named):
    with pytest.raises(ConfigError) as info:
        ledger_settings(value, where)
    assert str(info.value).startswith(named)


def _job(job_id="7", timestamp=1700000000123):
    return types.SimpleNamespace(id=job_id, prefix="bull", queue_name="billing", timestamp=timestamp, name="charge")


def test_the_key_is_the_job_and_its_creation_time():
    assert tuple(key_of(_job())) == ("bull", "billing", "7", 1700000000123)
    assert key_of(_job(timestamp=1700000000124)) != key_of(_job())  # the id used again: a new job
    assert key_of(_job(timestamp=None)).job_ts == 0


def test_a_stored_value_reads_back_and_a_bad_one_names_the_row():
    key = key_of(_job())
    assert _stored(key, (1, '{"a":[1,2]}')) == {"a": [1, 2]}
    assert _stored(key, (1, b"null")) is None
    with pytest.raises(UnrecoverableError) as info:
        _stored(key, (42, "{oops"))
    text = str(info.value)
    assert "echomq_ledger row (prefix 'bull', queue 'billing', job_id '7', job_ts 1700000000123) (id 42)" in text
    assert "not JSON" in text and "the processor was not run again" in text

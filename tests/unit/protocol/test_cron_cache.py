"""next_run's caches (parsed croniter per pattern, answer per pattern, zone and whole
second) give exactly what the uncached search gives, across DST changes and time zones."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from echomq_gevent.protocol import cron
from echomq_gevent.protocol.cron import next_run

PATTERNS = ["*/5 * * * *", "30 2 * * *", "0 1-3 * * *", "*/7 * * * *", "0 0 L * *", "0 12 * * 5L",
            "0 10 * * 1#2", "0 30 2 * * *", "*/20 * * * * *", "7 * * * * *", "@hourly", "0 0 29 2 *"]
ZONES = [None, "UTC", "America/New_York", "Europe/Paris", "Australia/Sydney"]
STARTS = [
    datetime(2026, 3, 8, 6, 50, tzinfo=timezone.utc),     # New York springs forward
    datetime(2026, 3, 29, 0, 30, tzinfo=timezone.utc),    # Paris springs forward
    datetime(2026, 10, 25, 0, 0, tzinfo=timezone.utc),    # Paris falls back
    datetime(2026, 11, 1, 5, 0, tzinfo=timezone.utc),     # New York: the hour about to repeat
    datetime(2026, 11, 1, 6, 20, tzinfo=timezone.utc),    # New York: inside the repeated hour
    datetime(2026, 4, 4, 15, 40, tzinfo=timezone.utc),    # Sydney: inside the repeated hour
]


def _cold(*args):
    cron._clear_caches()
    return next_run(*args)


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.setenv("TZ", "America/Chicago")
    cron._clear_caches()
    yield
    cron._clear_caches()


@pytest.mark.parametrize("tz", ZONES)
def test_cached_chain_matches_uncached(tz):
    for pattern in PATTERNS:
        for start in STARTS:
            millis = int(start.timestamp() * 1000)
            for _ in range(6):  # a scheduler's chain of runs; each asked twice (the second one warm)
                cold = _cold(pattern, millis, tz)
                assert next_run(pattern, millis, tz) == cold
                assert next_run(pattern, millis, tz) == cold, (pattern, tz, millis)
                if cold is None:
                    break
                millis = cold


@pytest.mark.parametrize("offset", [0, 1, 499, 999])
def test_any_instant_of_a_second_gets_that_seconds_answer(offset):
    for start in STARTS:
        base = int(start.timestamp()) * 1000
        for pattern in PATTERNS:
            for tz in ZONES:
                next_run(pattern, base, tz)  # warms the cache with the second's first instant
                assert next_run(pattern, base + offset, tz) == _cold(pattern, base + offset, tz)


def test_start_and_end_dates_apply_around_the_cache():
    millis = int(datetime(2026, 11, 1, 5, 0, tzinfo=timezone.utc).timestamp() * 1000)
    for start_date, end_date in [(None, None), (millis + 3_600_000, None), (None, millis + 60_000),
                                 (millis + 600_000, millis + 400_000), (None, millis - 1)]:
        for pattern in ("*/5 * * * *", "0 30 2 * * *", "*/20 * * * * *"):
            args = (pattern, millis, "America/New_York", start_date, end_date)
            warm = [next_run(*args) for _ in range(2)]
            assert warm == [_cold(*args)] * 2


def test_the_caches_stay_bounded(monkeypatch):
    monkeypatch.setattr(cron, "_NEXT_CACHE_MAX", 50)
    monkeypatch.setattr(cron, "_ITER_CACHE_MAX", 10)
    millis = int(STARTS[0].timestamp() * 1000)
    for second in range(30):
        for minute in range(5):
            assert next_run(f"{second} {minute} * * * *", millis, "UTC") is not None
    assert len(cron._next_cache) <= 50
    assert len(cron._iter_cache) <= 10
    assert len(cron._parsed_cache) <= 10


def test_a_bad_pattern_is_refused_every_time():
    for _ in range(2):
        with pytest.raises(cron.CronError):
            next_run("0 0 30 2 *", 0, "UTC")
    assert not cron._iter_cache

"""Backoff math: BullMQ 6.7.0's fixed/exponential strategies, jitter, custom types."""
from __future__ import annotations

import pytest

from echomq_gevent.protocol import backoff
from echomq_gevent.plugins.hookspecs import hookimpl
from echomq_gevent.plugins.host import PluginHost, make_plugin_manager


class _Job:
    id = "7"
    opts: dict = {}


def test_normalize():
    assert backoff.normalize(500) == {"type": "fixed", "delay": 500}
    assert backoff.normalize({"type": "exponential", "delay": 10}) == {"type": "exponential", "delay": 10}
    assert backoff.normalize(None) is None
    assert backoff.normalize({}) is None
    assert backoff.normalize(True) is None


def test_fixed_and_exponential_without_jitter():
    assert backoff.fixed_delay(300) == 300
    assert [backoff.exponential_delay(100, n) for n in (1, 2, 3, 4)] == [100, 200, 400, 800]
    # Math.round rounds halves up
    assert backoff.exponential_delay(0.75, 2) == 2
    assert backoff.exponential_delay(1.25, 1) == 1


def test_jitter_bounds_follow_bullmq():
    # fixed: floor(r * delay * j + delay * (1 - j)), r in [0, 1)
    assert backoff.fixed_delay(1000, 0.5, rand=lambda: 0.0) == 500
    assert backoff.fixed_delay(1000, 0.5, rand=lambda: 0.999999) == 999
    # exponential: the same over the attempt's maximum
    assert backoff.exponential_delay(100, 3, 0.25, rand=lambda: 0.0) == 300
    assert backoff.exponential_delay(100, 3, 0.25, rand=lambda: 0.999999) == 399
    for _ in range(200):
        assert 500 <= backoff.fixed_delay(1000, 0.5) < 1000


def test_compute_delay_builtin_and_no_backoff():
    job = _Job()
    assert backoff.compute_delay(None, 1, ValueError(), job) == 0
    assert backoff.compute_delay(250, 3, ValueError(), job) == 250
    assert backoff.compute_delay({"type": "exponential", "delay": 50}, 3, ValueError(), job) == 200


def test_compute_delay_with_builtin_plugin_host():
    host = PluginHost()
    job = _Job()
    job.opts = {"backoff": {"type": "exponential", "delay": 100}}
    assert backoff.compute_delay(job.opts["backoff"], 2, ValueError(), job, host) == 200


def test_unknown_type_names_job_and_type():
    with pytest.raises(backoff.UnknownBackoffType) as info:
        backoff.compute_delay({"type": "fibonacci", "delay": 5}, 1, ValueError(), _Job())
    assert "fibonacci" in str(info.value) and "job 7" in str(info.value)


class _Custom:
    @hookimpl
    def echomq_backoff_delay(self, backoff_type, attempts_made, delay, error, job):
        if backoff_type == "linear":
            return attempts_made * delay
        if backoff_type == "never":
            return -1
        return None


def test_custom_type_from_plugin_and_no_retry():
    host = PluginHost(make_plugin_manager([_Custom()]))
    job = _Job()
    assert backoff.compute_delay({"type": "linear", "delay": 30}, 3, ValueError(), job, host) == 90
    assert backoff.compute_delay({"type": "never", "delay": 30}, 1, ValueError(), job, host) == backoff.NO_RETRY
    # built-ins still answer through the built-in plugin
    assert backoff.compute_delay({"type": "fixed", "delay": 30}, 1, ValueError(), job, host) == 30

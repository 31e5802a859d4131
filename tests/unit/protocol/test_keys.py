"""QueueKeys spells BullMQ v6's key layout (docs/protocol.md, "Keys and conventions")."""
from __future__ import annotations

import pytest

from echomq_gevent.protocol.keys import QueueKeys, validate_prefix, validate_queue_name


def test_fixed_keys_match_bullmq_names():
    k = QueueKeys("mail")
    assert k.base == "bull:mail:"
    assert k.queue_key == "bull:mail"
    expected = {
        "wait": "wait", "active": "active", "waiting_children": "waiting-children",
        "paused": "paused", "id": "id", "delayed": "delayed", "prioritized": "prioritized",
        "stalled_check": "stalled-check", "completed": "completed", "failed": "failed",
        "stalled": "stalled", "repeat": "repeat", "limiter": "limiter", "meta": "meta",
        "events": "events", "pc": "pc", "marker": "marker", "de": "de",
        "metrics_completed": "metrics:completed", "metrics_failed": "metrics:failed",
    }
    for attr, suffix in expected.items():
        assert getattr(k, attr) == "bull:mail:" + suffix
    assert sorted(k.all_fixed()) == sorted("bull:mail:" + s for s in expected.values())


def test_job_keys():
    k = QueueKeys("q", prefix="{app}")
    assert k.job("42") == "{app}:q:42"
    assert k.lock("42") == "{app}:q:42:lock"
    assert k.logs("42") == "{app}:q:42:logs"
    assert k.dependencies("p") == "{app}:q:p:dependencies"
    assert k.processed("p") == "{app}:q:p:processed"
    assert k.failed_children("p") == "{app}:q:p:failed"
    assert k.unsuccessful("p") == "{app}:q:p:unsuccessful"
    assert k.dedup("d1") == "{app}:q:de:d1"
    assert k.scheduler("s") == "{app}:q:repeat:s"
    assert k.metrics("failed") == "{app}:q:metrics:failed"
    with pytest.raises(ValueError, match="metrics kind"):
        k.metrics("done")


def test_state_key_maps_waiting_to_wait():
    k = QueueKeys("q")
    assert k.state_key("waiting") == "bull:q:wait"
    assert k.state_key("waiting-children") == "bull:q:waiting-children"
    assert k.state_key("prioritized") == "bull:q:prioritized"
    with pytest.raises(ValueError, match="unknown job state 'stalled-check'"):
        k.state_key("stalled-check")
    with pytest.raises(ValueError, match="unknown job state 'meta'"):
        k.state_key("meta")


def test_queue_name_and_prefix_rules():
    with pytest.raises(ValueError, match="must not contain ':'"):
        QueueKeys("a:b")
    with pytest.raises(ValueError, match="non-empty"):
        validate_queue_name("")
    with pytest.raises(ValueError, match="white space"):
        validate_prefix("bu ll")
    with pytest.raises(ValueError, match="non-empty"):
        QueueKeys("q", prefix="")
    assert validate_queue_name("émails") == "émails"


def test_equality_and_hash():
    assert QueueKeys("q") == QueueKeys("q", "bull")
    assert QueueKeys("q") != QueueKeys("q", "other")
    assert len({QueueKeys("q"), QueueKeys("q")}) == 1
    assert repr(QueueKeys("q")) == "QueueKeys('q', prefix='bull')"

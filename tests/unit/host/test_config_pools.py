"""``pools:`` in the YAML file: a good section gives each pool its queues, order and
weights and each pooled queue its cap; bad input is refused at start with file, line and key."""
from __future__ import annotations

import textwrap

import pytest

from echomq_gevent.errors import ConfigError
from echomq_gevent.host.config import config_from_mapping, parse_config

QUEUES = """
queues:
  emails: {concurrency: 4}
  reports: {}
  thumbnails: {}
  alone: {concurrency: 2}
"""


def parse(pools: str, defaults: str = ""):
    return parse_config(defaults + QUEUES + textwrap.dedent(pools), filename="worker.yaml", env={})


def test_a_pool_gets_its_queues_order_weights_and_caps():
    cfg = parse("""
pools:
  default:
    concurrency: 50
    queues: [emails, reports, thumbnails]
    order: weighted
    weights: {emails: 5, reports: 1, thumbnails: 2}
""")
    pool = cfg.pools["default"]
    assert (pool.concurrency, pool.queues, pool.order) == (50, ["emails", "reports", "thumbnails"], "weighted")
    assert pool.weights == {"emails": 5, "reports": 1, "thumbnails": 2}
    assert pool.line == 9
    # a queue's own concurrency is its cap; without one it may use the whole pool
    assert cfg.queues["emails"].options["concurrency"] == 4
    assert cfg.queues["reports"].options["concurrency"] == 50
    assert cfg.queues["alone"].options["concurrency"] == 2  # in no pool: as before


def test_defaults_concurrency_is_the_cap_too_and_order_defaults_to_weighted():
    cfg = parse("pools: {p: {concurrency: 20, queues: [reports]}}\n", defaults="defaults: {concurrency: 3}\n")
    assert cfg.pools["p"].order == "weighted" and cfg.pools["p"].turn == 1
    assert cfg.queues["reports"].options["concurrency"] == 3


def test_a_pattern_makes_a_queue_family_with_its_own_keys():
    cfg = parse("""
pools:
  tenants:
    concurrency: 20
    queues: [emails, "tenant-*"]
    order: round_robin
    turn: 10
    max_per_queue: 3
    processor: "myapp.jobs:handle"
    discover_every: 2
""", defaults="defaults: {lock_duration: 5000}\n")
    pool = cfg.pools["tenants"]
    assert pool.turn == 10
    assert pool.queues == ["emails"] and pool.patterns == ["tenant-*"]
    assert pool.family_options["concurrency"] == 3 and pool.family_options["lock_duration"] == 5000
    assert (pool.processor, pool.discover_every) == ("myapp.jobs:handle", 2.0)
    # without max_per_queue a found queue may use the whole pool
    cfg = parse("pools: {p: {concurrency: 9, queues: ['t-*']}}\n")
    assert cfg.pools["p"].family_options["concurrency"] == 9 and cfg.pools["p"].processor is None


def test_a_weight_may_name_a_pattern():
    cfg = parse("""
pools:
  tenants:
    concurrency: 20
    queues: [emails, "tenant-*"]
    weights: {emails: 4, "tenant-*": 2}
""")
    assert cfg.pools["tenants"].weights == {"emails": 4, "tenant-*": 2}
    with pytest.raises(ConfigError, match=r"pools\.tenants\.weights\.other-\*.*not in this pool's queues"):
        parse("pools: {tenants: {concurrency: 2, queues: ['tenant-*'], weights: {'other-*': 2}}}\n")


def test_no_pools_is_the_old_behaviour():
    assert parse("").pools == {}


@pytest.mark.parametrize("pools, line, key, message", [
    ("pools:\n  p:\n    concurrency: 5\n    queues: [emails, nosuch]\n", 10, "pools.p.queues[1]",
     "'nosuch' is not a declared queue"),
    ("pools:\n  p: {concurrency: 5, queues: [emails]}\n  q:\n    concurrency: 5\n    queues: [reports, emails]\n",
     11, "pools.q.queues[1]", "queue 'emails' is in pool 'p' already"),
    ("pools:\n  p:\n    concurrency: 5\n    queues: [emails]\n    weights: {reports: 2}\n", 11,
     "pools.p.weights.reports", "queue 'reports' is not in this pool's queues"),
    ("pools:\n  p:\n    concurrency: 5\n    queues: [emails]\n    weights:\n      emails: 0\n", 12,
     "pools.p.weights.emails", "must be a whole number, at least 1, got 0"),
    ("pools:\n  p:\n    concurrency: 5\n    queues: [emails]\n    weights:\n      emails: two\n", 12,
     "pools.p.weights.emails", "must be a whole number, at least 1, got 'two'"),
    ("pools:\n  p:\n    concurrency: 5\n    queues: [emails]\n    order: fair\n", 11, "pools.p.order",
     "must be one of strict, weighted, round_robin, got 'fair'"),
    ("pools:\n  p:\n    concurrency: 5\n    queues: [emails]\n    turn: 0\n", 11, "pools.p.turn",
     "must be a whole number of jobs, at least 1, got 0"),
    ("pools:\n  p:\n    concurrency: 5\n    queues: [emails]\n    turn: 2.5\n", 11, "pools.p.turn",
     "must be a whole number of jobs, at least 1, got 2.5"),
    ("pools:\n  p:\n    concurrency: 0\n    queues: [emails]\n", 9, "pools.p.concurrency",
     "must be a whole number of slots, at least 1"),
    ("pools:\n  p:\n    concurency: 5\n    queues: [emails]\n", 9, "pools.p.concurency",
     "did you mean 'concurrency'"),
    ("pools:\n  p:\n    concurrency: 5\n    queues: []\n", 10, "pools.p.queues", "must be a non-empty list"),
    ("pools:\n  p:\n    concurrency: 5\n    queues: [emails]\n    max_per_queue: 2\n", 11, "pools.p.max_per_queue",
     "is for the queues a pattern finds"),
    ("pools:\n  p:\n    concurrency: 5\n    queues: ['t-*']\n    max_per_queue: 0\n", 11, "pools.p.max_per_queue",
     "must be a whole number of slots, at least 1"),
    ("pools:\n  p:\n    concurrency: 5\n    queues: ['t-*']\n    processor: handle\n", 11, "pools.p.processor",
     "must be 'module:function'"),
    ("pools:\n  p:\n    concurrency: 5\n    queues: ['t-*']\n    discover_every: 0\n", 11,
     "pools.p.discover_every", "must be a number of seconds from 0.1 to 3600"),
    ("pools:\n  p:\n    concurrency: 5\n    queues: ['t-*', 't-*']\n", 10, "pools.p.queues[1]", "listed twice"),
    ("pools:\n  p:\n    concurrency: 5\n    order: strict\n    queues: [emails]\n    weights: {emails: 2}\n",
     12, "pools.p.weights", "order: weighted only"),
])
def test_bad_pools_are_refused_with_file_line_and_key(pools, line, key, message):
    with pytest.raises(ConfigError) as info:
        parse(pools)
    text = str(info.value)
    assert text.startswith(f"worker.yaml, line {line}, key {key}: "), text
    assert message in text


def test_framework_settings_take_pools_and_name_the_setting():
    where = lambda path: "settings.ECHOMQ" + "".join(f"[{p!r}]" for p in path)  # noqa: E731
    cfg = config_from_mapping({"queues": {"a": {}, "b": {}},
                               "pools": {"p": {"concurrency": 4, "queues": ["a", "b"], "order": "round_robin"}}},
                              "settings.ECHOMQ", where=where)
    assert cfg.pools["p"].order == "round_robin"
    with pytest.raises(ConfigError, match=r"settings.ECHOMQ\['pools'\]\['p'\]\['queues'\]\[1\]: 'c' is not"):
        config_from_mapping({"queues": {"a": {}}, "pools": {"p": {"concurrency": 4, "queues": ["a", "c"]}}},
                            "settings.ECHOMQ", where=where)

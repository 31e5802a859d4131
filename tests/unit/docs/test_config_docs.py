"""docs/configuration.md lists exactly the worker options of the one table, with their
defaults, and every top-level key the loader accepts."""
from __future__ import annotations

import os
import re

import yaml

from echomq_gevent.host.config import (
    EMBEDDED_KEYS,
    LOGGING_KEYS,
    QUEUE_ONLY_KEYS,
    REDIS_KEYS,
    SCHEDULER_KEYS,
    TOP_LEVEL_KEYS,
)
from echomq_gevent.worker.options import WORKER_OPTIONS

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))), "docs",
                   "configuration.md")


def read_doc() -> str:
    with open(DOC, encoding="utf-8") as fh:
        return fh.read()


def option_rows() -> list:
    text = read_doc()
    m = re.search(r"<!-- queue-options:.*?-->(.*?)<!-- /queue-options -->", text, re.S)
    assert m, "docs/configuration.md lost its queue-options table markers"
    rows = []
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`"):
            rows.append((cells[0].strip("`"), cells[1].strip("`"), cells[2]))
    return rows


def test_queue_options_section_lists_exactly_the_table():
    rows = option_rows()
    assert [r[0] for r in rows] == list(WORKER_OPTIONS), "options differ from worker_options.WORKER_OPTIONS"


def test_queue_option_defaults_and_units_match():
    for name, default, unit in option_rows():
        opt = WORKER_OPTIONS[name]
        assert yaml.safe_load(default) == opt.default, f"{name}: the doc says {default}, the table {opt.default!r}"
        assert unit == opt.unit, f"{name}: the doc's unit {unit!r}, the table's {opt.unit!r}"


def test_every_config_key_is_documented():
    text = read_doc()
    for key in TOP_LEVEL_KEYS + REDIS_KEYS + EMBEDDED_KEYS + LOGGING_KEYS + QUEUE_ONLY_KEYS + SCHEDULER_KEYS:
        assert f"`{key}`" in text, f"docs/configuration.md does not describe `{key}`"


def test_every_yaml_example_in_the_docs_is_a_valid_file_or_fragment():
    from echomq_gevent.host.config import parse_config

    others = ""
    for page in ("plugins.md", "schedulers.md"):
        with open(os.path.join(os.path.dirname(DOC), page), encoding="utf-8") as fh:
            others += fh.read()
    blocks = re.findall(r"```yaml\n(.*?)```", read_doc() + others, re.S)
    assert len(blocks) >= 4
    for block in blocks:
        text = block if "queues:" in block else block + "queues: {q: {}}\n"
        parse_config(text, filename="docs/configuration.md", env={})


def test_the_redis_section_keys_and_defaults_match_the_code():
    """The rows of the redis:, redis.sentinel, redis.cluster and redis.embedded tables name
    every key the loader takes, with the defaults the code uses."""
    from echomq_gevent.host.redis_section import CLUSTER_KEYS, SENTINEL_KEYS, RedisSettings
    from echomq_gevent.connection.settings import DEFAULT_SETTINGS, SETTING_KEYS

    text = read_doc()
    for key in SENTINEL_KEYS + CLUSTER_KEYS:
        assert f"`{key}`" in text, f"docs/configuration.md does not describe `{key}`"
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and re.fullmatch(r"`\w+`", cells[0]) and re.fullmatch(r"`[^`]*`", cells[1]):
            rows.setdefault(cells[0].strip("`"), yaml.safe_load(cells[1].strip("`")))
    for key in SETTING_KEYS:
        assert key in rows, f"docs/configuration.md has no row for redis.{key}"
        assert rows[key] == getattr(DEFAULT_SETTINGS, key), f"redis.{key}: the doc says {rows[key]!r}"
    embedded = RedisSettings()
    assert (rows["dir"], rows["port"], rows["persist"]) == (embedded.embedded_dir, embedded.embedded_port,
                                                           embedded.embedded_persist)
    assert rows["url"] == embedded.url and rows["db"] == 0 and rows["tls"] is False

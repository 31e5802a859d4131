"""Redis Cluster without a server: the URL, the YAML forms, the hash-tag rule and how
redirect answers are read."""
from __future__ import annotations

import textwrap

import pytest
from redis.exceptions import AskError, MovedError, ResponseError, TryAgainError

from echomq_gevent.connection.cluster import CrossSlotError, key_slot, parse_cluster_url, require_same_slot
from echomq_gevent.protocol.keys import ClusterHashTagError, hash_tag, require_hash_tag
from echomq_gevent.connection.routing import redirect_kind, redirect_target
from echomq_gevent.host.config import parse_config
from echomq_gevent.connection.clients import redact_url
from echomq_gevent.errors import ConfigError


def parse(text: str):
    return parse_config(textwrap.dedent(text), "test.yaml")


def test_cluster_url_names_its_nodes_and_credentials():
    parsed = parse_cluster_url("redis+cluster://u:p%40w@n1:7000,[::1]:7001/")
    assert parsed.nodes == [("n1", 7000), ("::1", 7001)]
    assert (parsed.username, parsed.password, parsed.tls) == ("u", "p@w", False)
    assert parse_cluster_url("rediss+cluster://n1:7000").tls is True
    assert redact_url("redis+cluster://u:secret@n1:7000/") == "redis+cluster://u:***@n1:7000/"


@pytest.mark.parametrize("url,expect", [
    ("redis+cluster://n1/", "each node must be host:port, got 'n1'"),
    ("redis+cluster://n1:7000/3", "only database 0"),
    ("redis+cluster://n1:7000/?socket_timeout=3", "no query parameters"),
    ("redis://n1:7000/", "the scheme must be redis+cluster://"),
])
def test_bad_cluster_urls_are_named_with_the_form(url, expect):
    with pytest.raises(ValueError) as info:
        parse_cluster_url(url)
    assert expect in str(info.value) and "redis+cluster://[[user]:password@]host:port" in str(info.value)


def test_yaml_cluster_list_and_mapping_become_a_url():
    cfg = parse("""
        redis:
          cluster: ["10.0.0.1:7000", "10.0.0.2:7000"]
          socket_timeout: 3
        prefix: "{bull}"
        queues: {q: {}}
    """)
    assert cfg.redis.url == "redis+cluster://10.0.0.1:7000,10.0.0.2:7000/"
    assert cfg.redis.connection.socket_timeout == 3
    cfg = parse("""
        redis: {cluster: {nodes: ["h:7000"], password: "p@ss", tls: true}}
        queues: {"{q}": {}}
    """)
    assert cfg.redis.url == "rediss+cluster://:p%40ss@h:7000/"
    assert parse_cluster_url(cfg.redis.url).password == "p@ss"
    cfg = parse('redis: {url: "redis+cluster://h:7000,h:7001"}\nqueues: {"{q}": {}}\n')
    assert parse_cluster_url(cfg.redis.url).nodes == [("h", 7000), ("h", 7001)]


@pytest.mark.parametrize("redis_yaml,expect", [
    ('{cluster: []}', "redis.cluster"),
    ('{cluster: ["h"]}', "must be host:port, got 'h'"),
    ('{cluster: "h:7000"}', "must be a list of host:port strings"),
    ('{cluster: {nodes: ["h:1"], pasword: x}}', "redis.cluster.pasword"),
    ('{cluster: {nodes: ["h:1"], tls: "yes"}}', "redis.cluster.tls"),
    ('{cluster: ["h:1"], url: "redis://h:1/0"}', "either url or cluster"),
    ('{url: "redis+cluster://h/"}', "each node must be host:port"),
])
def test_bad_cluster_settings_are_named(redis_yaml, expect):
    with pytest.raises(ConfigError) as info:
        parse(f"redis: {redis_yaml}\nqueues: {{q: {{}}}}\n")
    assert expect in str(info.value), str(info.value)


def test_hash_tags_follow_redis_rules():
    assert hash_tag("{bull}:q:wait") == "bull"
    assert hash_tag("bull:{q}:wait") == "q"
    assert hash_tag("bull:q:wait") is None
    assert hash_tag("{}:{q}:wait") is None  # an empty first tag: the whole key is hashed
    assert hash_tag("a{b:c}d") == "b:c"
    assert key_slot("{bull}:a:wait") == key_slot("{bull}:b:123") == key_slot("bull")
    assert key_slot("bull:{a}:wait") != key_slot("bull:{b}:wait")


def test_a_queue_without_a_hash_tag_is_refused_with_both_fixes():
    assert require_hash_tag("{bull}", "q") == "bull"
    assert require_hash_tag("bull", "{q}") == "q"
    with pytest.raises(ClusterHashTagError) as info:
        require_hash_tag("bull", "mail")
    text = str(info.value)
    assert "prefix '{bull}'" in text and "'{mail}'" in text
    assert isinstance(info.value, ConfigError)


def test_a_cross_slot_call_is_refused_before_anything_is_sent():
    require_same_slot("flow", "{bull}:a:1", "{bull}:b:2")
    with pytest.raises(CrossSlotError, match="same hash tag"):
        require_same_slot("flow", "bull:{a}:1", "bull:{b}:2")


def test_redirect_answers_are_read_from_typed_errors_and_plain_text():
    assert redirect_kind(MovedError("3999 127.0.0.1:7001")) == "moved"
    assert redirect_target(MovedError("3999 127.0.0.1:7001")) == ("127.0.0.1", 7001, 3999)
    assert redirect_kind(AskError("3999 127.0.0.1:7002")) == "ask"
    assert redirect_kind(TryAgainError("Multiple keys request during rehashing of slot")) == "wait"
    assert redirect_kind(ResponseError("MOVED 12 10.0.0.1:7000")) == "moved"
    assert redirect_target(ResponseError("MOVED 12 10.0.0.1:7000")) == ("10.0.0.1", 7000, 12)
    assert redirect_kind(ResponseError("CLUSTERDOWN The cluster is down")) == "wait"
    assert redirect_kind(ResponseError("READONLY You can't write against a read only replica.")) == "wait"
    assert redirect_kind(ResponseError("ERR Error running script")) is None
    assert redirect_kind(7) is None


def test_a_cluster_file_whose_queue_has_no_hash_tag_is_refused_at_load():
    with pytest.raises(ConfigError) as info:
        parse("""\
            redis:
              cluster: ["n1:7000", "n2:7001"]
            queues:
              "{mail}": {}
              pdf: {}
            """)
    message = str(info.value)
    assert message.startswith("test.yaml, line 5, key queues.pdf:"), message
    assert "no hash tag" in message and "'{bull}'" in message and "'{pdf}'" in message


def test_a_cluster_file_with_tagged_names_or_a_tagged_prefix_loads():
    cfg = parse("""\
        redis: "redis+cluster://n1:7000/"
        queues: {"{mail}": {}, "{pdf}": {}}
        """)
    assert sorted(cfg.queues) == ["{mail}", "{pdf}"]
    cfg = parse("""\
        redis: {cluster: ["n1:7000"]}
        prefix: "{shop}"
        queues: {mail: {}, pdf: {}}
        """)
    assert cfg.prefix == "{shop}"
    # without a cluster, no tag is needed
    assert parse("queues: {mail: {}}").queues["mail"].name == "mail"

"""Connection settings: defaults on every client the package builds, settable in code and
in the YAML file, checked with a message naming the key."""
from __future__ import annotations

import socket
import textwrap

import pytest
import redis

from echomq_gevent import ConnectionSettings, Queue
from echomq_gevent.host.config import parse_config
from echomq_gevent.connection.clients import DEFAULT_SETTINGS, clone_client, make_client
from echomq_gevent.errors import ConfigError

URL = "redis://127.0.0.1:1/0"  # nothing connects in these tests


def kwargs_of(client: "redis.Redis") -> dict:
    return client.connection_pool.connection_kwargs


def test_clients_from_a_url_get_timeouts_keepalive_and_health_checks():
    kw = kwargs_of(make_client(URL))
    assert kw["socket_timeout"] == DEFAULT_SETTINGS.socket_timeout > 0
    assert kw["socket_connect_timeout"] == DEFAULT_SETTINGS.socket_connect_timeout > 0
    assert kw["socket_keepalive"] is True
    assert kw["health_check_interval"] == DEFAULT_SETTINGS.health_check_interval > 0
    if hasattr(socket, "TCP_KEEPINTVL"):
        assert kw["socket_keepalive_options"][socket.TCP_KEEPINTVL] == DEFAULT_SETTINGS.keepalive_interval


def test_settings_in_code_reach_the_queue_client():
    settings = ConnectionSettings(socket_timeout=2.5, health_check_interval=0, tcp_keepalive=False)
    q = Queue("q", connection=URL, connection_settings=settings)
    kw = kwargs_of(q.client)
    assert (kw["socket_timeout"], kw["health_check_interval"], kw["socket_keepalive"]) == (2.5, 0, False)
    assert "socket_keepalive_options" not in kw


def test_a_clone_of_a_bare_client_fills_what_its_owner_left_unset():
    bare = redis.Redis.from_url(URL, decode_responses=True, socket_timeout=3)
    kw = kwargs_of(clone_client(bare))
    assert kw["socket_timeout"] == 3  # the owner's choice stays
    assert kw["socket_keepalive"] is True and kw["health_check_interval"] == DEFAULT_SETTINGS.health_check_interval
    kw = kwargs_of(clone_client(bare, settings=ConnectionSettings(socket_timeout=7)))
    assert kw["socket_timeout"] == 7


@pytest.mark.parametrize("changes,words", [
    ({"socket_timeout": 0}, "socket_timeout must be a number of seconds > 0"),
    ({"socket_timeout": True}, "socket_timeout must be"),
    ({"keepalive_count": 0}, "keepalive_count must be an integer >= 1"),
    ({"tcp_keepalive": "yes"}, "tcp_keepalive must be true or false"),
    ({"health_check_interval": -1}, "health_check_interval must be"),
])
def test_bad_settings_are_refused_in_code(changes, words):
    with pytest.raises(ConfigError, match=words):
        ConnectionSettings(**changes)


def test_yaml_redis_section_sets_them():
    cfg = parse_config(textwrap.dedent("""
        redis:
          url: redis://127.0.0.1:6379/0
          socket_timeout: 4
          health_check_interval: 5
          tcp_keepalive: true
        queues: {mail: {}}
    """), filename="worker.yaml", env={})
    assert cfg.redis.connection == ConnectionSettings(socket_timeout=4, health_check_interval=5)


@pytest.mark.parametrize("line,words", [
    ("socket_timeout: 0", "key redis.socket_timeout: socket_timeout must be a number of seconds > 0"),
    ("socket_timout: 3", "key redis.socket_timout: unknown key 'socket_timout'; did you mean 'socket_timeout'"),
])
def test_yaml_bad_setting_names_the_key(line, words):
    with pytest.raises(ConfigError) as info:
        parse_config(f"redis:\n  url: redis://127.0.0.1:6379/0\n  {line}\nqueues: {{mail: {{}}}}\n",
                     filename="worker.yaml", env={})
    assert words in str(info.value)


def test_unix_socket_clients_get_timeouts_without_tcp_options():
    client = make_client("unix:///tmp/echomq-none.sock?db=0")
    kw = kwargs_of(client)
    assert kw["socket_timeout"] == DEFAULT_SETTINGS.socket_timeout
    assert "socket_keepalive" not in kw and "socket_keepalive_options" not in kw
    clone = kwargs_of(clone_client(client, settings=ConnectionSettings(socket_timeout=3)))
    assert clone["socket_timeout"] == 3 and "socket_keepalive" not in clone
    client.connection_pool.make_connection()  # the connection class accepts what it is given


def test_the_wsgi_enqueue_pool_gets_the_defaults():
    from echomq_gevent.contrib.wsgi import get_queue

    queue = get_queue("conn-settings-q", connection=URL, prefix="p")
    kw = kwargs_of(queue.client)
    assert kw["socket_timeout"] == DEFAULT_SETTINGS.socket_timeout
    assert kw["socket_keepalive"] is True
    assert kw["health_check_interval"] == DEFAULT_SETTINGS.health_check_interval


def test_a_clone_of_a_sentinel_client_asks_the_same_sentinels_on_its_own_connections():
    # the lock-renewal thread's clone must never use a sentinel socket made on the hub's
    # thread (gevent refuses the switch), so each clone gets its own Sentinel manager
    client = make_client("redis+sentinel://:secret@127.0.0.1:26379,127.0.0.1:26380/mymaster/2"
                         "?sentinel_password=watch")
    clone = clone_client(client, max_connections=2)
    mine, theirs = clone.connection_pool.sentinel_manager, client.connection_pool.sentinel_manager
    assert mine is not theirs
    assert not {id(s) for s in mine.sentinels} & {id(s) for s in theirs.sentinels}

    def where(manager):
        return [(s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"])
                for s in manager.sentinels]
    assert where(mine) == where(theirs) == [("127.0.0.1", 26379), ("127.0.0.1", 26380)]
    assert mine.sentinel_kwargs == theirs.sentinel_kwargs and mine.sentinel_kwargs["password"] == "watch"
    assert mine.min_other_sentinels == theirs.min_other_sentinels
    assert clone.connection_pool.service_name == "mymaster"
    assert clone.connection_pool.connection_kwargs["db"] == 2
    assert clone.connection_pool.connection_kwargs["password"] == "secret"
    clone.close()
    client.close()

"""The connection ``Scripts`` keeps checked out for its EVALSHAs (the "lane"): the same
bytes and answers as ``client.evalsha``, recovery from NOSCRIPT and dropped connections,
and the connection going back to the pool on close or collection."""
from __future__ import annotations

import gc

import msgpack
import pytest
import redis

from echomq_gevent.errors import JobNotExist
from echomq_gevent.keys import QueueKeys
from echomq_gevent.scripts import Scripts, _pack_command


def _client(redis_url: str, **kw) -> redis.Redis:
    return redis.Redis.from_url(redis_url, decode_responses=True, **kw)


def _pool_counts(client: redis.Redis):
    pool = client.connection_pool
    return pool._created_connections, len(pool._available_connections), len(pool._in_use_connections)


@pytest.fixture
def lane(redis_url, prefix, qname):
    client = _client(redis_url)
    scripts = Scripts(client, QueueKeys(qname, prefix))
    yield scripts
    scripts.release_connections()
    client.close()


@pytest.mark.skipif(_pack_command is None, reason="hiredis is not installed")
def test_packed_bytes_equal_redis_py_packing(redis_url):
    client = _client(redis_url)
    conn = client.connection_pool.get_connection()
    try:
        cmd = ("EVALSHA", "a" * 40, 3, "bull:q:wait", "bull:q:é", "bull:q:1", 1700000000123,
               "returnvalue", '{"ok":true}', msgpack.packb({"token": "t:1", "n": 5}), "0")
        assert b"".join(conn.pack_command(*cmd)) == _pack_command(cmd)
    finally:
        client.connection_pool.release(conn)
        client.close()


def test_calls_reuse_one_connection_and_release_returns_it(lane, r):
    lane.client.script_load(lane.lib.sources["getCounts-1"])  # through the pool: 1 idle there
    assert _pool_counts(lane.client) == (1, 1, 0)
    for _ in range(5):
        assert lane.get_counts(["wait", "active"]) == [0, 0]
    assert _pool_counts(lane.client) == (1, 0, 1)
    lane.release_connections()
    assert _pool_counts(lane.client) == (1, 1, 0)
    lane.release_connections()  # idempotent
    assert lane.get_counts(["wait"]) == [0]
    assert _pool_counts(lane.client) == (1, 0, 1)


def test_other_commands_use_the_pool_beside_the_lane(lane):
    lane.client.script_load(lane.lib.sources["getCounts-1"])
    lane.get_counts(["wait"])
    assert lane.client.ping() is True
    assert lane.client.ping() is True
    assert _pool_counts(lane.client) == (2, 1, 1)


def test_script_errors_raise_and_keep_the_connection(lane, r):
    with pytest.raises(JobNotExist):
        lane.update_progress("missing", "5")
    r.set(lane.keys.wait, "not a list")
    with pytest.raises(redis.ResponseError):
        lane.get_counts(["wait"])
    r.delete(lane.keys.wait)
    assert lane.get_counts(["wait"]) == [0]
    assert _pool_counts(lane.client)[2] == 1


def test_noscript_is_loaded_and_retried_on_the_same_connection(lane, r):
    lane.get_counts(["wait"])
    r.script_flush()
    assert lane.get_counts(["wait"]) == [0]
    assert r.script_exists(lane.lib.shas["getCounts-1"]) == [True]
    assert _pool_counts(lane.client) == (1, 0, 1)


def test_a_killed_connection_is_replaced(lane, r):
    lane.get_counts(["wait"])
    conn = lane._lane[0]
    client_id = conn.send_command("CLIENT", "ID") or int(conn.read_response())
    r.client_kill_filter(_id=client_id)
    assert lane.get_counts(["wait", "active"]) == [0, 0]
    assert lane.get_counts(["wait"]) == [0]


def test_collected_scripts_give_the_connection_back(redis_url, prefix, qname):
    client = _client(redis_url)
    try:
        scripts = Scripts(client, QueueKeys(qname, prefix))
        scripts.get_counts(["wait"])
        assert _pool_counts(client)[2] == 1
        del scripts
        gc.collect()
        assert _pool_counts(client)[2] == 0
    finally:
        client.close()


@pytest.mark.parametrize("kw", [{"max_connections": 2}, {"single_connection_client": True}])
def test_small_or_single_connection_clients_keep_nothing(redis_url, prefix, qname, kw):
    client = _client(redis_url, **kw)
    try:
        scripts = Scripts(client, QueueKeys(qname, prefix))
        assert scripts._lane is None
        assert scripts.get_counts(["wait"]) == [0]
        if "max_connections" in kw:
            assert _pool_counts(client)[2] == 0
    finally:
        client.close()


def _batch(scripts: Scripts, calls):
    pipe = scripts.client.pipeline(transaction=False)
    for keys in calls:
        scripts.queue_call(pipe, "getCounts-1", [scripts.keys.base], keys)
    try:
        return scripts.execute_pipeline(pipe)
    finally:
        pipe.reset()


def test_pipelined_calls_go_on_the_lane_with_errors_in_place(lane, r):
    lane.client.script_load(lane.lib.sources["getCounts-1"])
    r.set(lane.keys.active, "not a list")
    answers = _batch(lane, [["wait"], ["active"], ["wait", "paused"]])
    assert answers[0] == [0] and answers[2] == [0, 0]
    assert isinstance(answers[1], redis.ResponseError)
    assert _pool_counts(lane.client) == (1, 0, 1)  # the pool's one connection, kept by the lane
    assert _batch(lane, [["wait"]]) == [[0]]
    assert _pool_counts(lane.client) == (1, 0, 1)


def test_pipelined_noscript_and_dropped_connection_recover(lane, r):
    lane.get_counts(["wait"])
    r.script_flush()
    assert _batch(lane, [["wait"], ["active"]]) == [[0], [0]]
    conn = lane._lane[0]
    conn.send_command("CLIENT", "ID")
    r.client_kill_filter(_id=int(conn.read_response()))
    assert _batch(lane, [["wait"], ["active"]]) == [[0], [0]]
    assert lane.get_counts(["wait"]) == [0]


def test_other_commands_on_a_script_pipeline_are_refused(lane):
    pipe = lane.client.pipeline(transaction=False)
    lane.queue_call(pipe, "getCounts-1", [lane.keys.base], ["wait"])
    pipe.ping()
    with pytest.raises(RuntimeError, match="separate pipeline"):
        lane.execute_pipeline(pipe)
    pipe.reset()


def test_transaction_pipelines_are_left_to_redis_py(lane):
    pipe = lane.client.pipeline(transaction=True)
    lane.queue_call(pipe, "getCounts-1", [lane.keys.base], ["wait"])
    assert lane.execute_pipeline(pipe) == [[0]]
    pipe.reset()

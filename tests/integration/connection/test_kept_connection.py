"""The connection ``Scripts`` keeps checked out for its EVALSHAs
(``echomq_gevent.connection.kept``): the same bytes and answers as ``client.evalsha``,
recovery from NOSCRIPT and dropped connections, and the connection going back to the pool
on close or collection. ``test_redis_py_versions.py`` runs this module against the lowest
and the newest redis-py the package allows."""
from __future__ import annotations

import gc
import os
from urllib.parse import urlsplit

import msgpack
import pytest
import redis

from echomq_gevent.errors import JobNotExist
from echomq_gevent.protocol.keys import QueueKeys
from echomq_gevent.connection.kept import KeptConnection, _RedisPy, pack_command
from echomq_gevent.protocol.scripts import ScriptCall, Scripts
from tcp_proxy import ControlledProxy


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


@pytest.mark.skipif(pack_command(("PING",)) is None, reason="hiredis is not installed")
def test_packed_bytes_equal_redis_py_packing(redis_url):
    client = _client(redis_url)
    conn = _RedisPy.checkout(client.connection_pool)
    try:
        cmd = ("EVALSHA", "a" * 40, 3, "bull:q:wait", "bull:q:é", "bull:q:1", 1700000000123,
               "returnvalue", '{"ok":true}', msgpack.packb({"token": "t:1", "n": 5}), "0")
        assert b"".join(conn.pack_command(*cmd)) == pack_command(cmd)
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
    conn = lane.kept_connection.idle[0]
    client_id = conn.send_command("CLIENT", "ID") or int(conn.read_response())
    r.client_kill_filter(_id=client_id)
    assert lane.get_counts(["wait", "active"]) == [0, 0]
    assert lane.get_counts(["wait"]) == [0]


def test_the_scripts_of_one_client_share_its_kept_connection(redis_url, prefix, qname):
    # the workers of a process share one client: their script calls share one connection,
    # which stays with the client (not with one Scripts) until released
    client = _client(redis_url)
    try:
        many = [Scripts(client, QueueKeys(f"{qname}{i}", prefix)) for i in range(5)]
        for scripts in many:
            scripts.get_counts(["wait"])
        assert _pool_counts(client)[2] == 1
        assert len({id(s.kept_connection) for s in many}) == 1
        del many
        gc.collect()
        assert _pool_counts(client)[2] == 1  # kept for the client's next user
        Scripts(client, QueueKeys(qname, prefix)).release_connections()
        assert _pool_counts(client)[2] == 0
    finally:
        client.close()


@pytest.mark.parametrize("kw", [{"max_connections": 2}, {"single_connection_client": True}])
def test_small_or_single_connection_clients_keep_nothing(redis_url, prefix, qname, kw):
    # the pool is built first: redis-py 4.x's from_url hands every keyword to the pool
    pool = redis.ConnectionPool.from_url(redis_url, decode_responses=True,
                                         max_connections=kw.get("max_connections"))
    client = redis.Redis(connection_pool=pool,
                         single_connection_client=kw.get("single_connection_client", False))
    try:
        scripts = Scripts(client, QueueKeys(qname, prefix))
        assert scripts.kept_connection is None
        assert scripts.get_counts(["wait"]) == [0]
        if "max_connections" in kw:
            assert _pool_counts(client)[2] == 0
    finally:
        client.close()


def _batch(scripts: Scripts, calls):
    return scripts.run_many([ScriptCall("getCounts-1", [scripts.keys.base], keys) for keys in calls])


def test_batched_calls_go_on_the_kept_connection_with_errors_in_place(lane, r):
    lane.client.script_load(lane.lib.sources["getCounts-1"])
    r.set(lane.keys.active, "not a list")
    answers = _batch(lane, [["wait"], ["active"], ["wait", "paused"]])
    assert answers[0] == [0] and answers[2] == [0, 0]
    assert isinstance(answers[1], redis.ResponseError)
    assert _pool_counts(lane.client) == (1, 0, 1)  # the pool's one connection, kept
    assert _batch(lane, [["wait"]]) == [[0]]
    assert _pool_counts(lane.client) == (1, 0, 1)


def test_batched_noscript_and_dropped_connection_recover(lane, r):
    lane.get_counts(["wait"])
    r.script_flush()
    assert _batch(lane, [["wait"], ["active"]]) == [[0], [0]]
    conn = lane.kept_connection.idle[0]
    conn.send_command("CLIENT", "ID")
    r.client_kill_filter(_id=int(conn.read_response()))
    assert _batch(lane, [["wait"], ["active"]]) == [[0], [0]]
    assert lane.get_counts(["wait"]) == [0]


def test_negative_answers_become_typed_errors_in_place(lane):
    calls = [ScriptCall("updateProgress-3", [lane.keys.job("nope"), lane.keys.events, lane.keys.meta],
                        ["nope", "5"], "nope"),
             ScriptCall("getCounts-1", [lane.keys.base], ["wait"])]
    answers = lane.run_many(calls)
    assert isinstance(answers[0], JobNotExist) and "nope" in str(answers[0])
    assert answers[1] == [0]
    with pytest.raises(JobNotExist):
        lane.run(calls[0])


def test_a_script_batch_runs_queued_calls_once(lane):
    batch = lane.batch()
    lane.queue_call(batch, "getCounts-1", [lane.keys.base], ["wait"])
    lane.queue_call(batch, "getCounts-1", [lane.keys.base], ["wait", "active"])
    assert len(batch) == 2
    assert lane.execute_pipeline(batch) == [[0], [0, 0]]
    assert batch.execute() == []


def test_redis_py_pipelines_replay_noscript_in_place_beside_other_commands(lane, r):
    r.script_flush()
    pipe = lane.client.pipeline(transaction=False)
    pipe.ping()
    lane.queue_call(pipe, "getCounts-1", [lane.keys.base], ["wait"])
    pipe.ping()
    assert lane.execute_pipeline(pipe) == [True, [0], True]
    pipe.reset()


def test_transaction_pipelines_are_left_to_redis_py(lane):
    pipe = lane.client.pipeline(transaction=True)
    lane.queue_call(pipe, "getCounts-1", [lane.keys.base], ["wait"])
    assert lane.execute_pipeline(pipe) == [[0]]
    pipe.reset()


def test_for_client_refuses_clients_it_cannot_serve(redis_url):
    class Custom(redis.Redis):
        pass

    for client in (Custom.from_url(redis_url), redis.Redis.from_url(redis_url, encoding="latin-1")):
        try:
            assert KeptConnection.for_client(client) is None
        finally:
            client.close()
    client = redis.Redis.from_url(redis_url)
    try:
        assert isinstance(KeptConnection.for_client(client), KeptConnection)
    finally:
        client.close()


# --- no blind replay ---------------------------------------------------------------------------
# A reply that is surely lost: the client talks to Redis through a proxy that, once told to
# hold its open connections, carries their commands to Redis but no reply back. The client
# gives up after its socket timeout (the reply never comes, however loaded the machine); the
# script's own count says how often it ran.
_COUNT_RUNS = "return redis.call('INCR', KEYS[1])"


@pytest.fixture
def proxy(redis_url):
    parts = urlsplit(redis_url)
    p = ControlledProxy(parts.hostname or "127.0.0.1", parts.port or 6379)
    yield p
    p.close()


@pytest.fixture
def impatient(proxy):
    client = _client(proxy.url, socket_timeout=1.0)
    kept = KeptConnection.for_client(client)
    assert kept is not None
    yield kept
    kept.release()
    client.close()


def _hold_the_kept_connection(kept, proxy):
    """Open the kept connection (a PING through it), then hold its replies."""
    assert kept.call("PING") in ("PONG", True)
    assert proxy.hold_replies() == 1  # the kept connection is the only one not held before


def test_a_call_whose_answer_is_lost_is_not_sent_again_unless_safe(impatient, proxy, r, prefix, wait_for):
    from echomq_gevent.connection.kept import AmbiguousCallError

    once, twice = f"{prefix}:once", f"{prefix}:twice"
    _hold_the_kept_connection(impatient, proxy)
    with pytest.raises(AmbiguousCallError, match="may have run"):
        impatient.call("EVAL", _COUNT_RUNS, 1, once, resend=False)
    wait_for(lambda: r.get(once), what="the call to have run")
    assert r.get(once) == "1"  # it ran, and was not sent again
    # a call declared safe is sent again through the client, on a connection the proxy
    # does not hold: the caller gets the second run's answer
    _hold_the_kept_connection(impatient, proxy)
    assert impatient.call("EVAL", _COUNT_RUNS, 1, twice, resend=True) == 2
    assert r.get(twice) == "2"


def test_a_batch_whose_answers_are_lost_is_not_sent_again(impatient, proxy, r, prefix, wait_for):
    from echomq_gevent.connection.kept import AmbiguousCallError

    key = f"{prefix}:runs"
    _hold_the_kept_connection(impatient, proxy)
    with pytest.raises(AmbiguousCallError) as info:
        impatient.call_many([("EVAL", _COUNT_RUNS, 1, key), ("EVAL", _COUNT_RUNS, 1, key)], resend=False)
    assert len(info.value.commands) == 2
    wait_for(lambda: r.get(key) == "2", what="both calls to have run")
    assert proxy.accepted == 1  # nothing was sent again, on any connection


def test_a_connection_the_server_closed_while_idle_is_replaced_before_the_call(lane, r, monkeypatch):
    import echomq_gevent.connection.kept as kept_module

    monkeypatch.setattr(kept_module, "STALE_AFTER_S", 0.0)
    lane.get_counts(["wait"])
    conn = lane.kept_connection.idle[0]
    conn.send_command("CLIENT", "ID")
    r.client_kill_filter(_id=int(conn.read_response()))
    # an unsafe call: the closed connection is noticed before anything is written
    assert lane.call("addLog-2", [lane.keys.job("nope"), lane.keys.logs("nope")], ["nope", "x", ""],
                     resend=False) == -1


def test_a_forked_child_never_uses_the_parents_kept_connection(lane):
    kept = lane.kept_connection
    parent_id = kept.call("CLIENT", "ID")
    assert kept.idle  # the parent's connection, kept for its next call
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.write(write_end, str(kept.call("CLIENT", "ID")).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    os.waitpid(pid, 0)
    child = os.read(read_end, 64)
    os.close(read_end)
    assert child and int(child) != parent_id
    assert kept.call("CLIENT", "ID") == parent_id

"""The embedded Redis: starts, serves, keeps its data, stops, and leaves no process
behind, even when the process that started it is killed."""
from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import time

import pytest
import redis

from echomq_gevent.host.embedded import EmbeddedRedis

from target import PYTHON

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))



def test_starts_serves_and_stops_cleanly(tmp_path, redis_pids_in):
    d = str(tmp_path / "var")
    server = EmbeddedRedis(directory=d, stop_grace=120).start()
    try:
        assert server.owned
        assert server.url.startswith("unix://") and server.url.endswith("redis.sock?db=0")
        client = redis.Redis.from_url(server.url, decode_responses=True)
        client.set("k", "v")
        assert client.get("k") == "v"
        client.close()
        pid = server.server_pid
        assert pid and redis_pids_in(d) == [pid]
    finally:
        t0 = time.monotonic()
        server.stop()
    # a clean stop never sits out the escalation grace (a stuck watchdog would wait 120 s)
    assert time.monotonic() - t0 < 60
    assert redis_pids_in(d) == []
    with open(os.path.join(d, "redis.log")) as fh:
        assert "ready to exit" in fh.read()  # SIGTERM: redis shut down by itself, not killed
    assert not os.path.exists(os.path.join(d, "redis.sock"))
    assert not os.path.exists(os.path.join(d, "redis.pid"))


def test_data_survives_a_restart(tmp_path, redis_pids_in):
    d = str(tmp_path / "var")
    with EmbeddedRedis(directory=d) as server:
        client = redis.Redis.from_url(server.url)
        client.rpush("bull:q:wait", "1", "2")
        client.close()
    with EmbeddedRedis(directory=d) as server:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        assert client.lrange("bull:q:wait", 0, -1) == ["1", "2"]
        client.close()
    assert redis_pids_in(d) == []


def test_second_user_attaches_without_owning(tmp_path, redis_pids_in):
    d = str(tmp_path / "var")
    with EmbeddedRedis(directory=d) as owner:
        guest = EmbeddedRedis(directory=d).start()
        assert not guest.owned and guest.url == owner.url
        guest.stop()  # must not stop the owner's server
        assert redis.Redis.from_url(owner.url).ping()
    assert redis_pids_in(d) == []


def test_tcp_port_when_asked(tmp_path):
    from redis_server import free_port

    port = free_port()
    with EmbeddedRedis(directory=str(tmp_path / "var"), port=port, persist=False) as server:
        assert server.url == f"redis://127.0.0.1:{port}/0"
        assert redis.Redis.from_url(server.url).ping()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_no_process_left_when_the_owner_is_killed(tmp_path, sig, wait_for, redis_pids_in):
    d = str(tmp_path / "var")
    script = textwrap.dedent(f"""
        import sys, time
        from echomq_gevent.host.embedded import EmbeddedRedis
        server = EmbeddedRedis(directory={d!r}).start()
        print(server.server_pid, flush=True)
        time.sleep(60)
    """)
    env = dict(os.environ, PYTHONPATH=ROOT)
    owner = subprocess.Popen([PYTHON, "-c", script], stdout=subprocess.PIPE, env=env, text=True)
    try:
        pid = int(owner.stdout.readline())
        assert redis_pids_in(d) == [pid]
        owner.send_signal(sig)
        owner.wait(10)
        wait_for(lambda: not redis_pids_in(d), what="redis-server to exit after its owner died")
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


def test_stale_files_from_a_crash_are_cleared(tmp_path, redis_pids_in):
    d = tmp_path / "var"
    d.mkdir()
    (d / "redis.pid").write_text("999999\n")  # no such process
    (d / "redis.sock").write_text("")         # a dead socket file
    with EmbeddedRedis(directory=str(d)) as server:
        assert server.owned and redis.Redis.from_url(server.url).ping()
    assert redis_pids_in(str(d)) == []

"""``echomq-gevent dashboard``: the standalone server (127.0.0.1 unless told, basic auth
from the environment, SIGTERM stops it)."""
from __future__ import annotations

import base64
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from echomq_gevent.contrib.dashboard import auth_from_env, parse_bind
from target import PYTHON

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start(*args, env=None):
    full_env = dict(os.environ, PYTHONPATH=ROOT)
    full_env.pop("ECHOMQ_CONFIG", None)
    full_env.update(env or {})
    proc = subprocess.Popen([PYTHON, "-m", "echomq_gevent", *args], cwd=ROOT, env=full_env,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    lines = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"dashboard on http://([^/]+)/", line)
        if m:
            return proc, m.group(1)
    proc.kill()
    raise AssertionError("the dashboard did not say where it listens:\n" + "".join(lines))


def get(url, headers=None):
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_bind_parsing_defaults_to_localhost():
    assert parse_bind(":0") == ("127.0.0.1", 0)
    assert parse_bind("8080") == ("127.0.0.1", 8080)
    assert parse_bind("0.0.0.0:80") == ("0.0.0.0", 80)
    assert parse_bind("[::1]:81") == ("::1", 81)
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_bind("localhost:http")
    with pytest.raises(ValueError, match="both"):
        auth_from_env({"ECHOMQ_DASHBOARD_USER": "ops"})
    assert auth_from_env({}) is None


def test_standalone_dashboard_serves_queues_with_basic_auth(redis_url, prefix, queue, qname):
    queue.add("hello", {"x": 1})
    proc, where = start("--redis", redis_url, "--prefix", prefix, "dashboard", "--bind", ":0",
                        env={"ECHOMQ_DASHBOARD_USER": "ops", "ECHOMQ_DASHBOARD_PASSWORD": "s3cret"})
    try:
        assert where.startswith("127.0.0.1:")
        status, body = get(f"http://{where}/")
        assert status == 401
        good = base64.b64encode(b"ops:s3cret").decode()
        status, body = get(f"http://{where}/", {"Authorization": f"Basic {good}"})
        assert status == 200 and f'data-queue="{qname}"' in body and "read-only" in body
        bad = base64.b64encode(b"ops:wrong").decode()
        assert get(f"http://{where}/", {"Authorization": f"Basic {bad}"})[0] == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0

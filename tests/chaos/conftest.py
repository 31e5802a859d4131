"""Fixtures of the chaos suite: a Redis of the test's own (AOF on, so it can be killed and
restarted, or squeezed with maxmemory, without touching the session's), a TCP proxy the
test controls, and worker processes started, killed and restarted at will.

Long cases carry ``@pytest.mark.chaos_long`` and run with ``make chaos`` (or
``ECHOMQ_CHAOS_LONG=1``); the soak runs with ``make soak``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Dict, List, Optional

import pytest
import redis

from redis_server import RedisServer
from tcp_proxy import ControlledProxy

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def pytest_collection_modifyitems(config, items):
    long_ok = bool(os.environ.get("ECHOMQ_CHAOS_LONG"))
    soak_ok = bool(os.environ.get("ECHOMQ_SOAK_JOBS"))
    for item in items:
        if "chaos_long" in item.keywords and not long_ok:
            item.add_marker(pytest.mark.skip(reason="long chaos case: run with `make chaos`"))
        if "soak" in item.keywords and not soak_ok:
            item.add_marker(pytest.mark.skip(reason="the soak: run with `make soak`"))


@pytest.fixture
def own_redis():
    """A redis-server of this test only, AOF with fsync always; ``.kill()``/``.start()``
    restart it on the same port with its data."""
    server = RedisServer(aof=True).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def own_r(own_redis):
    client = redis.Redis.from_url(own_redis.url, decode_responses=True, socket_timeout=5)
    yield client
    client.close()


@pytest.fixture
def proxy(own_redis):
    p = ControlledProxy("127.0.0.1", own_redis.port)
    yield p
    p.close()


class WorkerProcesses:
    """Starts ``chaos_worker.py`` processes; all are killed at the end of the test."""

    def __init__(self, tmp_path: Any, queue: str, prefix: str, record_url: str) -> None:
        self.tmp_path = tmp_path
        self.queue = queue
        self.prefix = prefix
        self.record_url = record_url
        self.procs: List[subprocess.Popen] = []

    def start(self, url: str, settings: Optional[Dict[str, Any]] = None, extra: Optional[Dict[str, Any]] = None,
              **options: Any) -> subprocess.Popen:
        """A worker process on ``url`` with ``ConnectionSettings(**settings)`` and worker
        ``options``; ``extra`` goes into its JSON argument as is (``record``, ``stats_every``)."""
        cfg = {"queue": self.queue, "url": url, "record_url": self.record_url, "prefix": self.prefix,
               "options": options, "settings": settings or {}, **(extra or {})}
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, HERE, os.environ.get("PYTHONPATH", "")]))
        log = open(self.tmp_path / f"worker{len(self.procs)}.log", "w")
        proc = subprocess.Popen([sys.executable, os.path.join(HERE, "chaos_worker.py"), json.dumps(cfg)],
                                cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=log, text=True)
        self.procs.append(proc)
        line = proc.stdout.readline().strip()
        assert line == "READY", f"the worker process did not start ({line!r}); see {log.name}"
        return proc

    def log_text(self) -> str:
        out = []
        for i in range(len(self.procs)):
            path = self.tmp_path / f"worker{i}.log"
            if path.exists():
                out.append(path.read_text())
        return "\n".join(out)

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)


@pytest.fixture
def workers(tmp_path, redis_url, prefix, qname):
    """Worker processes; they record each run in the session's Redis (``runs_of(r, prefix)``),
    which no fault touches."""
    w = WorkerProcesses(tmp_path, qname, prefix, redis_url)
    yield w
    w.stop_all()

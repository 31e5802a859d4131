"""The pipelined script connection (``echomq_gevent.connection.pipelined``) needs monkey-patched
sockets, which this test process does not have: its cases (``pipelined_cases.py``: answers
to the right callers with many round trips in flight, call order, a connection dying with
several batches outstanding, callers killed while waiting or before their call is written)
run in a subprocess that calls ``gevent.monkey.patch_all()`` first, on this session's Redis."""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CASES = os.path.join(ROOT, "tests", "integration", "connection", "pipelined_cases.py")
_RUN = ("from gevent import monkey; monkey.patch_all()\n"
        "import sys, pytest\n"
        "sys.exit(pytest.main(sys.argv[1:]))\n")


def run_cases(redis_url: str, *extra: str, env: "dict | None" = None) -> subprocess.CompletedProcess:
    env = dict(env or os.environ, REDIS_URL=redis_url)
    return subprocess.run([sys.executable, "-c", _RUN, "-q", "-p", "no:cacheprovider", CASES, *extra],
                          env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)


def test_pipelined_connection_cases_under_patched_sockets(redis_url):
    run = run_cases(redis_url)
    assert run.returncode == 0, f"{run.stdout[-6000:]}\n{run.stderr[-3000:]}"
    assert " passed" in run.stdout and " failed" not in run.stdout and " skipped" not in run.stdout

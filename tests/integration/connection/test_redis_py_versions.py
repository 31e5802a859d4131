"""The kept connection (``echomq_gevent.connection.kept``) and the pipelined one
(``echomq_gevent.connection.pipelined``) rely on redis-py below its client API; their tests run here
again against the lowest and the newest redis-py that ``setup.py`` allows, each installed
into a scratch folder that shadows the installed one."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from test_pipelined_connection import run_cases

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _allowed_redis() -> str:
    with open(os.path.join(ROOT, "setup.py"), encoding="utf-8") as fh:
        match = re.search(r'"redis(?:\[[^\]]*\])?([^"]+)"', fh.read())
    assert match, "setup.py names no redis requirement"
    return match.group(1)


def _versions():
    spec = _allowed_redis()
    lowest = re.search(r">=\s*([\d.]+)", spec)
    assert lowest, f"setup.py's redis requirement {spec!r} has no lower bound"
    low = lowest.group(1)
    low = low + ".0" if low.count(".") == 1 else low
    return [pytest.param(f"redis=={low}", low, id=f"lowest-{low}"),
            pytest.param(f"redis{spec}", None, id="newest")]


@pytest.mark.parametrize("requirement,expected", _versions())
def test_kept_connection_across_allowed_redis_py(tmp_path, redis_url, requirement, expected):
    target = tmp_path / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                          "--no-deps", "--target", str(target), requirement],
                         capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, f"pip install {requirement} failed:\n{pip.stderr[-2000:]}"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")]),
               REDIS_URL=redis_url)
    version = subprocess.run([sys.executable, "-c", "import redis; print(redis.__version__)"], env=env,
                             capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert version.returncode == 0, version.stderr
    if expected is not None:
        assert version.stdout.strip() == expected
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          os.path.join(ROOT, "tests", "integration", "connection", "test_kept_connection.py")],
                         env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, (f"with redis-py {version.stdout.strip()}:\n"
                                 f"{run.stdout[-4000:]}\n{run.stderr[-2000:]}")
    assert " passed" in run.stdout and " failed" not in run.stdout
    piped = run_cases(redis_url, env=env)  # under patched sockets
    assert piped.returncode == 0, (f"pipelined, with redis-py {version.stdout.strip()}:\n"
                                   f"{piped.stdout[-4000:]}\n{piped.stderr[-2000:]}")
    assert " passed" in piped.stdout and " failed" not in piped.stdout

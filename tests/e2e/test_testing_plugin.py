"""The testing kit as a user's project uses it: ``pytest_plugins = ["echomq_gevent.testing"]``
in a conftest, tests that enqueue, drain and assert, run by pytest in a subprocess with
the Redis the plugin starts itself (no ``REDIS_URL``), in parallel under pytest-xdist,
and in a process that gevent patched first; no redis-server of the run is left."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

USER_TESTS = textwrap.dedent('''
    import os

    from echomq_gevent.testing import assert_enqueued, drain


    def send_welcome(job):
        return {"sent_to": job.data["email"]}


    def signup(queue, email):  # the user's code that enqueues
        queue.add("welcome", {"email": email}, {"attempts": 3, "backoff": {"type": "exponential", "delay": 30000}})


    def test_signup_sends_a_welcome(echomq_queue):
        emails = echomq_queue("emails")
        signup(emails, "ada@example.com")
        assert_enqueued(emails, "welcome", data={"email": "ada@example.com"}, count=1)
        assert drain(emails, {"welcome": send_welcome}).values == [{"sent_to": "ada@example.com"}]


    def test_a_retrying_job_does_not_wait_for_its_backoff(echomq_queue):
        emails = echomq_queue("emails")
        signup(emails, "grace@example.com")
        tries = []

        def flaky(job):
            tries.append(job.attempts_made)
            if len(tries) < 3:
                raise ConnectionError("smtp down")
            return "sent"

        result = drain(emails, {"welcome": flaky}, timeout=10)
        assert result.values == ["sent"] and len(result.retried) == 2


    def test_each_test_has_its_own_prefix(echomq_queue, echomq_prefix, echomq_redis_url):
        emails = echomq_queue("emails")
        assert emails.prefix == echomq_prefix
        assert emails.get_job_counts("waiting")["waiting"] == 0
        with open(os.environ["URLS_FILE"], "a") as fh:
            fh.write(echomq_redis_url + "\\n")
''')


def _project(tmp_path, patched: bool) -> str:
    project = tmp_path / ("patched" if patched else "plain")
    project.mkdir()
    head = "from gevent import monkey\nmonkey.patch_all()\n\n" if patched else ""
    (project / "conftest.py").write_text(head + 'pytest_plugins = ["echomq_gevent.testing"]\n')
    for n in range(3):  # several modules, so xdist spreads them over its workers
        (project / f"test_user_{n}.py").write_text(USER_TESTS)
    return str(project)


def _run(project: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "PYTEST_ADDOPTS", "PYTHONPATH")}
    env["URLS_FILE"] = os.path.join(project, "urls.txt")
    # the run's temporary folders (the plugin's redis-server among them) under the project
    basetemp = os.path.join(project, "tmp")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", basetemp,
                           *args], cwd=project, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("patched", [False, True], ids=["unpatched", "patched"])
def test_a_users_tests_run_with_the_plugin(tmp_path, patched, redis_pids_in):
    project = _project(tmp_path, patched)
    done = _run(project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "9 passed" in done.stdout, done.stdout
    urls = set(open(os.path.join(project, "urls.txt")).read().split())
    assert len(urls) == 1, urls  # one server for the run
    assert os.path.isdir(os.path.join(project, "tmp")), "the run kept its folders elsewhere"
    assert redis_pids_in(project) == [], "the run's redis-server outlived it"


def test_a_users_tests_run_in_parallel_under_xdist(tmp_path, redis_pids_in):
    pytest.importorskip("xdist")
    project = _project(tmp_path, patched=False)
    done = _run(project, "-n", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "9 passed" in done.stdout, done.stdout
    assert "bringing up nodes" in done.stdout, done.stdout  # xdist ran them
    urls = set(open(os.path.join(project, "urls.txt")).read().split())
    # a server per xdist worker process that ran one of them (a fast worker may run all)
    assert 1 <= len(urls) <= 2, urls
    assert redis_pids_in(project) == []

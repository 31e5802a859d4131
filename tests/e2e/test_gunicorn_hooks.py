"""The gunicorn integration's pieces on their own: hook chaining as gunicorn validates
and calls it, the drain budget, the patching check (with a real gunicorn ``-k sync``),
a bad YAML refused before any worker forks, and the health endpoints' decisions
against a real Redis."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List

import pytest
from gunicorn.config import Config as GunicornConfig

from echomq_gevent.contrib import gunicorn as gu
from echomq_gevent.contrib.state import process
from echomq_gevent.contrib.wsgi import EchoMQMiddleware
from echomq_gevent.errors import ConfigError

from target import PYTHON

REPO = Path(__file__).resolve().parents[2]


def _yaml(tmp_path: Path, redis_url: str, prefix: str, extra: str = "") -> Path:
    path = tmp_path / "worker.yaml"
    path.write_text(textwrap.dedent(f"""\
        redis: {{url: "{redis_url}"}}
        prefix: {prefix}
        entry_points: false
        queues:
          mail:
            processor: "examples.tasks:dispatch"
            concurrency: 3
        """) + extra)
    return path


@pytest.fixture(autouse=True)
def _keep_module_state():
    """install() sets module globals; put them back so tests stay independent."""
    saved = (process.settings, process.cohost, os.environ.get(gu.PROM_DIR_ENV))
    yield
    process.settings, process.cohost = saved[0], saved[1]
    if saved[2] is None:
        os.environ.pop(gu.PROM_DIR_ENV, None)
    else:
        os.environ[gu.PROM_DIR_ENV] = saved[2]


def test_install_chains_the_files_own_hooks_and_gunicorn_accepts_them(tmp_path, redis_url, prefix):
    calls: List[str] = []
    ns: Dict[str, Any] = {
        "__file__": str(tmp_path / "gunicorn.conf.py"),
        "worker_exit": lambda server, worker: calls.append("theirs exit"),
        "worker_int": lambda worker: calls.append("theirs int"),
        "on_exit": lambda server: calls.append("theirs on_exit"),
    }
    path = _yaml(tmp_path, redis_url, prefix)
    settings = gu.install(ns, config="worker.yaml", metrics=False)  # found beside the conf file
    assert settings.config_path == str(path)
    assert ns["worker_class"] == "gevent"
    cfg = GunicornConfig()
    for name in ("on_starting", "post_worker_init", "worker_int", "worker_abort", "worker_exit",
                 "child_exit", "on_exit"):
        cfg.set(name, ns[name])  # gunicorn's own arity validation
    # outside a worker process that runs job workers, our part is a no-op and theirs runs
    ns["worker_exit"](SimpleNamespace(), SimpleNamespace(pid=1))
    ns["worker_int"](SimpleNamespace(pid=1))
    ns["on_exit"](SimpleNamespace())
    assert calls == ["theirs exit", "theirs int", "theirs on_exit"]

    # HUP re-reads the file: install() again must not wrap its own hooks twice
    gu.install(ns, config=str(path), metrics=False)
    calls.clear()
    ns["worker_exit"](SimpleNamespace(), SimpleNamespace(pid=1))
    assert calls == ["theirs exit"]


def test_their_hook_runs_even_when_ours_fails(tmp_path, redis_url, prefix):
    calls: List[str] = []
    ns: Dict[str, Any] = {"worker_abort": lambda worker: calls.append("theirs")}
    gu.install(ns, config=str(_yaml(tmp_path, redis_url, prefix)), metrics=False)
    process.cohost = SimpleNamespace(pid=os.getpid(), report_abort=lambda: 1 / 0)
    ns["worker_abort"](SimpleNamespace())
    assert calls == ["theirs"]


def test_a_bad_yaml_is_refused_at_install_naming_line_and_key(tmp_path, redis_url, prefix):
    path = _yaml(tmp_path, redis_url, prefix).read_text().replace("concurrency: 3", "concurency: 3")
    (tmp_path / "bad.yaml").write_text(path)
    with pytest.raises(ConfigError) as err:
        gu.install({}, config=str(tmp_path / "bad.yaml"), metrics=False)
    assert "bad.yaml" in str(err.value) and "concurency" in str(err.value)
    assert "line 7" in str(err.value) or ":7" in str(err.value)


def test_a_cluster_yaml_whose_prefix_has_no_hash_tag_is_refused_at_install(tmp_path):
    # refused in the master, before any worker forks (nothing connects to the cluster)
    path = tmp_path / "cluster.yaml"
    path.write_text(textwrap.dedent("""\
        redis: {cluster: ["127.0.0.1:7000", "127.0.0.1:7001"]}
        prefix: bull
        entry_points: false
        queues:
          mail: {processor: "examples.tasks:dispatch"}
        """))
    with pytest.raises(ConfigError) as err:
        gu.install({}, config=str(path), metrics=False)
    assert "cluster.yaml, line 5, key queues.mail" in str(err.value) and "{bull}" in str(err.value), str(err.value)


def test_a_file_broken_before_a_hup_keeps_the_previous_configuration(tmp_path, redis_url, prefix):
    path = _yaml(tmp_path, redis_url, prefix)
    first = gu.install({}, config=str(path), metrics=False)
    path.write_text(path.read_text().replace("concurrency: 3", "concurrency: -3"))
    again = gu.install({}, config=str(path), metrics=False)  # what gunicorn runs on HUP
    assert again.config.queues["mail"].options["concurrency"] == 3
    assert again.config is first.config


def test_install_turns_on_prometheus_multiprocess_mode(tmp_path, redis_url, prefix):
    os.environ.pop(gu.PROM_DIR_ENV, None)
    gu.install({}, config=str(_yaml(tmp_path, redis_url, prefix)))
    prom_dir = os.environ[gu.PROM_DIR_ENV]
    assert os.path.isdir(prom_dir)
    gu._on_exit(SimpleNamespace())  # removes the directory it made
    assert not os.path.exists(prom_dir)


def test_the_master_imports_the_prometheus_cleanup_before_any_worker_exits(tmp_path, redis_url, prefix):
    # child_exit runs in gunicorn's SIGCHLD handler: its import of prometheus_client must
    # not be the first (a second worker's SIGCHLD arriving during that import re-entered
    # child_exit, which found the package half imported). In a fresh interpreter, as the
    # master starts: the module is there once on_starting has run.
    script = textwrap.dedent(f"""\
        import sys
        from types import SimpleNamespace
        from echomq_gevent.contrib import gunicorn as gu
        ns = {{}}
        gu.install(ns, config={str(_yaml(tmp_path, redis_url, prefix))!r})
        assert "prometheus_client.multiprocess" not in sys.modules
        ns["on_starting"](SimpleNamespace())
        print("prometheus_client.multiprocess" in sys.modules)
        ns["on_exit"](SimpleNamespace())
        """)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop(gu.PROM_DIR_ENV, None)
    out = subprocess.run([PYTHON, "-c", script], cwd=str(REPO), env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


@pytest.mark.parametrize("graceful,timeout,margin,budget", [
    (30, 30, None, 28.0),   # default margin 2 s
    (6, 30, None, 4.5),     # margin at most a quarter
    (30, 10, None, 8.0),    # recycling/HUP: the master's heartbeat timeout is the limit
    (30, 0, 5.0, 25.0),     # timeout 0 = no heartbeat kill; explicit margin
])
def test_drain_budget(tmp_path, redis_url, prefix, graceful, timeout, margin, budget):
    settings = gu.install({}, config=str(_yaml(tmp_path, redis_url, prefix)), metrics=False,
                          drain_margin=margin)
    gworker = SimpleNamespace(alive=True, cfg=SimpleNamespace(graceful_timeout=graceful, timeout=timeout))
    assert gu.CoHost(settings, gworker).budget() == pytest.approx(budget)


def test_refuses_to_start_in_a_process_gevent_did_not_patch(tmp_path, redis_url, prefix):
    settings = gu.install({}, config=str(_yaml(tmp_path, redis_url, prefix)), metrics=False)
    host = gu.CoHost(settings, SimpleNamespace(alive=True))
    from gevent import monkey
    if monkey.is_module_patched("socket"):
        pytest.skip("another test patched this interpreter with gevent")
    with pytest.raises(ConfigError, match="-k gevent"):
        host.start()


def test_gunicorn_with_a_sync_worker_fails_to_boot_and_says_why(tmp_path, redis_url, prefix):
    yaml_path = _yaml(tmp_path, redis_url, prefix)
    conf = tmp_path / "gunicorn.conf.py"
    conf.write_text(textwrap.dedent(f"""\
        from echomq_gevent.contrib.gunicorn import install
        bind = "127.0.0.1:0"
        workers = 1
        wsgi_app = "examples.app:application"
        install(globals(), config={str(yaml_path)!r})
        worker_class = "sync"
        """))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([PYTHON, "-m", "gunicorn", "-c", str(conf)], cwd=str(REPO), env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "not monkey-patched by gevent" in out.stderr and "-k gevent" in out.stderr


def test_gunicorn_refuses_a_bad_yaml_before_forking(tmp_path, redis_url, prefix):
    yaml_path = _yaml(tmp_path, redis_url, prefix, extra="    lock_duration: soon\n")
    conf = tmp_path / "gunicorn.conf.py"
    conf.write_text(f"from echomq_gevent.contrib.gunicorn import install\n"
                    f"install(globals(), config={str(yaml_path)!r})\n")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([PYTHON, "-m", "gunicorn", "-c", str(conf), "examples.app:application"],
                         cwd=str(REPO), env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "lock_duration" in out.stderr and "Booting worker" not in out.stderr


# --- the health endpoints' decisions --------------------------------------------------------------
def _call(app, path: str):
    seen = {}

    def start_response(status, headers):
        seen["status"], seen["headers"] = status, dict(headers)
    body = b"".join(app({"PATH_INFO": path, "REQUEST_METHOD": "GET"}, start_response))
    return int(seen["status"].split()[0]), body


def _cohost(tmp_path, redis_url, prefix, alive=True):
    settings = gu.install({}, config=str(_yaml(tmp_path, redis_url, prefix)), metrics=False)
    host = gu.CoHost(settings, SimpleNamespace(alive=alive, cfg=SimpleNamespace(graceful_timeout=30, timeout=30)))
    host.state = "running"
    return host


def test_ready_and_live_follow_redis_and_gunicorns_decision(tmp_path, redis_url, prefix):
    inner = lambda environ, start_response: (start_response("204 No Content", []), [b""])[1]  # noqa: E731
    host = _cohost(tmp_path, redis_url, prefix)
    app = EchoMQMiddleware(inner, cohost=host)
    assert _call(app, "/_echomq/ready")[0] == 200
    assert _call(app, "/_echomq/live")[0] == 200
    assert _call(app, "/anything")[0] == 204  # not ours: passed to the app

    host.gworker.alive = False  # gunicorn decided to stop this process: out of rotation at once
    status, body = _call(app, "/_echomq/ready")
    assert status == 503 and json.loads(body)["draining"] is True
    assert _call(app, "/_echomq/live")[0] == 200  # still alive: it is draining, not stuck


def test_ready_is_503_when_redis_is_unreachable(tmp_path, prefix):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    host = _cohost(tmp_path, f"redis://127.0.0.1:{port}/0", prefix)
    status, body = _call(EchoMQMiddleware(lambda e, s: [b""], cohost=host), "/_echomq/ready")
    assert status == 503 and "Redis unreachable" in json.loads(body)["reason"]


def test_live_and_ready_without_job_workers_say_why(tmp_path):
    app = EchoMQMiddleware(lambda e, s: [b""])
    process.cohost = None
    status, body = _call(app, "/_echomq/live")
    assert status == 503 and "no job workers" in json.loads(body)["reason"]
    assert _call(app, "/_echomq/ready")[0] == 503

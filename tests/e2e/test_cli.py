"""The ``echomq-gevent`` command in a subprocess: --version, --check, add, status, refused
configuration files, and gevent patching before anything imports socket or redis."""
from __future__ import annotations

import json
import os
import subprocess
import textwrap

import pytest

from echomq_gevent.queue.queue import Queue

from target import PYTHON

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli(*args, cwd=None, env=None, timeout=60):
    """Run ``python -m echomq_gevent ARGS``; returns the CompletedProcess (text)."""
    full_env = dict(os.environ, PYTHONPATH=ROOT)
    full_env.pop("ECHOMQ_CONFIG", None)
    full_env.update(env or {})
    return subprocess.run([PYTHON, "-m", "echomq_gevent", *args], cwd=cwd or ROOT, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def conf(tmp_path, redis_url, prefix, qname):
    """Write a YAML file into tmp_path (a processor module beside it); returns its path."""
    (tmp_path / "clijobs.py").write_text("def handle(job):\n    return {'echo': job.data}\n")

    def write(text: str = None) -> str:
        text = text or f"""
            redis: {{url: "{redis_url}"}}
            prefix: {prefix}
            plugin_paths: ["."]
            entry_points: false
            queues:
              {qname}:
                processor: "clijobs:handle"
                concurrency: 2
        """
        path = tmp_path / "worker.yaml"
        path.write_text(textwrap.dedent(text))
        return str(path)
    return write


def test_version():
    out = cli("--version")
    assert out.returncode == 0
    from echomq_gevent import __version__
    assert out.stdout.strip().startswith(f"echomq-gevent {__version__}")


def test_gevent_patches_before_socket_ssl_or_redis_are_imported():
    code = textwrap.dedent("""
        import sys
        import echomq_gevent.host.cli as cli
        import socket, gevent.socket, threading, gevent.monkey
        print(repr(cli.PREIMPORTED), socket.socket is gevent.socket.socket,
              gevent.monkey.is_module_patched('threading'))
    """)
    out = subprocess.run([PYTHON, "-c", code], env=dict(os.environ, PYTHONPATH=ROOT),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["()", "True", "True"]


def test_check_passes_for_a_good_file(conf):
    out = cli("-c", conf(), "--check")
    assert out.returncode == 0, out.stderr
    assert "OK" in out.stdout and "answers PING" in out.stdout
    assert "processor clijobs:handle" in out.stdout


def test_check_fails_when_redis_does_not_answer(conf, qname):
    from redis_server import free_port

    path = conf(f"""
        redis: {{url: "redis://127.0.0.1:{free_port()}/0"}}
        plugin_paths: ["."]
        entry_points: false
        queues:
          {qname}: {{processor: "clijobs:handle"}}
    """)
    out = cli("-c", path, "--check")
    assert out.returncode == 3, out.stdout + out.stderr
    assert "does not answer" in out.stderr


@pytest.mark.parametrize("body,line,key", [
    ("queues:\n  mail:\n    concurency: 3\n", 3, "queues.mail.concurency"),
    ("queues:\n  mail:\n    processor: 'nosuchmodule_xyz:run'\n", 3, "queues.mail.processor"),
    ("plugins: [nosuchplugin_xyz]\nqueues:\n  mail: {processor: 'clijobs:handle'}\n", 1, "plugins[0]"),
    ("queues:\n  mail: {concurrency: 2\n", None, None),
])
def test_bad_file_exits_2_naming_line_and_key(conf, body, line, key):
    path = conf("plugin_paths: ['.']\nentry_points: false\n" + body)
    out = cli("-c", path, "--check")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "configuration error" in out.stderr and "worker.yaml" in out.stderr
    if line is not None:
        assert f"line {line + 2}" in out.stderr and f"key {key}" in out.stderr, out.stderr
    else:
        assert "not valid YAML" in out.stderr and "line " in out.stderr


def test_add_then_status(conf, redis_url, prefix, qname):
    path = conf()
    out = cli("-c", path, "add", qname, "welcome", '{"to": "ada@example.com"}', "--opts",
              '{"attempts": 3, "priority": 0, "jobId": "w-1"}')
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "w-1"
    out2 = cli("-c", path, "add", qname, "second", "[1, 2]")
    assert out2.returncode == 0, out2.stderr
    queue = Queue(qname, connection=redis_url, prefix=prefix)
    try:
        job = queue.get_job("w-1")
        assert (job.name, job.data, job.opts["attempts"]) == ("welcome", {"to": "ada@example.com"}, 3)
        assert queue.get_job(out2.stdout.strip()).data == [1, 2]
    finally:
        queue.close()
    status = cli("-c", path, "status", "--json")
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert report[qname]["counts"]["waiting"] == 2
    assert report[qname]["paused"] is False
    assert report[qname]["age"]["job_id"] == "w-1" and report[qname]["age"]["state"] == "wait"
    table = cli("-c", path, "status")
    assert table.returncode == 0 and qname in table.stdout
    assert "oldest" in table.stdout.splitlines()[0]


def test_add_refuses_bad_input(conf, qname):
    path = conf()
    bad_json = cli("-c", path, "add", qname, "x", "{nope")
    assert bad_json.returncode == 2 and "not valid JSON" in bad_json.stderr
    bad_opt = cli("-c", path, "add", qname, "x", "{}", "--opts", '{"atempts": 2}')
    assert bad_opt.returncode == 2 and "atempts" in bad_opt.stderr

"""``echomq-gevent -c FILE`` end to end, in a subprocess: jobs added by Node
``bullmq@6.7.0`` and by ``echomq-gevent add`` are processed by a processor from a
plugin module named in the YAML and by one from an installed entry point; SIGTERM
mid-run exits 0 and loses nothing; the embedded default starts and stops cleanly."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import textwrap
import threading
import time
from typing import Any, Dict, List, Optional

import pytest

from echomq_gevent.queue.queue import Queue

from running_command import RunningCommand
from target import BIN, PYTHON

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODE_TOOL = os.path.join(ROOT, "tests", "interop", "node", "bullmq_tool.js")
EXAMPLE_PKG = os.path.join(ROOT, "plugins", "example-processor-package")



@pytest.fixture(scope="session")
def example_plugin_path(tmp_path_factory):
    """``pip install`` the example processor package once, into a folder the command's
    PYTHONPATH includes (its entry point is then visible to that process only)."""
    target = str(tmp_path_factory.mktemp("example-plugin-site"))
    base = [PYTHON, "-m", "pip", "install", "--quiet", "--no-deps", "--disable-pip-version-check",
            "--target", target]
    fast = subprocess.run(base + ["--no-build-isolation", EXAMPLE_PKG], capture_output=True, text=True)
    if fast.returncode != 0 or not any(n.endswith(".dist-info") for n in os.listdir(target)):
        # no `wheel` beside setuptools (an old pip then installs an egg, without the entry
        # point's metadata where importlib.metadata looks): build in an isolated environment
        shutil.rmtree(target, ignore_errors=True)
        os.makedirs(target)
        slow = subprocess.run(base + [EXAMPLE_PKG], capture_output=True, text=True)
        assert slow.returncode == 0, f"pip install of the example plugin package failed:\n{slow.stderr}"
    assert any(n.endswith(".dist-info") for n in os.listdir(target))
    return target


class Cli(RunningCommand):
    """A running ``python -m echomq_gevent`` (or ``command``, e.g. the console script) with
    its output collected."""

    def __init__(self, args: List[str], cwd: str, extra_path: str = "", env: Optional[Dict[str, str]] = None,
                 command: Optional[List[str]] = None):
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, extra_path) if p)
        full_env.pop("ECHOMQ_CONFIG", None)
        full_env.setdefault("PYTHONFAULTHANDLER", "1")  # a crash prints where it was into output()
        full_env.update(env or {})
        super().__init__([*(command or [PYTHON, "-m", "echomq_gevent"]), *args], cwd, full_env)


def command_file(tmp_path, redis_url: str, prefix: str, rest: str):
    """``tmp_path/worker.yaml`` for the command: the test's Redis and prefix, processors
    imported from ``tmp_path``, no entry points, then ``rest`` (top-level YAML, dedented).
    Returns its path."""
    conf = tmp_path / "worker.yaml"
    conf.write_text(f'redis: {{url: "{redis_url}"}}\nprefix: {prefix}\nplugin_paths: ["."]\n'
                    f"entry_points: false\n" + textwrap.dedent(rest))
    return conf


def one_queue_file(tmp_path, redis_url: str, prefix: str, qname: str, queue_options: str, more: str = ""):
    """:func:`command_file` with one queue of ``queue_options`` (the text of a YAML flow
    mapping) and ``more`` top-level lines. Returns its path."""
    return command_file(tmp_path, redis_url, prefix, f"queues:\n  {qname}: {{{queue_options}}}\n" + more)


def node_add_bulk(redis_url: str, prefix: str, queue: str, jobs: List[Dict[str, Any]]) -> List[str]:
    """Add jobs with the real Node bullmq 6.7.0 Queue; returns their ids."""
    cmd = {"redis": redis_url, "prefix": prefix, "queue": queue, "cmd": "addBulk", "jobs": jobs}
    out = subprocess.run(["node", NODE_TOOL, json.dumps(cmd)], capture_output=True, text=True, timeout=60,
                         cwd=os.path.join(ROOT, "tests"))
    assert out.returncode == 0, out.stdout + out.stderr
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert line["ok"], line
    return [str(j["id"]) for j in line["result"]]


def cli_add(cwd: str, conf: str, queue: str, name: str, data: Any, extra_path: str = "") -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, extra_path) if p))
    out = subprocess.run([PYTHON, "-m", "echomq_gevent", "-c", conf, "add", queue, name, json.dumps(data)],
                         cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


PLUGIN_MODULE = '''
"""Test plugin: serves queue {q1!r}: 'greet' (quick) and 'slow' (longer than the drain deadline)."""
import gevent
from echomq_gevent import hookimpl


def greet(job):
    gevent.sleep(0.05)
    return {{"hello": job.data.get("who"), "by": "e2eplugin"}}


def slow(job):
    # long on the first run (it must outlive the 1 s drain however slow the machine is),
    # short once it was handed back
    first_run = (job.attempts_started or 0) <= 1
    gevent.sleep(float(job.data.get("seconds", 3)) if first_run else 0.05)
    return {{"slow": job.data.get("n"), "attempt": job.attempts_started}}


@hookimpl
def echomq_register_processors(registry):
    registry.add({q1!r}, "greet", greet)
    registry.add({q1!r}, "slow", slow)
'''


@pytest.mark.interop
def test_node_and_cli_jobs_processed_by_yaml_plugin_and_entry_point_and_sigterm_loses_nothing(
        tmp_path, redis_url, prefix, qname, example_plugin_path, wait_for):
    q1, q2 = qname + "a", qname + "b"
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "e2eplugin.py").write_text(PLUGIN_MODULE.format(q1=q1))
    conf = tmp_path / "worker.yaml"
    conf.write_text(textwrap.dedent(f"""
        redis: {{url: "{redis_url}"}}
        prefix: {prefix}
        plugin_paths: [plugins]
        plugins: [e2eplugin]
        entry_points: true
        logging: {{level: info, format: json}}
        defaults:
          drain_delay: 1
          shutdown_timeout: 1
        queues:
          {q1}: {{concurrency: 5}}
          {q2}: {{concurrency: 3}}
    """))
    cwd = str(tmp_path)
    node_ids = node_add_bulk(redis_url, prefix, q1, [{"name": "greet", "data": {"who": f"node{i}"}} for i in range(5)])
    node_ids2 = node_add_bulk(redis_url, prefix, q2, [{"name": "example.wordcount",
                                                        "data": {"text": "one two three"}}])
    cli_id = cli_add(cwd, str(conf), q1, "greet", {"who": "cli"})
    cli_id2 = cli_add(cwd, str(conf), q2, "example.echo", {"x": [1, 2]})

    queue1 = Queue(q1, connection=redis_url, prefix=prefix)
    queue2 = Queue(q2, connection=redis_url, prefix=prefix)
    cli = Cli(["-c", str(conf), "--no-progress"], cwd=cwd, extra_path=example_plugin_path)
    try:
        for jid in node_ids + [cli_id]:
            wait_for(lambda: queue1.get_job_state(jid) == "completed", what=f"{q1} job {jid}", give_up=cli.exited, details=cli.output, timeout=20)
        for jid in node_ids2 + [cli_id2]:
            wait_for(lambda: queue2.get_job_state(jid) == "completed", what=f"{q2} job {jid}", give_up=cli.exited, details=cli.output, timeout=20)
        assert queue1.get_job(node_ids[0]).returnvalue == {"hello": "node0", "by": "e2eplugin"}
        assert queue1.get_job(cli_id).returnvalue == {"hello": "cli", "by": "e2eplugin"}
        assert queue2.get_job(node_ids2[0]).returnvalue == {"words": 3, "chars": 13}  # entry point
        assert queue2.get_job(cli_id2).returnvalue == {"x": [1, 2]}

        # mid-run: quick jobs finish, slow ones outlive the 1 s drain and go back to wait
        slow_ids = node_add_bulk(redis_url, prefix, q1, [{"name": "slow", "data": {"n": i, "seconds": 60}}
                                                          for i in range(3)])
        quick_ids = [cli_add(cwd, str(conf), q1, "greet", {"who": f"late{i}"}) for i in range(2)]
        wait_for(lambda: all(queue1.get_job_state(j) == "active" for j in slow_ids), what="slow jobs active",
                   give_up=cli.exited, details=cli.output, timeout=20)
        wait_for(lambda: all(queue1.get_job_state(j) == "completed" for j in quick_ids), what="quick jobs",
                   give_up=cli.exited, details=cli.output, timeout=20)
        t0 = time.monotonic()
        code = cli.stop(signal.SIGTERM)
        assert code == 0, cli.output()
        assert time.monotonic() - t0 < 10
        states = {j: queue1.get_job_state(j) for j in slow_ids}
        assert set(states.values()) == {"waiting"}, states  # handed back, none lost
        assert queue1.get_job_counts("active")["active"] == 0

        # JSON log lines with the structured event fields of the built-in logging path
        events = []
        for line in cli.lines:
            if line.startswith("{"):
                events.append(json.loads(line))
        assert any(e.get("msg", "").startswith("SIGTERM") for e in events), cli.output()

        # a second run finishes the handed-back jobs
        cli2 = Cli(["-c", str(conf), "--no-progress"], cwd=cwd, extra_path=example_plugin_path)
        try:
            for jid in slow_ids:
                wait_for(lambda: queue1.get_job_state(jid) == "completed", what=f"slow job {jid}", give_up=cli2.exited, details=cli2.output, timeout=20)
            assert sorted(queue1.get_job(j).returnvalue["slow"] for j in slow_ids) == [0, 1, 2]
            assert cli2.stop(signal.SIGINT) == 0, cli2.output()
        finally:
            cli2.kill()
        assert queue1.get_job_counts("failed")["failed"] == 0
        assert queue2.get_job_counts("failed")["failed"] == 0
    finally:
        cli.kill()
        queue1.close()
        queue2.close()


def test_embedded_default_runs_jobs_and_leaves_no_process(tmp_path, wait_for, redis_pids_in):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "embjobs.py").write_text("def double(job):\n    return job.data['n'] * 2\n")
    conf = tmp_path / "conf" / "worker.yaml"
    conf.parent.mkdir()
    conf.write_text(textwrap.dedent("""
        redis:
          url: embedded
        plugin_paths: [../plugins]
        entry_points: false
        logging: {format: json}
        queues:
          numbers:
            processor: "embjobs:double"
            drain_delay: 1
    """))
    cwd = str(tmp_path)
    var = str(tmp_path / "var")
    cli = Cli(["-c", str(conf)], cwd=cwd)
    try:
        wait_for(lambda: cli.saw("started the embedded Redis"), what="the embedded Redis", give_up=cli.exited, details=cli.output, timeout=20)
        assert len(redis_pids_in(var)) == 1
        ids = [cli_add(cwd, str(conf), "numbers", "double", {"n": n}) for n in range(3)]
        url = f"unix://{var}/redis.sock?db=0"
        queue = Queue("numbers", connection=url)
        try:
            for jid in ids:
                wait_for(lambda: queue.get_job_state(jid) == "completed", what=f"job {jid}", give_up=cli.exited, details=cli.output, timeout=20)
            assert sorted(queue.get_job(j).returnvalue for j in ids) == [0, 2, 4]
        finally:
            queue.close()
        assert cli.stop(signal.SIGTERM) == 0, cli.output()
    finally:
        cli.kill()
    assert redis_pids_in(var) == [], "the embedded redis-server outlived the command"
    assert os.path.exists(os.path.join(var, "appendonly.aof"))
    assert not os.path.exists(os.path.join(var, "redis.sock"))


def test_embedded_server_goes_away_when_the_command_is_killed(tmp_path, wait_for, redis_pids_in):
    conf = tmp_path / "worker.yaml"
    (tmp_path / "killjobs.py").write_text("def run(job):\n    return 1\n")
    conf.write_text("redis: {url: embedded}\nplugin_paths: ['.']\nentry_points: false\n"
                    "queues:\n  k: {processor: 'killjobs:run'}\n")
    var = str(tmp_path / "var")
    cli = Cli(["-c", str(conf)], cwd=str(tmp_path))
    try:
        wait_for(lambda: cli.saw("started the embedded Redis"), what="the embedded Redis", give_up=cli.exited, details=cli.output, timeout=20)
        assert len(redis_pids_in(var)) == 1
        cli.proc.kill()
        cli.proc.wait(10)
        wait_for(lambda: not redis_pids_in(var), timeout=15, what="redis-server to exit after a kill -9")
    finally:
        cli.kill()


def test_check_on_the_shipped_conf_with_embedded_redis(tmp_path, redis_pids_in):
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("REDIS_URL", None)
    out = subprocess.run([PYTHON, "-m", "echomq_gevent", "-c", os.path.join(ROOT, "conf", "worker.yaml"),
                          "--check"], cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "queue demo" in out.stdout and "demo" in out.stdout
    assert redis_pids_in(str(tmp_path / "var")) == []


def test_demo_mode_on_the_shipped_conf_processes_jobs_and_shows_progress_on_a_terminal(tmp_path, redis_pids_in):
    """What ``make demo`` runs: the shipped file, embedded Redis, demo jobs enqueued every
    second; on a terminal a progress line is drawn. SIGINT (Ctrl-C) drains and exits 0."""
    import pty

    master, slave = pty.openpty()
    env = dict(os.environ, PYTHONPATH=ROOT, DEMO_CONCURRENCY="10")
    env.pop("REDIS_URL", None)
    proc = subprocess.Popen([PYTHON, "-m", "echomq_gevent", "-c", os.path.join(ROOT, "conf", "worker.yaml"),
                             "--demo"], cwd=str(tmp_path), env=env, stdin=subprocess.DEVNULL,
                            stdout=slave, stderr=slave)
    os.close(slave)
    chunks: List[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    text = lambda: b"".join(chunks).decode(errors="replace")  # noqa: E731
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            if "completed in" in text() and "[echomq] demo:" in text():
                break
            time.sleep(0.1)
        out = text()
        assert "completed in" in out, out[-3000:]
        assert "\r\x1b[K[echomq] demo:" in out and "jobs/s" in out, out[-3000:]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0, text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    assert "stopped the embedded Redis" in text()
    assert redis_pids_in(str(tmp_path / "var")) == []


def test_demo_without_a_file_runs_the_shipped_demo_from_any_directory(tmp_path, wait_for, redis_pids_in):
    """``echomq-gevent --demo`` in an empty folder (no conf/worker.yaml, no -c): the demo
    file shipped in the package runs on the embedded Redis, data under ./var/ there."""
    cli = Cli(["--demo", "--no-progress"], cwd=str(tmp_path), command=[os.path.join(BIN, "echomq-gevent")],
              env={"REDIS_URL": "", "DEMO_CONCURRENCY": "5"})
    try:
        wait_for(lambda: cli.saw("started the embedded Redis"), what="the embedded Redis", give_up=cli.exited, details=cli.output, timeout=20)
        wait_for(lambda: cli.saw("completed in"), what="a demo job to complete", give_up=cli.exited, details=cli.output, timeout=20)
        assert cli.saw("queue(s) (demo)"), cli.output()
        assert len(redis_pids_in(str(tmp_path / "var"))) == 1
        assert cli.stop(signal.SIGINT) == 0, cli.output()
    finally:
        cli.kill()
    assert cli.saw("stopped the embedded Redis"), cli.output()
    assert redis_pids_in(str(tmp_path / "var")) == []


def test_second_signal_hands_jobs_back_at_once(tmp_path, redis_url, prefix, qname, wait_for):
    (tmp_path / "sleepy.py").write_text("import gevent\ndef run(job):\n    gevent.sleep(30)\n    return 1\n")
    conf = one_queue_file(tmp_path, redis_url, prefix, qname,
                          'processor: "sleepy:run", concurrency: 2, shutdown_timeout: 60, drain_delay: 1')
    queue = Queue(qname, connection=redis_url, prefix=prefix)
    cli = Cli(["-c", str(conf)], cwd=str(tmp_path))
    try:
        ids = [queue.add("nap", {}).id for _ in range(2)]
        wait_for(lambda: all(queue.get_job_state(j) == "active" for j in ids), what="jobs active", give_up=cli.exited, details=cli.output, timeout=20)
        cli.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: cli.saw("stopping"), what="the drain to start", give_up=cli.exited, details=cli.output, timeout=20)
        t0 = time.monotonic()
        assert cli.stop(signal.SIGTERM) == 0, cli.output()
        assert time.monotonic() - t0 < 10, "the second signal did not cut the 60 s drain short"
        assert {queue.get_job_state(j) for j in ids} == {"waiting"}
    finally:
        cli.kill()
        queue.close()


def test_run_exits_3_when_redis_is_unreachable(tmp_path):
    from redis_server import free_port

    (tmp_path / "j.py").write_text("def run(job):\n    return 1\n")
    conf = tmp_path / "worker.yaml"
    conf.write_text(f"redis: {{url: 'redis://127.0.0.1:{free_port()}/0'}}\nplugin_paths: ['.']\n"
                    "entry_points: false\nqueues:\n  q: {processor: 'j:run'}\n")
    cli = Cli(["-c", str(conf)], cwd=str(tmp_path))
    try:
        assert cli.proc.wait(30) == 3, cli.output()
        cli._reader.join(5)
        assert cli.saw("Redis cannot be reached"), cli.output()
    finally:
        cli.kill()


def test_add_with_embedded_config_and_no_server_keeps_the_job_for_the_next_run(tmp_path, wait_for, redis_pids_in):
    (tmp_path / "later.py").write_text("def run(job):\n    return job.data['v'] + 1\n")
    conf = tmp_path / "worker.yaml"
    conf.write_text("redis: {url: embedded}\nplugin_paths: ['.']\nentry_points: false\n"
                    "queues:\n  later: {processor: 'later:run', drain_delay: 1}\n")
    var = str(tmp_path / "var")
    job_id = cli_add(str(tmp_path), str(conf), "later", "inc", {"v": 41})
    assert redis_pids_in(var) == [], "add left its temporary embedded server running"
    cli = Cli(["-c", str(conf)], cwd=str(tmp_path))
    try:
        wait_for(lambda: cli.saw("started the embedded Redis"), what="the embedded Redis", give_up=cli.exited, details=cli.output, timeout=20)
        queue = Queue("later", connection=f"unix://{var}/redis.sock?db=0")
        try:
            wait_for(lambda: queue.get_job_state(job_id) == "completed", what="the stored job", give_up=cli.exited, details=cli.output, timeout=20)
            assert queue.get_job(job_id).returnvalue == 42
        finally:
            queue.close()
        assert cli.stop() == 0
    finally:
        cli.kill()
    assert redis_pids_in(var) == []


def test_yaml_schedulers_run_survive_a_restart_and_show_in_status(tmp_path, redis_url, prefix, qname, wait_for):
    """Schedulers declared in the file are created at start and served; a restart with the
    same file leaves them as they are; ``status`` lists them with their next run."""
    (tmp_path / "schedjobs.py").write_text("def tick(job):\n    return job.data\n")
    conf = command_file(tmp_path, redis_url, prefix, f"""
        queues:
          {qname}:
            processor: "schedjobs:tick"
            drain_delay: 1
            schedulers:
              fast:
                repeat: {{every: 200}}
                template: {{name: tick, data: {{from: yaml}}}}
              nightly:
                repeat: {{pattern: "0 3 * * *", tz: Europe/Paris}}
    """)
    queue = Queue(qname, connection=redis_url, prefix=prefix)
    try:
        run = Cli(["-c", str(conf)], cwd=str(tmp_path))
        try:
            def completed_runs():
                return [j for j in queue.client.zrange(queue.keys.completed, 0, -1) if j.startswith("repeat:fast:")]
            wait_for(lambda: len(completed_runs()) >= 3, timeout=60, what="3 runs of the YAML scheduler", give_up=run.exited, details=run.output)
        finally:
            assert run.stop() == 0, run.output()
        assert queue.get_job(completed_runs()[0]).returnvalue == {"from": "yaml"}
        nightly = queue.get_job_scheduler("nightly")
        assert nightly.pattern == "0 3 * * *" and nightly.tz == "Europe/Paris"
        upcoming = f"repeat:nightly:{nightly.next}"
        # same file again: the nightly scheduler is left as it is (same upcoming run, same count)
        again = Cli(["-c", str(conf)], cwd=str(tmp_path))
        try:
            wait_for(lambda: again.saw("'nightly' unchanged"), timeout=60, what="the unchanged scheduler log",
                     give_up=again.exited, details=again.output)
        finally:
            assert again.stop() == 0, again.output()
        assert queue.get_job_scheduler("nightly").next == nightly.next
        assert queue.get_job(upcoming) is not None
        status = subprocess.run([PYTHON, "-m", "echomq_gevent", "-c", str(conf), "status"],
                                cwd=str(tmp_path), env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True,
                                text=True, timeout=60)
        assert status.returncode == 0, status.stderr
        assert f"{qname}: scheduler 'nightly' pattern '0 3 * * *' (Europe/Paris), next run " in status.stdout
        assert f"{qname}: scheduler 'fast' every 200 ms, next run " in status.stdout
    finally:
        queue.close()

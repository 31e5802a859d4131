"""``offload: process`` under the real command (monkey-patched, signals, the Runner): jobs
run in children, SIGTERM hands a job still running back and leaves no child behind; a bad
``offload_processes`` is refused at start with the file's line."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap

from echomq_gevent.queue.queue import Queue

from e2e.test_cli_run import ROOT, Cli, one_queue_file
from target import PYTHON

JOBS = '''
import os
import time


def run(job):
    if job.data.get("hang"):
        job.log("pid %d" % os.getpid())
        time.sleep(60)
    return {"pid": os.getpid()}
'''


def children_of(pid: int) -> list:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(p) for p in fh.read().split()]
    except OSError:
        return []


def test_the_command_runs_jobs_in_children_and_sigterm_leaves_none(tmp_path, redis_url, prefix, qname, r, wait_for):
    (tmp_path / "cpujobs.py").write_text(JOBS)
    conf = one_queue_file(tmp_path, redis_url, prefix, qname,
                          'processor: "cpujobs:run", concurrency: 2, offload: process, shutdown_timeout: 1, '
                          'drain_delay: 1')
    queue = Queue(qname, connection=redis_url, prefix=prefix)
    cli = Cli(["-c", str(conf), "--no-progress"], cwd=str(tmp_path))
    try:
        quick = queue.add("quick", {})
        wait_for(lambda: queue.get_job_state(quick.id) == "completed", what="the quick job", give_up=cli.exited,
                 details=cli.output, timeout=30)
        pid = json.loads(r.hget(f"{prefix}:{qname}:{quick.id}", "returnvalue"))["pid"]
        assert pid in children_of(cli.proc.pid) and len(children_of(cli.proc.pid)) == 2
        hung = queue.add("hang", {"hang": True})
        wait_for(lambda: r.llen(f"{prefix}:{qname}:{hung.id}:logs") == 1, what="the hung job to start",
                 give_up=cli.exited, details=cli.output, timeout=30)
        assert cli.stop(signal.SIGTERM) == 0, cli.output()
        assert queue.get_job_state(hung.id) == "waiting"  # handed back after shutdown_timeout
        hung_pid = int(r.lindex(f"{prefix}:{qname}:{hung.id}:logs", 0).split()[1])
        for gone in (pid, hung_pid):
            assert not os.path.exists(f"/proc/{gone}") or "Z" in open(f"/proc/{gone}/stat").read().split()[2]
    finally:
        cli.kill()
        queue.close()


def test_offload_processes_above_concurrency_is_refused_with_the_line(tmp_path):
    conf = tmp_path / "worker.yaml"
    conf.write_text(textwrap.dedent("""
        redis: {url: "redis://127.0.0.1:1"}
        queues:
          mail:
            processor: "json:dumps"
            offload: process
            offload_processes: 4
    """))
    out = subprocess.run([PYTHON, "-m", "echomq_gevent", "-c", str(conf), "--check"], cwd=str(tmp_path),
                         env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "line 7" in out.stderr and "queues.mail.offload_processes" in out.stderr, out.stderr
    assert "more than concurrency (1)" in out.stderr

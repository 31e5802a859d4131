"""``echomq-gevent -c FILE cancel QUEUE JOB_ID [--reason ...]``: a job running in a worker
process is stopped from another process; a waiting one fails at once; a missing id and a
bad reason are refused (exit 2) with nothing written."""
from __future__ import annotations

import os
import subprocess
import textwrap
import time

from running_command import RunningCommand
from target import PYTHON

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

JOBS = textwrap.dedent('''
    import gevent


    def crunch(job):
        print(f"started {job.id}", flush=True)
        gevent.sleep(60)
        return "finished"
''')


def _config(tmp_path, redis_url, prefix, qname):
    (tmp_path / "canceljobs.py").write_text(JOBS)
    path = tmp_path / "worker.yaml"
    path.write_text(f"redis: {{url: '{redis_url}'}}\nprefix: {prefix}\nplugin_paths: ['.']\nentry_points: false\n"
                    f"queues:\n  {qname}:\n    processor: canceljobs:crunch\n")
    return str(path)


def _env():
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("ECHOMQ_CONFIG", None)
    return env


def _cancel(tmp_path, path, *args):
    return subprocess.run([PYTHON, "-m", "echomq_gevent", "-c", path, "cancel", *args], cwd=str(tmp_path),
                          env=_env(), capture_output=True, text=True, timeout=60)


def _snapshot(r, prefix):
    return sorted((k, r.dump(k)) for k in r.scan_iter(match=f"{prefix}:*"))


def test_cancel_waiting_missing_and_bad_reason(tmp_path, redis_url, prefix, qname, queue, r):
    path = _config(tmp_path, redis_url, prefix, qname)
    job = queue.add("crunch", {}, {"delay": 60000})
    out = _cancel(tmp_path, path, qname, job.id, "--reason", "wrong customer")
    assert out.returncode == 0, out.stderr
    assert f"job {job.id} was delayed: it is now failed" in out.stdout
    assert queue.get_job(job.id).failed_reason == "job cancelled: wrong customer"

    again = _cancel(tmp_path, path, qname, job.id)
    assert again.returncode == 0 and "already failed: nothing changed" in again.stdout

    before = _snapshot(r, prefix)
    missing = _cancel(tmp_path, path, qname, "nope")
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    too_long = _cancel(tmp_path, path, qname, job.id, "--reason", "x" * 1001)
    assert too_long.returncode == 2 and "at most 1000" in too_long.stderr
    assert _snapshot(r, prefix) == before


def test_cancel_a_job_running_in_another_process(tmp_path, redis_url, prefix, qname, queue, wait_for):
    path = _config(tmp_path, redis_url, prefix, qname)
    worker = RunningCommand([PYTHON, "-m", "echomq_gevent", "-c", path], str(tmp_path), _env())
    try:
        job = queue.add("crunch", {}, {"attempts": 5})
        wait_for(lambda: worker.saw(f"started {job.id}"), timeout=30, what="the job to start",
                 details=worker.output)
        out = _cancel(tmp_path, path, qname, job.id, "--reason", "runaway")
        assert out.returncode == 0, out.stderr
        assert "its worker was told to stop it" in out.stdout
        t0 = time.monotonic()
        wait_for(lambda: queue.get_job_state(job.id) == "failed", timeout=5, what="the job to fail",
                 details=worker.output)
        assert time.monotonic() - t0 < 1.5
        back = queue.get_job(job.id)
        assert back.failed_reason == "job cancelled: runaway" and back.attempts_made == 1
        assert worker.exited() is None  # the worker goes on
    finally:
        worker.stop()

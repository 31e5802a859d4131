"""``echomq-gevent -c FILE replay QUEUE JOB_ID [--pdb]`` in a subprocess: a job that
failed in production runs again through the file's processor; the result, the new
traceback beside the stored one, the debugger at the exception; Redis unchanged."""
from __future__ import annotations

import os
import subprocess
import textwrap

from echomq_gevent.testing import drain

from target import PYTHON

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

JOBS = textwrap.dedent('''
    import os


    def charge(job):
        if os.environ.get("REPLAY_MODE") == "ok":
            return {"charged": job.data["amount"]}
        raise ValueError(f"card declined for {job.data['amount']}")
''')


def _config(tmp_path, redis_url, prefix, qname):
    (tmp_path / "replayjobs.py").write_text(JOBS)
    path = tmp_path / "worker.yaml"
    path.write_text(f"redis: {{url: '{redis_url}'}}\nprefix: {prefix}\nplugin_paths: ['.']\nentry_points: false\n"
                    f"queues:\n  {qname}:\n    processor: replayjobs:charge\n")
    return str(path)


def _replay(tmp_path, path, *args, mode="fail", stdin=None):
    env = dict(os.environ, PYTHONPATH=ROOT, REPLAY_MODE=mode)
    env.pop("ECHOMQ_CONFIG", None)
    return subprocess.run([PYTHON, "-m", "echomq_gevent", "-c", path, "replay", *args], cwd=str(tmp_path), env=env,
                          input=stdin, capture_output=True, text=True, timeout=60)


def _snapshot(r, prefix):
    return sorted((k, r.dump(k)) for k in r.scan_iter(match=f"{prefix}:*"))


def test_replay_a_failed_job(tmp_path, redis_url, prefix, qname, queue, r):
    path = _config(tmp_path, redis_url, prefix, qname)
    job = queue.add("charge", {"amount": 7})
    assert drain(queue, {"charge": lambda j: (_ for _ in ()).throw(ValueError("card declined for 7"))}).reasons \
        == ["card declined for 7"]
    before = _snapshot(r, prefix)

    fixed = _replay(tmp_path, path, qname, job.id, mode="ok")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert f"replaying job {job.id} ('charge') of queue {qname!r}" in fixed.stdout
    assert 'result: {"charged": 7}' in fixed.stdout

    still = _replay(tmp_path, path, qname, job.id)
    assert still.returncode == 1, still.stdout + still.stderr
    assert "stored stack trace (its last attempt):" in still.stdout
    assert "new traceback (this run):" in still.stdout and "replayjobs.py" in still.stdout

    debugged = _replay(tmp_path, path, qname, job.id, "--pdb", stdin="p job.data\nquit\n")
    assert "(Pdb)" in debugged.stdout and "{'amount': 7}" in debugged.stdout, debugged.stdout + debugged.stderr

    missing = _replay(tmp_path, path, qname, "4242")
    assert missing.returncode == 2 and "no job '4242'" in missing.stderr, missing.stderr
    assert _snapshot(r, prefix) == before

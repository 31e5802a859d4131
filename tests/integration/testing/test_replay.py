"""``replay``: a failed job read back from Redis runs through the local processor in this
process and prints the result, or the new traceback beside the stored one; Redis is the
same before and after (every key of the prefix dumped and compared), also for a job id
that does not exist and for a job whose data is garbage."""
from __future__ import annotations

import io
import os

import pytest

import replay_jobs
from echomq_gevent.host.config import load_config
from echomq_gevent.host.replay import replay
from echomq_gevent.testing import drain

HERE = os.path.dirname(os.path.abspath(__file__))


def _snapshot(r, prefix):
    return sorted((k, r.type(k), r.dump(k)) for k in r.scan_iter(match=f"{prefix}:*"))


@pytest.fixture
def cfg(tmp_path, redis_url, prefix, qname):
    path = tmp_path / "worker.yaml"
    path.write_text(f"redis: {{url: '{redis_url}'}}\nprefix: {prefix}\nentry_points: false\n"
                    f"plugin_paths: ['{HERE}']\nqueues:\n  {qname}:\n    processor: replay_jobs:charge\n")
    return load_config(str(path))


@pytest.fixture
def failed_job(queue, cfg):
    replay_jobs.MODE["now"] = "fail"
    job = queue.add("charge", {"amount": 12})
    assert drain(queue, config=cfg).reasons == ["card declined for 12"]
    return job


def _replay(cfg, redis_url, qname, job_id):
    out, err = io.StringIO(), io.StringIO()
    code = replay(cfg, redis_url, qname, job_id, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_a_fixed_processor_completes_the_replay_and_redis_is_unchanged(cfg, redis_url, qname, r, prefix,
                                                                        failed_job):
    replay_jobs.MODE["now"] = "ok"
    before = _snapshot(r, prefix)
    code, out, err = _replay(cfg, redis_url, qname, failed_job.id)
    assert code == 0, out + err
    assert 'result: {"charged": 12}' in out
    assert "(kept here, not written) progress 50" in out and "(kept here, not written) log charging 12" in out
    assert _snapshot(r, prefix) == before


def test_a_processor_that_still_fails_prints_both_tracebacks(cfg, redis_url, qname, r, prefix, failed_job):
    replay_jobs.MODE["now"] = "fail"
    before = _snapshot(r, prefix)
    code, out, err = _replay(cfg, redis_url, qname, failed_job.id)
    assert code == 1
    stored, new = out.split("new traceback (this run):")
    assert "stored stack trace (its last attempt):" in stored and "ValueError: card declined for 12" in stored
    assert "ValueError: card declined for 12" in new and "in charge" in new
    assert _snapshot(r, prefix) == before


def test_a_job_that_does_not_exist(cfg, redis_url, qname, r, prefix, failed_job):
    before = _snapshot(r, prefix)
    code, out, err = _replay(cfg, redis_url, qname, "no-such-job")
    assert code == 2 and f"no job 'no-such-job' on queue {qname!r}" in err and "nothing ran" in err
    assert _snapshot(r, prefix) == before


def test_a_job_whose_data_is_garbage(cfg, redis_url, qname, r, prefix, failed_job):
    r.hset(f"{prefix}:{qname}:{failed_job.id}", "data", "{not json")
    before = _snapshot(r, prefix)
    code, out, err = _replay(cfg, redis_url, qname, failed_job.id)
    assert code == 2 and "the stored job cannot be read" in err and "'data'" in err
    assert _snapshot(r, prefix) == before

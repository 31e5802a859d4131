"""The plugins shipped in ``echomq_gevent.contrib``: structured logging, Prometheus
metrics (also summed across processes), and the demo processors, each driven by a real
Worker; their old top-level names still load, with a warning."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time

import pytest

from echomq_gevent.plugins.host import PluginHost, make_plugin_manager
from echomq_gevent.queue.queue import Queue

from target import PYTHON

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
LOGGING = "echomq_gevent.contrib.logging"
PROMETHEUS = "echomq_gevent.contrib.prometheus"
DEMO = "echomq_gevent.contrib.demo"



@pytest.fixture
def worker_with(redis_url, prefix, qname):
    from echomq_gevent.worker.worker import Worker

    workers = []

    def start(modules, processor, **options):
        host = PluginHost(make_plugin_manager(modules))
        w = Worker(qname, processor=processor, connection=redis_url, prefix=prefix, plugins=host,
                   drain_delay=0.2, **options)
        w.start()
        workers.append(w)
        return w

    yield start
    for w in workers:
        w.close(timeout=5)


def flaky_processor(job):
    if job.data.get("delay_once") and job.delay == 0 and job.attempts_started == 1:
        from echomq_gevent import DelayedError

        job.move_to_delayed(int(time.time() * 1000) + job.data["delay_once"], job.token)
        raise DelayedError()
    if job.data.get("fail") and job.attempts_made == 0:
        raise RuntimeError(f"job {job.id}: first attempt fails")
    if job.data.get("always_fail"):
        raise ValueError(f"job {job.id}: always fails")
    return job.data.get("n")


def test_logging_plugin_emits_structured_records_in_order(queue, worker_with, caplog, wait_for):
    caplog.set_level(logging.INFO, logger="echomq_gevent.events")
    w = worker_with([LOGGING], flaky_processor)
    ok = queue.add("calc", {"n": 3})
    retried = queue.add("calc", {"n": 4, "fail": True}, {"attempts": 2})
    bad = queue.add("calc", {"always_fail": True})
    for j in (ok, retried, bad):
        wait_for(lambda: queue.get_job_state(j.id) in ("completed", "failed"), what=f"job {j.id}")
    w.close(timeout=5)
    recs = [r for r in caplog.records if r.name == "echomq_gevent.events"]

    def events_of(job_id):
        return [r.event for r in recs if getattr(r, "job_id", None) == job_id]

    assert events_of(ok.id) == ["job.active", "job.completed"]
    assert events_of(retried.id) == ["job.active", "job.retried", "job.active", "job.completed"]
    assert events_of(bad.id) == ["job.active", "job.failed"]
    assert recs[0].event == "worker.started" and recs[-1].event == "worker.stopping"
    done = [r for r in recs if r.event == "job.completed" and r.job_id == ok.id][0]
    assert done.queue == queue.name and done.job_name == "calc" and done.duration_ms >= 0
    assert done.attempt == 1
    failed = [r for r in recs if r.event == "job.failed"][0]
    assert failed.levelno == logging.WARNING and "always fails" in failed.error


def test_json_formatter_carries_the_structured_fields():
    from echomq_gevent.host.logs import JsonFormatter

    rec = logging.LogRecord("echomq_gevent.events", logging.INFO, __file__, 1, "job %s done", ("7",), None)
    rec.event, rec.job_id, rec.duration_ms = "job.completed", "7", 12.5
    line = json.loads(JsonFormatter().format(rec))
    assert line["msg"] == "job 7 done" and line["level"] == "info"
    assert (line["event"], line["job_id"], line["duration_ms"]) == ("job.completed", "7", 12.5)


def test_prometheus_plugin_counts_jobs(queue, worker_with, qname, wait_for):
    from prometheus_client import REGISTRY

    import echomq_gevent.contrib.prometheus as prom

    def value(metric, **labels):
        return REGISTRY.get_sample_value(metric, dict(queue=qname, **labels)) or 0

    worker_with([PROMETHEUS], flaky_processor, concurrency=3)
    jobs = [queue.add("calc", {"n": i}) for i in range(4)]
    retried = queue.add("calc", {"n": 9, "fail": True}, {"attempts": 2})
    bad = queue.add("calc", {"always_fail": True})
    moved = queue.add("calc", {"n": 8, "delay_once": 1500})
    wait_for(lambda: queue.get_job_state(moved.id) == "delayed", what="the job to delay itself")
    for j in jobs + [retried, bad]:
        wait_for(lambda: queue.get_job_state(j.id) in ("completed", "failed"), what=f"job {j.id}")
    assert queue.get_job_state(moved.id) == "delayed"
    assert value("echomq_jobs_in_flight") == 0  # the job that delayed itself is not in flight
    for j in (moved,):
        wait_for(lambda: queue.get_job_state(j.id) in ("completed", "failed"), what=f"job {j.id}")
    wait_for(lambda: value("echomq_jobs_completed_total", name="calc") == 6, what="6 completed counted")
    assert value("echomq_jobs_failed_total", name="calc") == 1
    assert value("echomq_jobs_retried_total", name="calc") == 1
    assert value("echomq_job_duration_seconds_count", name="calc") == 6
    assert value("echomq_jobs_in_flight") == 0
    body, ctype = prom.render()
    assert ctype.startswith("text/plain")
    assert f'echomq_jobs_completed_total{{name="calc",queue="{qname}"}} 6.0' in body.decode()


def test_prometheus_counts_add_up_across_processes(tmp_path):
    """Two processes write to one PROMETHEUS_MULTIPROC_DIR; render() in a third sums them."""
    mp = tmp_path / "metrics"
    mp.mkdir()
    writer = textwrap.dedent("""
        import sys, types
        import echomq_gevent.contrib.prometheus as prom
        n = int(sys.argv[1])
        for i in range(n):
            job = types.SimpleNamespace(id=str(i), name="mail", queue_name="shared", attempts_made=0)
            prom.echomq_job_active(worker=None, job=job)
            prom.echomq_job_completed(worker=None, job=job, result=None, duration_ms=5.0)
        hold = types.SimpleNamespace(id="held", name="mail", queue_name="shared", attempts_made=0)
        prom.echomq_job_active(worker=None, job=hold)   # one job still in flight in each process
        print("done", flush=True)
        sys.stdin.readline()                            # stay alive until told
    """)
    env = dict(os.environ, PYTHONPATH=ROOT, PROMETHEUS_MULTIPROC_DIR=str(mp))
    procs = [subprocess.Popen([PYTHON, "-c", writer, str(n)], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for n in (3, 4)]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "done"
        reader = "import echomq_gevent.contrib.prometheus as prom; print(prom.render()[0].decode())"
        out = subprocess.run([PYTHON, "-c", reader], env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        text = out.stdout
        assert 'echomq_jobs_completed_total{name="mail",queue="shared"} 7.0' in text, text
        assert 'echomq_job_duration_seconds_count{name="mail",queue="shared"} 7.0' in text, text
        assert 'echomq_jobs_in_flight{queue="shared"} 2.0' in text, text
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(10)


def test_demo_plugin_processes_demo_jobs(redis_url, prefix, wait_for):
    from echomq_gevent.contrib import demo
    from echomq_gevent.worker.worker import Worker

    host = PluginHost(make_plugin_manager([DEMO]))
    q = Queue(demo.QUEUE, connection=redis_url, prefix=prefix)
    w = Worker(demo.QUEUE, connection=redis_url, prefix=prefix, plugins=host, concurrency=20, drain_delay=0.2)
    w.start()
    try:
        assert demo.enqueue_demo_jobs(q, 10) == 10
        resize = q.add("resize", {"image": "a.jpg", "width": 400, "height": 200})
        report = q.add("report", {"month": 1})
        bad_mail = q.add("email", {"to": "nobody"}, {"attempts": 3})
        wait_for(lambda: q.get_job_state(resize.id) == "completed", what="resize")
        wait_for(lambda: q.get_job_state(report.id) == "completed", what="report")
        wait_for(lambda: q.get_job_state(bad_mail.id) == "failed", what="the bad e-mail to fail")
        assert q.get_job(resize.id).returnvalue == {"image": "a.jpg", "width": 100, "height": 50}
        assert q.get_job(report.id).progress == 100
        assert q.get_job(bad_mail.id).attempts_made == 1  # unrecoverable: no retries
        wait_for(lambda: q.get_job_counts("completed", "failed")["completed"] +
                 q.get_job_counts("completed", "failed")["failed"] >= 13, timeout=20, what="all demo jobs")
    finally:
        w.close(timeout=5)
        q.close()


def test_logging_plugin_replaces_the_builtin_log_lines():
    """With the logging plugin loaded an event is logged once, by it; without it the
    built-in lines stay."""
    from echomq_gevent.contrib import logging as echomq_logging
    from echomq_gevent.plugins.host import BUILTIN_LOGGING, make_plugin_manager

    assert make_plugin_manager().has_plugin(BUILTIN_LOGGING)
    pm = make_plugin_manager([echomq_logging])
    assert not pm.has_plugin(BUILTIN_LOGGING)
    assert pm.has_plugin("echomq_gevent.builtin")  # the failure rule and backoff stay


@pytest.mark.parametrize("old,new", [("echomq_logging", LOGGING), ("echomq_prometheus", PROMETHEUS),
                                     ("demo", DEMO)])
def test_old_plugin_names_load_the_shipped_module_with_a_warning(old, new, caplog):
    import importlib

    from echomq_gevent.plugins.host import make_plugin_manager

    caplog.set_level(logging.WARNING, logger="echomq_gevent.plugins")
    pm = make_plugin_manager([old])
    assert pm.get_plugin(old) is importlib.import_module(new)
    warned = [r.getMessage() for r in caplog.records if r.name == "echomq_gevent.plugins"]
    assert any(repr(old) in m and repr(new) in m for m in warned), warned


def test_an_old_plugin_name_that_is_a_module_of_the_users_is_that_module(tmp_path, monkeypatch, caplog):
    (tmp_path / "demo.py").write_text("MINE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "demo", raising=False)
    from echomq_gevent.plugins.host import make_plugin_manager

    caplog.set_level(logging.WARNING, logger="echomq_gevent.plugins")
    pm = make_plugin_manager(["demo"])
    assert getattr(pm.get_plugin("demo"), "MINE", False)
    assert not [r for r in caplog.records if r.name == "echomq_gevent.plugins"]
    monkeypatch.delitem(sys.modules, "demo", raising=False)

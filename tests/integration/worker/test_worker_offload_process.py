"""``offload: process`` against a real Redis with real child processes: parallel CPU
work, results and errors crossing, crashes, timeouts, cancels, calls from the child."""
from __future__ import annotations

import os
import sys
import types

import gevent
import pytest

from echomq_gevent.errors import ConfigError

from integration import offload_helpers
from echomq_gevent.plugins.hookspecs import hookimpl

from integration.worker_helpers import host_with, make_worker, running


def job_hash(r, prefix, qname, job_id):
    return r.hgetall(f"{prefix}:{qname}:{job_id}")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def logged_pid(r, prefix, qname, job_id):
    lines = r.lrange(f"{prefix}:{qname}:{job_id}:logs", 0, -1)
    return int(lines[0].split()[1]) if lines else None


def test_cpu_bound_jobs_run_at_once_in_distinct_processes(redis_url, prefix, qname, queue, r, wait_for, tmp_path):
    jobs = [queue.add("burn", {"dir": str(tmp_path), "n": 2, "within": 30}) for _ in range(2)]
    ticks = []

    def ticker():
        while True:
            ticks.append(1)
            gevent.sleep(0.01)

    w = make_worker(redis_url, prefix, qname, offload_helpers.rendezvous, concurrency=2, offload="process")
    t = gevent.spawn(ticker)
    try:
        with running(w):
            wait_for(lambda: w.completed_count == 2, timeout=60, what="both jobs")
    finally:
        t.kill()
    results = [__import__("json").loads(job_hash(r, prefix, qname, j.id)["returnvalue"]) for j in jobs]
    pids = {res["pid"] for res in results}
    # each job saw the other running at the same time, in another process, not this one
    assert len(pids) == 2 and os.getpid() not in pids
    assert all(res["seen"] == sorted(pids) for res in results)
    assert ticks, "the hub ran while the children worked"


def test_return_values_and_exceptions_cross(redis_url, prefix, qname, queue, r, wait_for):
    ok = queue.add("echo", {"x": [1, "two", {"three": 3.5}]})
    bad = queue.add("fail", {"x": 7})
    final = queue.add("unrecoverable", {}, {"attempts": 3})
    w = make_worker(redis_url, prefix, qname, offload_helpers.dispatch, concurrency=2, offload="process")
    with running(w):
        wait_for(lambda: w.completed_count == 1 and w.failed_count == 2, timeout=30, what="three jobs")
    import json

    value = json.loads(job_hash(r, prefix, qname, ok.id)["returnvalue"])
    assert value["data"] == {"x": [1, "two", {"three": 3.5}]} and value["pid"] != os.getpid()
    h = job_hash(r, prefix, qname, bad.id)
    assert h["failedReason"] == "bad input 7"
    stack = json.loads(h["stacktrace"])
    assert "ValueError: bad input 7" in stack[-1] and "offload_helpers.py" in stack[-1] and "dispatch" in stack[-1]
    # an UnrecoverableError raised in the child stays one: no retry although attempts are left
    h = job_hash(r, prefix, qname, final.id)
    assert h["failedReason"] == "give up now" and h["atm"] == "1"


@pytest.mark.parametrize("how, signame", [("abort", "SIGABRT"), ("segv", "SIGSEGV")])
def test_a_crash_fails_the_attempt_naming_the_signal_and_the_next_job_runs(redis_url, prefix, qname, queue, r,
                                                                           wait_for, how, signame):
    aborting = queue.add(how, {}, {"attempts": 2})
    after = queue.add("echo", {"n": 1})
    w = make_worker(redis_url, prefix, qname, offload_helpers.dispatch, concurrency=1, offload="process")
    with running(w):
        wait_for(lambda: w.failed_count == 1 and w.completed_count == 1, timeout=30, what="abort then echo")
    h = job_hash(r, prefix, qname, aborting.id)
    assert f"died of {signame}" in h["failedReason"] and h["atm"] == "2"  # retried once, crashed again
    assert r.zscore(f"{prefix}:{qname}:completed", after.id) is not None
    first = logged_pid(r, prefix, qname, aborting.id)
    assert first is not None and not pid_alive(first)


def test_os_exit_names_the_exit_status(redis_url, prefix, qname, queue, r, wait_for):
    job = queue.add("exit3", {})
    w = make_worker(redis_url, prefix, qname, offload_helpers.dispatch, concurrency=1, offload="process")
    with running(w):
        wait_for(lambda: w.failed_count == 1, timeout=30, what="exit failure")
    assert "exited with status 3" in job_hash(r, prefix, qname, job.id)["failedReason"]


def test_job_timeout_kills_the_hung_child_and_the_next_job_gets_a_fresh_one(redis_url, prefix, qname, queue, r,
                                                                          wait_for):
    hung = queue.add("hang", {})
    after = queue.add("echo", {})
    w = make_worker(redis_url, prefix, qname, offload_helpers.dispatch, concurrency=1, offload="process",
                    job_timeout=1500)
    with running(w):
        wait_for(lambda: w.failed_count == 1 and w.completed_count == 1, timeout=30, what="timeout then echo")
    import json

    h = job_hash(r, prefix, qname, hung.id)
    assert "job_timeout (1500 ms)" in h["failedReason"] and "was killed" in h["failedReason"]
    hung_pid = logged_pid(r, prefix, qname, hung.id)
    assert not pid_alive(hung_pid)
    assert json.loads(job_hash(r, prefix, qname, after.id)["returnvalue"])["pid"] != hung_pid


def test_cancel_job_terminates_the_running_child(redis_url, prefix, qname, queue, r, wait_for):
    hung = queue.add("hang", {})
    w = make_worker(redis_url, prefix, qname, offload_helpers.dispatch, concurrency=1, offload="process")
    with running(w):
        wait_for(lambda: logged_pid(r, prefix, qname, hung.id) is not None, timeout=30, what="the child's pid")
        pid = logged_pid(r, prefix, qname, hung.id)
        w.cancel_job(hung.id, "operator said stop")
        wait_for(lambda: w.failed_count == 1, timeout=10, what="the cancelled job to fail")
        wait_for(lambda: not pid_alive(pid), timeout=10, what="the child to be gone")
        after = queue.add("echo", {})
        wait_for(lambda: w.completed_count == 1, timeout=30, what="a job after the cancel")
    assert job_hash(r, prefix, qname, hung.id)["failedReason"] == "job cancelled: operator said stop"
    assert r.zscore(f"{prefix}:{qname}:completed", after.id) is not None


def test_progress_log_and_update_data_from_the_child_reach_redis(redis_url, prefix, qname, queue, r, wait_for):
    job = queue.add("talk", {"a": 1})
    w = make_worker(redis_url, prefix, qname, offload_helpers.dispatch, offload="process")
    with running(w):
        wait_for(lambda: w.completed_count == 1, timeout=30, what="the job")
    import json

    h = job_hash(r, prefix, qname, job.id)
    assert h["progress"] == "100"
    assert json.loads(h["data"]) == {"a": 1, "seen": True}
    assert r.lrange(f"{prefix}:{qname}:{job.id}:logs", 0, -1) == ["hello from the child"]
    assert json.loads(h["returnvalue"])["log_count"] == 1


@pytest.mark.parametrize("name", ["bad_return", "huge_int"])
def test_a_return_value_that_cannot_cross_fails_the_attempt(redis_url, prefix, qname, queue, r, wait_for, name):
    job = queue.add(name, {})
    w = make_worker(redis_url, prefix, qname, offload_helpers.dispatch, offload="process")
    with running(w):
        wait_for(lambda: w.failed_count == 1, timeout=30, what="the failure")
        assert len(w._ctx.runtime.children) == 1  # the child that answered so is kept
    assert "cannot be sent back to the worker" in job_hash(r, prefix, qname, job.id)["failedReason"]


def test_job_data_that_cannot_cross_fails_for_good_without_killing_a_child(redis_url, prefix, qname, queue, r,
                                                                          wait_for):
    job = queue.add("echo", {"big": 2 ** 70}, {"attempts": 3})  # JSON holds it; msgpack cannot
    w = make_worker(redis_url, prefix, qname, offload_helpers.dispatch, offload="process")
    with running(w):
        wait_for(lambda: w.fetch_loop_alive(), timeout=30, what="the worker to start")
        (pid,) = list(w._ctx.runtime.children)
        wait_for(lambda: w.failed_count == 1, timeout=30, what="the failure")
        assert list(w._ctx.runtime.children) == [pid]
    h = job_hash(r, prefix, qname, job.id)
    assert "cannot be sent to an offload process" in h["failedReason"] and h["atm"] == "1"


def test_a_processor_the_child_cannot_import_fails_the_start_naming_it(redis_url, prefix, qname):
    module = types.ModuleType("offload_only_in_parent")
    exec("def work(job):\n    return 1\n", module.__dict__)
    sys.modules[module.__name__] = module
    try:
        w = make_worker(redis_url, prefix, qname, module.work, offload="process")
        with pytest.raises(ConfigError, match=r"offload_only_in_parent:work cannot be imported in a child process"):
            w.run()
    finally:
        del sys.modules[module.__name__]


@pytest.mark.parametrize("processor, words", [
    (lambda job: 1, "is a closure or a lambda"),
    (offload_helpers.shadowed_original, "names another object"),
])
def test_processors_a_fresh_process_cannot_find_are_refused_at_start(redis_url, prefix, qname, processor, words):
    w = make_worker(redis_url, prefix, qname, processor, offload="process")
    with pytest.raises(ConfigError, match=words):
        w.run()


@pytest.mark.parametrize("opts, words", [
    ({"offload": "process", "offload_processes": 0}, "offload_processes must be an integer >= 1"),
    ({"offload": "process", "offload_processes": "two"}, "offload_processes must be an integer or null"),
    ({"offload": "process", "concurrency": 2, "offload_processes": 3}, "more than concurrency"),
    ({"offload": "thread", "offload_processes": 1}, "is for offload: process"),
])
def test_bad_offload_processes_are_refused_naming_the_key(redis_url, prefix, qname, opts, words):
    with pytest.raises(ConfigError, match=words):
        make_worker(redis_url, prefix, qname, offload_helpers.dispatch, **opts)


class RoutesToDispatch:
    """A plugin that registers the helpers' dispatch for every job name of one queue."""

    def __init__(self, queue: str) -> None:
        self.queue = queue

    @hookimpl
    def echomq_register_processors(self, registry):
        registry.add(self.queue, "*", offload_helpers.dispatch)


def test_a_processor_registered_by_a_plugin_runs_in_the_child(redis_url, prefix, qname, queue, r, wait_for):
    job = queue.add("echo", {"via": "plugin"})
    w = make_worker(redis_url, prefix, qname, None, offload="process", plugins=host_with(RoutesToDispatch(qname)))
    with running(w):
        wait_for(lambda: w.completed_count == 1, timeout=30, what="the job")
    import json

    value = json.loads(job_hash(r, prefix, qname, job.id)["returnvalue"])
    assert value["data"] == {"via": "plugin"} and value["pid"] != os.getpid()


def test_a_child_killed_while_idle_is_replaced_before_the_next_job(redis_url, prefix, qname, queue, r, wait_for):
    import signal

    w = make_worker(redis_url, prefix, qname, offload_helpers.dispatch, offload="process")
    with running(w):
        wait_for(lambda: w.fetch_loop_alive(), timeout=30, what="the worker to start")
        (idle_pid,) = list(w._ctx.runtime.children)
        os.kill(idle_pid, signal.SIGKILL)
        wait_for(lambda: not pid_alive(idle_pid) or w._ctx.runtime.children[idle_pid].popen.poll() is not None,
                 timeout=10, what="the child to die")
        job = queue.add("echo", {})
        wait_for(lambda: w.completed_count == 1, timeout=30, what="the job, in a new child")
    import json

    assert json.loads(job_hash(r, prefix, qname, job.id)["returnvalue"])["pid"] != idle_pid
    assert w.failed_count == 0


WORKER_SCRIPT = r'''
import sys
from gevent import monkey
monkey.patch_all()
from echomq_gevent import Worker
from integration import offload_helpers

url, prefix, qname = sys.argv[1:4]
Worker(qname, offload_helpers.dispatch, connection=url, prefix=prefix, offload="process", drain_delay=0.5).run()
'''


def test_a_worker_killed_with_sigkill_takes_its_busy_child_along(redis_url, prefix, qname, queue, r, wait_for,
                                                                  tmp_path):
    import signal
    import subprocess

    script = tmp_path / "worker.py"
    script.write_text(WORKER_SCRIPT)
    tests_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tests_dir] + sys.path))
    proc = subprocess.Popen([sys.executable, str(script), redis_url, prefix, qname], env=env)
    try:
        hung = queue.add("hang", {})
        wait_for(lambda: logged_pid(r, prefix, qname, hung.id) is not None, timeout=30, what="the busy child",
                 give_up=lambda: "the worker exited" if proc.poll() is not None else None)
        child = logged_pid(r, prefix, qname, hung.id)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

        def ended() -> bool:  # gone, or a zombie left to init: not sleeping in the processor any more
            try:
                with open(f"/proc/{child}/stat") as fh:
                    return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
            except OSError:
                return True
        wait_for(ended, timeout=5, what="the child to die with its worker (PR_SET_PDEATHSIG)")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)

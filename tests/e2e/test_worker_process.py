"""The Worker as a real, monkey-patched process: SIGKILL with jobs in flight (a second
worker's stalled check recovers them), a processor that blocks the hub with CPU work
for 3 x lock_duration (its lock holds; a second worker never gets the job), SIGTERM
(finished jobs completed, the rest handed back by the deadline, exit code 0)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, List

import gevent
import pytest

from echomq_gevent import Queue, Worker

from target import PYTHON

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = r'''
from gevent import monkey
monkey.patch_all()

import faulthandler
import json
import logging
import sys
import time

import gevent

faulthandler.enable()

from echomq_gevent import Worker

cfg = json.loads(sys.argv[1])
logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                    format="%(asctime)s %(name)s %(levelname)s %(message)s")


def processor(job):
    kind = job.data.get("kind", "sleep")
    if kind == "sleep":
        gevent.sleep(job.data.get("s", 0))
        return {"slept": job.data.get("s", 0)}
    if kind == "cpu":
        n = 0
        end = time.monotonic() + job.data["s"]
        while time.monotonic() < end:
            n += 1
        return {"spins": n}
    if kind == "progress":  # Redis calls from the processor (on a thread with offload: thread)
        for step in range(3):
            job.update_progress(step * 50)
            job.log("step %d" % step)
            time.sleep(0.01)
        return {"steps": 3}
    raise ValueError("unknown kind " + kind)


worker = Worker(cfg["queue"], processor, connection=cfg["url"], prefix=cfg["prefix"], **cfg["options"])
print("READY", flush=True)
worker.run()
print("EXITED", flush=True)
'''



@pytest.fixture
def spawn_worker(tmp_path, redis_url, prefix, qname):
    procs: List[subprocess.Popen] = []
    script = tmp_path / "child_worker.py"
    script.write_text(CHILD)

    def start(**options: Any) -> subprocess.Popen:
        cfg = {"queue": qname, "url": redis_url, "prefix": prefix, "options": options}
        env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
        log_path = tmp_path / f"worker{len(procs)}.log"
        log = open(log_path, "w")
        proc = subprocess.Popen([PYTHON, str(script), json.dumps(cfg)], cwd=REPO, env=env,
                                stdout=subprocess.PIPE, stderr=log, text=True)
        proc.log_path = log_path  # its log, with a faulthandler dump if it crashed
        procs.append(proc)
        assert proc.stdout.readline().strip() == "READY"
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


@pytest.fixture
def queue(redis_url, prefix, qname):
    q = Queue(qname, connection=redis_url, prefix=prefix)
    yield q
    q.close()




def test_sigkill_with_jobs_in_flight_is_recovered_by_another_worker(spawn_worker, redis_url, prefix, qname,
                                                                    queue, r, events, wait_for):
    jobs = [queue.add("work", {"kind": "sleep", "s": 60}) for _ in range(3)]
    jobs += [queue.add("work", {"kind": "sleep", "s": 0}) for _ in range(2)]
    child = spawn_worker(concurrency=3, lock_duration=1000, stalled_interval=1000, name="doomed")
    wait_for(lambda: r.llen(f"{prefix}:{qname}:active") == 3, what="three jobs in flight")
    in_flight = set(r.lrange(f"{prefix}:{qname}:active", 0, -1))
    child.send_signal(signal.SIGKILL)
    child.wait(5)

    done: List[str] = []

    def proc(job):
        done.append(job.id)
        return "recovered" if job.id in in_flight else "normal"

    rescuer = Worker(qname, proc, connection=redis_url, prefix=prefix, concurrency=5, lock_duration=1000,
                     stalled_interval=500, drain_delay=0.5)
    rescuer.start()
    try:
        wait_for(lambda: len(set(done)) == 5, timeout=20, what="every job completed")
    finally:
        rescuer.close(timeout=5)
    assert sorted(set(done)) == sorted(j.id for j in jobs)
    for job_id in in_flight:
        h = r.hgetall(f"{prefix}:{qname}:{job_id}")
        assert h["returnvalue"] == '"recovered"' and h["stc"] == "1"
    stalled = {e["jobId"] for e in events() if e["event"] == "stalled"}
    assert stalled == in_flight
    assert r.zcard(f"{prefix}:{qname}:completed") == 5


def test_cpu_bound_job_keeps_its_lock_while_another_worker_polls(spawn_worker, redis_url, prefix, qname,
                                                                 queue, r, events, wait_for):
    job = queue.add("crunch", {"kind": "cpu", "s": 3.0})  # 3 x lock_duration
    child = spawn_worker(concurrency=1, lock_duration=1000, stalled_interval=1000, name="busy",
                         hub_block_threshold=0.5)
    wait_for(lambda: r.hget(f"{prefix}:{qname}:{job.id}", "pb") == "busy", what="the busy worker took the job")

    stolen: List[str] = []
    poller = Worker(qname, lambda j: stolen.append(j.id), connection=redis_url, prefix=prefix,
                    lock_duration=1000, stalled_interval=300, drain_delay=0.2, name="poller")
    poller.start()
    try:
        wait_for(lambda: r.hget(f"{prefix}:{qname}:{job.id}", "returnvalue"), timeout=20, what="completion")
        gevent.sleep(0.5)  # a few more stalled checks after the job finished
    finally:
        poller.close(timeout=5)
    h = r.hgetall(f"{prefix}:{qname}:{job.id}")
    assert stolen == []
    assert h["atm"] == "1" and h["ats"] == "1" and "stc" not in h
    assert json.loads(h["returnvalue"])["spins"] > 0
    assert not any(e["event"] == "stalled" for e in events())
    assert poller.counters["stalled"] == 0
    child.send_signal(signal.SIGTERM)
    status = child.wait(10)
    assert status == 0, child.log_path.read_text()[-4000:]


def test_sigterm_completes_short_jobs_and_hands_back_the_rest(spawn_worker, redis_url, prefix, qname, queue, r, wait_for):
    short = [queue.add("short", {"kind": "sleep", "s": 0.3}) for _ in range(2)]
    long_ = [queue.add("long", {"kind": "sleep", "s": 60}) for _ in range(2)]
    child = spawn_worker(concurrency=4, lock_duration=1000, shutdown_timeout=1.5)
    wait_for(lambda: r.llen(f"{prefix}:{qname}:active") == 4, what="four jobs in flight")
    t0 = time.monotonic()
    child.send_signal(signal.SIGTERM)
    long_ids = sorted(j.id for j in long_)
    wait_for(lambda: sorted(r.lrange(f"{prefix}:{qname}:wait", 0, -1)) == long_ids, timeout=10,
             what="long jobs back in wait")
    handed_back_after = time.monotonic() - t0
    assert child.wait(10) == 0
    assert handed_back_after <= 1.5 + 1.0, f"hand-back took {handed_back_after:.2f} s"
    assert handed_back_after >= 1.4, "in-flight jobs were not given their shutdown_timeout"
    for job in short:
        assert r.hget(f"{prefix}:{qname}:{job.id}", "returnvalue") == '{"slept":0.3}'
    assert r.llen(f"{prefix}:{qname}:active") == 0
    assert child.stdout.read().strip() == "EXITED"


def test_second_signal_hands_back_at_once(spawn_worker, redis_url, prefix, qname, queue, r, wait_for):
    job = queue.add("long", {"kind": "sleep", "s": 60})
    child = spawn_worker(concurrency=1, lock_duration=1000, shutdown_timeout=30)
    wait_for(lambda: r.llen(f"{prefix}:{qname}:active") == 1, what="job in flight")
    t0 = time.monotonic()
    child.send_signal(signal.SIGTERM)
    gevent.sleep(0.3)
    child.send_signal(signal.SIGINT)
    assert child.wait(10) == 0
    assert time.monotonic() - t0 < 5
    assert r.lrange(f"{prefix}:{qname}:wait", 0, -1) == [job.id]


def test_offloaded_processors_reach_redis_from_their_threads(spawn_worker, redis_url, prefix, qname, queue, r, wait_for):
    jobs = [queue.add("p", {"kind": "progress"}) for _ in range(4)]
    child = spawn_worker(concurrency=2, offload="thread", lock_duration=2000)
    wait_for(lambda: r.zcard(f"{prefix}:{qname}:completed") + r.zcard(f"{prefix}:{qname}:failed") == 4,
             what="all jobs settled")
    for job in jobs:
        h = r.hgetall(f"{prefix}:{qname}:{job.id}")
        assert h.get("returnvalue") == '{"steps":3}', h.get("failedReason")
        assert h["progress"] == "100"
        assert r.lrange(f"{prefix}:{qname}:{job.id}:logs", 0, -1) == ["step 0", "step 1", "step 2"]
    child.send_signal(signal.SIGTERM)
    assert child.wait(10) == 0


@pytest.mark.parametrize("concurrency", [1, 4])
def test_every_idle_wait_carries_the_pickup_in_a_patched_process(spawn_worker, redis_url, prefix, qname, queue, r,
                                                                 wait_for, concurrency):
    """The marker wait runs on a greenlet when the process is patched (on a pool thread
    otherwise, tests/integration/worker/test_worker_marker_pickup.py): with free slots beside
    a running job the loop's wait has no pick-up behind it, and it may not even be sent when
    the loop reuses it idle; either way the pick-up goes behind it. As Redis sees the blocked
    connection: the pick-up in its query buffer after every job."""
    spawn_worker(concurrency=concurrency, drain_delay=5, name="marker")
    name = f"{prefix}:"

    def blocked_with_pickup():
        return any(c.get("name", "").startswith(name) and c.get("name", "").endswith(":w:marker")
                   and "b" in c.get("flags", "") and int(c["qbuf"]) > 0 for c in r.client_list())

    for i in range(1, 9):
        queue.add("work", {"kind": "sleep", "s": 0})
        wait_for(lambda: r.zcard(f"{prefix}:{qname}:completed") == i, what=f"job {i}")
        if i > 1:  # the first pick-up behind a wait met NOSCRIPT: its script was not loaded yet
            wait_for(blocked_with_pickup, timeout=3, what=f"the idle wait after job {i} with its pick-up behind",
                     details=lambda: str([c for c in r.client_list() if c.get("name", "").startswith(name)]))

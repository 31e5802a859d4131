"""End to end: the example app under a real gunicorn master with gevent workers, its job
workers in the same processes (``install()`` in ``conf/gunicorn.conf.py``), on the test
session's Redis.

Proves issue 5: a request enqueues a job the pool processes; Node bullmq's jobs too;
the web side stays responsive while 100 jobs run per process; SIGTERM drains and hands
back, nothing lost, ``/ready`` 503 meanwhile; SIGKILL of a worker process is recovered
by a stalled check; ``/_echomq/metrics`` sums every worker process; recycling
(``max_requests``) and HUP reload lose nothing.
"""
from __future__ import annotations

import http.client
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from target import PYTHON

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
QUEUE = "mail"


_instances = itertools.count()



class Gunicorn:
    """One gunicorn master with ``workers`` gevent worker processes, each running the
    ``mail`` queue at ``concurrency``."""

    def __init__(self, tmp_path: Path, redis_url: str, prefix: str, workers: int = 1,
                 concurrency: int = 10, graceful_timeout: int = 10, timeout: int = 30,
                 lock_duration: int = 30000, stalled_interval: int = 30000,
                 max_requests: int = 0, extra_args: Tuple[str, ...] = (),
                 config: str = "conf/gunicorn.conf.py", env: Optional[Dict[str, str]] = None,
                 waiter: Any = None) -> None:
        # port 0: the master binds a free port and logs it (no race with other processes)
        self.port: Optional[int] = None
        self.workers = workers
        self.log_path = tmp_path / f"gunicorn-{next(_instances)}.log"
        self.env = dict(os.environ)
        self.env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        self.env.update({
            "REDIS_URL": redis_url,
            "ECHOMQ_PREFIX": prefix,
            "MAIL_CONCURRENCY": str(concurrency),
            "LOCK_DURATION": str(lock_duration),
            "STALLED_INTERVAL": str(stalled_interval),
            "BIND": "127.0.0.1:0",
            "WEB_CONCURRENCY": str(workers),
            "MAX_REQUESTS": str(max_requests),
            "PYTHONPATH": str(REPO) + os.pathsep + self.env.get("PYTHONPATH", ""),
        })
        self.env.update(env or {})
        self.cmd = [PYTHON, "-m", "gunicorn", "-c", config,
                    "--graceful-timeout", str(graceful_timeout), "--timeout", str(timeout),
                    "--keep-alive", "10", *extra_args]
        self.proc: Optional[subprocess.Popen] = None
        #: the suite's wait_until (the ``wait_for`` fixture)
        self.waiter = waiter

    # -- life cycle -------------------------------------------------------------------------
    def start(self, wait: bool = True) -> "Gunicorn":
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.cmd, cwd=str(REPO), env=self.env, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        if wait:
            self.waiter(self._booted, 30, what=f"{self.workers} gunicorn worker(s) with job workers", interval=0.1)
        return self

    def _booted(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"gunicorn exited with {self.proc.returncode}:\n{self.log()}")
        log = self.log()
        if self.port is None:
            found = re.search(r"Listening at: http://127\.0\.0\.1:(\d+)", log)
            if not found:
                return False
            self.port = int(found.group(1))
        if log.count("job workers started") < self.workers:
            return False
        try:
            return self.get("/_echomq/ready")[0] == 200
        except OSError:
            return False

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def worker_pids(self) -> List[int]:
        path = f"/proc/{self.proc.pid}/task/{self.proc.pid}/children"
        try:
            with open(path) as fh:
                return [int(p) for p in fh.read().split()]
        except OSError:
            return []

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def kill_all(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)
        self._log.close()

    # -- HTTP --------------------------------------------------------------------------------
    def connection(self, timeout: float = 10.0) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def get(self, path: str, method: str = "GET",
            conn: Optional[http.client.HTTPConnection] = None) -> Tuple[int, bytes]:
        own = conn is None
        conn = conn or self.connection()
        try:
            conn.request(method, path)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            if own:
                conn.close()

    def get_json(self, path: str, method: str = "GET") -> Tuple[int, Any]:
        status, body = self.get(path, method)
        return status, json.loads(body)


def node_add(redis_url: str, prefix: str, jobs: List[Tuple[str, Any]]) -> List[str]:
    """Add ``jobs`` ((name, data) pairs) to the ``mail`` queue with Node ``bullmq``'s Queue;
    returns the ids Node gave them."""
    script = r"""
const { Queue } = require('bullmq');
(async () => {
  const u = new URL(process.env.REDIS_URL);
  const q = new Queue(process.env.QUEUE, {
    connection: { host: u.hostname, port: Number(u.port), db: Number((u.pathname || '/0').slice(1) || 0) },
    prefix: process.env.PREFIX,
  });
  const ids = [];
  for (const [name, data] of JSON.parse(process.env.JOBS)) {
    const job = await q.add(name, data);
    ids.push(job.id);
  }
  console.log(JSON.stringify(ids));
  await q.close();
})().catch((e) => { console.error(e); process.exit(1); });
"""
    env = dict(os.environ, REDIS_URL=redis_url, PREFIX=prefix, QUEUE=QUEUE, JOBS=json.dumps(jobs))
    out = subprocess.run(["node", "-e", script], cwd=str(TESTS), env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def percentile(samples: List[float], p: float) -> float:
    """Nearest-rank percentile of ``samples`` (p in 0..100)."""
    ordered = sorted(samples)
    k = max(0, min(len(ordered) - 1, int(round(p / 100.0 * len(ordered) + 0.5)) - 1))
    return ordered[k]


# --- fixtures ---------------------------------------------------------------------------------
@pytest.fixture
def gunicorn(tmp_path, redis_url, prefix, wait_for):
    """Factory: ``gunicorn(workers=2, concurrency=10, ...)`` starts a master and waits
    until every worker process runs its job workers. Everything is killed afterwards."""
    started: List[Gunicorn] = []

    def start(**kwargs: Any) -> Gunicorn:
        wait = kwargs.pop("wait", True)
        g = Gunicorn(tmp_path, redis_url, prefix, waiter=wait_for, **kwargs)
        started.append(g)
        return g.start(wait=wait)

    yield start
    for g in started:
        g.kill_all()


@pytest.fixture
def queue(redis_url, prefix):
    from echomq_gevent import Queue

    q = Queue(QUEUE, connection=redis_url, prefix=prefix)
    yield q
    q.close()


def _states(queue, ids) -> Dict[str, str]:
    return {i: queue.get_job_state(i) for i in ids}


def _all_completed(queue, ids) -> bool:
    return all(s == "completed" for s in _states(queue, ids).values())


# --- a request enqueues, the pool processes -----------------------------------------------------
def test_request_enqueues_a_job_that_the_same_pool_processes(gunicorn, queue, wait_for):
    g = gunicorn(workers=2, concurrency=5)
    status, body = g.get_json("/signup?email=ann@example.com", method="POST")
    assert status == 202, body
    job_id = body["job"]
    wait_for(lambda: queue.get_job_state(job_id) == "completed", 15, what=f"job {job_id} completed")
    job = queue.get_job(job_id)
    assert job.returnvalue["sent_to"] == "ann@example.com"
    assert job.returnvalue["pid"] in g.worker_pids()
    status, body = g.get_json(f"/jobs/{job_id}")
    assert status == 200 and body["state"] == "completed"
    # the trivial endpoint and the app's own 404 still go through the middleware untouched
    assert g.get("/") == (200, b"hello\n")
    assert g.get("/nope")[0] == 404
    # the example app wraps itself in the middleware; install(dashboard=True) still adds the UI
    status, page = g.get("/_echomq/ui/")
    assert status == 200 and b'data-queue="mail"' in page
    status, body = g.get_json("/sleep?n=3&ms=5", method="POST")
    assert status == 202 and len(body["jobs"]) == 3
    wait_for(lambda: _all_completed(queue, body["jobs"]), 15, what="the /sleep jobs completed")


def test_install_adds_the_endpoints_to_an_app_that_does_not_wrap_itself(gunicorn, queue):
    # the bare WSGI function, not the wrapped `application`: install() wraps it in the worker
    g = gunicorn(workers=1, concurrency=2, extra_args=("examples.app:legacy_app",))
    status, body = g.get_json("/_echomq/live")
    assert status == 200 and body["live"] is True and body["queues"]["mail"]["lock_renewal_alive"]
    assert g.get("/") == (200, b"hello\n")
    status, page = g.get("/_echomq/ui/")  # the read-only dashboard the example config turns on
    assert status == 200 and b'data-queue="mail"' in page and b"read-only" in page


@pytest.mark.interop
def test_node_bullmq_producer_jobs_are_processed_by_the_gunicorn_workers(gunicorn, queue, redis_url, prefix, wait_for):
    g = gunicorn(workers=2, concurrency=5)
    ids = node_add(redis_url, prefix, [("welcome", {"email": f"node{i}@example.com"}) for i in range(4)]
                   + [("sleep", {"ms": 20})])
    wait_for(lambda: _all_completed(queue, ids), 20, what="Node-added jobs completed")
    pids = set(g.worker_pids())
    for i, job_id in enumerate(ids):
        job = queue.get_job(job_id)
        assert job.returnvalue["pid"] in pids
        if i < 4:
            assert job.returnvalue["sent_to"] == f"node{i}@example.com"
    errors = [line for line in g.log().splitlines() if "[ERROR]" in line or "Traceback" in line]
    assert not errors, g.log()


# --- latency of the web side while jobs run -----------------------------------------------------
_PRODUCER = r"""
import sys, time
from echomq_gevent import Queue
url, prefix, queue = sys.argv[1:4]
q = Queue(queue, connection=url, prefix=prefix)
batch = [("sleep", {"ms": 10}) for _ in range(500)]
q.add_bulk(batch)
print("ready", flush=True)
while True:  # keep 500+ waiting until the test closes our stdin (then we die on SIGTERM)
    if q.client.llen(q.keys.wait) < 500:
        q.add_bulk(batch)
    time.sleep(0.02)
"""


def test_http_latency_stays_close_to_idle_under_io_bound_job_load(gunicorn, queue, r, redis_url, prefix, wait_for):
    g = gunicorn(workers=1, concurrency=100)
    conn = g.connection()

    def completed() -> int:
        return g.get_json("/_echomq/ready")[1]["counts"].get("completed", 0)

    def measure(seconds: float, active: Optional[List[int]] = None) -> List[float]:
        """One request every ~5 ms for ``seconds`` (at least 300 samples); latencies in ms."""
        out: List[float] = []
        end = time.monotonic() + seconds
        while time.monotonic() < end or len(out) < 300:
            t0 = time.perf_counter()
            status, _ = g.get("/", conn=conn)
            out.append((time.perf_counter() - t0) * 1000)
            assert status == 200
            if active is not None and len(out) % 20 == 0:
                active.append(r.llen(queue.keys.active))
            time.sleep(0.005)
        return out

    measure(0.2)  # warm up
    idle = measure(1.5)

    # Load: 500 jobs of 10 ms cooperative sleep at concurrency 100, topped up by 500 more
    # whenever the backlog runs low, so the pool is busy for the whole measurement. The
    # producer is its own process so it never competes with the measuring client.
    producer = subprocess.Popen([PYTHON, "-c", _PRODUCER, redis_url, prefix, QUEUE],
                                cwd=str(REPO), env=dict(os.environ, PYTHONPATH=str(REPO)),
                                stdout=subprocess.PIPE, text=True)
    active_seen: List[int] = []
    try:
        assert producer.stdout.readline().strip() == "ready"
        # in flight = min(100, throughput x 10 ms): wait until the pool is clearly busy
        wait_for(lambda: r.llen(queue.keys.active) >= 10, 10, what="jobs in flight")
        done_before = completed()
        t0 = time.monotonic()
        loaded = measure(2.5, active_seen)
        elapsed = time.monotonic() - t0
        done_during = completed() - done_before
    finally:
        producer.kill()
        producer.wait(10)
        conn.close()
    report = {
        "idle_p50_ms": round(percentile(idle, 50), 2), "idle_p99_ms": round(percentile(idle, 99), 2),
        "loaded_p50_ms": round(percentile(loaded, 50), 2), "loaded_p99_ms": round(percentile(loaded, 99), 2),
        "samples": [len(idle), len(loaded)],
        "jobs_completed_while_measuring": done_during, "jobs_per_s": round(done_during / elapsed),
        "median_active": sorted(active_seen)[len(active_seen) // 2] if active_seen else 0,
        "load_average": round(os.getloadavg()[0], 2),
    }
    print("\nHTTP latency, 1 gunicorn gevent worker, I/O-bound jobs (10 ms) at concurrency 100:",
          json.dumps(report))
    _write_report("latency", report)
    # The pool really was loaded while we measured ...
    assert done_during >= 500, report
    assert report["median_active"] >= 5, report
    # ... and the web side stayed responsive. A generous sanity bound only: this is a
    # shared 2-core machine (ECHOMQ_STRICT_LATENCY=1 asks for the 50 ms target).
    bound = 50.0 if os.environ.get("ECHOMQ_STRICT_LATENCY") else 500.0
    assert report["loaded_p99_ms"] < bound, report


def _write_report(name: str, payload: Dict[str, Any]) -> None:
    target = os.environ.get("ECHOMQ_REPORT_DIR")
    if target:
        os.makedirs(target, exist_ok=True)
        with open(os.path.join(target, f"gunicorn-{name}.json"), "w") as fh:
            json.dump(payload, fh, indent=2)


# --- deploy: SIGTERM to the master --------------------------------------------------------------
def test_sigterm_drains_in_flight_jobs_and_hands_back_the_rest(gunicorn, queue, r, wait_for):
    # graceful_timeout 6 s: the drain budget is 6 - 1.5 (margin) = 4.5 s.
    g = gunicorn(workers=2, concurrency=10, graceful_timeout=6)
    short = [j.id for j in queue.add_bulk([("sleep", {"ms": 1500}) for _ in range(8)])]
    long = [j.id for j in queue.add_bulk([("sleep", {"ms": 60000}) for _ in range(6)])]
    wait_for(lambda: r.llen(queue.keys.active) == 14, 10, what="all 14 jobs in flight")
    conns = [g.connection() for _ in range(12)]
    for c in conns:
        assert g.get("/_echomq/ready", conn=c)[0] == 200

    t0 = time.monotonic()
    g.signal(signal.SIGTERM)
    # /ready answers 503 as soon as gunicorn decided to stop (asked on kept-alive
    # connections: the listening socket closes during the drain).
    seen_503 = None
    for c in conns:
        try:
            status, body = g.get("/_echomq/ready", conn=c)
        except (OSError, http.client.HTTPException):
            continue
        if status == 503:
            seen_503 = json.loads(body)
            break
        time.sleep(0.1)
    for c in conns:
        c.close()
    assert seen_503 is not None, "no /ready answered 503 during the drain"
    assert seen_503["draining"] is True and "draining" in seen_503["reason"]

    code = g.wait(30)
    took = time.monotonic() - t0
    log = g.log()
    assert code == 0, log
    assert "SIGKILL" not in log, log
    states = _states(queue, short + long)
    assert all(states[i] == "completed" for i in short), states
    assert all(states[i] == "waiting" for i in long), states
    assert r.llen(queue.keys.active) == 0
    waiting = r.lrange(queue.keys.wait, 0, -1)
    assert sorted(waiting) == sorted(long)  # none lost, none duplicated
    assert not list(r.scan_iter(match=queue.keys.base + "*:lock"))
    assert took < 6 + 3, f"shutdown took {took:.1f} s"


# --- crash: SIGKILL of one worker process ---------------------------------------------------------
def test_sigkill_of_a_worker_process_its_jobs_are_recovered_by_a_stalled_check(gunicorn, queue, r, wait_for):
    gunicorn(workers=2, concurrency=5, lock_duration=1000, stalled_interval=1000)
    ids = [j.id for j in queue.add_bulk([("sleep", {"ms": 2500, "report": True}) for _ in range(10)])]

    def where() -> Dict[str, int]:
        out = {}
        for i in ids:
            job = queue.get_job(i)
            if isinstance(job.progress, dict) and job.progress.get("pid"):
                out[i] = job.progress["pid"]
        return out if len(out) == 10 else {}

    running_on = wait_for(where, 15, what="all 10 jobs running and reporting their pid")
    victim = running_on[ids[0]]
    victims_jobs = sorted(i for i, pid in running_on.items() if pid == victim)
    assert victims_jobs
    os.kill(victim, signal.SIGKILL)

    wait_for(lambda: _all_completed(queue, ids), 40, what="every job completed after the kill")
    for i in victims_jobs:
        job = queue.get_job(i)
        assert job.returnvalue["pid"] != victim
        assert job.attempts_started >= 2  # taken again after the stalled check
    events = r.xrange(queue.keys.events)
    stalled = {e[1].get("jobId") for e in events if e[1].get("event") == "stalled"}
    assert set(victims_jobs) <= stalled


# --- metrics across worker processes --------------------------------------------------------------
def _completed_metric(text: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith("echomq_jobs_completed_total{") and f'queue="{QUEUE}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_metrics_count_completed_jobs_across_two_worker_processes(gunicorn, queue, wait_for):
    g = gunicorn(workers=2, concurrency=4)
    ids = [j.id for j in queue.add_bulk([("sleep", {"ms": 40}) for _ in range(60)])]
    wait_for(lambda: _all_completed(queue, ids), 30, what="60 jobs completed")
    pids = {queue.get_job(i).returnvalue["pid"] for i in ids}
    assert len(pids) == 2, "both gunicorn workers should have processed jobs"
    # a job is completed in Redis just before its worker counts it (the hook runs after the
    # finishing script answers): wait for the count to catch up, then whichever worker
    # answers, it reports the pool's total
    wait_for(lambda: _completed_metric(g.get("/_echomq/metrics")[1].decode()) == 60, 10,
             what="the completed metric to count all 60 jobs")
    for _ in range(6):
        status, body = g.get("/_echomq/metrics")
        assert status == 200
        assert _completed_metric(body.decode()) == 60


def test_the_queues_gauges_are_read_by_the_worker_answering_a_scrape_only(gunicorn, queue, redis_url, prefix,
                                                                          tmp_path, wait_for):
    # two gevent worker processes: a scrape of /_echomq/metrics reads the queues from Redis
    # once, in the process that answers it, and nothing reads them between scrapes
    from redis_server import Monitor

    server = gunicorn(workers=2, concurrency=4)
    ids = [j.id for j in queue.add_bulk([("sleep", {"ms": 10}) for _ in range(5)])]
    wait_for(lambda: _all_completed(queue, ids), 30, what="5 jobs completed")
    queue.add("sleep", {"ms": 10}, {"delay": 3_600_000})  # one job that waits (delayed, not due)
    wait_for(lambda: f'echomq_queue_jobs{{queue="{QUEUE}",state="completed"}} 5.0'
             in server.get("/_echomq/metrics")[1].decode(), 10, what="the completed gauge")
    repeat = f'"ZRANGE" "{prefix}:{QUEUE}:repeat"'  # read by the gauges only
    with Monitor(redis_url, str(tmp_path / "monitor.log")) as monitor:
        bodies = []
        for _ in range(6):  # gunicorn hands the requests to either worker
            status, body = server.get("/_echomq/metrics")
            assert status == 200
            bodies.append(body.decode())
        time.sleep(1.0)
    assert monitor.count(repeat) == 6, [line for line in monitor.lines() if "repeat" in line]
    for body in bodies:
        assert "echomq_queue_stats_up 1.0" in body
        assert f'echomq_queue_jobs{{queue="{QUEUE}",state="completed"}} 5.0' in body
        assert f'echomq_queue_jobs{{queue="{QUEUE}",state="delayed"}} 1.0' in body
        assert f'echomq_queue_oldest_age_seconds{{queue="{QUEUE}"}} 0.0' in body


# --- recycling and reload ------------------------------------------------------------------------
def test_max_requests_recycling_drains_and_loses_nothing(gunicorn, queue, wait_for):
    g = gunicorn(workers=1, concurrency=10, max_requests=5)
    first = g.worker_pids()
    ids = [j.id for j in queue.add_bulk([("sleep", {"ms": 800}) for _ in range(6)])]
    for _ in range(5):  # the 5th request makes gunicorn recycle the worker
        g.get("/")
    wait_for(lambda: g.worker_pids() and g.worker_pids() != first, 20, what="a new worker process")
    wait_for(lambda: _all_completed(queue, ids), 20, what="the jobs completed")
    assert "SIGKILL" not in g.log() and "WORKER TIMEOUT" not in g.log()


def test_hup_reload_replaces_workers_without_losing_jobs(gunicorn, queue, r, wait_for):
    g = gunicorn(workers=2, concurrency=5, graceful_timeout=8)
    before = set(g.worker_pids())
    ids = [j.id for j in queue.add_bulk([("sleep", {"ms": 1000}) for _ in range(20)])]
    wait_for(lambda: r.llen(queue.keys.active) > 0, 10, what="jobs in flight")
    g.signal(signal.SIGHUP)
    wait_for(lambda: len(set(g.worker_pids())) == 2 and not (set(g.worker_pids()) & before), 20,
             what="two new worker processes")
    wait_for(lambda: _all_completed(queue, ids), 30, what="every job completed across the reload")
    assert "SIGKILL" not in g.log()


# --- quick shutdown and a stuck hub -----------------------------------------------------------------
def test_sigint_quick_shutdown_hands_every_job_back_at_once(gunicorn, queue, r, wait_for):
    g = gunicorn(workers=2, concurrency=5, graceful_timeout=20)
    ids = [j.id for j in queue.add_bulk([("sleep", {"ms": 60000}) for _ in range(6)])]
    wait_for(lambda: r.llen(queue.keys.active) == 6, 10, what="6 jobs in flight")
    t0 = time.monotonic()
    g.signal(signal.SIGINT)  # the master sends SIGQUIT: gunicorn's worker_int
    g.wait(20)
    assert time.monotonic() - t0 < 5, "a quick shutdown must not wait for the jobs"
    assert r.llen(queue.keys.active) == 0
    assert sorted(r.lrange(queue.keys.wait, 0, -1)) == sorted(ids)
    assert "quick shutdown" in g.log()


def test_a_job_that_hogs_the_hub_gets_the_worker_aborted_with_a_report_and_ends_failed(gunicorn, queue, r, wait_for):
    # gunicorn's timeout (2 s) runs out while the job spins without yielding: SIGABRT.
    g = gunicorn(workers=1, concurrency=2, timeout=2, graceful_timeout=5, lock_duration=1000,
                 stalled_interval=1000)
    job = queue.add("spin", {"seconds": 8})
    wait_for(lambda: "WORKER TIMEOUT" in g.log(), 20, what="gunicorn's worker timeout")
    wait_for(lambda: "What every greenlet" in g.log() and "stays active" in g.log(), 10,
             what="the abort report")
    log = g.log()
    assert f"'{QUEUE}': ['{job.id}']" in log  # the report names the job in flight
    assert "examples/tasks.py" in log and "in spin" in log  # and where it was
    # Not handed back (that would kill worker after worker): the stalled check counts it,
    # and with max_stalled_count 1 the second stall fails it.
    wait_for(lambda: queue.get_job_state(job.id) == "failed", 60, interval=0.2,
             what="the hogging job failed by the stalled check")
    assert "stalled more than allowable limit" in queue.get_job(job.id).failed_reason


# --- embedded Redis: one server for the whole pool ------------------------------------------------
def test_embedded_redis_is_started_once_by_the_master_and_stopped_with_it(tmp_path, wait_for):
    data = tmp_path / "var"
    yaml_path = tmp_path / "embedded.yaml"
    yaml_path.write_text(
        "redis: {url: embedded, embedded: {dir: '%s'}}\n"
        "prefix: emb\n"
        "entry_points: false\n"
        "queues:\n"
        "  mail: {processor: 'examples.tasks:dispatch', concurrency: 3}\n" % data)
    g = Gunicorn(tmp_path, "redis://unused", "emb", workers=2, env={"ECHOMQ_CONFIG": str(yaml_path)},
                 waiter=wait_for)
    try:
        g.start()
        status, body = g.get_json("/signup?email=emb@example.com", method="POST")
        assert status == 202
        sock = data / "redis.sock"
        import redis as redis_lib

        client = redis_lib.Redis(unix_socket_path=str(sock), decode_responses=True)
        wait_for(lambda: client.zscore("emb:mail:completed", body["job"]) is not None, 15,
                 what="the job completed on the embedded Redis")
        client.close()
        server_pid = int((data / "redis.pid").read_text())
        g.signal(signal.SIGTERM)
        assert g.wait(30) == 0
        wait_for(lambda: not os.path.exists(f"/proc/{server_pid}"), 25, what="the embedded Redis stopped")
    finally:
        g.kill_all()


def test_code_reload_hands_jobs_back_and_the_new_worker_finishes_them(gunicorn, queue, r, tmp_path, wait_for):
    watched = tmp_path / "watched.py"
    watched.write_text("x = 1\n")
    g = gunicorn(workers=1, concurrency=5, extra_args=("--reload", "--reload-extra-file", str(watched)))
    first = g.worker_pids()
    ids = [j.id for j in queue.add_bulk([("sleep", {"ms": 3000}) for _ in range(3)])]
    wait_for(lambda: r.llen(queue.keys.active) == 3, 10, what="3 jobs in flight")
    watched.write_text("x = 2\n")  # gunicorn's reloader calls worker_int, then exits the worker
    wait_for(lambda: "code reload" in g.log(), 15, what="the reload hand-back")
    wait_for(lambda: g.worker_pids() and g.worker_pids() != first, 20, what="a new worker process")
    wait_for(lambda: _all_completed(queue, ids), 30, what="the handed-back jobs completed")
    assert {queue.get_job(i).returnvalue["pid"] for i in ids} <= set(g.worker_pids())

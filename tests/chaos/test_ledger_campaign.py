"""A fault campaign on the effect ledger: three Django worker processes
(``tests/frameworks/ledger_worker_proc.py``) on a throwaway PostgreSQL and a Redis of the
test's own run thousands of jobs, half of them through a processor marked atomic and half
through the same processor in its own ``transaction.atomic()``, while a seeded schedule
SIGKILLs a worker (started again at once) or freezes one with SIGSTOP past its lock and
lets it go on. Every job must complete; the atomic jobs must have written their effect
row exactly once (double effects = 0); the plain jobs' second rows are counted beside.

``ECHOMQ_LEDGER_CAMPAIGN_JOBS`` (default 3000) and ``ECHOMQ_LEDGER_CAMPAIGN_SEED`` (default
45) change the run; ``make chaos`` records the figures (``$ECHOMQ_CHAOS_REPORT``).
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from chaos_helpers import record_figure

pytest.importorskip("django")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FRAMEWORKS = os.path.join(os.path.dirname(HERE), "frameworks")
PROC = os.path.join(FRAMEWORKS, "ledger_worker_proc.py")
OPTIONS = {"concurrency": 2, "lock_duration": 1000, "stalled_interval": 500, "max_stalled_count": 1000,
           "drain_delay": 0.5, "shutdown_timeout": 5}

pytestmark = [pytest.mark.slow, pytest.mark.chaos_long]


@pytest.fixture
def pg():
    from pg_server import pg_or_skip

    server = pg_or_skip()
    yield server
    server.stop()


class Fleet:
    """The worker processes, started, killed, frozen and thawed by index."""

    def __init__(self, tmp_path, database, redis_url, prefix, qname):
        self.argv = [sys.executable, PROC, json.dumps(database), redis_url, prefix, qname, json.dumps(OPTIONS)]
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, FRAMEWORKS, os.path.dirname(HERE)]))
        self.tmp_path = tmp_path
        self.procs = []
        self.started = 0

    def start(self, index=None):
        log = open(self.tmp_path / f"worker{self.started}.log", "w")
        self.started += 1
        proc = subprocess.Popen(self.argv, cwd=FRAMEWORKS, env=self.env, stdout=subprocess.PIPE, stderr=log,
                                text=True)
        line = proc.stdout.readline().strip()
        assert line == "ledger worker ready", f"a worker did not start ({line!r}); see {log.name}"
        if index is None:
            self.procs.append(proc)
        else:
            self.procs[index] = proc
        return proc

    def close(self):
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.kill(proc.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                proc.kill()
                proc.wait(10)


def test_sigkill_and_sigstop_at_random_moments_leave_no_double_effect_of_an_atomic_processor(
        pg, own_redis, prefix, qname, tmp_path):
    from echomq_gevent import Queue
    from pg_server import connect

    n = int(os.environ.get("ECHOMQ_LEDGER_CAMPAIGN_JOBS", "3000"))
    rng = random.Random(int(os.environ.get("ECHOMQ_LEDGER_CAMPAIGN_SEED", "45")))
    pg.create_database("campaign")
    database = {"ENGINE": "django.db.backends.postgresql", "NAME": "campaign", "USER": pg.user,
                "HOST": "127.0.0.1", "PORT": str(pg.port)}
    queue = Queue(qname, connection=own_redis.url, prefix=prefix)
    opts = {"attempts": 50, "backoff": {"type": "fixed", "delay": 50}}
    jobs = [{"name": "charge" if i % 2 == 0 else "plain", "data": {"n": i, "work_ms": 20},
             "opts": dict(opts, jobId=f"{'a' if i % 2 == 0 else 'p'}{i}")} for i in range(n)]
    fleet = Fleet(tmp_path, database, own_redis.url, prefix, qname)
    kills = freezes = 0
    try:
        fleet.start()  # the first migrates; the others find it done
        fleet.start()
        fleet.start()
        queue.add_bulk(jobs)
        started = time.monotonic()
        while queue.get_job_counts("completed")["completed"] < n:
            assert time.monotonic() - started < 600, "the campaign did not finish within 600 s"
            time.sleep(rng.uniform(0.3, 1.0))
            index = rng.randrange(len(fleet.procs))
            proc = fleet.procs[index]
            if rng.random() < 0.6:
                proc.kill()
                proc.wait(10)
                kills += 1
                fleet.start(index)
            else:
                os.kill(proc.pid, signal.SIGSTOP)
                time.sleep(rng.uniform(1.2, 2.5))  # past its lock (1 s): others take its jobs over
                os.kill(proc.pid, signal.SIGCONT)
                freezes += 1
        took = time.monotonic() - started
    finally:
        fleet.close()
    counts = queue.get_job_counts("completed", "failed", "active", "waiting", "delayed")
    redelivered = {"a": 0, "p": 0}
    for job in queue.get_jobs(["completed"]):
        if (job.attempts_started or 0) > 1:
            redelivered[job.id[0]] += 1
    queue.close()
    conn = connect(f"host=127.0.0.1 port={pg.port} user={pg.user} dbname=campaign")
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT job_id, COUNT(*) FROM ledger_effects GROUP BY job_id")
            effects = dict(cur.fetchall())
    finally:
        conn.close()
    atomic_double = sum(1 for j, c in effects.items() if j.startswith("a") and c > 1)
    plain_double = sum(c - 1 for j, c in effects.items() if j.startswith("p") and c > 1)
    missing = [j["opts"]["jobId"] for j in jobs if j["opts"]["jobId"] not in effects]
    print(f"ledger campaign: {n} jobs in {took:.1f} s, {kills} SIGKILLs, {freezes} SIGSTOPs; delivered more than "
          f"once: {redelivered['a']} atomic, {redelivered['p']} plain; double effects: atomic {atomic_double}, "
          f"plain {plain_double}")
    record_figure("ledger_campaign_jobs", n, "jobs")
    record_figure("ledger_campaign_kills", kills, "SIGKILLs")
    record_figure("ledger_campaign_freezes", freezes, "SIGSTOPs")
    record_figure("ledger_campaign_redelivered_atomic", redelivered["a"], "jobs")
    record_figure("ledger_campaign_double_effects_atomic", atomic_double, "jobs")
    record_figure("ledger_campaign_double_effects_plain", plain_double, "rows")
    assert counts == {"completed": n, "failed": 0, "active": 0, "waiting": 0, "delayed": 0}, counts
    assert missing == []
    assert atomic_double == 0

"""The effect ledger's faults, with Django worker processes (``ledger_worker_proc.py``),
Flask and Pyramid ones (``ledger_flask_proc.py``, ``ledger_pyramid_proc.py``: the SIGKILL
case) on SQLite and PostgreSQL and a real Redis: the worker SIGKILLed right after the processor's
transaction committed and before the finish reached Redis; Redis restarted at that moment;
PostgreSQL restarted while the processor's transaction is open. Every effect row is
counted: exactly one per job, and the job completes with the value of the run that
committed."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys

import pytest

pytest.importorskip("django")

HERE = os.path.dirname(os.path.abspath(__file__))
PROC = os.path.join(HERE, "ledger_worker_proc.py")
FLASK_PROC = os.path.join(HERE, "ledger_flask_proc.py")
PYRAMID_PROC = os.path.join(HERE, "ledger_pyramid_proc.py")
FAST = {"concurrency": 1, "lock_duration": 1000, "stalled_interval": 1000, "drain_delay": 0.5,
        "shutdown_timeout": 5}

pytestmark = pytest.mark.slow


class Database:
    """Django's ``DATABASES['default']`` for the worker processes (``url``: SQLAlchemy's),
    and the test's reads."""

    def __init__(self, settings, read, url):
        self.settings = settings
        self._read = read
        self.url = url

    def rows(self, sql, params=()):
        return self._read(sql, params)

    def effects(self, job_id):
        return [r[0] for r in self.rows("SELECT run FROM ledger_effects WHERE job_id = %s ORDER BY id", (job_id,))]

    def ledger(self, job_id):
        return [r[0] for r in self.rows("SELECT return_value FROM echomq_ledger WHERE job_id = %s", (job_id,))]


def _sqlite(path):
    def read(sql, params):
        conn = sqlite3.connect(path, timeout=10)
        try:
            return conn.execute(sql.replace("%s", "?"), params).fetchall()
        finally:
            conn.close()
    return Database({"ENGINE": "django.db.backends.sqlite3", "NAME": path, "OPTIONS": {"timeout": 10}}, read,
                    f"sqlite:///{path}")


def _postgres(server, name):
    from pg_server import connect

    server.create_database(name)

    def read(sql, params):
        conn = connect(f"host=127.0.0.1 port={server.port} user={server.user} dbname={name}")
        try:
            with conn.cursor() as cur:
                cur.execute(sql, params)
                return cur.fetchall()
        finally:
            conn.close()
    return Database({"ENGINE": "django.db.backends.postgresql", "NAME": name, "USER": server.user,
                     "HOST": "127.0.0.1", "PORT": str(server.port)}, read, server.url_for(name))


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request, tmp_path):
    if request.param == "sqlite":
        return _sqlite(str(tmp_path / "ledger.sqlite3"))
    server = request.getfixturevalue("pg_server")
    return _postgres(server, f"ledger{os.getpid()}x{abs(hash(request.node.name)) % 10 ** 8}")


def _worker(command, database, redis_url, prefix, qname, options=None, **env):
    argv = [sys.executable, PROC, json.dumps(database.settings), redis_url, prefix, qname,
            json.dumps(dict(FAST, **(options or {})))]
    return command(argv, HERE, {k: str(v) for k, v in env.items()})


def _completed_once(database, queue, job_id, first_pid=None):
    """The job completed with the value of the one run whose effect committed."""
    job = queue.get_job(job_id)
    effects = database.effects(job_id)
    assert len(effects) == 1, effects
    assert job.returnvalue["run"] == effects[0]
    stored = database.ledger(job_id)
    assert len(stored) == 1 and json.loads(stored[0]) == job.returnvalue
    if first_pid is not None:
        assert job.returnvalue["pid"] == first_pid
    return job


@pytest.mark.parametrize("offload", [None, "process"])
def test_killed_after_the_commit_the_job_completes_with_the_first_runs_value_and_one_effect(
        database, redis_url, prefix, qname, queue, command, wait_for, offload):
    if offload == "process" and "sqlite" not in database.settings["ENGINE"]:
        pytest.skip("offload: process is run on SQLite (the database does not matter to it)")
    queue.add("charge", {"n": 1}, {"jobId": "k1"})
    first = _worker(command, database, redis_url, prefix, qname, {"offload": offload} if offload else None,
                    LEDGER_KILL_AFTER_COMMIT=1)
    wait_for(lambda: first.exited(), what="the first worker to be killed after its commit", details=first.output,
             give_up=lambda: "the job failed" if queue.get_job_state("k1") == "failed" else None, timeout=60)
    # (not its return code: where gevent's child watcher runs in this process, as after an
    # offload: process test, it reaps the child first and Popen reads 0)
    assert first.saw("committed k1"), first.output()
    assert queue.get_job_state("k1") == "active"  # killed: the finish never reached Redis
    assert len(database.effects("k1")) == 1 and len(database.ledger("k1")) == 1
    first_pid = json.loads(database.ledger("k1")[0])["pid"]

    second = _worker(command, database, redis_url, prefix, qname, {"offload": offload} if offload else None)
    wait_for(lambda: queue.get_job_state("k1") == "completed", what="the stalled job to complete on the second "
             "worker", details=second.output, give_up=second.exited, timeout=60)
    _completed_once(database, queue, "k1", first_pid)
    assert second.stop() == 0


@pytest.mark.parametrize("framework", ["flask", "pyramid"])
def test_flask_and_pyramid_killed_after_the_commit_the_job_completes_with_the_first_runs_value_and_one_effect(
        database, redis_url, prefix, qname, queue, command, wait_for, framework):
    if framework == "flask":
        pytest.importorskip("flask_sqlalchemy")
    else:
        pytest.importorskip("pyramid_tm")
        pytest.importorskip("zope.sqlalchemy")
    job_id = f"{framework[0]}k1"
    queue.add("charge", {"n": 1}, {"jobId": job_id})
    argv = [sys.executable, FLASK_PROC if framework == "flask" else PYRAMID_PROC, database.url, redis_url, prefix,
            qname]
    first = command(argv, HERE, {"LEDGER_KILL_AFTER_COMMIT": "1"})
    wait_for(lambda: first.exited(), what=f"the first {framework} worker to be killed after its commit",
             details=first.output, give_up=lambda: "the job failed" if queue.get_job_state(job_id) == "failed" else None,
             timeout=60)
    assert first.saw(f"committed {job_id}"), first.output()
    assert queue.get_job_state(job_id) == "active"
    assert len(database.effects(job_id)) == 1 and len(database.ledger(job_id)) == 1  # committed before the kill
    first_pid = json.loads(database.ledger(job_id)[0])["pid"]
    second = command(argv, HERE, {})
    wait_for(lambda: queue.get_job_state(job_id) == "completed", what=f"the stalled job to complete on the second "
             f"{framework} worker", details=second.output, give_up=second.exited, timeout=60)
    _completed_once(database, queue, job_id, first_pid)
    assert second.stop() == 0


def test_without_the_ledger_the_same_kill_writes_the_effect_twice(database, redis_url, prefix, qname, queue,
                                                                   command, wait_for):
    """What the test above guards against, measured the same way on a plain processor."""
    queue.add("plain", {"n": 1}, {"jobId": "p1"})
    first = _worker(command, database, redis_url, prefix, qname, LEDGER_KILL_AFTER_COMMIT=1)
    wait_for(lambda: first.exited(), what="the first worker to be killed after its commit", details=first.output,
             timeout=60)
    second = _worker(command, database, redis_url, prefix, qname)
    wait_for(lambda: queue.get_job_state("p1") == "completed", what="the stalled job to complete",
             details=second.output, give_up=second.exited, timeout=60)
    assert len(database.effects("p1")) == 2 and database.ledger("p1") == []
    assert second.stop() == 0


def test_redis_restarted_between_the_commit_and_the_finish(database, own_redis, prefix, qname, command, wait_for):
    from echomq_gevent import Queue

    queue = Queue(qname, connection=own_redis.url, prefix=prefix)
    try:
        queue.add("charge", {"n": 1}, {"jobId": "r1"})
        worker = _worker(command, database, own_redis.url, prefix, qname, LEDGER_STOP_AFTER_COMMIT=1)
        wait_for(lambda: worker.saw("committed r1"), what="the worker to commit and stop", details=worker.output,
                 give_up=worker.exited, timeout=60)
        own_redis.kill()
        own_redis.start()
        os.kill(worker.proc.pid, signal.SIGCONT)
        wait_for(lambda: queue.get_job_state("r1") == "completed", what="the job to complete after Redis came back",
                 details=worker.output, give_up=worker.exited, timeout=60)
        _completed_once(database, queue, "r1", worker.proc.pid)
        assert worker.stop() == 0
    finally:
        queue.close()


@pytest.fixture
def own_redis():
    """A Redis of the test's own with an append-only file, since the test restarts it."""
    from redis_server import RedisServer

    server = RedisServer(aof=True).start()
    yield server
    server.stop()


@pytest.fixture
def own_pg():
    """A PostgreSQL cluster of the test's own, since the test restarts it."""
    from pg_server import pg_or_skip

    server = pg_or_skip()
    yield server
    server.stop()


def test_postgresql_restarted_mid_transaction_fails_the_attempt_and_the_retry_commits_once(
        own_pg, redis_url, prefix, qname, queue, command, wait_for, tmp_path):
    database = _postgres(own_pg, "ledgerrestart")
    release = tmp_path / "release"
    queue.add("hold", {"release": str(release)}, {"jobId": "h1", "attempts": 3,
                                                  "backoff": {"type": "fixed", "delay": 200}})
    worker = _worker(command, database, redis_url, prefix, qname)
    wait_for(lambda: worker.saw("holding h1"), what="the processor to hold its transaction open",
             details=worker.output, give_up=worker.exited, timeout=60)
    own_pg.restart()
    own_pg.wait_ready()
    release.write_text("go")
    wait_for(lambda: queue.get_job_state("h1") == "completed", what="the retry to complete",
             details=worker.output, give_up=worker.exited, timeout=60)
    job = _completed_once(database, queue, "h1")
    assert job.attempts_made == 2  # the first attempt failed with the server gone: nothing of it stayed
    assert worker.stop() == 0

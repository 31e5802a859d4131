"""The command and the gunicorn integration on a Redis Cluster and behind Sentinel, as whole
processes: only the YAML file's ``redis:`` section (and, on a cluster, a hash-tag prefix)
differs from a single Redis.

On a cluster of three primaries (the module's ``cluster``): ``echomq-gevent -c FILE --check``
pings it, ``echomq-gevent -c FILE`` runs the jobs added to it and exits 0 on SIGTERM, and
gunicorn's gevent workers run the jobs the app enqueues, answer the health endpoints, and
stop cleanly. Behind Sentinel, and on a cluster of its own: the primary (of the queue's
slot) is killed while gunicorn's workers run jobs; the same worker processes follow the
failover to the promoted replica, jobs the app enqueues after it complete, and the jobs in
flight at the kill end too.
"""
from __future__ import annotations

import http.client
import re
import signal
import textwrap
from pathlib import Path
from typing import Any, Dict, List, Optional

import redis as redis_lib

from echomq_gevent import Queue
from echomq_gevent.connection.cluster import key_slot

from test_cli import cli
from test_cli_run import Cli
from redis_server import ClusterGroup
from test_gunicorn import QUEUE, REPO, Gunicorn


def _yaml(tmp_path: Path, redis_section: str, prefix: str, queue: str, processor: str,
          extra: str = "", plugins: str = "") -> str:
    path = tmp_path / "scale.yaml"
    path.write_text(textwrap.dedent(redis_section) + textwrap.dedent(f"""\
        prefix: "{prefix}"
        plugin_paths: ["{REPO}", "{tmp_path}"]
        entry_points: false
        {plugins}
        queues:
          {queue}:
            processor: "{processor}"
        """) + textwrap.indent(textwrap.dedent(extra), "    "))
    return str(path)


def _cluster_section(cluster: Any) -> str:
    nodes = ", ".join(f'"127.0.0.1:{n.port}"' for n in cluster.nodes[:2])  # the rest is learnt
    return f"redis:\n  cluster: [{nodes}]\n"


def _owner(cluster: Any, key: str) -> Optional[int]:
    """The port of the primary that serves ``key``'s slot (None while no live one does)."""
    try:
        return cluster.owner_of(key_slot(key))
    except RuntimeError:  # its primary failed and no replica is promoted yet
        return None


def _completed(queue: Queue, ids: List[str]) -> bool:
    return all(queue.get_job_state(i) == "completed" for i in ids)


def _start(tmp_path: Path, yaml_path: str, prefix: str, wait_for: Any, workers: int = 2) -> Gunicorn:
    """The example app under gunicorn (``conf/gunicorn.conf.py``) with ``yaml_path``'s queues."""
    g = Gunicorn(tmp_path, "redis://unused", prefix, workers=workers,
                 env={"ECHOMQ_CONFIG": yaml_path}, waiter=wait_for)
    try:
        return g.start()
    except BaseException:
        g.kill_all()
        raise


def _post(g: Gunicorn, path: str) -> Optional[Dict[str, Any]]:
    """POST to the app; its JSON answer when it took the jobs (202), else None."""
    try:
        status, body = g.get_json(path, method="POST")
    except (OSError, http.client.HTTPException, ValueError):
        return None
    return body if status == 202 else None


def _ready(g: Gunicorn, status: int) -> Optional[Dict[str, Any]]:
    """``/_echomq/ready``'s JSON body when it answers ``status``, else None."""
    try:
        got, body = g.get_json("/_echomq/ready")
    except (OSError, http.client.HTTPException, ValueError):
        return None
    return body if got == status else None


def _greenlet_crashes(log: str) -> List[str]:
    """The greenlets gevent reported as crashed (it prints each with a traceback)."""
    return re.findall(r"<Greenlet at 0x[0-9a-f]+: .*> failed with \w+", log)


def _log_errors(g: Gunicorn) -> List[str]:
    return [line for line in g.log().splitlines()
            if "Traceback" in line or "WORKER TIMEOUT" in line or "failed to boot" in line.lower()]


# --- the command on a cluster ---------------------------------------------------------------------
def test_the_command_checks_and_runs_a_cluster_file(cluster, qname, tmp_path, wait_for):
    (tmp_path / "scalejobs.py").write_text("import os\n\ndef handle(job):\n    return {'pid': os.getpid()}\n")
    prefix = "{c" + qname + "}"
    path = _yaml(tmp_path, _cluster_section(cluster), prefix, qname, "scalejobs:handle",
                 extra="concurrency: 4\ndrain_delay: 0.5\n")

    out = cli("-c", path, "--check")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "redis+cluster://" in out.stdout and "answers PING" in out.stdout, out.stdout
    assert f"queue {qname}: processor scalejobs:handle" in out.stdout

    queue = Queue(qname, connection=cluster.url, prefix=prefix)
    command = Cli(["-c", path, "--no-progress"], cwd=str(tmp_path))
    try:
        wait_for(lambda: queue.get_workers(), 60, what="the command's worker to register",
                 details=command.output, give_up=command.exited)
        ids = [j.id for j in queue.add_bulk([("job", {"i": i}) for i in range(30)])]
        wait_for(lambda: _completed(queue, ids), 60, what="30 jobs completed by the command",
                 details=command.output, give_up=command.exited)
        assert {queue.get_job(i).returnvalue["pid"] for i in ids} == {command.proc.pid}
        # every key of the queue lives on the primary that owns the prefix's slot
        key = f"{prefix}:{qname}:completed"
        assert cluster.ask(_owner(cluster, key), "ZCARD", key) == len(ids)
        assert command.stop(signal.SIGTERM) == 0, command.output()
        assert not any("Traceback" in line for line in command.lines), command.output()
    finally:
        command.kill()
        queue.close()


# --- gunicorn on a cluster --------------------------------------------------------------------------
def test_gunicorn_workers_run_the_apps_jobs_on_a_cluster(cluster, qname, tmp_path, wait_for):
    prefix = "{g" + qname + "}"
    path = _yaml(tmp_path, _cluster_section(cluster), prefix, QUEUE, "examples.tasks:dispatch",
                 extra="concurrency: 5\n", plugins="plugins: [echomq_gevent.contrib.prometheus]")
    g = _start(tmp_path, path, prefix, wait_for)
    queue = Queue(QUEUE, connection=cluster.url, prefix=prefix)
    try:
        assert "on redis+cluster://" in g.log()
        ids = []
        for i in range(6):  # each request goes to whichever worker process accepts it
            body = _post(g, f"/signup?email=c{i}@example.com")
            assert body is not None, g.log()
            ids.append(body["job"])
        body = _post(g, "/sleep?n=20&ms=20")  # add_bulk: one pipeline to the slot's primary
        assert body is not None, g.log()
        ids += body["jobs"]
        wait_for(lambda: _completed(queue, ids), 60, what="the app's 26 jobs completed on the cluster",
                 details=g.log)
        pids = set(g.worker_pids())
        assert {queue.get_job(i).returnvalue["pid"] for i in ids} <= pids
        assert queue.get_job(ids[0]).returnvalue["sent_to"] == "c0@example.com"
        status, job = g.get_json(f"/jobs/{ids[0]}")  # read back through get_queue()
        assert status == 200 and job["state"] == "completed", job
        key = f"{prefix}:{QUEUE}:completed"
        assert cluster.ask(_owner(cluster, key), "ZCARD", key) == len(ids)

        status, ready = g.get_json("/_echomq/ready")
        assert status == 200 and ready["ready"] is True, ready
        status, live = g.get_json("/_echomq/live")
        assert status == 200 and live["queues"][QUEUE]["lock_renewal_alive"], live
        status, metrics = g.get("/_echomq/metrics")
        assert status == 200
        completed = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.decode().splitlines()
                        if line.startswith("echomq_jobs_completed_total{"))
        assert completed == len(ids)

        g.signal(signal.SIGTERM)
        assert g.wait(60) == 0, g.log()
        assert not _log_errors(g), g.log()
    finally:
        g.kill_all()
        queue.close()


# --- gunicorn behind Sentinel, through a failover ----------------------------------------------------
def test_gunicorn_workers_follow_a_sentinel_failover(sentinels, qname, tmp_path, wait_for):
    prefix = "s" + qname
    section = f"""\
        redis:
          sentinel:
            sentinels: [{", ".join(f'"127.0.0.1:{p}"' for p in sentinels.sentinel_ports)}]
            service: {sentinels.service}
        """
    # short locks: the jobs in flight at the kill lose their completion with the old primary
    # and come back through the stalled check
    path = _yaml(tmp_path, section, prefix, QUEUE, "examples.tasks:dispatch",
                 extra="concurrency: 5\nlock_duration: 2000\nstalled_interval: 1000\n")
    g = _start(tmp_path, path, prefix, wait_for)
    queue = Queue(QUEUE, connection=sentinels.url, prefix=prefix)
    try:
        assert "on redis+sentinel://" in g.log()
        pids = set(g.worker_pids())
        before = _post(g, "/sleep?n=80&ms=200")
        assert before is not None, g.log()
        primary = redis_lib.Redis(port=sentinels.primary.port)
        assert primary.execute_command("WAIT", 1, 10000) == 1  # the replica has every add
        primary.close()
        wait_for(lambda: sum(queue.get_job_state(i) == "completed" for i in before["jobs"]) >= 10, 60,
                 what="10 jobs done before the kill", details=g.log)

        done_at_kill = sum(queue.get_job_state(i) == "completed" for i in before["jobs"])
        sentinels.primary.kill()
        # the sentinels wait down-after-milliseconds (1 s) before they act: /ready says so meanwhile
        outage = wait_for(lambda: _ready(g, 503), 30, interval=0.05, what="/_echomq/ready 503 without a primary",
                          details=g.log)
        assert "Redis unreachable" in outage["reason"], outage
        sentinels.wait_promoted(wait_for)
        # the app's own queue follows too: enqueue until the new primary takes the jobs
        after = wait_for(lambda: _post(g, "/sleep?n=10&ms=20"), 90, interval=0.5,
                         what="the app to enqueue on the new primary", details=g.log)
        signup = wait_for(lambda: _post(g, "/signup?email=late@example.com"), 60, interval=0.5,
                          what="a signup after the failover", details=g.log)
        late = after["jobs"] + [signup["job"]]
        wait_for(lambda: _completed(queue, late), 90, what="the jobs added after the failover completed",
                 details=g.log)
        wait_for(lambda: _completed(queue, before["jobs"]), 90,
                 what="the jobs added before the kill completed (those in flight via the stalled check)",
                 details=g.log)
        # the same worker processes did it: they followed the failover, nobody restarted them
        assert set(g.worker_pids()) == pids
        assert {queue.get_job(i).returnvalue["pid"] for i in late} <= pids
        new_primary = redis_lib.Redis(port=sentinels.replica.port, decode_responses=True)
        assert new_primary.zcard(f"{prefix}:{QUEUE}:completed") == len(before["jobs"]) + len(late)
        new_primary.close()
        print(f"\ngunicorn behind Sentinel: {done_at_kill} of {len(before['jobs'])} jobs done at the kill")
        wait_for(lambda: _ready(g, 200), 60, what="/_echomq/ready 200 again", details=g.log)
        status, live = g.get_json("/_echomq/live")
        assert status == 200 and live["live"] is True, live
        assert "WORKER TIMEOUT" not in g.log() and "failed to boot" not in g.log().lower(), g.log()
        # the lock-renewal thread asked the sentinels on its own sockets, not on the hub's
        assert "Cannot switch to a different thread" not in g.log(), g.log()
        # a marker wait cut by the kill is the fetch loop's error (logged once, retried), not a crash
        assert not _greenlet_crashes(g.log()), g.log()
    finally:
        g.kill_all()
        queue.close()


# --- gunicorn on a cluster, through a killed primary ------------------------------------------------
def test_gunicorn_workers_follow_a_cluster_failover(qname, tmp_path, wait_for):
    # a cluster of its own: the test changes its layout
    with ClusterGroup(node_timeout_ms=2000) as cluster:
        prefix = "{k" + qname + "}"
        path = _yaml(tmp_path, _cluster_section(cluster), prefix, QUEUE, "examples.tasks:dispatch",
                     extra="concurrency: 5\nlock_duration: 2000\nstalled_interval: 1000\n")
        g = _start(tmp_path, path, prefix, wait_for)
        queue = Queue(QUEUE, connection=cluster.url, prefix=prefix)
        try:
            pids = set(g.worker_pids())
            before = _post(g, "/sleep?n=80&ms=200")
            assert before is not None, g.log()
            key = f"{prefix}:{QUEUE}:wait"
            owner = _owner(cluster, key)
            replica = cluster.replica_of(owner)
            assert cluster.ask(owner, "WAIT", 1, 10000) == 1  # the replica has every add
            wait_for(lambda: sum(queue.get_job_state(i) == "completed" for i in before["jobs"]) >= 10, 60,
                     what="10 jobs done before the kill", details=g.log)

            cluster.node(owner).kill()
            wait_for(lambda: _owner(cluster, key) == replica, 90, interval=0.2,
                     what="the replica to be promoted for the queue's slot")
            after = wait_for(lambda: _post(g, "/sleep?n=10&ms=20"), 90, interval=0.5,
                             what="the app to enqueue on the promoted replica", details=g.log)
            wait_for(lambda: _completed(queue, after["jobs"]), 90,
                     what="the jobs added after the failover completed", details=g.log)
            wait_for(lambda: _completed(queue, before["jobs"]), 90,
                     what="the jobs added before the kill completed (those in flight via the stalled check)",
                     details=g.log)
            assert set(g.worker_pids()) == pids
            assert {queue.get_job(i).returnvalue["pid"] for i in after["jobs"]} <= pids
            assert cluster.ask(replica, "ZCARD", f"{prefix}:{QUEUE}:completed") == 90
            wait_for(lambda: _ready(g, 200), 60, what="/_echomq/ready 200", details=g.log)
            log = g.log()
            assert "WORKER TIMEOUT" not in log and "Cannot switch to a different thread" not in log, log
            assert not _greenlet_crashes(log), log
        finally:
            g.kill_all()
            queue.close()

"""The connections of the real command (gevent-patched, pipelined) with 20 queues: one
command connection for all of them, and one blocking connection per queue or, with
``marker_wait: shared``, one for the process; jobs fed to every queue are all run once,
and SIGTERM exits cleanly."""
from __future__ import annotations

import json

import pytest

from echomq_gevent.queue.queue import Queue
from echomq_gevent.worker.remote_cancel import SUBSCRIBER_NAME
from echomq_gevent.worker.shared_wait import SHARED_WAIT_NAME

from e2e.test_cli_run import Cli, command_file

QUEUES = 20
JOBS = '''
def run(job):
    return {"q": job.queue_name, "i": job.data["i"]}
'''


@pytest.mark.parametrize("mode", ["per_queue", "shared"])
def test_the_commands_connections_for_twenty_queues(tmp_path, redis_url, prefix, qname, r, wait_for, mode):
    (tmp_path / "connjobs.py").write_text(JOBS)
    names = [f"{qname}{i}" for i in range(QUEUES)]
    conf = command_file(tmp_path, redis_url, prefix, f"marker_wait: {mode}\n"
                        "defaults: {concurrency: 5, drain_delay: 5}\nqueues:\n"
                        + "".join(f"  {n}: {{processor: \"connjobs:run\"}}\n" for n in names))
    before = {int(c["id"]) for c in r.client_list()}
    me = r.client_id()

    def ours():
        return [c for c in r.client_list() if int(c["id"]) not in before and int(c["id"]) != me]

    cli = Cli(["-c", str(conf), "--no-progress"], cwd=str(tmp_path))
    producers = [Queue(n, connection=redis_url, prefix=prefix) for n in names]
    try:
        if mode == "per_queue":
            wait_for(lambda: sum(1 for c in ours() if "b" in c["flags"]) == QUEUES, timeout=30,
                     what="every queue blocked", give_up=cli.exited, details=cli.output)
        else:
            wait_for(lambda: any(c["name"] == SHARED_WAIT_NAME and "b" in c["flags"] for c in ours()), timeout=30,
                     what="the shared wait blocked", give_up=cli.exited, details=cli.output)
        # the command connection, the marker waits (one, or one a queue) and the process's
        # subscription to the queues' cancellation channels
        expected = QUEUES + 2 if mode == "per_queue" else 3
        wait_for(lambda: len(ours()) == expected, timeout=10, what=f"{expected} connections",
                 details=lambda: repr([(c["name"], c["cmd"]) for c in ours()]))
        assert [c["name"] for c in ours() if c["cmd"] == "subscribe"] == [SUBSCRIBER_NAME]
        before = {int(c["id"]) for c in r.client_list()}  # the producers' own, from now on
        added = []
        for rnd in range(10):
            for i, q in enumerate(producers):
                added.append((names[i], q.add("j", {"i": rnd}).id))
        wait_for(lambda: sum(r.zcard(f"{prefix}:{n}:completed") for n in names) >= len(added),
                 timeout=60, what="every job completed", give_up=cli.exited, details=cli.output)
        for name, job_id in added:
            assert json.loads(r.hget(f"{prefix}:{name}:{job_id}", "returnvalue"))["q"] == name
            assert r.hget(f"{prefix}:{name}:{job_id}", "ats") == "1"  # run once
        status = cli.stop()
        assert status == 0, cli.output()  # a crash on the way out prints its faulthandler dump here
    finally:
        cli.kill()
        for q in producers:
            q.close()

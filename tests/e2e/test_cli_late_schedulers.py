"""The command logs a job scheduler whose run is late with no Prometheus scrape: the one
process of the host looks (the single worker process, or the supervisor and not each of
its children), once per late run."""
from __future__ import annotations

import time

import pytest

from echomq_gevent import Queue
from echomq_gevent.protocol.clock import now_ms

from test_cli_run import Cli, one_queue_file

LATE = "has not started"


@pytest.mark.parametrize("processes", [1, 2])
def test_a_late_scheduler_is_logged_once_by_the_host(tmp_path, redis_url, prefix, qname, wait_for, processes):
    (tmp_path / "ticks.py").write_text("def run(job):\n    return 1\n")
    conf = one_queue_file(tmp_path, redis_url, prefix, qname, 'processor: "ticks:run", drain_delay: 1')
    queue = Queue(qname, connection=redis_url, prefix=prefix)
    queue.upsert_job_scheduler("nightly", {"every": 3_600_000})
    queue.pause()  # no worker runs it: its run stays late
    queue.client.zadd(queue.keys.repeat, {"nightly": now_ms() - 30_000})
    args = ["-c", str(conf)] + (["--processes", str(processes)] if processes > 1 else [])
    cli = Cli(args, cwd=str(tmp_path), env={"ECHOMQ_SCHEDULER_LATE_AFTER": "1"})
    try:
        # the first look comes after late_check_interval(1) = 5 s
        wait_for(lambda: cli.saw(LATE), timeout=30, what="the late scheduler logged", give_up=cli.exited,
                 details=cli.output)
        wait_for(lambda: cli.output().count("(the queue is paused)") >= 1, timeout=5, what="the reason")
        # a second look (5 s later) does not log the same late run again, nor does any child
        time.sleep(6)
        lines = [line for line in cli.output().splitlines() if LATE in line]
        assert len(lines) == 1, lines
        assert "'nightly'" in lines[0] and qname in lines[0]
        assert cli.stop() == 0, cli.output()
    finally:
        cli.kill()
        queue.close()

"""``gc_freeze`` under the real command: once its workers have started, the worker
process has frozen what it loaded (``gc.get_freeze_count()`` seen by a job), unless the
file turns it off."""
from __future__ import annotations

import json

import pytest

from echomq_gevent.queue.queue import Queue

from e2e.test_cli_run import Cli, one_queue_file

JOBS = '''
import gc


def run(job):
    return {"frozen": gc.get_freeze_count()}
'''


@pytest.mark.parametrize("setting,frozen", [(None, True), ("false", False)], ids=["default", "off"])
def test_the_command_freezes_what_it_loaded_unless_told_not_to(tmp_path, redis_url, prefix, qname, r, wait_for,
                                                                setting, frozen):
    (tmp_path / "gcjobs.py").write_text(JOBS)
    conf = one_queue_file(tmp_path, redis_url, prefix, qname, 'processor: "gcjobs:run", drain_delay: 1',
                          f"gc_freeze: {setting}\n" if setting else "")
    queue = Queue(qname, connection=redis_url, prefix=prefix)
    cli = Cli(["-c", str(conf), "--no-progress"], cwd=str(tmp_path))
    try:
        job = queue.add("look", {})
        wait_for(lambda: queue.get_job_state(job.id) == "completed", what="the job", give_up=cli.exited,
                 details=cli.output, timeout=30)
        count = json.loads(r.hget(f"{prefix}:{qname}:{job.id}", "returnvalue"))["frozen"]
        # the package, gevent, redis-py and the workers alone are thousands of objects
        assert (count > 1000) if frozen else (count == 0), count
    finally:
        cli.kill()
        queue.close()

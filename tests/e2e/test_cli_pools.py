"""``echomq-gevent -c FILE`` with ``pools:`` end to end, in a subprocess: a file whose only
queues are those a pattern finds runs until SIGTERM (exit 0), serves a tenant queue made
after it started, and ``status`` lists the pool with the queue it found."""
from __future__ import annotations

import json
import signal

from echomq_gevent.queue.queue import Queue

from e2e.test_cli import cli
from e2e.test_cli_run import Cli, command_file


def test_a_pattern_only_file_serves_tenants_made_later_and_shows_in_status(tmp_path, redis_url, prefix, qname,
                                                                           wait_for):
    (tmp_path / "tenantjobs.py").write_text("def handle(job):\n    return {'tenant': job.queue_name}\n")
    conf = command_file(tmp_path, redis_url, prefix, f"""
        defaults: {{drain_delay: 1}}
        pools:
          tenants:
            concurrency: 4
            queues: ["{qname}-*"]
            order: round_robin
            max_per_queue: 2
            processor: "tenantjobs:handle"
            discover_every: 0.2
        """)
    run = Cli(["-c", str(conf), "--no-progress"], cwd=str(tmp_path))
    tenant = Queue(f"{qname}-acme", connection=redis_url, prefix=prefix)
    try:
        wait_for(lambda: run.saw("no queue matches"), what="the pool waiting for queues", give_up=run.exited,
                 details=run.output, timeout=30)
        job = tenant.add("j", {})
        wait_for(lambda: tenant.get_job_state(job.id) == "completed", what="the tenant's job run",
                 give_up=run.exited, details=run.output, timeout=30)
        assert tenant.get_job(job.id).returnvalue == {"tenant": f"{qname}-acme"}
        status = cli("-c", str(conf), "status", "--json", cwd=str(tmp_path))
        assert status.returncode == 0, status.stderr
        pool = json.loads(status.stdout)["echomq:pools"][0]
        assert pool["patterns"] == [f"{qname}-*"] and [q["queue"] for q in pool["queues"]] == [f"{qname}-acme"]
        assert run.stop(signal.SIGTERM) == 0, run.output()
    finally:
        run.kill()
        tenant.close()

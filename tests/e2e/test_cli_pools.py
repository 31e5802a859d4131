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


def test_check_lists_the_pools_and_refuses_a_pattern_processor_that_does_not_import(tmp_path, redis_url, prefix,
                                                                                      qname):
    (tmp_path / "tenantjobs.py").write_text("def handle(job):\n    return 1\n")
    good = command_file(tmp_path, redis_url, prefix, f"""
        queues:
          {qname}: {{processor: "tenantjobs:handle", concurrency: 3}}
        pools:
          p: {{concurrency: 8, queues: [{qname}, "{qname}-t-*"], order: round_robin, processor: "tenantjobs:handle"}}
        """)
    out = cli("-c", str(good), "--check", cwd=str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert (f"pool p: round_robin, 8 slots, queues {qname}; patterns {qname}-t-*, processor tenantjobs:handle, "
            f"8 slots each at most") in out.stdout
    bad = command_file(tmp_path, redis_url, prefix, f"""
        pools:
          p: {{concurrency: 8, queues: ["{qname}-t-*"], processor: "tenantjobs:nosuch"}}
        """)
    out = cli("-c", str(bad), "--check", cwd=str(tmp_path))
    assert out.returncode == 2, out.stdout + out.stderr
    assert "key pools.p.processor" in out.stderr and "has no 'nosuch'" in out.stderr

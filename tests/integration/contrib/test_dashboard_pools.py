"""A pool's budget, its queues and what each uses, in ``status`` (table and JSON) and on
the dashboard's overview, while a pool of real workers holds jobs in flight."""
from __future__ import annotations

import io
import json

import gevent.event

from echomq_gevent import Pool, Queue
from echomq_gevent.contrib.dashboard import Dashboard
from echomq_gevent.host.config import parse_config
from echomq_gevent.host.pools import describe_pools
from echomq_gevent.host.status import POOLS_KEY, print_status

from integration.contrib.test_dashboard_metrics import _get


def test_status_and_the_dashboard_show_the_pool_and_its_queues(redis_url, prefix, qname, wait_for):
    a, b = f"{qname}-a", f"{qname}-b"
    cfg = parse_config(f"""
redis: {{url: "{redis_url}"}}
prefix: {prefix}
queues:
  {a}: {{concurrency: 2}}
  {b}: {{}}
pools:
  shared:
    concurrency: 4
    queues: [{a}, {b}]
    weights: {{{a}: 3}}
    turn: 2
""", filename="worker.yaml")
    pools = describe_pools(cfg)
    assert pools == [{"name": "shared", "order": "weighted", "concurrency": 4, "turn": 2, "processes": 1, "budget": 4,
                      "queues": [{"queue": a, "weight": 3, "cap": 2}, {"queue": b, "weight": 1, "cap": 4}],
                      "patterns": [], "max_per_queue": None}]
    release = gevent.event.Event()
    pool = Pool({a: {"concurrency": 2}, b: None}, concurrency=4, weights={a: 3}, connection=redis_url,
                prefix=prefix, processor=lambda job: release.wait(10), drain_delay=0.5)
    producers = [Queue(n, connection=redis_url, prefix=prefix) for n in (a, b)]
    pool.start()
    try:
        producers[0].add_bulk([("j", {})] * 5)
        producers[1].add_bulk([("j", {})] * 1)
        # a takes its cap (2), b its one job: 3 of the 4 slots
        wait_for(lambda: producers[0].get_job_counts("active")["active"] == 2
                 and producers[1].get_job_counts("active")["active"] == 1, timeout=10, what="3 jobs in flight")
        assert [q["in_use"] for q in pool.usage()["queues"]] == [2, 1]

        out = io.StringIO()
        print_status(redis_url, [a, b], prefix, out=out, pools=pools)
        text = out.getvalue()
        assert "pool shared: weighted, turns of 2 jobs, 4 slots; 3 of 4 in use" in text, text
        assert f"  {a}  weight 3  cap 2  active 2  ready 3" in text, text
        assert f"  {b}  weight 1  cap 4  active 1  ready 0" in text, text
        out = io.StringIO()
        print_status(redis_url, [a, b], prefix, as_json=True, out=out, pools=pools)
        shown = json.loads(out.getvalue())[POOLS_KEY][0]
        assert shown["in_use"] == 3 and [q["active"] for q in shown["queues"]] == [2, 1]

        ui = Dashboard(redis_url, prefix=prefix, queues=[a, b], pools=pools)
        try:
            status, body = _get(ui, "/")
            assert status.startswith("200")
            assert 'id="pools"' in body and 'data-pool="shared"' in body and 'data-in-use="3"' in body
            assert "<b>shared</b>: weighted, turns of 2 jobs, 4 slots" in body
            assert f'<tr data-pool-queue="{a}">' in body and '<td class="n">50 %</td>' in body
        finally:
            ui.close()
    finally:
        release.set()
        pool.close(5)
        for q in producers:
            q.close()

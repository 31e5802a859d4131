"""The dashboard shows how long the oldest ready job of each queue has waited, and the
paused marker: on the overview, the queue page and ``/api/counts``."""
from __future__ import annotations

import json

from echomq_gevent.contrib.dashboard import Dashboard
from echomq_gevent.host.status import describe_age

from integration.contrib.test_dashboard_metrics import _get

T0 = 1_700_000_000_000


def test_the_overview_the_queue_page_and_the_api_show_the_oldest_ready_job(queue, redis_url, prefix, qname):
    ui = Dashboard(redis_url, prefix=prefix, queues=[qname])
    status, body = _get(ui, "/")
    assert status.startswith("200") and "oldest ready" in body
    assert 'data-age="0.000"' in body  # an empty queue: nothing waits
    job = queue.add("old", {}, {"timestamp": T0})
    queue.pause()
    status, body = _get(ui, "/")
    assert status.startswith("200") and "paused" in body
    assert f"job {job.id} (wait)" in body
    status, body = _get(ui, "/queue", f"name={qname}")
    assert status.startswith("200") and 'id="age"' in body and f"job {job.id} (wait)" in body
    status, body = _get(ui, "/api/counts", f"queue={qname}")
    payload = json.loads(body)
    assert payload["paused"] is True
    assert payload["age"]["job_id"] == job.id and payload["age"]["oldest_timestamp"] == T0
    assert payload["age"]["age_seconds"] > 3600


def test_describe_age_is_short():
    assert [describe_age(s) for s in (0.04, 42, 720, 12600, 3 * 86400)] == ["0.0s", "42s", "12m", "3.5h", "3.0d"]

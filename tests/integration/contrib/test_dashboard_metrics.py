"""The dashboard's throughput chart is drawn from BullMQ's metrics keys when a worker
records them: what ``/api/counts`` (the JSON an open page polls) and the queue page's
chart carry are the per-minute counts the worker wrote under ``<prefix>:<queue>:metrics:*``."""
from __future__ import annotations

import html
import io
import json
import re
import time

from echomq_gevent import Worker
from echomq_gevent.contrib.dashboard import Dashboard


def _get(app, path, query=""):
    """One GET through the WSGI app; (status, body text)."""
    answer = {}

    def start_response(status, headers):
        answer["status"] = status

    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": query, "SCRIPT_NAME": "",
               "wsgi.input": io.BytesIO(b""), "wsgi.url_scheme": "http", "HTTP_HOST": "localhost"}
    body = b"".join(app(environ, start_response))
    return answer["status"], body.decode("utf-8")


def _process(job):
    if job.name == "bad":
        raise ValueError("refused on purpose")
    return job.data


def _run(queue, redis_url, prefix, qname, jobs, wait_for):
    """Add ``jobs`` and let a worker with metrics on finish them all."""
    done = sum(queue.get_job_counts("completed", "failed").values()) + len(jobs)
    for name in jobs:
        queue.add(name, {"n": name})
    worker = Worker(qname, _process, connection=redis_url, prefix=prefix, drain_delay=0.5,
                    metrics={"maxDataPoints": 60})
    worker.start()
    try:
        wait_for(lambda: sum(queue.get_job_counts("completed", "failed").values()) == done,
                 what=f"{done} finished jobs")
    finally:
        worker.close(timeout=5)


def test_the_chart_shows_the_per_minute_counts_a_worker_records(queue, r, redis_url, prefix, qname, wait_for):
    _run(queue, redis_url, prefix, qname, ["good"] * 5 + ["bad"] * 2, wait_for)
    # A data point is written when a job finishes in a later minute than the last point.
    # Rather than wait for the clock, move the last point's time a minute back (as if the
    # jobs above had run a minute ago); the next finish of each kind writes the point.
    for kind in ("completed", "failed"):
        r.hset(f"{prefix}:{qname}:metrics:{kind}", "prevTS", int(time.time() * 1000) - 60_000)
    _run(queue, redis_url, prefix, qname, ["good", "bad"], wait_for)

    recorded = {kind: queue.get_metrics(kind)["data"] for kind in ("completed", "failed")}
    assert sum(recorded["completed"]) == 5 and sum(recorded["failed"]) == 2, recorded

    ui = Dashboard(redis_url, prefix=prefix, sample_every_s=0)
    try:
        status, body = _get(ui, "/api/counts", f"queue={qname}")
        assert status == "200 OK"
        payload = json.loads(body)
        assert payload["counts"]["completed"] == 6 and payload["counts"]["failed"] == 3
        series = payload["throughput"]
        assert series["source"] == "metrics" and series["unit"] == "jobs/min"
        # oldest minute first, as the chart draws them
        assert series["completed"] == [float(x) for x in reversed(recorded["completed"])]
        assert series["failed"] == [float(x) for x in reversed(recorded["failed"])]

        status, page = _get(ui, "/queue", f"name={qname}")
        assert status == "200 OK"
        chart = re.search(r'<div class="chart">.*?</figure>', page, re.S).group(0)
        assert json.loads(html.unescape(re.search(r'data-series="([^"]*)"', chart).group(1))) == series
        assert '<polyline class="completed"' in chart and '<polyline class="failed"' in chart
        assert "from BullMQ metrics" in chart and "no data yet" not in chart
    finally:
        ui.close()

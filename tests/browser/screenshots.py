"""The pictures of docs/dashboard.md, made again from scratch: ``make screenshots``.

    python tests/browser/screenshots.py [OUT_DIR]      (default: docs/images)

Starts a throwaway redis-server, fills a small shop's queues (``mail``, ``invoices``,
``pdf``, ``thumbnails``) with jobs in every state by running real workers, serves the
dashboard and takes the pictures with Debian's headless chromium. The mail queue's
throughput chart comes from the BullMQ metrics its worker records: a data point is
written when a job finishes in a later minute than the last point, so instead of
running for twelve minutes the script moves the last point's time a minute back after
each simulated minute of work.

The browser test ``test_screenshots_of_the_main_pages`` runs the same steps under its
own prefix, so this script cannot rot unnoticed.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for path in (HERE, os.path.dirname(HERE), ROOT):
    if path not in sys.path:
        sys.path.insert(0, path)

import gevent  # noqa: E402
import gevent.event  # noqa: E402

from browser_helpers import serving, wait_for  # noqa: E402
from cdp import Browser, find_chromium  # noqa: E402

#: Jobs finished per simulated minute on the mail queue: (completed, failed).
MINUTES = [(14, 1), (18, 2), (22, 1), (19, 1), (25, 3), (31, 1), (28, 2), (24, 1), (30, 1), (35, 2),
           (27, 1), (33, 1)]
MAIL_KINDS = ["welcome-email", "password-reset", "receipt"]
PEOPLE = ["ann", "bob", "chen", "dara", "emil", "fatima", "goran", "hana", "ivo", "jun"]


def _send_mail(job: Any) -> Dict[str, Any]:
    to = job.data["to"]
    job.log(f"connecting to smtp.example.com:587 for {to}")
    job.update_progress(50)
    if to.endswith(".invalid"):
        raise RuntimeError(f"550 mailbox unavailable: {to}")
    job.log("250 2.0.0 OK: queued as 4F2A9C1B")
    job.update_progress(100)
    return {"messageId": f"<{job.id}.{job.name}@mail.example.com>", "accepted": [to]}


def _finish_all(queue: Any, worker_factory: Any, jobs: List[Any]) -> None:
    target = sum(queue.get_job_counts("completed", "failed").values()) + len(jobs)
    for name, data in jobs:
        queue.add(name, data)
    worker = worker_factory()
    worker.start()
    try:
        wait_for(lambda: sum(queue.get_job_counts("completed", "failed").values()) >= target, timeout=60,
                 what=f"{target} finished mail jobs")
    finally:
        worker.close(timeout=10)


def fill(redis_url: str, prefix: str = "bull") -> Dict[str, Any]:
    """Fill the shop's queues under ``prefix``; returns what the pictures show (the job ids
    and a callable that lets the thumbnail worker finish and closes it)."""
    import redis

    from echomq_gevent import FlowProducer, Queue, Worker

    r = redis.Redis.from_url(redis_url, decode_responses=True)
    mail = Queue("mail", connection=redis_url, prefix=prefix)

    def mail_worker() -> Any:
        return Worker("mail", _send_mail, connection=redis_url, prefix=prefix, concurrency=8, drain_delay=0.5,
                      metrics={"maxDataPoints": 60}, name="mailer")

    n = 0
    for done, failed in MINUTES:
        batch = []
        for i in range(done):
            n += 1
            batch.append((MAIL_KINDS[n % 3], {"to": f"{PEOPLE[n % 10]}@example.com", "order": 1000 + n}))
        for i in range(failed):
            n += 1
            batch.append((MAIL_KINDS[n % 3], {"to": f"{PEOPLE[n % 10]}@example.invalid", "order": 1000 + n}))
        _finish_all(mail, mail_worker, batch)
        # as if this minute's jobs had finished a minute ago: the next finish writes their point
        for kind in ("completed", "failed"):
            r.hset(f"{prefix}:mail:metrics:{kind}", "prevTS", int(time.time() * 1000) - 60_000)
    _finish_all(mail, mail_worker, [("receipt", {"to": "ann@example.com", "order": 2000}),
                                    ("receipt", {"to": "bob@example.invalid", "order": 2001})])
    for i in range(6):
        mail.add("newsletter", {"to": f"{PEOPLE[i]}@example.com", "issue": "2024-06"})
    mail.add("password-reset", {"to": "hana@example.com"}, {"priority": 1})
    mail.add("trial-ending", {"to": "ivo@example.com", "plan": "team"}, {"delay": 3 * 86_400_000})

    invoices = Queue("invoices", connection=redis_url, prefix=prefix)
    invoices.upsert_job_scheduler("nightly-invoice-run", {"pattern": "0 2 * * *", "tz": "UTC"},
                                  {"name": "invoice-run", "data": {"period": "daily"}})
    flows = FlowProducer(connection=redis_url, prefix=prefix)
    invoice = flows.add({"name": "monthly-invoice", "queueName": "invoices",
                         "data": {"customer": "acme", "month": "2024-05"}, "opts": {"jobId": "acme-2024-05"},
                         "children": [{"name": "render-pdf", "queueName": "pdf", "data": {"page": p},
                                       "opts": {"jobId": f"acme-2024-05-page-{p}"}} for p in (1, 2, 3)]})
    flows.close()

    thumbnails = Queue("thumbnails", connection=redis_url, prefix=prefix)
    release = gevent.event.Event()

    def resize(job: Any) -> Dict[str, Any]:
        job.update_progress(40)
        release.wait()
        return {"width": 320}

    for i in range(5):
        thumbnails.add("resize", {"image": f"products/{4100 + i}.jpg", "width": 320})
    worker = Worker("thumbnails", resize, connection=redis_url, prefix=prefix, concurrency=2, drain_delay=0.5,
                    name="thumbnailer")
    worker.start()
    wait_for(lambda: thumbnails.get_job_counts("active")["active"] == 2, what="2 active thumbnail jobs")

    completed = [j for j in mail.get_jobs("completed", 0, 50) if j.name == "welcome-email"]
    failed = mail.get_jobs("failed", 0, 0)

    def finish() -> None:
        release.set()
        worker.close(timeout=10)
        for q in (mail, invoices, thumbnails):
            q.close()
        r.close()

    return {"completed": completed[0].id, "failed": failed[0].id, "invoice": invoice["job"].id, "finish": finish}


def pages(shown: Dict[str, Any]) -> Dict[str, str]:
    """The picture files and the page each one shows."""
    return {"dashboard-queues.png": "/",
            "dashboard-queue.png": "/queue?name=mail&state=failed",
            "dashboard-job.png": f"/job?queue=mail&id={shown['completed']}",
            "dashboard-flow.png": f"/job?queue=invoices&id={shown['invoice']}",
            "dashboard-schedulers.png": "/queue?name=invoices&state=waiting-children",
            "dashboard-confirm.png": f"/confirm?queue=mail&action=retry&job={shown['failed']}&state=failed"}


def take(browser: Browser, redis_url: str, prefix: str, out: str) -> Dict[str, Any]:
    """Fill, serve the dashboard (actions on) and write the pictures into ``out``; returns
    what :func:`fill` returned (its ``finish`` already called)."""
    from echomq_gevent.contrib.dashboard import Dashboard

    os.makedirs(out, exist_ok=True)
    shown = fill(redis_url, prefix)
    ui = Dashboard(redis_url, prefix=prefix, actions=True)
    try:
        with serving(ui) as base:
            for name, path in pages(shown).items():
                browser.goto(base + path)
                browser.screenshot(os.path.join(out, name))
    finally:
        ui.close()
        shown["finish"]()
    return shown


def main(argv: List[str]) -> int:
    from redis_server import RedisServer

    import logging

    logging.basicConfig(level=logging.ERROR)  # the failing mail jobs fail on purpose
    out = argv[1] if len(argv) > 1 else os.path.join(ROOT, "docs", "images")
    binary = find_chromium()
    if binary is None:
        print("screenshots: chromium is not installed (apt-get install chromium)", file=sys.stderr)
        return 2
    server = RedisServer().start()
    browser = Browser(binary)
    try:
        take(browser, server.url, "bull", out)
    finally:
        browser.close()
        server.stop()
    for name in sorted(pages({"completed": "", "failed": "", "invoice": ""})):
        print(os.path.join(out, name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""The demo processor plugin (``plugins: [echomq_gevent.contrib.demo]``).

``conf/worker.yaml`` loads it, and ``echomq-gevent --demo`` adds it to any file that
has a queue named ``demo``. Run without a file (no ``-c``, no ``$ECHOMQ_CONFIG``, no
``conf/worker.yaml`` in the working directory), ``echomq-gevent --demo`` uses
:data:`CONFIG`, the ``demo.yaml`` shipped beside this module: the embedded Redis
(``pip install 'echomq-gevent[embedded]'``, data under ``./var/``) unless
``$REDIS_URL`` names one.

It serves the queue ``demo`` with four job names, so a newcomer running
``make demo`` (``echomq-gevent -c conf/worker.yaml --demo``) sees jobs being
processed, progress reported, failures retried and a bad job failed:

* ``resize``: pretends to resize an image (a cooperative sleep of 50-300 ms) and
  returns the new size;
* ``email``: pretends to send an e-mail (50 ms) and returns a message id;
* ``report``: works in five steps, reporting progress 20, 40 ... 100;
* ``flaky``: fails about one time in three; with ``attempts: 3`` and a backoff the
  worker retries it, so most of these complete on a later attempt.

``--demo`` also calls :func:`enqueue_demo_jobs` every second so there is always
work. Any other job name on ``demo`` fails with a clear reason (as an unknown job
name does with any plugin). A processor runs on its job's greenlet: the sleeps are
``gevent.sleep``, so hundreds of demo jobs run at once without blocking the hub.
"""
from __future__ import annotations

import os
import random
import uuid
from typing import Any, Dict, List, Tuple

import gevent

from echomq_gevent import UnrecoverableError, hookimpl

QUEUE = "demo"
#: The configuration ``echomq-gevent --demo`` runs when it is given no file.
CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "demo.yaml")


def resize(job: Any) -> Dict[str, Any]:
    width = int(job.data.get("width", 1024))
    gevent.sleep(random.uniform(0.05, 0.3))
    return {"image": job.data.get("image"), "width": width // 4, "height": int(job.data.get("height", 768)) // 4}


def email(job: Any) -> Dict[str, Any]:
    if "@" not in str(job.data.get("to", "")):
        raise UnrecoverableError(f"job {job.id}: {job.data.get('to')!r} is not an e-mail address")
    gevent.sleep(0.05)
    return {"message_id": uuid.uuid4().hex}


def report(job: Any) -> Dict[str, Any]:
    for step in range(1, 6):
        gevent.sleep(0.05)
        job.update_progress(step * 20)
    return {"rows": random.randint(10, 1000)}


def flaky(job: Any) -> str:
    gevent.sleep(0.02)
    if random.random() < 0.34:
        raise RuntimeError(f"job {job.id}: the demo's remote service timed out (attempt {job.attempts_made + 1})")
    return "ok"


PROCESSORS = {"resize": resize, "email": email, "report": report, "flaky": flaky}


@hookimpl
def echomq_register_processors(registry: Any) -> None:
    for name, fn in PROCESSORS.items():
        registry.add(QUEUE, name, fn)


def demo_jobs(n: int = 5) -> List[Tuple[str, Dict[str, Any], Dict[str, Any]]]:
    """``n`` random demo jobs as ``(name, data, opts)``."""
    out = []
    for _ in range(n):
        name = random.choice(list(PROCESSORS))
        if name == "resize":
            data: Dict[str, Any] = {"image": f"photo-{random.randint(1, 999)}.jpg", "width": 4000, "height": 3000}
        elif name == "email":
            data = {"to": random.choice(["ada@example.com", "grace@example.com", "not-an-address"])}
        elif name == "report":
            data = {"month": random.randint(1, 12)}
        else:
            data = {}
        opts = {"attempts": 3, "backoff": {"type": "exponential", "delay": 200},
                "removeOnComplete": 1000, "removeOnFail": 1000}
        out.append((name, data, opts))
    return out


def enqueue_demo_jobs(queue: Any, n: int = 5) -> int:
    """Add ``n`` demo jobs to ``queue`` (an ``echomq_gevent.Queue`` named ``demo``);
    called by ``echomq-gevent --demo`` every second. Returns how many were added."""
    jobs = demo_jobs(n)
    if hasattr(queue, "add_bulk"):
        queue.add_bulk(jobs)
    else:
        for name, data, opts in jobs:
            queue.add(name, data, opts)
    return len(jobs)

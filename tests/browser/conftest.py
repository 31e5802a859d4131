"""Fixtures of the browser tests: one headless Chromium for the session, the dashboard
served over HTTP from a thread, and a queue with jobs in every state."""
from __future__ import annotations

import os
from typing import Any, Dict, Iterator, List

import pytest

from browser_helpers import wait_for
from cdp import Browser, find_chromium

HERE = os.path.dirname(os.path.abspath(__file__))


def pytest_collection_modifyitems(items):
    for item in items:
        if str(item.fspath).startswith(HERE):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """Debian's chromium, headless. Missing locally: the tests skip and say why; in CI
    (``CI`` set, where ``.ci/run`` installs it) a missing browser fails them."""
    binary = find_chromium()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed, and CI must run the browser tests: "
                        ".ci/run installs Debian's chromium package")
        pytest.skip("chromium is not installed (apt-get install chromium): the browser tests need it")
    b = Browser(binary)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def dashboard(redis_url, prefix):
    """``dashboard(**options)``: a Dashboard over the test's prefix, closed afterwards."""
    from echomq_gevent.contrib.dashboard import Dashboard

    made: List[Dashboard] = []

    def make(**options: Any) -> Dashboard:
        d = Dashboard(redis_url, prefix=prefix, **options)
        made.append(d)
        return d

    yield make
    for d in made:
        d.close()


def _process(job):
    if job.name == "boom":
        raise ValueError(f"boom: job {job.id} failed on purpose")
    job.log(f"processed {job.id}")
    job.update_progress(100)
    return {"ok": True, "id": job.id}


@pytest.fixture
def filled(queue, redis_url, prefix, qname) -> Dict[str, List[str]]:
    """The test's queue with jobs in every state a page lists: 3 completed and 2 failed
    (run by our worker), then 4 waiting, 2 prioritized and 1 delayed."""
    from echomq_gevent import Worker

    ids: Dict[str, List[str]] = {"completed": [], "failed": []}
    for i in range(3):
        ids["completed"].append(queue.add("ok", {"n": i}).id)
    for i in range(2):
        ids["failed"].append(queue.add("boom", {"n": i}).id)
    worker = Worker(qname, _process, connection=redis_url, prefix=prefix, drain_delay=0.5,
                    lock_duration=2000, stalled_interval=2000)
    worker.start()
    try:
        wait_for(lambda: queue.get_job_counts("completed", "failed") == {"completed": 3, "failed": 2},
                 what="3 completed and 2 failed jobs")
    finally:
        worker.close(timeout=5)
    ids["waiting"] = [queue.add("later", {"n": i}).id for i in range(4)]
    ids["prioritized"] = [queue.add("urgent", {"n": i}, {"priority": 3}).id for i in range(2)]
    ids["delayed"] = [queue.add("tomorrow", {"n": 0}, {"delay": 3_600_000}).id]
    return ids

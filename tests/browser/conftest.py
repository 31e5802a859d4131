"""Fixtures of the browser tests: one headless Chromium for the session, the dashboard
served over HTTP from a thread, and a queue with jobs in every state."""
from __future__ import annotations

import os
import socketserver
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import gevent
import pytest

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


class _ThreadedServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True  # the browser keeps idle connections open; one thread each


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def serving(app: Callable[..., Any]) -> Iterator[str]:
    """Serve a WSGI app on 127.0.0.1 (a free port) from a thread; yields its base URL."""
    server: WSGIServer = make_server("127.0.0.1", 0, app, server_class=_ThreadedServer,
                                     handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


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


def wait_for(cond: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    """Poll ``cond`` (yielding to gevent) until it is true; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        gevent.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


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

"""Helpers of the browser tests: serve a WSGI app from a thread, wait on a condition."""
from __future__ import annotations

import socketserver
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from waiting import wait_until as wait_for  # noqa: F401 (the browser tests import it from here)

import gevent


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

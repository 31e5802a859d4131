"""The standalone server of ``echomq-gevent dashboard``: gevent's WSGI server, bound to
127.0.0.1 unless told otherwise."""
from __future__ import annotations

from typing import Any, Callable, Tuple


def serve(app: Callable[..., Any], host: str = "127.0.0.1", port: int = 8765, log: Any = None) -> Any:
    """A gevent WSGI server for the dashboard (started; call ``.serve_forever()`` or
    ``.stop()``). Binds 127.0.0.1 unless told otherwise."""
    from gevent.pywsgi import WSGIServer

    server = WSGIServer((host, port), app, log=log)
    server.start()
    return server


def parse_bind(text: str) -> Tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` (127.0.0.1) or ``PORT`` -> ``(host, port)``; ``[::1]:80`` too."""
    host, sep, port = str(text).rpartition(":")
    if not sep:
        host, port = "", text
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"--bind wants HOST:PORT, got {text!r}") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"--bind: port {number} is out of range")
    return host, number

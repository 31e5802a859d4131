"""Scale bench driver: our dashboard (``echomq_gevent.contrib.dashboard``) served by gevent's
WSGI server, as ``echomq-gevent dashboard`` serves it (queues found by discovery).

Run by ``bench/scale/admin.py`` as ``python bench/drivers/scale_dashboard_ours.py '<json>'`` with
``{url, prefix, discover_every_s}``. Prints ``READY``, then the port it listens on (127.0.0.1), and serves
until SIGTERM.
"""
from gevent import monkey

monkey.patch_all()

import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
from typing import Any, Dict  # noqa: E402

import gevent  # noqa: E402
from gevent.event import Event  # noqa: E402

if importlib.util.find_spec("echomq_gevent") is None:  # a checkout that is not installed
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from echomq_gevent.contrib.dashboard import Dashboard, serve  # noqa: E402


def main(cfg: Dict[str, Any]) -> None:
    app = Dashboard(cfg["url"], prefix=cfg["prefix"], discover_every_s=cfg.get("discover_every_s", 10.0))
    server = serve(app, "127.0.0.1", 0)
    stop = Event()
    gevent.signal_handler(signal.SIGTERM, stop.set)
    gevent.signal_handler(signal.SIGINT, stop.set)
    sys.stdout.write(f"READY\n{server.server_port}\n")
    sys.stdout.flush()
    stop.wait()
    server.stop()
    app.close()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))

"""Bench driver: the outbox relay in a process of its own, as a worker command runs it
(gevent-patched, LISTEN wake-ups on PostgreSQL), until SIGTERM.

    python outbox_relay.py '{"db": URL, "url": REDIS, "prefix": P, "queue": Q, "batch_size": 100,
                             "poll_interval": 1.0}'

Any other outbox option in the JSON is passed on when the package (maybe an older one,
``--outbox-baseline``) has it.
"""
from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402

import gevent  # noqa: E402
import gevent.event  # noqa: E402


def main() -> None:
    cfg = json.loads(sys.argv[1])
    from sqlalchemy import create_engine

    from echomq_gevent import Queue
    from echomq_gevent.contrib.outbox import OutboxSettings
    from echomq_gevent.contrib.outbox.relay import Relay
    from echomq_gevent.contrib.outbox.sqlalchemy import SqlAlchemyDb

    queue = Queue(cfg["queue"], connection=cfg["url"], prefix=cfg["prefix"])
    known = OutboxSettings.__dataclass_fields__
    opts = {k: v for k, v in cfg.items() if k in known and k not in ("database", "session")}
    opts.setdefault("batch_size", 100)
    relay = Relay(SqlAlchemyDb(create_engine(cfg["db"])), lambda name: queue, OutboxSettings(enabled=True, **opts),
                  "bench")
    stop = gevent.event.Event()
    gevent.signal_handler(signal.SIGTERM, stop.set)
    relay.start()
    print("ready", flush=True)
    stop.wait()
    relay.stop(5)


if __name__ == "__main__":
    main()

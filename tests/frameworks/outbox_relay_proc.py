"""A relay process for the outbox fault tests: the real Relay on a SQLAlchemy engine,
patched by gevent as the worker commands are, until SIGTERM.

    python outbox_relay_proc.py DB_URL REDIS_URL PREFIX QUEUE[,QUEUE] [--kill-after-adds N]
        [--batch-size N] [--poll-interval S] [--lease S]

``--kill-after-adds N``: the process SIGKILLs itself right after its N-th round trip of
adds returned, before the pass deletes the rows (the crash the outbox must survive).
Prints ``relay ready`` once started, and one ``pass ...`` line per pass that moved rows.
"""
from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402

import gevent  # noqa: E402
import gevent.event  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("db_url")
    p.add_argument("redis_url")
    p.add_argument("prefix")
    p.add_argument("queues")
    p.add_argument("--kill-after-adds", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("--poll-interval", type=float, default=0.5)
    p.add_argument("--lease", type=float, default=2.0)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")

    from sqlalchemy import create_engine

    from echomq_gevent import Queue
    from echomq_gevent.contrib.outbox import OutboxSettings
    from echomq_gevent.contrib.outbox.relay import Relay
    from echomq_gevent.contrib.outbox.sqlalchemy import SqlAlchemyDb
    from echomq_gevent.errors import ConfigError

    declared = args.queues.split(",")
    queues = {}
    adds = [0]

    from echomq_gevent.protocol.calls import ScriptBatch

    class KillingBatch(ScriptBatch):
        """The real batch; the process dies right after the N-th one returned."""

        def execute(self):
            out = super().execute()
            adds[0] += 1
            if args.kill_after_adds and adds[0] >= args.kill_after_adds:
                print(f"killing myself after {adds[0]} add round trip(s)", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            return out

    def queue_for(name):
        if name not in declared:
            raise ConfigError(f"queue {name!r} is not declared (declared: {', '.join(declared)})")
        q = queues.get(name)
        if q is None:
            q = queues[name] = Queue(name, connection=args.redis_url, prefix=args.prefix)
            if args.kill_after_adds:
                q.scripts.batch = (lambda scripts: lambda: KillingBatch(scripts))(q.scripts)
        return q

    settings = OutboxSettings(enabled=True, batch_size=args.batch_size, poll_interval=args.poll_interval,
                              lease=args.lease)
    relay = Relay(SqlAlchemyDb(create_engine(args.db_url)), queue_for, settings, "test relay")
    real_apply = relay._apply

    def apply(*args, **kwargs):
        result = real_apply(*args, **kwargs)
        if result.added or result.parked:
            print(f"pass added={result.added} parked={result.parked}", flush=True)
        return result
    relay._apply = apply
    stop = gevent.event.Event()
    gevent.signal_handler(signal.SIGTERM, stop.set)
    relay.start()
    print("relay ready", flush=True)
    stop.wait()
    relay.stop(5)
    print("relay stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

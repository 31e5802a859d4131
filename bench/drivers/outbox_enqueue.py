"""Bench driver: N transactions, each writing an order row and asking for one job, from
C writer greenlets of a gevent-patched process (a WSGI app under ``gunicorn -k gevent``).

    python outbox_enqueue.py '{"mode": "outbox"|"on_commit", "db": URL, "url": REDIS, "prefix": P,
                               "queue": Q, "n": N, "c": C, "interval_ms": 0}'

``on_commit``: the job is added by the session's after-commit hook (``enqueue_after_commit``
with the outbox off). ``outbox``: the row is written in the transaction; a relay in
another process (``outbox_relay.py``) adds it. Prints one JSON line: the wall time and the
CPU time of the writes, when they started (epoch ms) and, per transaction, the epoch ms it
called ``commit()``, by job id.

``db`` names the driver (``postgresql+psycopg2://`` or ``postgresql+psycopg://``). psycopg2
is made cooperative with a wait callback on gevent's ``wait_read``/``wait_write`` (what
``psycogreen`` does), as a gevent shop on PostgreSQL runs it; psycopg 3 waits
cooperatively by itself in a monkey-patched process.
"""
from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import gevent  # noqa: E402
import gevent.pool  # noqa: E402


def _green_psycopg2() -> None:
    import psycopg2
    from gevent.socket import wait_read, wait_write
    from psycopg2 import extensions

    def wait(conn, timeout=None):
        while True:
            state = conn.poll()
            if state == extensions.POLL_OK:
                return
            if state == extensions.POLL_READ:
                wait_read(conn.fileno(), timeout=timeout)
            elif state == extensions.POLL_WRITE:
                wait_write(conn.fileno(), timeout=timeout)
            else:
                raise psycopg2.OperationalError(f"bad poll state {state!r}")
    extensions.set_wait_callback(wait)


def main() -> None:
    cfg = json.loads(sys.argv[1])
    if cfg["db"].startswith("postgresql+psycopg2"):
        _green_psycopg2()
    from sqlalchemy import create_engine, text
    from sqlalchemy.orm import Session

    from echomq_gevent import Queue
    from echomq_gevent.contrib.frameworks import enqueue_after_commit
    from echomq_gevent.contrib.outbox.rows import encode_row
    from echomq_gevent.contrib.outbox.sqlalchemy import write_row

    engine = create_engine(cfg["db"], pool_size=cfg["c"], max_overflow=0)
    queue = Queue(cfg["queue"], connection=cfg["url"], prefix=cfg["prefix"], max_connections=cfg["c"] + 2)
    committed = {}

    def one(i: int) -> None:
        with Session(engine) as s:
            s.execute(text("INSERT INTO bench_orders (n) VALUES (:n)"), {"n": i})
            if cfg["mode"] == "outbox":
                params = encode_row(cfg["queue"], "order", json.dumps({"n": i}), None)
                if cfg.get("order"):  # a package without the option takes no notify argument
                    write_row(s, params, notify=cfg["order"] == "commit")
                else:
                    write_row(s, params)
                job_id = params[4]
            else:
                job_id = f"oc-{i}"
                enqueue_after_commit(s, lambda: queue.add("order", {"n": i}, {"jobId": job_id}))
            # from the moment the app asks for the commit (a relay may add the job before
            # commit() has returned to this greenlet: the commit is visible first)
            committed[job_id] = time.time() * 1000
            s.commit()

    pool = gevent.pool.Pool(cfg["c"])
    start_ms = time.time() * 1000
    start = time.perf_counter()
    cpu = time.process_time()
    for i in range(cfg["n"]):
        pool.spawn(one, i)
        if cfg.get("interval_ms"):  # one transaction at a time, spaced: an idle app
            pool.join()
            gevent.sleep(cfg["interval_ms"] / 1000.0)
    pool.join(raise_error=True)
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu
    queue.close()
    engine.dispose()
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "start_ms": start_ms, "committed": committed}))


if __name__ == "__main__":
    main()

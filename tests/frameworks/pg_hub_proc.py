"""Does a psycopg 3 query let the gevent hub run? One process per case, since psycopg
picks its wait function once, when it is imported.

    python pg_hub_proc.py DSN ORDER

ORDER: ``patched-first`` (gevent patches, then psycopg is imported: what the worker
commands do), ``imported-first`` (psycopg imported before gevent patched the process, as
in an app preloaded by gunicorn's master), ``imported-first-fixed`` (the same, then the
outbox's :func:`~echomq_gevent.contrib.outbox.drivers.cooperative_psycopg`). A ticker
greenlet counts 10 ms ticks while the main greenlet runs ``SELECT pg_sleep(0.5)``;
prints one JSON line with the ticks and the wait function psycopg uses.
"""
import json
import sys


def main() -> int:
    dsn, order = sys.argv[1], sys.argv[2]
    if order == "patched-first":
        from gevent import monkey

        monkey.patch_all()
        import psycopg
    else:
        import psycopg
        from gevent import monkey

        monkey.patch_all()
    switched = None
    if order == "imported-first-fixed":
        from echomq_gevent.contrib.outbox.drivers import cooperative_psycopg

        switched = cooperative_psycopg()
    import gevent

    ticks = [0]

    def tick():
        while True:
            gevent.sleep(0.01)
            ticks[0] += 1

    ticker = gevent.spawn(tick)
    conn = psycopg.connect(dsn)
    gevent.sleep(0.05)
    before = ticks[0]
    conn.execute("SELECT pg_sleep(0.5)")
    during = ticks[0] - before
    ticker.kill()
    conn.close()
    print(json.dumps({"ticks": during, "wait": psycopg.waiting.wait.__name__, "switched": switched}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

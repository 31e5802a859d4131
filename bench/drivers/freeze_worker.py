"""Freeze campaign driver: one ``echomq_gevent.Worker`` under ``gevent.monkey.patch_all()``
whose processor, as it starts, asks Redis on a connection of its own (opened before the
first job) whether the job's lock still holds the job's token, and records the run (``<prefix>:freeze:runs``) and a start
whose lock had lapsed (``<prefix>:freeze:lapsed``: the job id, the worker's name, the lock's
holder, the job's token, the pick-up's age and how long the look took, in ms).

    python bench/drivers/freeze_worker.py '{"url": ..., "queue": ..., "prefix": ..., "name": ...,
                                           "options": {...}}'

Jobs' data ``{"s": seconds}`` sleep that long after the check. Prints READY as it starts.
"""
from gevent import monkey

monkey.patch_all()

import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import gevent  # noqa: E402
import redis  # noqa: E402

if importlib.util.find_spec("echomq_gevent") is None:  # a checkout that is not installed
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from echomq_gevent import Worker  # noqa: E402

cfg = json.loads(sys.argv[1])
observer = redis.Redis.from_url(cfg["url"], decode_responses=True, socket_timeout=5)
prefix, name = cfg["prefix"], cfg["name"]


def processor(job):
    entered = time.monotonic()
    holder = observer.get(f"{prefix}:{cfg['queue']}:{job.id}:lock")
    look_ms = int((time.monotonic() - entered) * 1000)
    pipe = observer.pipeline(transaction=False)
    pipe.rpush(f"{prefix}:freeze:runs", job.id)
    if holder != job.token:
        # look_ms: how long the look itself took; a freeze inside it (longer than the lock)
        # means the processor had started before the freeze, and the lock lapsed meanwhile
        age = int(time.time() * 1000) - int(job.processed_on or 0)
        pipe.rpush(f"{prefix}:freeze:lapsed", f"{job.id} {name} {holder} {job.token} {age} {look_ms}")
    pipe.execute()
    seconds = (job.data or {}).get("s") or 0
    if seconds:
        gevent.sleep(seconds)


# the observer's connections open before the first job: a processor that had to connect
# first could be stopped mid-connect, after its start, and its late look taken for a start
# whose lock had lapsed
pool = observer.connection_pool
warm = [pool.get_connection() for _ in range(int(cfg["options"].get("concurrency", 1)) + 2)]
for conn in warm:
    conn.connect()
    pool.release(conn)
worker = Worker(cfg["queue"], processor, connection=cfg["url"], prefix=prefix, name=name, **cfg["options"])
print("READY", flush=True)
worker.run()

"""Benchmark driver: how soon the shared marker wait (``marker_wait: shared``) wakes a queue
that joins it while the wait is in flight, under ``gevent.monkey.patch_all()``.

``python bench/drivers/shared_wait_wake.py '{"url": ..., "queues": 200, "rounds": 300,
"gap_ms": 0}'``: ``queues - 1`` waiters sit in one :class:`SharedMarkerWait`; the probe
queue joins it, ``gap_ms`` later a marker is added to its key, and the time from the add
to the probe's wait answering is recorded. ``gap_ms: 0`` adds the marker as the queue
joins (the ``CLIENT UNBLOCK`` and the wait sent again are still under way); a larger gap
measures a queue already covered. Prints one JSON line: the latencies' p50/p99/max in ms
and the shared wait's counters.
"""
from gevent import monkey

monkey.patch_all()

import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import gevent  # noqa: E402
import gevent.event  # noqa: E402
import redis  # noqa: E402

if importlib.util.find_spec("echomq_gevent") is None:  # a checkout that is not installed
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from echomq_gevent.connection.clients import make_client  # noqa: E402
from echomq_gevent.worker.shared_wait import SharedMarkerWait  # noqa: E402


def main(cfg):
    client = make_client(cfg["url"])
    producer = redis.Redis.from_url(cfg["url"])
    shared = SharedMarkerWait(client)
    handles = [shared.attach(f"bench-wake:{i}:marker") for i in range(cfg["queues"])]
    stop = gevent.event.Event()

    def idle(handle):
        while not stop.is_set():
            handle.wait(10.0, stop)

    sitters = [gevent.spawn(idle, h) for h in handles[1:]]
    gevent.sleep(0.5)
    probe = handles[0]
    lat = []
    for _ in range(cfg["rounds"]):
        waiter = gevent.spawn(probe.wait, 10.0, gevent.event.Event())
        gevent.sleep(cfg["gap_ms"] / 1000.0)
        t0 = time.perf_counter()
        producer.zadd(probe.key, {"0": 0})
        outcome, _ = waiter.get()
        if outcome != "marker":
            raise SystemExit(f"the probe's wait answered {outcome!r}")
        lat.append((time.perf_counter() - t0) * 1000.0)
    stop.set()
    gevent.joinall(sitters, timeout=2)
    shared.close()
    lat.sort()
    print(json.dumps({"queues": cfg["queues"], "gap_ms": cfg["gap_ms"], "rounds": len(lat),
                      "p50_ms": lat[len(lat) // 2], "p99_ms": lat[max(0, int(len(lat) * 0.99) - 1)],
                      "max_ms": lat[-1], "stats": shared.stats}))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))

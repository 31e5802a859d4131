"""Benchmark driver: an ``echomq_gevent.Worker`` under ``gevent.monkey.patch_all()``.

Run by the harness as ``python bench/drivers/ours_worker.py '<json>'`` (protocol in the
package docstring). The processor is a plain function: a no-op, ``gevent.sleep`` for the
I/O-bound workload, a latency probe reading ``data.t`` (enqueue time, epoch ms), the
realistic mix's (jobs flagged ``data.f`` fail their first attempt), ``order`` (records
``data.p``, the priority, in start order: the report's ``order``) or ``sched`` (a job
scheduler's run ``repeat:<id>:<millis>``: start minus ``millis`` into ``latencies_ms``,
``[data.k, millis]`` into the report's ``tags``). Once the workers have started it freezes
what is loaded out of the cyclic collector's reach, as the command does by default
(``gc_freeze``). Several queues (``queues``) share one client, and with ``marker_wait:
shared`` one marker wait, as the command's workers do.
"""
from gevent import monkey

monkey.patch_all()

import gc  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any, Dict, List  # noqa: E402

import gevent  # noqa: E402
from gevent.event import Event  # noqa: E402

if importlib.util.find_spec("echomq_gevent") is None:  # a checkout that is not installed
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from echomq_gevent import Worker  # noqa: E402


def main(cfg: Dict[str, Any]) -> None:
    processed = 0
    latencies: List[float] = []
    order: List[Any] = []
    # each run's tag as two flat lists of atoms: a list a run would be one more object for
    # every full collection of the cyclic collector to walk, in the process being measured
    tag_kinds: List[Any] = []
    tag_millis: List[int] = []
    mode = cfg["mode"]
    sleep_s = cfg.get("sleep_ms", 0) / 1000.0

    if mode == "sleep":
        def processor(job: Any) -> None:
            nonlocal processed
            processed += 1
            gevent.sleep(sleep_s)
    elif mode == "latency":
        def processor(job: Any) -> None:
            nonlocal processed
            processed += 1
            latencies.append(time.time() * 1000.0 - float(job.data["t"]))
    elif mode == "order":
        def processor(job: Any) -> None:
            nonlocal processed
            processed += 1
            order.append(job.data["p"])
    elif mode == "sched":
        def processor(job: Any) -> None:
            nonlocal processed
            processed += 1
            latencies.append(time.time() * 1000.0 - float(str(job.id).rpartition(":")[2]))
            tag_kinds.append(job.data.get("k"))
            tag_millis.append(int(str(job.id).rpartition(":")[2]))
    elif mode == "mix":
        def processor(job: Any) -> None:
            nonlocal processed
            processed += 1
            if job.data.get("f") and job.attempts_made == 0:
                raise RuntimeError("fails once")
    else:
        def processor(job: Any) -> None:
            nonlocal processed
            processed += 1

    # cfg["queues"] (the scale bench's idle queues): one Worker per queue in this process,
    # sharing one client as the runner's workers do, and with cfg["marker_wait"] == "shared"
    # one marker wait (the runner's ``marker_wait: shared``); ``own_clients``: each worker
    # its own client, as before the runner shared one
    from echomq_gevent.connection.clients import make_client

    client = make_client(cfg["url"])
    marker_wait = None
    if cfg.get("marker_wait") == "shared":
        from echomq_gevent.worker.shared_wait import SharedMarkerWait

        marker_wait = SharedMarkerWait(client)
    workers = [Worker(name, processor, connection=cfg["url"] if cfg.get("own_clients") else client,
                      prefix=cfg["prefix"],
                      concurrency=cfg["concurrency"], marker_wait=marker_wait,
                      metrics={"maxDataPoints": cfg["metrics"]} if cfg.get("metrics") else None)
               for name in cfg.get("queues") or [cfg["queue"]]]
    stop = Event()
    gevent.signal_handler(signal.SIGTERM, stop.set)
    gevent.signal_handler(signal.SIGINT, stop.set)
    for worker in workers:
        worker.start()
    # as the command does by default (gc_freeze): what is loaded by now stays out of the
    # cyclic collector's full collections
    gc.collect()
    gc.freeze()
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    stop.wait()
    gevent.joinall([gevent.spawn(w.close) for w in workers])
    if marker_wait is not None:
        marker_wait.close()
    client.close()
    with open(cfg["report"], "w", encoding="utf-8") as fh:
        json.dump({"processed": processed, "latencies_ms": latencies, "order": order,
                   "tags": [[k, m] for k, m in zip(tag_kinds, tag_millis)]}, fh)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))

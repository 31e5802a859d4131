"""Benchmark driver: enqueue rate of ``echomq_gevent.Queue`` (``add`` one at a time, or
``add_bulk`` in chunks). Protocol in the package docstring."""
from gevent import monkey

monkey.patch_all()

import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any, Dict  # noqa: E402

if importlib.util.find_spec("echomq_gevent") is None:  # a checkout that is not installed
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from echomq_gevent import Queue  # noqa: E402
from peak_rss import peak_rss_mb  # noqa: E402  (bench/drivers, the script's folder)


def main(cfg: Dict[str, Any]) -> None:
    queue = Queue(cfg["queue"], connection=cfg["url"], prefix=cfg["prefix"])
    warm = Queue(cfg["queue"] + "-warm", connection=cfg["url"], prefix=cfg["prefix"])
    warm.add("w", {})
    warm.add_bulk([("w", {}, None)])
    warm.obliterate(force=True)
    warm.close()
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    while sys.stdin.readline().strip() != "GO":
        pass
    n = int(cfg["n"])
    chunk = int(cfg.get("chunk") or 1000)
    cpu0 = os.times()
    t0 = time.perf_counter()
    if cfg["mode"] == "add":
        for i in range(n):
            queue.add("j", {"i": i})
    elif cfg["mode"] == "bulk":
        for start in range(0, n, chunk):
            queue.add_bulk([("j", {"i": i}, None) for i in range(start, min(n, start + chunk))])
    else:
        raise SystemExit(f"ours_producer: unknown mode {cfg['mode']!r} (use add or bulk)")
    elapsed = time.perf_counter() - t0
    cpu1 = os.times()
    cpu_s = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    maxrss_mb = peak_rss_mb()
    sys.stdout.write(json.dumps({"n": n, "elapsed_s": elapsed, "cpu_s": cpu_s, "maxrss_mb": maxrss_mb}) + "\n")
    sys.stdout.flush()
    queue.close()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))

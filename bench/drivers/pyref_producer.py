"""Benchmark driver: enqueue rate of the PyPI ``bullmq`` package's ``Queue``.

``python bench/drivers/pyref_producer.py '<json>'`` with mode ``add`` (one awaited ``add``
per job) or ``bulk`` (``addBulk`` in chunks). Prints ``READY`` after a warm-up, waits for
``GO`` on stdin, then prints ``{"n", "elapsed_s", "cpu_s", "maxrss_mb"}`` and exits.
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any, Dict

from peak_rss import peak_rss_mb  # bench/drivers, the script's folder


async def main(cfg: Dict[str, Any]) -> None:
    from bullmq import Queue

    opts = {"connection": cfg["url"], "prefix": cfg["prefix"]}
    queue = Queue(cfg["queue"], opts)
    warm = Queue(cfg["queue"] + "-warm", opts)
    await warm.add("w", {})
    await warm.addBulk([{"name": "w", "data": {}}])
    await warm.obliterate(force=True)
    await warm.close()
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    loop = asyncio.get_running_loop()
    while (await loop.run_in_executor(None, sys.stdin.readline)).strip() != "GO":
        pass
    n = int(cfg["n"])
    chunk = int(cfg.get("chunk") or 1000)
    cpu0 = os.times()
    t0 = time.perf_counter()
    if cfg["mode"] == "add":
        for i in range(n):
            await queue.add("j", {"i": i})
    elif cfg["mode"] == "bulk":
        for start in range(0, n, chunk):
            await queue.addBulk([{"name": "j", "data": {"i": i}} for i in range(start, min(n, start + chunk))])
    else:
        raise SystemExit(f"pyref_producer: unknown mode {cfg['mode']!r} (use add or bulk)")
    elapsed = time.perf_counter() - t0
    cpu1 = os.times()
    cpu_s = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    maxrss_mb = peak_rss_mb()
    sys.stdout.write(json.dumps({"n": n, "elapsed_s": elapsed, "cpu_s": cpu_s, "maxrss_mb": maxrss_mb}) + "\n")
    sys.stdout.flush()
    await queue.close()


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))

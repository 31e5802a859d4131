"""Benchmark driver: a worker of the PyPI ``bullmq`` package (asyncio), the Python reference.

Run by the harness as ``python bench/drivers/pyref_worker.py '<json>'`` (see the package
docstring for the protocol). The processor is a coroutine: a no-op, ``asyncio.sleep`` for the
I/O-bound workload, or a latency probe reading ``data.t`` (enqueue time, epoch ms).
"""
from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from typing import Any, Dict, List


async def main(cfg: Dict[str, Any]) -> None:
    from bullmq import Worker  # imported here so a missing package fails with a clear trace

    processed = 0
    latencies: List[float] = []
    mode = cfg["mode"]
    sleep_s = cfg.get("sleep_ms", 0) / 1000.0

    async def processor(job: Any, token: str) -> None:
        nonlocal processed
        processed += 1
        if mode == "sleep":
            await asyncio.sleep(sleep_s)
        elif mode == "latency":
            latencies.append(time.time() * 1000.0 - float(job.data["t"]))
        return None

    worker = Worker(cfg["queue"], processor, {
        "connection": cfg["url"], "prefix": cfg["prefix"], "concurrency": cfg["concurrency"],
    })
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    # the worker connects lazily; one round trip proves the connection is up
    await worker.client.ping()
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    await stop.wait()
    await worker.close()
    with open(cfg["report"], "w", encoding="utf-8") as fh:
        json.dump({"processed": processed, "latencies_ms": latencies}, fh)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))

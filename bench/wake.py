"""``python -m bench.wake``: how soon the shared marker wait (``marker_wait: shared``) wakes
a queue that joins it while the wait is in flight (``bench/drivers/shared_wait_wake.py``),
on the harness's private Redis, with 200 queues: a marker added as the queue joins (the
``CLIENT UNBLOCK`` and the wait sent again under way) and one added 10 ms later (the wait
already covers it). Prints a markdown table with the load average before each row."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from .harness import Bench, BenchError
from .impls import DRIVERS, ours_python


def main() -> int:
    rows = []
    with Bench(verbose=False) as bench:
        for gap in (0, 10):
            load = round(os.getloadavg()[0], 2)
            cfg = {"url": bench.url, "queues": 200, "rounds": 300, "gap_ms": gap}
            res = subprocess.run([ours_python(), os.path.join(DRIVERS, "shared_wait_wake.py"), json.dumps(cfg)],
                                 capture_output=True, text=True, timeout=300)
            if res.returncode != 0:
                raise BenchError(f"the wake probe failed: {res.stderr.strip()[-2000:]}")
            row = json.loads(res.stdout.strip().splitlines()[-1])
            row["load1"] = load
            rows.append(row)
        version = bench.redis_version
    sys.stdout.write(f"Redis {version}; 200 queues in one shared wait, 300 wake-ups of one of them\n\n"
                     "| marker added | p50 ms | p99 ms | max ms | unblocks | load |\n|---|---|---|---|---|---|\n")
    for r in rows:
        when = "as the queue joins" if r["gap_ms"] == 0 else f"{r['gap_ms']} ms after it joined"
        sys.stdout.write(f"| {when} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['max_ms']:.2f} | "
                         f"{r['stats']['unblocks']} | {r['load1']} |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

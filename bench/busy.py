"""``python -m bench.busy``: the scale bench's busy case (``bench/scale/queues.py``, ``measure_busy``)
for ours only, its three ways in turn, the order rotated every round so that no way always
runs first (on the least load) or last, with a pause before each measurement. 20 queues of
5,000 waiting no-op jobs in one process, concurrency 10 each; ``--rounds N`` (default 4),
``--redis`` as ``bench.run``'s (default 7). Prints a markdown table, one row a measurement,
with the load average before it."""
from __future__ import annotations

import argparse
import os
import sys
import time

from . import scale
from .environment import redis_servers
from .harness import Bench, rotated
from .impls import IMPLS


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--redis", default="7")
    p.add_argument("--queues", type=int, default=20)
    p.add_argument("--n", type=int, default=5000, help="waiting jobs a queue")
    args = p.parse_args()
    variants = list(scale.BUSY_VARIANTS)
    rows = []
    with Bench(verbose=False, binary=redis_servers(args.redis)[0]) as bench:
        filler = scale.Filler(bench)
        for rnd in range(args.rounds):
            for variant in rotated(variants, rnd):
                time.sleep(8)  # let the last measurement's load settle
                load = round(os.getloadavg()[0], 2)
                row = scale.measure_busy(bench, filler, IMPLS["ours"], args.queues, args.n, variant=variant)
                row.update(load1=load, round=rnd + 1)
                rows.append(row)
        version = bench.redis_version
    sys.stdout.write(f"Redis {version}; {args.queues} queues × {args.n:,} no-op jobs, concurrency 10 each\n\n"
                     "| round | ours | jobs/s | worker µs/job | Redis µs/job | connections | load |\n"
                     "|---|---|---|---|---|---|---|\n")
    for r in rows:
        sys.stdout.write(f"| {r['round']} | {r['impl'][5:]} | {r['jobs_per_s']:,.0f} | {r['worker_cpu_us_per_job']:.1f} | "
                         f"{r['redis_cpu_us_per_job']:.1f} | {r['busy_connections']} | {r['load1']} |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

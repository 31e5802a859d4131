"""``python -m bench.freeze``: the freeze campaign. Two worker processes on one queue
(``bench/drivers/freeze_worker.py``) share the jobs on the harness's private Redis; ten
times a backlog of jobs (``--jobs`` over the freezes, no-op by default) is added and, 2-30 ms
later, while both workers drain it, one of them is stopped (SIGSTOP) for longer than its
lock, then continued (SIGCONT) and the backlog left to finish. Counted from outside: the processors started for
jobs whose lock no longer held their token (a frozen worker that started a job the other
worker had taken back; a processor stopped inside that look, which had started before the
freeze, is counted apart), the jobs run twice, and that every job completed.

``--code DIR`` runs the workers on the checkout in DIR (the same campaign on an older
commit: ``git archive <commit> | tar -x -C DIR``). Prints one JSON line with the figures
and the load average before and after; ``--seed`` makes the moments and lengths of the
freezes the same from run to run (the jobs' timing is the machine's).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List

from echomq_gevent import Queue
from echomq_gevent.protocol.keys import QueueKeys

from .harness import Bench, BenchError
from .impls import DRIVERS, ours_python


def _start(bench: Bench, cfg: Dict[str, Any], code: str) -> subprocess.Popen:
    env = dict(os.environ)
    if code:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [code, env.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([ours_python(), os.path.join(DRIVERS, "freeze_worker.py"), json.dumps(cfg)],
                            stdout=subprocess.PIPE, stderr=open(os.environ.get("FREEZE_LOG", os.devnull) + cfg["name"], "w") if os.environ.get("FREEZE_LOG") else subprocess.DEVNULL, text=True, env=env)
    if proc.stdout is None or proc.stdout.readline().strip() != "READY":
        raise BenchError(f"the freeze worker {cfg['name']} did not start")
    return proc


def campaign(jobs: int, freezes: int, lock_ms: int, freeze_s: List[float], concurrency: int, seed: int,
             code: str, sleep_ms: float = 0.0) -> Dict[str, Any]:
    rnd = random.Random(seed)
    with Bench(verbose=False) as bench:
        client = bench.client
        assert client is not None
        prefix, queue = "fz", bench.new_queue()
        keys = QueueKeys(queue, prefix)
        options = {"concurrency": concurrency, "lock_duration": lock_ms, "stalled_interval": 500, "drain_delay": 1}
        procs = [_start(bench, {"url": bench.url, "queue": queue, "prefix": prefix, "name": n, "options": options},
                        code) for n in ("frozen", "steady")]
        q = Queue(queue, connection=bench.url, prefix=prefix)
        load_before = os.getloadavg()[0]
        started = time.monotonic()
        per = max(1, jobs // max(1, freezes))
        added, frozen_for = 0, 0.0
        try:
            for i in range(freezes):
                # a backlog both workers are draining when the freeze comes
                n = per if i < freezes - 1 else jobs - added
                q.add_bulk([{"name": "j", "data": {"s": round(rnd.uniform(0, sleep_ms) / 1000.0, 4)}}
                            for _ in range(n)])
                added += n
                time.sleep(rnd.uniform(0.002, 0.03))
                length = rnd.uniform(*freeze_s)
                procs[0].send_signal(signal.SIGSTOP)
                time.sleep(length)
                procs[0].send_signal(signal.SIGCONT)
                frozen_for += length
                deadline = time.monotonic() + 60
                while client.zcard(keys.completed) < added and time.monotonic() < deadline:
                    time.sleep(0.05)
            completed = client.zcard(keys.completed)
            runs: Dict[str, int] = {}
            for job_id in client.lrange(f"{prefix}:freeze:runs", 0, -1):
                runs[job_id] = runs.get(job_id, 0) + 1
            lapsed = client.lrange(f"{prefix}:freeze:lapsed", 0, -1)
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait(5)
            q.close()
        return {"jobs": jobs, "completed": completed, "freezes": freezes, "frozen_s": round(frozen_for, 1),
                "lock_ms": lock_ms, "concurrency": concurrency, "seed": seed, "sleep_ms": sleep_ms,
                # a start whose lock had lapsed, and one frozen inside its own look at the lock
                # (it started before the freeze: the lock lapsed while the look was under way)
                "lapsed_starts": sum(1 for x in lapsed if int(x.split()[-1]) < lock_ms),
                "frozen_mid_look": sum(1 for x in lapsed if int(x.split()[-1]) >= lock_ms),
                "run_twice": sum(1 for n in runs.values() if n > 1), "duration_s": round(time.monotonic() - started, 1),
                "load1_before": round(load_before, 2), "load1_after": round(os.getloadavg()[0], 2),
                "redis": bench.redis_version, "code": code or "this checkout", "lapsed": lapsed[:40]}


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.freeze", description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=3000)
    p.add_argument("--sleep-ms", type=float, default=0.0,
                   help="each job sleeps a random time up to this (default 0: no-op jobs)")
    p.add_argument("--freezes", type=int, default=10)
    p.add_argument("--lock-ms", type=int, default=2000)
    p.add_argument("--freeze-s", default="3,4", help="shortest,longest freeze in seconds (default 3,4)")
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--seed", type=int, default=45)
    p.add_argument("--code", default="", help="run the workers on the checkout in this folder")
    args = p.parse_args()
    lo, hi = (float(x) for x in args.freeze_s.split(","))
    res = campaign(args.jobs, args.freezes, args.lock_ms, [lo, hi], args.concurrency, args.seed, args.code,
                   args.sleep_ms)
    sys.stdout.write(json.dumps(res) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

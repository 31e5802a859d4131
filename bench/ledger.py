"""``python -m bench.ledger``: what the effect ledger costs per job on PostgreSQL.

A Django worker process (``tests/frameworks/ledger_worker_proc.py``, gevent-patched as
``manage.py echomq_worker`` is) runs N preloaded jobs on a throwaway PostgreSQL cluster
(``tests/pg_server.py``) and Redis (``tests/redis_server.py``), in two modes that do the
same work, one row inserted by the processor:

* ``plain``: the processor in its own ``transaction.atomic()``;
* ``ledger``: the processor marked atomic: the ledger's look-up, the row, the ledger's
  insert and the commit in one transaction.

Each round runs both modes (alternating which goes first); jobs/s is N over the time
from the first job's ``processedOn`` to the last one's ``finishedOn`` (the worker's clock,
read from the job hashes), so process start-up is not counted. Reported: the median over
the rounds per mode and concurrency, the ratio, the machine and the load average.
Writes ``bench/results/ledger.md`` and ``ledger.json``.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any, Dict, List

from .environment import cpu_model

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TESTS = os.path.join(ROOT, "tests")
PROC = os.path.join(TESTS, "frameworks", "ledger_worker_proc.py")
RESULTS = os.path.join(HERE, "results")
MODES = {"plain": "plain", "ledger": "charge"}  # mode -> the job name the worker runs it under


def _module(name: str) -> Any:
    sys.path.insert(0, TESTS)
    spec = importlib.util.spec_from_file_location(f"echomq_bench_{name}", os.path.join(TESTS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def _one(redis_url: str, database: Dict[str, Any], mode: str, n: int, concurrency: int, offload: Any) -> float:
    import redis

    from echomq_gevent import Queue

    prefix = f"bl{uuid.uuid4().hex[:8]}"
    qname = "ledger"
    queue = Queue(qname, connection=redis_url, prefix=prefix)
    try:
        queue.add_bulk([{"name": MODES[mode], "data": {"n": i}} for i in range(n)])
        options = {"concurrency": concurrency, "drain_delay": 0.5, "shutdown_timeout": 10}
        if offload:
            options["offload"] = offload
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.path.join(TESTS, "frameworks"), TESTS]))
        proc = subprocess.Popen([sys.executable, PROC, json.dumps(database), redis_url, prefix, qname,
                                 json.dumps(options)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 600
            while queue.get_job_counts("completed")["completed"] < n:
                if proc.poll() is not None:
                    raise RuntimeError(f"the worker exited ({proc.returncode}): {proc.stderr.read().decode()[-2000:]}")
                if time.monotonic() > deadline:
                    raise RuntimeError("the jobs did not complete within 600 s")
                time.sleep(0.05)
        finally:
            proc.terminate()
            proc.wait(30)
        r = redis.Redis.from_url(redis_url)
        ids = r.zrange(f"{prefix}:{qname}:completed", 0, -1)
        pipe = r.pipeline(transaction=False)
        for job_id in ids:
            pipe.hmget(f"{prefix}:{qname}:{job_id.decode()}", "processedOn", "finishedOn")
        stamps = pipe.execute()
        r.close()
        first = min(int(s[0]) for s in stamps)
        last = max(int(s[1]) for s in stamps)
        return n / max((last - first) / 1000.0, 1e-3)
    finally:
        queue.obliterate(force=True)
        queue.close()


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ledger", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    pg = _module("pg_server")
    redis_mod = _module("redis_server")
    server = pg.PostgresServer().start()
    server.wait_ready()
    rs = redis_mod.RedisServer().start()
    cases = [(1, None), (8, "thread")]
    figures: Dict[str, List[float]] = {}
    loads = []
    try:
        for rnd in range(args.rounds):
            for concurrency, offload in cases:
                order = list(MODES) if rnd % 2 == 0 else list(reversed(MODES))
                for mode in order:
                    name = f"ledger{rnd}{mode}{concurrency}"
                    server.create_database(name)
                    database = {"ENGINE": "django.db.backends.postgresql", "NAME": name, "USER": server.user,
                                "HOST": "127.0.0.1", "PORT": str(server.port), "CONN_MAX_AGE": 60}
                    loads.append(os.getloadavg()[0])
                    rate = _one(rs.url, database, mode, args.jobs, concurrency, offload)
                    key = f"{mode} c={concurrency}" + (f" offload: {offload}" if offload else "")
                    figures.setdefault(key, []).append(rate)
                    print(f"round {rnd + 1}: {key}: {rate:,.0f} jobs/s", flush=True)
        version = subprocess.run([os.path.join(server.bin, "postgres"), "--version"], capture_output=True,
                                 text=True).stdout.strip()
        redis_version = subprocess.run([rs.binary, "--version"], capture_output=True, text=True).stdout.split()[2]
    finally:
        rs.stop()
        server.stop()
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": cpu_model(), "cpus": os.cpu_count(),
            "postgres": version, "redis": redis_version, "load_min": min(loads), "load_max": max(loads),
            "jobs": args.jobs, "rounds": args.rounds, "commit": commit}
    medians = {k: statistics.median(v) for k, v in figures.items()}
    # each round's two modes ran back to back: the median of the rounds' ratios follows
    # the load of the moment better than the ratio of the medians
    paired = {}
    for concurrency, offload in cases:
        suffix = f" c={concurrency}" + (f" offload: {offload}" if offload else "")
        paired[suffix] = statistics.median(q / p for p, q in zip(figures[f"plain{suffix}"],
                                                                 figures[f"ledger{suffix}"]))
    lines = ["# The effect ledger's cost per job (PostgreSQL)\n",
             f"{meta['date']}; {meta['cpu']} ({meta['cpus']} CPUs); {version} (fsync off, throwaway cluster), "
             f"{redis_version.replace('v=', 'Redis ')}; load average {meta['load_min']:.2f}-{meta['load_max']:.2f} "
             f"(a shared machine); commit {commit}. {args.jobs} preloaded jobs a run, each inserting one row "
             f"through Django's ORM connection (psycopg, CONN_MAX_AGE 60); median of {args.rounds} rounds, the modes alternating. "
             f"jobs/s: jobs over first processedOn to last finishedOn.\n",
             "| case | plain (own `transaction.atomic()`) jobs/s | ledger (`atomic=True`) jobs/s | ledger / plain "
             "(median of the rounds' ratios) |",
             "| --- | --- | --- | --- |"]
    for concurrency, offload in cases:
        suffix = f" c={concurrency}" + (f" offload: {offload}" if offload else "")
        p, q = medians[f"plain{suffix}"], medians[f"ledger{suffix}"]
        lines.append(f"| c={concurrency}" + (f", offload: {offload}" if offload else "") +
                     f" | {p:,.0f} | {q:,.0f} | {paired[suffix]:.2f} |")
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "ledger.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    with open(os.path.join(RESULTS, "ledger.json"), "w") as fh:
        json.dump({"meta": meta, "runs": figures, "medians": medians, "paired_ratios": paired}, fh, indent=1)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

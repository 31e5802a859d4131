"""``python -m bench.sentry``: what the Sentry plugin costs a job.

No-op jobs through one worker process (``concurrency`` 100, gevent-patched as the command
runs), in four variants, each round in a fresh process on a fresh queue of the harness's
private Redis, the variants' order rotating every round:

* ``off``: no plugin;
* ``plugin, no Sentry``: the plugin registered, ``sentry_sdk.init`` never called (what an
  app pays for listing it where Sentry is not set up);
* ``traces 0``: Sentry set up, ``traces_sample_rate=0`` (errors only: a scope per job, the
  trace continued, no transaction sent);
* ``traces 1.0``: every run a transaction.

Sentry sends through a transport that drops the envelopes after building them (no network),
so the figures are the plugin's and the SDK's CPU. The clock runs from the first job taken
to the last completed. Writes ``sentry.md`` and ``sentry.json`` into ``--out`` and, unless
``--quick``, one row per variant to ``history.md``'s ratio table.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any, Dict, List

from .environment import cpu_model
from .harness import Bench, BenchError, rotated
from .report import git_commit

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS = ("off", "plugin, no Sentry", "traces 0", "traces 1.0")


def driver(cfg: Dict[str, Any]) -> None:
    """One round, in its own process: add ``n`` jobs, run them, print the figures."""
    from gevent import monkey

    monkey.patch_all()
    import gevent
    import gevent.event

    from echomq_gevent import Queue, Worker, hookimpl
    from echomq_gevent.plugins import PluginHost, make_plugin_manager

    variant, n = cfg["variant"], cfg["n"]
    plugins: List[Any] = []
    if variant != "off":
        if variant.startswith("traces"):
            import sentry_sdk
            from sentry_sdk.transport import Transport

            class Dropping(Transport):
                def capture_envelope(self, envelope: Any) -> None:
                    envelope.serialize()  # the work a real transport does before the network

            sentry_sdk.init(dsn="http://public@127.0.0.1:9/1", transport=Dropping(),
                            traces_sample_rate=float(variant.split()[1]))
        from echomq_gevent.contrib.sentry import SentryPlugin

        plugins.append(SentryPlugin())
    done = gevent.event.Event()
    seen = [0, 0.0, 0.0]

    class Clock:
        @hookimpl
        def echomq_job_active(self) -> None:
            if not seen[1]:
                seen[1] = time.perf_counter()

        @hookimpl
        def echomq_job_completed(self) -> None:
            seen[0] += 1
            if seen[0] == n:
                seen[2] = time.perf_counter()
                done.set()

    plugins.append(Clock())
    queue = Queue(cfg["queue"], connection=cfg["url"], prefix="bs")
    for i in range(0, n, 1000):
        queue.add_bulk([("noop", {"i": j}) for j in range(i, min(n, i + 1000))])
    worker = Worker(cfg["queue"], lambda job: None, connection=cfg["url"], prefix="bs", concurrency=cfg["concurrency"],
                    plugins=PluginHost(make_plugin_manager(plugins)))
    cpu0 = time.process_time()
    worker.start()
    if not done.wait(timeout=600):
        raise SystemExit(f"only {seen[0]} of {n} jobs completed")
    cpu = time.process_time() - cpu0
    worker.close(timeout=10)
    queue.obliterate(force=True)
    queue.close()
    took = seen[2] - seen[1]
    print(json.dumps({"jobs_per_s": n / took, "cpu_us_per_job": cpu * 1e6 / n}))
    sys.stdout.flush()
    os._exit(0)  # no flush of Sentry's queue: nothing is waiting there


def run_round(bench: Bench, variant: str, n: int, concurrency: int) -> Dict[str, Any]:
    cfg = {"url": bench.url, "queue": "sentry" + uuid.uuid4().hex[:8], "variant": variant, "n": n,
           "concurrency": concurrency}
    load = os.getloadavg()[0]
    res = subprocess.run([sys.executable, "-m", "bench.sentry", "driver", json.dumps(cfg)], capture_output=True,
                         text=True, timeout=900, cwd=os.path.dirname(HERE))
    if res.returncode != 0:
        raise BenchError(f"sentry driver ({variant}) failed: {res.stderr.strip()[-2000:]}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    return {"variant": variant, "load1_before": round(load, 2), **out}


def measure(bench: Bench, n: int, rounds: int, concurrency: int) -> Dict[str, Any]:
    runs: List[Dict[str, Any]] = []
    variants = list(VARIANTS)
    for rnd in range(rounds):
        order = rotated(variants, rnd)
        for variant in order:
            row = run_round(bench, variant, n, concurrency)
            row["round"] = rnd + 1
            runs.append(row)
            bench.log(f"  sentry {variant:<18} round {rnd + 1}: {row['jobs_per_s']:,.0f} jobs/s, "
                      f"{row['cpu_us_per_job']:.0f} us CPU/job, load {row['load1_before']}")
    medians = {v: {k: statistics.median(r[k] for r in runs if r["variant"] == v)
                   for k in ("jobs_per_s", "cpu_us_per_job")} for v in variants}
    return {"runs": runs, "medians": medians}


def markdown(result: Dict[str, Any], meta: Dict[str, Any]) -> str:
    med = result["medians"]
    base = med["off"]
    loads = [r["load1_before"] for r in result["runs"]]
    lines = ["# The Sentry plugin's cost per job", "",
             f"{meta['date']} · {meta['machine']}, {meta['cpu']} · Redis {meta['redis']} · Python {meta['python']} · "
             f"sentry-sdk {meta['sentry_sdk']} · commit {meta['commit']} · load average 1 min "
             f"{min(loads):.2f}–{max(loads):.2f} · {meta['n']:,} no-op jobs, concurrency {meta['concurrency']}, "
             f"one worker process · {meta['rounds']} rounds, median", "",
             "| variant | jobs/s | ÷ off | CPU µs/job | + µs/job over off |", "| --- | --- | --- | --- | --- |"]
    for variant, row in med.items():
        lines.append(f"| {variant} | {row['jobs_per_s']:,.0f} | {row['jobs_per_s'] / base['jobs_per_s']:.2f} | "
                     f"{row['cpu_us_per_job']:.0f} | {row['cpu_us_per_job'] - base['cpu_us_per_job']:+.0f} |")
    lines += ["", "| round | variant | jobs/s | CPU µs/job | load |", "| --- | --- | --- | --- | --- |"]
    for r in result["runs"]:
        lines.append(f"| {r['round']} | {r['variant']} | {r['jobs_per_s']:,.0f} | {r['cpu_us_per_job']:.0f} | "
                     f"{r['load1_before']} |")
    return "\n".join(lines) + "\n"


def main(argv: List[str]) -> int:
    if argv[:1] == ["driver"]:
        driver(json.loads(argv[1]))
        return 0
    p = argparse.ArgumentParser(prog="python -m bench.sentry", description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=10000, help="jobs per round (default 10000)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=100)
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--quick", action="store_true", help="1,000 jobs, one round, no history row")
    args = p.parse_args(argv)
    n, rounds = (1000, 1) if args.quick else (args.n, args.rounds)
    import sentry_sdk

    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}",
            "cpu": cpu_model(), "python": platform.python_version(), "sentry_sdk": sentry_sdk.VERSION,
            "commit": git_commit(os.path.dirname(HERE)), "n": n, "rounds": rounds, "concurrency": args.concurrency}
    try:
        with Bench() as bench:
            meta["redis"] = bench.redis_version
            result = measure(bench, n, rounds, args.concurrency)
    except (BenchError, RuntimeError, subprocess.SubprocessError) as exc:
        sys.stderr.write(f"bench: FAILED sentry: {exc}\n")
        return 1
    text = markdown(result, meta)
    sys.stdout.write(text)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "sentry.md"), "w", encoding="utf-8") as fh:
        fh.write(text)
    with open(os.path.join(args.out, "sentry.json"), "w", encoding="utf-8") as fh:
        json.dump({"meta": meta, **result}, fh, indent=1)
    if not args.quick:
        med, loads = result["medians"], [r["load1_before"] for r in result["runs"]]
        with open(os.path.join(args.out, "history.md"), "a", encoding="utf-8") as fh:
            for variant in VARIANTS[1:]:
                fh.write(f"| {meta['date']} | {meta['commit']} | {meta['machine']}, {meta['cpu']} | {meta['redis']} | "
                         f"{rounds} | {min(loads):.2f}–{max(loads):.2f} | sentry: no-op c={args.concurrency}, "
                         f"{variant} ÷ off jobs/s ({med[variant]['jobs_per_s']:,.0f} against "
                         f"{med['off']['jobs_per_s']:,.0f}) | "
                         f"{med[variant]['jobs_per_s'] / med['off']['jobs_per_s']:.2f} |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

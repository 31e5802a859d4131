"""``python -m bench.run --only cpu``: CPU-bound jobs, ``offload: thread`` against
``offload: process`` in one worker process.

Every job burns about 2 ms of pure-Python CPU (a loop whose length is calibrated on this
machine before the run). For each mode and round: N jobs are added to a fresh queue, then
one worker process (``python -m bench.cpu worker ...``, monkey-patched as the command is)
runs them with ``concurrency`` = 2 × the CPU count; with ``offload: process`` it has one
child per CPU (``offload_processes``). The clock runs from the first job taken to the last
one completed, so the children's start-up is not counted. Modes alternate, their order
rotating each round; jobs/s is the median of the rounds. The issue's target on 2 cores:
process ≥ 1.6 × thread. Writes ``cpu.md`` and ``cpu.json`` and, for a full run, one row of
``history.md``.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List

#: Pure-Python CPU each job burns.
JOB_MS = 2.0
MODES = ("thread", "process")


def burn(job: Any) -> int:
    """The processor: ``data["loops"]`` rounds of integer arithmetic (about 2 ms)."""
    x = 0
    for i in range(int(job.data["loops"])):
        x = (x + i * i) % 1000003
    return x


class _Probe:
    def __init__(self, data: Dict[str, Any]) -> None:
        self.data = data


def calibrate(target_ms: float = JOB_MS) -> int:
    """Loops of :func:`burn` that take ``target_ms`` here (the fastest of several tries)."""
    loops = 20000
    best = min(_timed(loops) for _ in range(5))
    loops = max(1000, int(loops * target_ms / 1000.0 / best))
    best = min(_timed(loops) for _ in range(5))
    return max(1000, int(loops * target_ms / 1000.0 / best))


def _timed(loops: int) -> float:
    start = time.perf_counter()
    burn(_Probe({"loops": loops}))
    return time.perf_counter() - start


def _worker_main(argv: List[str]) -> int:
    """``python -m bench.cpu worker URL QUEUE N MODE CONCURRENCY PROCESSES``: run the
    jobs, print ``{"seconds": ...}`` (first pick-up to last completion) and exit."""
    from gevent import monkey

    monkey.patch_all()
    import gevent

    from bench.cpu import burn as processor  # not __main__.burn: the offload children import it by name
    from echomq_gevent import Worker
    from echomq_gevent.plugins.hookspecs import hookimpl
    from echomq_gevent.plugins.host import PluginHost, make_plugin_manager

    url, queue, n, mode, concurrency, processes = argv
    first: List[float] = []

    class FirstActive:
        @hookimpl
        def echomq_job_active(self, worker: Any, job: Any) -> None:
            if not first:
                first.append(time.perf_counter())

    opts: Dict[str, Any] = {"concurrency": int(concurrency), "offload": mode, "hub_block_threshold": None}
    if mode == "process":
        opts["offload_processes"] = int(processes)
    w = Worker(queue, processor, connection=url, prefix="benchcpu",
               plugins=PluginHost(make_plugin_manager([FirstActive()])), **opts)
    running = w.start()
    while w.completed_count + w.failed_count < int(n):
        if running.dead:
            running.get()  # raises what stopped the worker
            raise RuntimeError("the worker stopped before the jobs were done")
        gevent.sleep(0.005)
    end = time.perf_counter()
    w.close(timeout=5)
    print(json.dumps({"seconds": end - first[0], "failed": w.failed_count}))
    return 0


def _load1() -> float:
    try:
        return float(open("/proc/loadavg").read().split()[0])
    except (OSError, ValueError, IndexError):
        return -1.0


def measure_cpu(bench: Any, n: int, rounds: int) -> Dict[str, Any]:
    """Run both modes ``rounds`` times with ``n`` jobs each on ``bench``'s Redis."""
    from echomq_gevent.queue.queue import Queue

    cpus = os.cpu_count() or 1
    concurrency, processes = 2 * cpus, cpus
    loops = calibrate()
    bench.log(f"bench cpu: {loops} loops a job (~{JOB_MS} ms), concurrency {concurrency}, "
              f"{processes} offload processes, {n} jobs, {rounds} round(s)")
    runs: List[Dict[str, Any]] = []
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for r in range(rounds):
        order = MODES if r % 2 == 0 else tuple(reversed(MODES))
        for mode in order:
            name = f"cpu-{mode}-{r}-{int(time.time() * 1000)}"
            queue = Queue(name, connection=bench.url, prefix="benchcpu")
            try:
                for start in range(0, n, 1000):
                    queue.add_bulk([{"name": "burn", "data": {"loops": loops}, "opts": {"removeOnComplete": True}}
                                    for _ in range(min(1000, n - start))])
            finally:
                queue.close()
            load = _load1()
            out = subprocess.run([sys.executable, "-m", "bench.cpu", "worker", bench.url, name, str(n), mode,
                                  str(concurrency), str(processes)], cwd=here, capture_output=True, text=True,
                                 timeout=600)
            if out.returncode != 0:
                raise RuntimeError(f"the {mode} worker failed: {out.stderr[-2000:]}")
            res = json.loads(out.stdout.strip().splitlines()[-1])
            rate = n / res["seconds"]
            bench.log(f"bench cpu: round {r + 1} {mode}: {rate:,.0f} jobs/s (load {load:.2f})")
            runs.append({"mode": mode, "round": r, "jobs_per_s": rate, "seconds": res["seconds"],
                         "failed": res["failed"], "load1_before": load})
    medians = {m: statistics.median(x["jobs_per_s"] for x in runs if x["mode"] == m) for m in MODES}
    return {"n": n, "rounds": rounds, "loops": loops, "job_ms": JOB_MS, "concurrency": concurrency,
            "processes": processes, "cpus": cpus, "runs": runs, "medians": medians,
            "ratio": medians["process"] / medians["thread"]}


def cpu_markdown(result: Dict[str, Any], meta: Dict[str, Any]) -> str:
    """The report of :func:`measure_cpu`."""
    med = result["medians"]
    loads = [r["load1_before"] for r in result["runs"]]
    lines = [
        "# CPU-bound jobs: offload: thread against offload: process",
        "",
        f"{meta['date']}, commit {meta['commit']}; {result['cpus']} CPUs ({meta['cpu']}), Python {meta['python']}, "
        f"Redis {meta['redis']}; load average (1 min) before each round {min(loads):.2f}–{max(loads):.2f}; "
        f"`uptime` before the run: {meta.get('uptime', '?')}.",
        "",
        f"{result['n']} jobs per round, each {result['loops']} loops of pure-Python arithmetic "
        f"(~{result['job_ms']:g} ms here); one worker process, concurrency {result['concurrency']}; "
        f"offload: process with {result['processes']} children. {result['rounds']} round(s), modes alternating.",
        "",
        "| mode | jobs/s per round | median jobs/s |",
        "|---|---|---|",
    ]
    for mode in MODES:
        rates = ", ".join(f"{r['jobs_per_s']:,.0f}" for r in result["runs"] if r["mode"] == mode)
        lines.append(f"| offload: {mode} | {rates} | {med[mode]:,.0f} |")
    lines += ["", f"process ÷ thread: **{result['ratio']:.2f}×** (target ≥ 1.6× on 2 cores).", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        sys.exit(_worker_main(sys.argv[2:]))
    sys.stderr.write("usage: python -m bench.run --only cpu\n")
    sys.exit(2)

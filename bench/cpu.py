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


def _fill(url: str, name: str, n: int, loops: int, paused: bool = False) -> None:
    from echomq_gevent.queue.queue import Queue

    queue = Queue(name, connection=url, prefix="benchcpu")
    try:
        if paused:
            queue.pause()
        for start in range(0, n, 1000):
            queue.add_bulk([{"name": "burn", "data": {"loops": loops}, "opts": {}}
                            for _ in range(min(1000, n - start))])
    finally:
        queue.close()


def _resume_when_workers(url: str, name: str, workers: int, procs: List[subprocess.Popen],
                         timeout: float = 60.0) -> None:
    """Resume the paused queue once ``workers`` workers are connected to it (so no
    implementation's start-up is measured)."""
    from echomq_gevent.queue.queue import Queue

    queue = Queue(name, connection=url, prefix="benchcpu")
    try:
        deadline = time.monotonic() + timeout
        while queue.get_workers_count() < workers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"queue {name}: {queue.get_workers_count()} of {workers} workers connected")
            time.sleep(0.05)
        queue.resume()
    finally:
        queue.close()


def _window_rate(client: Any, name: str, n: int, timeout: float = 600.0) -> float:
    """Jobs/s between 5 % and 95 % of ``n`` completed (start-up and tail left out)."""
    key = f"benchcpu:{name}:completed"
    low, high = max(1, n // 20), n - n // 20
    t_low = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = client.zcard(key)
        now = time.monotonic()
        if t_low is None and done >= low:
            t_low, at_low = now, done
        if done >= high and t_low is not None:
            return (done - at_low) / max(now - t_low, 1e-6)
        time.sleep(0.01)
    raise RuntimeError(f"queue {name}: {client.zcard(key)} of {n} jobs completed within {timeout:.0f} s")


def _stop(procs: List[subprocess.Popen]) -> None:
    import signal

    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def measure_scaling(bench: Any, n: int, rounds: int, node: str) -> Dict[str, Any]:
    """The same ~2 ms jobs (each implementation's loop calibrated to 2 ms in its own
    language) under ``echomq-gevent --processes 1`` and ``--processes N`` (N = the CPU
    count; concurrency 1 a process: a CPU-bound job holds its hub anyway), and under 1 and
    N Node BullMQ worker processes. The jobs wait in a paused queue until every worker
    is connected; jobs/s between 5 % and 95 % completed."""
    import tempfile

    cpus = os.cpu_count() or 1
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    driver = os.path.join(here, "bench", "drivers", "node_cpu_worker.js")
    py_loops = calibrate()
    out = subprocess.run([node, driver, json.dumps({"calibrate": JOB_MS})], capture_output=True, text=True, timeout=60)
    js_loops = int(json.loads(out.stdout.strip().splitlines()[-1])["loops"])
    bench.log(f"bench cpu scaling: {py_loops} Python loops, {js_loops} JS loops a job (~{JOB_MS} ms), "
              f"1 and {cpus} processes, {n} jobs, {rounds} round(s)")
    runs: List[Dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for impl in (("ours", "node") if r % 2 == 0 else ("node", "ours")):
                for procs in (1, cpus):
                    name = f"scale-{impl}-{procs}-{r}-{int(time.time() * 1000)}"
                    _fill(bench.url, name, n, py_loops if impl == "ours" else js_loops, paused=True)
                    load = _load1()
                    if impl == "ours":
                        conf = os.path.join(tmp, f"{name}.yaml")
                        with open(conf, "w") as fh:
                            fh.write(f'redis: {{url: "{bench.url}"}}\nprefix: benchcpu\nplugin_paths: ["{here}"]\n'
                                     f'entry_points: false\nlogging: {{level: warning}}\nqueues:\n'
                                     f'  {name}: {{processor: "bench.cpu:burn", concurrency: 1, '
                                     f'hub_block_threshold: null, drain_delay: 1}}\n')
                        started = [subprocess.Popen([sys.executable, "-m", "echomq_gevent", "-c", conf, "--processes",
                                                     str(procs), "--no-progress"], cwd=here,
                                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
                    else:
                        cfg = json.dumps({"url": bench.url, "queue": name, "prefix": "benchcpu", "concurrency": 1})
                        started = [subprocess.Popen([node, driver, cfg], stdout=subprocess.DEVNULL,
                                                    stderr=subprocess.DEVNULL) for _ in range(procs)]
                    try:
                        _resume_when_workers(bench.url, name, procs, started)
                        rate = _window_rate(bench.client, name, n)
                    finally:
                        _stop(started)
                    bench.log(f"bench cpu scaling: round {r + 1} {impl} x{procs}: {rate:,.0f} jobs/s (load {load:.2f})")
                    runs.append({"impl": impl, "processes": procs, "round": r, "jobs_per_s": rate,
                                 "load1_before": load})
    med = {(impl, p): statistics.median(x["jobs_per_s"] for x in runs if x["impl"] == impl and x["processes"] == p)
           for impl in ("ours", "node") for p in (1, cpus)}
    return {"n": n, "rounds": rounds, "cpus": cpus, "py_loops": py_loops, "js_loops": js_loops, "runs": runs,
            "medians": {f"{impl} x{p}": v for (impl, p), v in med.items()},
            "scaling": {impl: med[(impl, cpus)] / med[(impl, 1)] for impl in ("ours", "node")},
            "to_node": {p: med[("ours", p)] / med[("node", p)] for p in (1, cpus)}}


def scaling_markdown(result: Dict[str, Any]) -> str:
    """The report of :func:`measure_scaling` (appended to ``cpu.md``)."""
    cpus = result["cpus"]
    med = result["medians"]
    loads = [r["load1_before"] for r in result["runs"]]
    lines = [
        f"## --processes 1 against --processes {cpus}, beside Node BullMQ",
        "",
        f"{result['n']} jobs per run, each ~2 ms of CPU ({result['py_loops']} loops in Python, {result['js_loops']} "
        f"in JavaScript, each calibrated here); ours: `echomq-gevent --processes 1` and `--processes {cpus}` "
        f"(concurrency 1 a process); Node: 1 and {cpus} worker processes (concurrency 1). The queue is resumed once "
        f"every worker is connected; jobs/s between 5 % and 95 % completed; load average before the runs {min(loads):.2f}–{max(loads):.2f}.",
        "",
        f"| | 1 process | {cpus} processes | scaling ({cpus} ÷ 1) |",
        "|---|---|---|---|",
    ]
    for impl, label in (("ours", "echomq-gevent"), ("node", "BullMQ Node")):
        lines.append(f"| {label} | {med[f'{impl} x1']:,.0f} | {med[f'{impl} x{cpus}']:,.0f} | "
                     f"{result['scaling'][impl]:.2f}× |")
    lines += ["", f"ours ÷ Node: {result['to_node'][1]:.2f} with 1 process, {result['to_node'][cpus]:.2f} with "
                  f"{cpus} (target for the scaling: ≥ {0.8 * cpus:.1f}× on an idle machine).", ""]
    return "\n".join(lines)


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

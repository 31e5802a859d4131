"""The pools bench (``python -m bench.pools``, or ``python -m bench.run --only pools``): what
a pool costs against one queue, and what it buys a tenant against one shared queue.

Cases, each in a worker process of its own (gevent-patched, as the command runs) on a
private redis-server, the jobs filled into paused queues first and resumed at once:

- **scale**: N no-op jobs (default 100,000) at a total concurrency of 100: one plain
  ``Worker`` on one queue, then a pool (round robin) over 1, 10, 100 and 1,000 queues
  holding N/Q jobs each (1,000: more queues with work than slots, with ``turn`` 1 and 10),
  and the references (a Worker per queue; BullMQ's Node Worker on one queue and one per
  queue): jobs/s (resume to the last finish), the worker's and Redis's CPU per job, and
  the worker process's connections (``CLIENT LIST`` while it runs).
- **fairness**: one tenant floods F jobs (default 50,000) while 50 others add 100 each, jobs
  that sleep 1 ms, at concurrency 50: (a) all in one shared FIFO queue behind the flood,
  one worker; (b) one queue per tenant, a pool with ``queues: ["tenant-*"]`` and
  ``order: round_robin`` (found by its pattern at start), with ``turn`` 1 and 10. The small
  tenants' wait (resume to the start of their job) p50/p99/max, against the processing
  time of a job.
- **idle**: T tenant queues (default 1,000) that exist and hold nothing, served by a pool
  with a pattern: the worker process's CPU over S seconds (default 10) and its connections.
- **redis**: what a job costs Redis alone over one queue and over 100, no worker beside it:
  the finish-and-fetch scripts run straight from the bench, BullMQ's own and ours
  (:mod:`bench.pools_redis`).

Writes ``pools.md`` and ``pools.json`` into ``--out`` (default ``bench/results``) and
appends a row to ``history.md`` there. ``--quick`` shrinks every N (a smoke run).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

from .pools_redis import markdown as redis_markdown
from .pools_redis import fill, redis_alone_case
from .harness import ROOT, SCRIPT_COMMANDS, Bench, BenchError, ProcWatch, RedisSnapshot, command_delta, percentile, rotated

HERE = os.path.dirname(os.path.abspath(__file__))
PREFIX = "bpool"
SMALL_TENANTS = 50
SMALL_JOBS = 100


# --------------------------------------------------------------------------- the worker side
def sleep_1ms(job: Any) -> None:
    """The fairness case's job: 1 ms of waiting (a call to a service)."""
    import gevent

    gevent.sleep(0.001)


def noop(job: Any) -> None:
    """The scale case's job."""


def _driver(cfg: Dict[str, Any]) -> None:
    """In the worker process: run the layout ``cfg`` asks for until stdin closes; print
    ``ready`` once every queue waits."""
    from gevent import monkey

    monkey.patch_all()
    import gevent

    from echomq_gevent import Pool, Worker
    from echomq_gevent.host.config import parse_config
    from echomq_gevent.host.runner import Runner

    url, layout = cfg["url"], cfg["layout"]
    fn = sleep_1ms if cfg.get("sleep") else noop
    opts = {"drain_delay": cfg.get("drain_delay", 5), "lock_duration": 30000}
    stop: Any
    if layout == "worker":
        worker = Worker(cfg["queues"][0], fn, connection=url, prefix=PREFIX, concurrency=cfg["concurrency"], **opts)
        worker.start()
        stop = lambda: worker.close(5)  # noqa: E731
    elif layout == "workers":  # the layout without pools: a Worker per queue, the budget split evenly
        each = max(1, cfg["concurrency"] // len(cfg["queues"]))
        workers = [Worker(q, fn, connection=url, prefix=PREFIX, concurrency=each, **opts) for q in cfg["queues"]]
        for w in workers:
            w.start()
        stop = lambda: [w.close(5) for w in workers]  # noqa: E731
    elif layout == "pool":
        pool = Pool(cfg["queues"], concurrency=cfg["concurrency"], order=cfg.get("order", "round_robin"), connection=url,
                    prefix=PREFIX, processor=fn, turn=cfg.get("turn", 1), **opts)
        pool.start()
        stop = lambda: pool.close(5)  # noqa: E731
    else:  # a pool over the queues a pattern finds, as the command runs it
        text = (f"redis: {{url: '{url}'}}\nprefix: {PREFIX}\nentry_points: false\n"
                f"defaults: {{drain_delay: {opts['drain_delay']}}}\n"
                f"pools:\n  tenants:\n    concurrency: {cfg['concurrency']}\n    queues: ['{cfg['pattern']}']\n"
                f"    order: round_robin\n    turn: {cfg.get('turn', 1)}\n"
                f"    processor: 'bench.pools:{fn.__name__}'\n")
        runner = Runner(parse_config(text), url)
        runner.start()
        gevent.sleep(0.5)  # the first look
        stop = lambda: runner.drain(5).join()  # noqa: E731
    gevent.sleep(1.0)
    print("ready", flush=True)
    gevent.get_hub().threadpool.spawn(sys.stdin.read).get()
    stop()


# --------------------------------------------------------------------------- the bench side
def _start(bench: Bench, cfg: Dict[str, Any]) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen([sys.executable, "-m", "bench.pools", "--driver", json.dumps(cfg)], cwd=ROOT, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        raise BenchError(f"the pool driver did not start: {line!r} {proc.stderr.read()[-2000:] if proc.stderr else ''}")
    return proc


NODE_WORKER = os.path.join(HERE, "drivers", "node_worker.js")
NODE_BULLMQ = os.path.join(ROOT, "tests", "node_modules", "bullmq")


def node_missing() -> Optional[str]:
    """Why the Node layouts cannot run here (None when they can)."""
    import shutil

    if shutil.which("node") is None:
        return "no node on PATH"
    if not os.path.isdir(NODE_BULLMQ):
        return f"no BullMQ for Node at {os.path.relpath(NODE_BULLMQ, ROOT)} (make tests/node_modules/.installed)"
    return None


def _start_node(bench: Bench, queues: List[str], concurrency: int) -> subprocess.Popen:
    """BullMQ's own Worker, one per queue, each with ``concurrency`` (``drivers/node_worker.js``)."""
    cfg = {"url": bench.url, "prefix": PREFIX, "queues": queues, "concurrency": concurrency, "mode": "noop",
           "report": os.devnull}
    proc = subprocess.Popen(["node", NODE_WORKER, json.dumps(cfg)], cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "READY" not in line:
        proc.kill()
        raise BenchError(f"the Node workers did not start: {line!r} {proc.stderr.read()[-2000:] if proc.stderr else ''}")
    time.sleep(1.0)  # as the Python driver: every worker waits on its queue before the resume
    return proc


def _stop(proc: subprocess.Popen) -> None:
    try:
        if proc.stdin is not None:
            proc.stdin.close()
        else:  # the Node driver closes its workers on SIGTERM
            proc.terminate()
        proc.wait(timeout=30)
    except Exception:
        proc.kill()


def _fill(bench: Bench, queue: str, n: int, name: str = "j") -> None:
    """``n`` jobs into ``queue`` (paused), with our producer (one pipeline a 1,000)."""
    fill(bench.url, queue, n, PREFIX, name, paused=True)


def _resume_all(bench: Bench, queues: List[str]) -> float:
    """Resume every queue in one MULTI; the wall time (ms) it was sent."""
    from echomq_gevent.protocol.keys import QueueKeys

    assert bench.client is not None
    pipe = bench.client.pipeline(transaction=True)
    for q in queues:
        keys = QueueKeys(q, PREFIX)
        pipe.hdel(keys.meta, "paused")
        pipe.zadd(keys.marker, {"0": 0})
    t0 = time.time() * 1000.0
    pipe.execute()
    return t0


def _completed(bench: Bench, queues: List[str]) -> int:
    assert bench.client is not None
    pipe = bench.client.pipeline(transaction=False)
    for q in queues:
        pipe.zcard(f"{PREFIX}:{q}:completed")
    return sum(pipe.execute())


def _connections(bench: Bench) -> int:
    assert bench.client is not None
    me = bench.client.client_id()
    return sum(1 for c in bench.client.client_list() if int(c["id"]) != me)


def _wait_done(bench: Bench, queues: List[str], n: int, proc: subprocess.Popen, timeout: float) -> float:
    end = time.monotonic() + timeout
    conns = 0
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise BenchError("the pool driver exited early: " + (proc.stderr.read()[-2000:] if proc.stderr else ""))
        conns = max(conns, _connections(bench))
        if _completed(bench, queues) >= n:
            return conns
        time.sleep(0.05)
    raise BenchError(f"{n} jobs not finished within {timeout:.0f} s")


def _last_finish_ms(bench: Bench, queues: List[str]) -> float:
    assert bench.client is not None
    last = 0.0
    for q in queues:
        top = bench.client.zrange(f"{PREFIX}:{q}:completed", -1, -1, withscores=True)
        if top:
            last = max(last, float(top[0][1]))
    return last


ONE_QUEUE = "one queue, no pool"
NODE_ONE_QUEUE = "Node: one queue"
#: (label, layout, queues, the layout its ratio is against[, more of the driver's settings]).
#: 1,000 queues: more queues with work than slots, where ``turn`` counts. The last three are the
#: references: the layout without pools (a Worker per queue, the budget split evenly),
#: and BullMQ's own Worker on one queue and one per queue.
SCALE_LAYOUTS = ((ONE_QUEUE, "worker", 1, ONE_QUEUE), ("pool over 1 queue", "pool", 1, ONE_QUEUE),
                 ("pool over 10 queues", "pool", 10, ONE_QUEUE), ("pool over 100 queues", "pool", 100, ONE_QUEUE),
                 ("pool over 1,000 queues", "pool", 1000, ONE_QUEUE),
                 ("pool over 1,000 queues, turn 10", "pool", 1000, ONE_QUEUE, {"turn": 10}),
                 ("a Worker per queue, 100 queues, no pool", "workers", 100, ONE_QUEUE),
                 (NODE_ONE_QUEUE, "node", 1, NODE_ONE_QUEUE),
                 ("Node: a Worker per queue, 100 queues", "node", 100, NODE_ONE_QUEUE))


def scale_layouts(with_node: bool) -> List[tuple]:
    return [lay for lay in SCALE_LAYOUTS if with_node or lay[1] != "node"]


def round_order(layouts: List[tuple], r: int) -> List[tuple]:
    """Round ``r``'s order: ours rotated among themselves, then Node's rotated among
    themselves. On the reference VM our one queue right after Node's 100 workers spent up
    to 1.5x the CPU a job it spent right after one of our layouts (two rounds of four);
    rotated all together, the base of our ratios ran right after Node in four rounds of five."""
    ours = [lay for lay in layouts if lay[1] != "node"]
    node = [lay for lay in layouts if lay[1] == "node"]
    return rotated(ours, r) + (rotated(node, r) if node else [])


def scale_case(bench: Bench, n: int, concurrency: int, log: Any, rounds: int = 1,
               with_node: bool = True) -> List[Dict[str, Any]]:
    """Every layout ``rounds`` times, their order rotated each round; the median round of
    each, and each round's ratio against its base layout of the same round."""
    layouts = scale_layouts(with_node)
    runs: Dict[str, List[Dict[str, Any]]] = {lay[0]: [] for lay in layouts}
    for r in range(rounds):
        rows = _scale_round(bench, n, concurrency, log, round_order(layouts, r))
        for row in rows:
            # against the base of the same round: the machine's speed drifts between
            # rounds by more than the difference measured (paired, the drift cancels)
            base = next(x["jobs_per_s"] for x in rows if x["case"] == row["base"])
            row["x_one_queue"] = round(row["jobs_per_s"] / max(1, base), 3)
            runs[row["case"]].append(row)
    out = []
    for label, *_rest in layouts:
        ordered = sorted(runs[label], key=lambda row: row["jobs_per_s"])
        median = dict(ordered[len(ordered) // 2])
        median["rounds"] = [row["jobs_per_s"] for row in runs[label]]
        ratios = [row["x_one_queue"] for row in runs[label]]
        median["x_one_queue_rounds"] = ratios
        median["x_one_queue_median"] = sorted(ratios)[len(ratios) // 2]
        for part in ("worker_us_per_job", "redis_us_per_job"):
            values = sorted(row[part] for row in runs[label])
            median[part] = values[len(values) // 2]
        out.append(median)
    return out


def _scale_round(bench: Bench, n: int, concurrency: int, log: Any, layouts: Any) -> List[Dict[str, Any]]:
    rows = []
    for label, layout, count, base, *more in layouts:
        bench.flush()
        queues = [f"s{count}-{i}" for i in range(count)]
        for q in queues:
            _fill(bench, q, n // count)
        if layout == "node":
            proc = _start_node(bench, queues, max(1, concurrency // count))
        else:
            proc = _start(bench, dict({"url": bench.url, "layout": layout, "queues": queues,
                                       "concurrency": concurrency}, **(more[0] if more else {})))
        try:
            watch = ProcWatch(proc.pid)
            cpu0 = watch.cpu_s()
            assert bench.client is not None
            snap0 = RedisSnapshot.take(bench.client)
            t0 = _resume_all(bench, queues)
            conns = _wait_done(bench, queues, n, proc, timeout=600)
            elapsed = max(1.0, _last_finish_ms(bench, queues) - t0) / 1000.0
            snap1 = RedisSnapshot.take(bench.client)
            cpu1 = watch.cpu_s()
        finally:
            _stop(proc)
        row = {"case": label, "base": base, "queues": count, "jobs": n, "concurrency": concurrency,
               "jobs_per_s": round(n / elapsed), "worker_us_per_job": round((cpu1 - cpu0) / n * 1e6, 1),
               "redis_us_per_job": round((snap1.cpu_s - snap0.cpu_s) / n * 1e6, 1), "connections": conns,
               "script_calls_per_job": round(sum(snap1.calls.get(c, 0) - snap0.calls.get(c, 0)
                                                 for c in SCRIPT_COMMANDS) / n, 2),
               "commands_per_job": {c: round(d / n, 3) for c, d in sorted(command_delta(snap0, snap1, {}).items())
                                    if d / n >= 0.005}}
        log(f"scale: {label}: {row['jobs_per_s']} jobs/s, worker {row['worker_us_per_job']} µs/job, "
            f"Redis {row['redis_us_per_job']} µs/job, {row['script_calls_per_job']} script calls/job, "
            f"{conns} connections")
        rows.append(row)
    return rows


def _starts(bench: Bench, queue: str) -> List[float]:
    """``processedOn`` of every job of ``queue`` (ms), and the processing times."""
    assert bench.client is not None
    ids = bench.client.zrange(f"{PREFIX}:{queue}:completed", 0, -1)
    pipe = bench.client.pipeline(transaction=False)
    for job_id in ids:
        pipe.hmget(f"{PREFIX}:{queue}:{job_id}", "processedOn", "finishedOn", "name", "data")
    return pipe.execute()


#: (label, layout, the pool's turn): the flood in one FIFO queue, and a queue per tenant
#: in a round-robin pool, with turns of 1 job (the default) and of 10
FAIRNESS_LAYOUTS = (("one shared FIFO queue", "worker", 1), ("a queue per tenant, pool round_robin", "family", 1),
                    ("a queue per tenant, pool round_robin, turn 10", "family", 10))


def fairness_case(bench: Bench, flood: int, log: Any) -> List[Dict[str, Any]]:
    rows = []
    small = [f"tenant-s{i:02d}" for i in range(SMALL_TENANTS)]
    for label, layout, turn in FAIRNESS_LAYOUTS:
        bench.flush()
        if layout == "worker":
            queues = ["shared"]
            _fill(bench, "shared", flood, name="flood")
            _fill_small_into(bench, "shared", SMALL_TENANTS * SMALL_JOBS)
        else:
            queues = ["tenant-flood"] + small
            _fill(bench, "tenant-flood", flood, name="flood")
            for q in small:
                _fill(bench, q, SMALL_JOBS, name="small")
        cfg = {"url": bench.url, "layout": layout, "queues": queues, "concurrency": 50, "sleep": True,
               "pattern": "tenant-*", "turn": turn}
        proc = _start(bench, cfg)
        try:
            t0 = _resume_all(bench, queues)
            _wait_done(bench, queues, flood + SMALL_TENANTS * SMALL_JOBS, proc, timeout=900)
        finally:
            _stop(proc)
        waits: List[float] = []
        runs: List[float] = []
        flood_end = 0.0
        first: Dict[Any, float] = {}
        last: Dict[Any, float] = {}
        for q in queues:
            for processed, finished, name, data in _starts(bench, q):
                if processed is None:
                    continue
                if name == "small":
                    waits.append(float(processed) - t0)
                    runs.append(float(finished) - float(processed))
                    tenant = json.loads(data).get("t", q) if layout == "worker" else q
                    first[tenant] = min(first.get(tenant, float("inf")), float(processed) - t0)
                    last[tenant] = max(last.get(tenant, 0.0), float(finished) - t0)
                else:
                    flood_end = max(flood_end, float(finished) - t0)
        firsts, lasts = sorted(first.values()), sorted(last.values())
        waits.sort()
        runs.sort()
        row = {"case": label, "flood": flood, "small_jobs": len(waits),
               "small_wait_ms_p50": round(percentile(waits, 50), 1), "small_wait_ms_p99": round(percentile(waits, 99), 1),
               "small_wait_ms_max": round(waits[-1], 1) if waits else None,
               "small_run_ms_p50": round(percentile(runs, 50), 2), "flood_done_s": round(flood_end / 1000.0, 1),
               "tenant_first_start_ms_p99": round(percentile(firsts, 99), 1),
               "tenant_all_done_ms_p99": round(percentile(lasts, 99), 1),
               "tenant_own_work_ms": round(SMALL_JOBS * percentile(runs, 50), 1)}
        log(f"fairness: {label}: small tenants wait p50 {row['small_wait_ms_p50']} ms, p99 "
            f"{row['small_wait_ms_p99']} ms (a job runs {row['small_run_ms_p50']} ms); a tenant's first job "
            f"starts p99 {row['tenant_first_start_ms_p99']} ms, all its jobs done p99 {row['tenant_all_done_ms_p99']} "
            f"ms; flood done at {row['flood_done_s']} s")
        rows.append(row)
    return rows


def _fill_small_into(bench: Bench, queue: str, n: int) -> None:
    """The small tenants' jobs in the shared queue, each naming its tenant (``t``)."""
    from echomq_gevent import Queue

    q = Queue(queue, connection=bench.url, prefix=PREFIX)
    try:
        for start in range(0, n, 1000):
            q.add_bulk([("small", {"i": i, "t": i // SMALL_JOBS}) for i in range(start, min(n, start + 1000))])
    finally:
        q.close()


def idle_case(bench: Bench, tenants: int, seconds: float, log: Any) -> Dict[str, Any]:
    bench.flush()
    assert bench.client is not None
    pipe = bench.client.pipeline(transaction=False)
    for i in range(tenants):  # queues that exist (as a Node Queue leaves them) and hold nothing
        pipe.hset(f"{PREFIX}:idle-{i:04d}:meta", "opts.maxLenEvents", 10000)
    pipe.execute()
    proc = _start(bench, {"url": bench.url, "layout": "family", "queues": [], "concurrency": 50,
                          "pattern": "idle-*", "drain_delay": 10})
    try:
        time.sleep(min(5.0, seconds))  # the first looks and waits settle
        watch = ProcWatch(proc.pid)
        snap0 = RedisSnapshot.take(bench.client)
        cpu0, t0 = watch.cpu_s(), time.monotonic()
        time.sleep(seconds)
        cpu1, t1 = watch.cpu_s(), time.monotonic()
        snap1 = RedisSnapshot.take(bench.client)
        conns = _connections(bench)
    finally:
        _stop(proc)
    row = {"tenants": tenants, "seconds": seconds, "worker_cpu_pct": round(100 * (cpu1 - cpu0) / (t1 - t0), 2),
           "redis_cpu_pct": round(100 * (snap1.cpu_s - snap0.cpu_s) / (t1 - t0), 2), "connections": conns}
    log(f"idle: {tenants} idle tenant queues: worker {row['worker_cpu_pct']} % of a core, Redis "
        f"{row['redis_cpu_pct']} %, {conns} connections")
    return row


def _machine() -> Dict[str, Any]:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu)
    except OSError:
        pass
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    return {"when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": commit, "cpu": cpu, "cpus": os.cpu_count(), "python": platform.python_version()}


def markdown(res: Dict[str, Any]) -> str:
    m = res["meta"]
    out = [f"# Pools bench ({m['when']}, {m['commit']})", "",
           f"{m['cpus']} CPUs ({m['cpu']}), Redis {m['redis']}, Python {m['python']}, load average "
           f"{m['load_before']} before and {m['load_after']} after. `python -m bench.pools`"
           + (" --quick" if m.get("quick") else "") + "."]
    if res["scale"]:
        out += _scale_markdown(res)
    if res["fairness"]:
        out += ["", f"## Fairness: one tenant floods, {SMALL_TENANTS} tenants add {SMALL_JOBS} each (jobs of 1 ms, "
                    "concurrency 50)", "",
                "| layout | flood | small jobs' wait p50 ms | p99 ms | max ms | a job runs (p50 ms) | a tenant's first "
                "job starts, p99 ms | a tenant's jobs all done, p99 ms | flood done (s) |",
                "|---|---|---|---|---|---|---|---|---|"]
        for r in res["fairness"]:
            out.append(f"| {r['case']} | {r['flood']:,} | {r['small_wait_ms_p50']} | {r['small_wait_ms_p99']} | "
                       f"{r['small_wait_ms_max']} | {r['small_run_ms_p50']} | {r.get('tenant_first_start_ms_p99')} | "
                       f"{r.get('tenant_all_done_ms_p99')} | {r['flood_done_s']} |")
    i = res["idle"]
    if i is not None:
        out += ["", "## Idle tenants", "",
                f"{i['tenants']:,} tenant queues that exist and hold nothing, a pool over `idle-*`: the worker "
                f"process used {i['worker_cpu_pct']} % of a core and Redis {i['redis_cpu_pct']} % over "
                f"{i['seconds']:.0f} s, with {i['connections']} connections (the bench's own excluded)."]
    out += redis_markdown(res.get("redis"))
    return "\n".join(out) + "\n"


def _scale_markdown(res: Dict[str, Any]) -> List[str]:
    out = ["", "## Scale: one budget of 100 slots over 1, 10, 100 and 1,000 queues", "",
           "Every layout once a round, ours rotated among themselves, then Node's (run right after Node's, our "
           "one queue was slower); a round's ratio is against the one queue of the "
           "same round (ours for ours, Node's for Node's: the machine's speed drifts between rounds), the row "
           "gives the median of those. CPU per job: the medians of the rounds. The references: the layout "
           "without pools (a Worker per queue, the 100 slots split evenly) and BullMQ's own Worker (Node) on one "
           "queue and one per queue, each with its share of the 100.", "",
           "| layout | jobs | jobs/s (median) | × one queue, median of rounds | rounds: jobs/s | rounds: × one "
           "queue | worker µs/job | Redis µs/job | one queue's CPU per job ÷ this one's | script calls/job | "
           "connections |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    by_case = {r["case"]: r for r in res["scale"]}
    for r in res["scale"]:
        base_row = by_case.get(r.get("base", ONE_QUEUE), res["scale"][0])
        base_cpu = base_row["worker_us_per_job"] + base_row["redis_us_per_job"]
        rounds = ", ".join(f"{x:,}" for x in r.get("rounds", []))
        cpu = r["worker_us_per_job"] + r["redis_us_per_job"]
        ratio = r.get("x_one_queue_median", r["jobs_per_s"] / max(1, base_row["jobs_per_s"]))
        ratios = ", ".join(f"{x:.2f}" for x in r.get("x_one_queue_rounds", []))
        out.append(f"| {r['case']} | {r['jobs']:,} | {r['jobs_per_s']:,} | {ratio:.2f} | {rounds} | {ratios} | "
                   f"{r['worker_us_per_job']} | {r['redis_us_per_job']} | {base_cpu / max(cpu, 0.1):.2f} | "
                   f"{r.get('script_calls_per_job')} | {r['connections']} |")
    if res.get("node_skipped"):
        out += ["", f"The Node layouts did not run: {res['node_skipped']}."]
    return out


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.pools", description=__doc__.split("\n")[0])
    p.add_argument("--driver", help=argparse.SUPPRESS)
    p.add_argument("--quick", action="store_true", help="tiny N: a smoke run")
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--jobs", type=int, default=None, help="the scale case's jobs (default 100000)")
    p.add_argument("--flood", type=int, default=None, help="the fairness case's flood (default 50000)")
    p.add_argument("--tenants", type=int, default=None, help="the idle case's tenant queues (default 1000)")
    p.add_argument("--rounds", type=int, default=None, help="rounds of the scale case (default 5; --quick 1)")
    p.add_argument("--only", default="scale,fairness,idle,redis", help="which cases (default all four)")
    args = p.parse_args(argv)
    if args.driver:
        _driver(json.loads(args.driver))
        return 0
    # 100,000: at some 35,000 jobs/s a run of 20,000 lasted 0.6 s, and the start and the
    # tail of a run moved its figure more than the layouts did
    n = args.jobs or (2000 if args.quick else 100000)
    flood = args.flood or (2000 if args.quick else 50000)
    tenants = args.tenants or (100 if args.quick else 1000)
    idle_s = 3.0 if args.quick else 10.0
    load_before = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    no_node = node_missing()
    if no_node:
        sys.stderr.write(f"bench pools: the Node layouts are skipped: {no_node}\n")
    with Bench() as bench:
        only = set(args.only.split(","))
        rounds = args.rounds or (1 if args.quick else 5)
        res: Dict[str, Any] = {
            "scale": scale_case(bench, n, 100, bench.log, rounds, with_node=not no_node) if "scale" in only else [],
            "node_skipped": no_node,
            "fairness": fairness_case(bench, flood, bench.log) if "fairness" in only else [],
            "idle": idle_case(bench, tenants, idle_s, bench.log) if "idle" in only else None,
            "redis": redis_alone_case(bench, n, rounds, bench.log) if "redis" in only else None}
        meta = _machine()
        meta.update(redis=bench.redis_version, quick=args.quick, load_before=load_before,
                    load_after=", ".join(f"{x:.2f}" for x in os.getloadavg()))
        res["meta"] = meta
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "pools.json"), "w", encoding="utf-8") as fh:
        json.dump(res, fh, indent=2, sort_keys=True)
    with open(os.path.join(args.out, "pools.md"), "w", encoding="utf-8") as fh:
        fh.write(markdown(res))
    if not args.quick and res["scale"] and res["fairness"] and res["idle"]:
        _history(os.path.join(args.out, "history.md"), res)
    print(markdown(res))
    return 0


def from_run(args: argparse.Namespace, only: List[str]) -> Optional[int]:
    """``python -m bench.run --only pools[,...]``: run this bench (``--quick`` and ``--out``
    carried over) and take ``pools`` out of ``only``; its exit code when nothing else was
    asked, else None (the other groups run)."""
    if "pools" not in only:
        return None
    only.remove("pools")
    rc = main((["--quick"] if args.quick else []) + ["--out", args.out])
    return rc if not only else None


def _history(path: str, res: Dict[str, Any]) -> None:
    m = res["meta"]
    scale = {r["queues"]: r["jobs_per_s"] for r in res["scale"] if r["case"].startswith("pool")}
    node = {r["queues"]: r for r in res["scale"] if r["case"].startswith("Node")}
    node_text = (f"; Node, a Worker per queue: 100 queues {node[100]['x_one_queue_median']:.2f} of its one queue"
                 if 100 in node and "x_one_queue_median" in node[100] else "")
    base = res["scale"][0]["jobs_per_s"]
    hundred = next((r for r in res["scale"] if r["queues"] == 100 and r["case"].startswith("pool")), {})
    thousand = {r["case"]: r.get("x_one_queue_median", 0) for r in res["scale"] if r["queues"] == 1000}
    thousand_text = "".join(f"; {case} {x:.2f} of one queue" for case, x in thousand.items())
    fair = {r["case"]: r["small_wait_ms_p99"] for r in res["fairness"]}
    alone = {r["source"]: r["x_redis"] for r in (res.get("redis") or {}).get("rows", []) if r["queues"] == 100}
    alone_text = "".join(f"; Redis alone over 100 queues, {src}'s scripts {x:.2f}x one queue's CPU a job"
                         for src, x in alone.items())
    text = (f"| {m['when']} | {m['commit']} | {platform.machine()}, {m['cpus']} CPUs, {m['cpu']} | {m['redis']} | "
            f"{len(res['scale'][0].get('rounds', [1]))} | "
            f"{m['load_before']} | pools: jobs/s over 1, 10, 100 queues {scale.get(1)}, {scale.get(10)}, "
            f"{scale.get(100)} (one queue without a pool {base}{node_text}{thousand_text}); small tenants' wait p99 ms "
            + ", ".join(f"{k} {v}" for k, v in fair.items())
            + f"; {res['idle']['tenants']} idle tenants {res['idle']['worker_cpu_pct']} % of a core{alone_text} | "
            f"{hundred.get('x_one_queue_median', (scale.get(100) or 0) / max(1, base)):.2f} |\n")
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text)


if __name__ == "__main__":
    sys.exit(main())

"""The scale section of the bench (``python -m bench.run --only scale``): how the cost of our
worker and of BullMQ (Node) 6.7.0 grows with the work, side by side in one run.

Cases (issue 30; each for every implementation asked, one round each, same Redis):

- **backlog**: N waiting no-op jobs (default 1e3, 1e5, 1e6) at concurrency 100 through
  :meth:`bench.harness.Bench.run_worker` with the queue filled by ``scale_fill.lua``
  (straight into Redis, in the shape an add leaves; not timed) instead of Node's
  ``addBulk``: jobs/s, worker and Redis CPU per job, and Redis memory per waiting job
  (``used_memory`` delta over the fill / N; the same for every worker, it is what lands).
- **admin**: on a queue of N jobs (default 1e5): ``get_job_counts``, three ``get_jobs``
  pages of 100 (head, middle, tail of the completed set), ``clean`` of every completed job,
  ``retry_jobs`` of every failed job, ``drain`` and ``obliterate`` of N waiting jobs, each
  timed by the driver (``scale_admin_*``), with the longest Redis command during it read from
  ``SLOWLOG`` (every command of 1 ms or more is logged).
- **delayed**: N delayed jobs (default 1e5) due over S seconds (default 60) and an idle
  worker at concurrency 100 that records when each starts: lateness p50/p99/max of the
  start against the due time written in the job.
- **idle queues**: one worker process on Q queues (default 200) with nothing to do:
  connections to Redis (``CLIENT LIST``), the process's CPU over 10 s, its RSS, and pick-up
  latency of jobs added one at a time to one of the queues.

Writes ``scale.md`` and ``scale.json`` into ``--out``; a full run appends one row to
``history.md``.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any, Callable, Dict, List, Optional

from .harness import PREFIX, Bench, BenchError, ProcWatch, percentile
from .impls import DRIVERS, Impl, node_binary, node_producer_cmd, ours_python
from echomq_gevent.protocol.keys import QueueKeys

HERE = os.path.dirname(os.path.abspath(__file__))
FILL_CHUNK = 5000
#: SLOWLOG threshold during an admin call (µs): every command that took 1 ms or more
SLOWLOG_US = 1000
#: the target of issue 30: no command of ours longer than this during an admin call
LONGEST_TARGET_MS = 50.0


def sizes(quick: bool, backlogs: Optional[List[int]] = None, admin_n: Optional[int] = None) -> Dict[str, Any]:
    """The case sizes: tiny with ``quick`` (the smoke test), else issue 30's."""
    if quick:
        return {"backlogs": backlogs or [200, 1000], "admin_n": admin_n or 2000, "delayed_n": 300,
                "delayed_span_s": 2.0, "queues": 20, "idle_s": 1.0, "probes": 5}
    return {"backlogs": backlogs or [1000, 100000, 1000000], "admin_n": admin_n or 100000,
            "delayed_n": 100000, "delayed_span_s": 60.0, "queues": 200, "idle_s": 10.0, "probes": 50}


# -- the fill --------------------------------------------------------------------------------
class Filler:
    """Loads ``scale_fill.lua`` once and writes N jobs into one state, in chunks."""

    def __init__(self, bench: Bench) -> None:
        assert bench.client is not None
        self.client = bench.client
        with open(os.path.join(HERE, "scale_fill.lua"), encoding="utf-8") as fh:
            self.sha = self.client.script_load(fh.read())

    def fill(self, keys: QueueKeys, state: str, n: int, ts: Optional[int] = None,
             due0: float = 0.0, step_ms: float = 0.0) -> None:
        ts = int(time.time() * 1000) - 1000 if ts is None else ts
        target = {"wait": keys.wait, "completed": keys.completed, "failed": keys.failed,
                  "delayed": keys.delayed}[state]
        pipe = self.client.pipeline(transaction=False)
        for start in range(0, n, FILL_CHUNK):
            count = min(FILL_CHUNK, n - start)
            pipe.evalsha(self.sha, 3, target, keys.id, keys.marker, keys.base, start + 1, count, state, ts,
                         due0 + start * step_ms, step_ms)
            if len(pipe) >= 8:
                pipe.execute()
        pipe.execute()

    def used_memory(self) -> int:
        return int(self.client.info("memory")["used_memory"])


# -- backlog ---------------------------------------------------------------------------------
def measure_backlog(bench: Bench, filler: Filler, impl: Impl, n: int, concurrency: int = 100) -> Dict[str, Any]:
    mem: Dict[str, int] = {}

    def fill(queue: str, keys: QueueKeys) -> None:
        assert bench.client is not None
        bench.client.hset(keys.meta, "paused", 1)
        before = filler.used_memory()
        filler.fill(keys, "wait", n)
        mem["bytes"] = filler.used_memory() - before

    row = bench.run_worker(impl, n, concurrency, "noop", fill=fill, timeout=1800)
    if row["completed"] != n or row["failed"]:
        raise BenchError(f"{impl.key} backlog {n}: {row['completed']} completed, {row['failed']} failed")
    row["memory_per_waiting_job_b"] = mem["bytes"] / n
    row["commands"] = dict(sorted(row["commands"].items(), key=lambda kv: -kv[1])[:12])
    return row


# -- admin -----------------------------------------------------------------------------------
def _admin_cmd(impl: Impl) -> List[str]:
    if impl.key == "node":
        return [node_binary(), os.path.join(DRIVERS, "scale_admin_node.js")]
    return [ours_python(), os.path.join(DRIVERS, "scale_admin_ours.py")]


def _slowlog_max(bench: Bench) -> Dict[str, Any]:
    """The longest command in SLOWLOG since the reset: ms, what it was, how many over 50 ms."""
    assert bench.client is not None
    entries = bench.client.slowlog_get(100000)
    mine = [e for e in entries if not str(e.get("command", "")).lower().startswith(("slowlog", "config"))]
    if not mine:
        return {"longest_ms": 0.0, "longest_cmd": "", "over_target": 0, "slow_cmds": 0}
    top = max(mine, key=lambda e: e["duration"])
    return {"longest_ms": top["duration"] / 1000.0, "longest_cmd": _script_name(top.get("command", b"")),
            "over_target": sum(1 for e in mine if e["duration"] / 1000.0 > LONGEST_TARGET_MS),
            "slow_cmds": len(mine)}


def _script_name(cmd: Any) -> str:
    """What a SLOWLOG command was: our script's name for an EVALSHA of ours, the first line
    of the script's comment for Node's EVAL, else the command itself (shortened)."""
    text = cmd.decode("utf-8", "replace") if isinstance(cmd, bytes) else str(cmd)
    parts = text.split(" ", 2)
    if parts[0].lower() == "evalsha" and len(parts) > 1:
        from echomq_gevent.protocol.library import library

        names = {sha: name for name, sha in library().shas.items()}
        if parts[1] in names:
            return f"EVALSHA {names[parts[1]]}"
    if parts[0].lower() == "eval" and len(parts) > 1:
        body = text[5:]
        for line in body.splitlines()[1:4]:
            line = line.strip()
            if line:
                return f"EVAL (Node: {line[:60]})"
    return text[:80]


def measure_admin(bench: Bench, filler: Filler, impl: Impl, n: int) -> List[Dict[str, Any]]:
    """Every admin operation of the module docstring on ``n`` jobs; one row each."""
    assert bench.client is not None
    client = bench.client
    queue = "scaleadmin"
    keys = QueueKeys(queue, PREFIX)
    client.config_set("slowlog-max-len", 100000)
    page = min(100, n)
    plan = [  # (label, fill state or None to keep the last fill, request)
        ("get_job_counts", "completed", {"op": "get_job_counts"}),
        ("get_jobs page 1", None, {"op": "get_jobs", "start": 0, "end": page - 1}),
        ("get_jobs middle page", None, {"op": "get_jobs", "start": n // 2, "end": n // 2 + page - 1}),
        ("get_jobs last page", None, {"op": "get_jobs", "start": n - page, "end": n - 1}),
        ("clean completed", None, {"op": "clean"}),
        ("retry_jobs failed", "failed", {"op": "retry_jobs"}),
        ("drain wait", "wait", {"op": "drain"}),
        ("obliterate", "wait", {"op": "obliterate"}),
    ]
    rows: List[Dict[str, Any]] = []
    bench.flush()
    proc = bench.start_driver(_admin_cmd(impl), {"url": bench.url, "queue": queue, "prefix": PREFIX}, stdin=True)
    try:
        assert proc.stdin is not None
        for label, state, req in plan:
            if state is not None:
                client.flushall()
                filler.fill(keys, state, n)
            calls0 = client.info("commandstats")
            client.config_set("slowlog-log-slower-than", SLOWLOG_US)
            client.slowlog_reset()
            proc.stdin.write(json.dumps(req) + "\n")
            proc.stdin.flush()
            answer = json.loads(bench.read_line(proc, 1800))
            client.config_set("slowlog-log-slower-than", 10000)
            slow = _slowlog_max(bench)
            calls1 = client.info("commandstats")
            scripts = sum(int(v["calls"]) - int(calls0.get(k, {}).get("calls", 0)) for k, v in calls1.items()
                          if k in ("cmdstat_evalsha", "cmdstat_eval"))
            left = client.llen(keys.wait) + client.zcard(keys.completed) + client.zcard(keys.failed)
            rows.append({"impl": impl.key, "op": label, "n": n, "ms": float(answer["ms"]),
                         "script_calls": scripts, "jobs_left": left, **slow})
            bench.log(f"  admin {label:<22} {impl.key:<5} {answer['ms']:9.1f} ms, {scripts} script calls, "
                      f"longest command {slow['longest_ms']:.1f} ms")
    finally:
        Bench.reap(proc)
    return rows


# -- delayed ---------------------------------------------------------------------------------
def measure_delayed(bench: Bench, filler: Filler, impl: Impl, n: int, span_s: float,
                    concurrency: int = 100) -> Dict[str, Any]:
    import tempfile

    bench.flush()
    queue = bench.new_queue()
    keys = QueueKeys(queue, PREFIX)
    report = tempfile.NamedTemporaryFile(prefix="echomq-bench-", suffix=".json", delete=False)
    report.close()
    cfg = {"url": bench.url, "queue": queue, "prefix": PREFIX, "concurrency": concurrency,
           "mode": "latency", "sleep_ms": 0, "report": report.name}
    proc = bench.start_driver(impl.worker_cmd(), cfg)
    try:
        bench.wait_blocked_client(15, proc)
        now = time.time() * 1000.0
        # the first job is due once the fill is surely over (about 5 µs a job here)
        due0 = now + 1000.0 + n * 0.02
        filler.fill(keys, "delayed", n, ts=int(now), due0=due0, step_ms=span_s * 1000.0 / n)
        done, failed, _ = bench.wait_finished(keys, n, span_s + 600, proc)
        rep = bench.stop_driver(proc, report.name)
    finally:
        Bench.reap(proc)
        os.unlink(report.name)
    late = sorted(float(x) for x in rep.get("latencies_ms", []))
    return {"impl": impl.key, "n": n, "span_s": span_s, "completed": done, "failed": failed,
            "samples": len(late), "p50_ms": percentile(late, 50), "p99_ms": percentile(late, 99),
            "max_ms": late[-1] if late else float("nan")}


# -- idle queues -----------------------------------------------------------------------------
def measure_idle(bench: Bench, impl: Impl, queues: int, idle_s: float, probes: int) -> Dict[str, Any]:
    import tempfile

    assert bench.client is not None
    bench.flush()
    base = bench.new_queue()
    names = [f"{base}-{i}" for i in range(queues)]
    report = tempfile.NamedTemporaryFile(prefix="echomq-bench-", suffix=".json", delete=False)
    report.close()
    cfg = {"url": bench.url, "queue": names[0], "queues": names, "prefix": PREFIX, "concurrency": 1,
           "mode": "latency", "sleep_ms": 0, "report": report.name}
    proc = bench.start_driver(impl.worker_cmd(), cfg, ready_timeout=120)
    feeder: Optional[subprocess.Popen] = None
    try:
        # settled: every queue's worker blocked on its marker (or 10 s)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            blocked = sum(1 for c in bench.client.client_list() if "b" in c.get("flags", ""))
            if blocked >= queues:
                break
            time.sleep(0.1)
        time.sleep(1.0)
        watch = ProcWatch(proc.pid)
        own_id = bench.client.client_id()
        conns = sum(1 for c in bench.client.client_list() if int(c["id"]) != own_id)
        cpu0, redis0 = watch.cpu_s(), _redis_cpu(bench)
        time.sleep(idle_s)
        cpu1, redis1 = watch.cpu_s(), _redis_cpu(bench)
        import psutil

        rss = psutil.Process(proc.pid).memory_info().rss / (1024.0 * 1024.0)
        target = names[len(names) // 2]
        fcfg = {"url": bench.url, "queue": target, "prefix": PREFIX, "mode": "feed", "n": probes,
                "interval_ms": 50}
        feeder = bench.start_driver(node_producer_cmd(), fcfg, stdin=True)
        assert feeder.stdin is not None
        feeder.stdin.write("GO\n")
        feeder.stdin.flush()
        bench.wait_finished(QueueKeys(target, PREFIX), probes, 120, proc)
        feeder.wait(60)
        rep = bench.stop_driver(proc, report.name, timeout=120)
    finally:
        Bench.reap(proc)
        Bench.reap(feeder)
        os.unlink(report.name)
    lat = sorted(float(x) for x in rep.get("latencies_ms", []))
    return {"impl": impl.key, "queues": queues, "connections": conns,
            "idle_cpu_pct": (cpu1 - cpu0) * 100.0 / idle_s, "redis_idle_cpu_pct": (redis1 - redis0) * 100.0 / idle_s,
            "rss_mb": rss, "idle_s": idle_s, "probes": len(lat),
            "p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99)}


def _redis_cpu(bench: Bench) -> float:
    assert bench.client is not None
    cpu = bench.client.info("cpu")
    return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])


# -- the whole section -----------------------------------------------------------------------
def run_scale(bench: Bench, impls: List[Impl], size: Dict[str, Any], log: Callable[[str], None],
              failures: List[str], groups: Optional[List[str]] = None) -> Dict[str, Any]:
    """Every case of the section for every implementation (ours and node only); returns
    ``{"backlog": [...], "admin": [...], "delayed": [...], "idle": [...]}`` with the
    1-minute load average before each row (``load1``). A case that fails is named in
    ``failures`` and left out."""
    impls = [i for i in impls if i.key in ("ours", "node")]
    filler = Filler(bench)
    out: Dict[str, List[Dict[str, Any]]] = {"backlog": [], "admin": [], "delayed": [], "idle": []}
    groups = groups or list(out)

    def attempt(group: str, label: str, fn: Callable[[], Any]) -> None:
        load = round(os.getloadavg()[0], 2)
        try:
            res = fn()
        except Exception as exc:  # one failed case must not lose the others
            failures.append(f"scale {group} {label}: {exc}")
            log(f"bench: FAILED scale {group} {label}: {exc}")
            return
        for row in res if isinstance(res, list) else [res]:
            row["load1"] = load
            out[group].append(row)

    if "backlog" in groups:
        for n in size["backlogs"]:
            for impl in impls:
                attempt("backlog", f"{n} {impl.key}", lambda impl=impl, n=n: measure_backlog(bench, filler, impl, n))
                if out["backlog"] and out["backlog"][-1]["impl"] == impl.key:
                    r = out["backlog"][-1]
                    log(f"  backlog {n:>8} {impl.key:<5} {r['jobs_per_s']:9,.0f} jobs/s, worker "
                        f"{r['worker_cpu_us_per_job']:.0f} µs/job, Redis {r['redis_cpu_us_per_job']:.0f} µs/job, "
                        f"{r['memory_per_waiting_job_b']:.0f} B/job")
    if "admin" in groups:
        for impl in impls:
            attempt("admin", impl.key, lambda impl=impl: measure_admin(bench, filler, impl, size["admin_n"]))
    if "delayed" in groups:
        for impl in impls:
            attempt("delayed", impl.key,
                    lambda impl=impl: measure_delayed(bench, filler, impl, size["delayed_n"], size["delayed_span_s"]))
            if out["delayed"] and out["delayed"][-1]["impl"] == impl.key:
                r = out["delayed"][-1]
                log(f"  delayed {impl.key:<5} late p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, "
                    f"max {r['max_ms']:.1f} ms")
    if "idle" in groups:
        for impl in impls:
            attempt("idle", impl.key, lambda impl=impl: measure_idle(bench, impl, size["queues"], size["idle_s"],
                                                           size["probes"]))
            if out["idle"] and out["idle"][-1]["impl"] == impl.key:
                r = out["idle"][-1]
                log(f"  idle {r['queues']} queues {impl.key:<5} {r['connections']} connections, "
                    f"{r['idle_cpu_pct']:.2f} % CPU, RSS {r['rss_mb']:.0f} MB, pick-up p99 {r['p99_ms']:.1f} ms")
    return out


def _f(v: Any, nd: int = 0) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "–"
    return f"{v:,.{nd}f}"


def markdown(res: Dict[str, Any], meta: Dict[str, Any]) -> str:
    """``scale.md``: one table per case, ours beside Node."""
    lines = [
        "# Scale: how the cost grows (ours and BullMQ Node 6.7.0, same run)", "",
        f"{meta['date']} · commit {meta['commit']} · {meta['machine']} · {meta['cpu']} · "
        f"Redis {meta['redis']} · Python {meta['python']} · Node {meta['node']} · "
        f"load average (1 min) {meta.get('load1_min', '?')}–{meta.get('load1_max', '?')}"
        + (" · **quick run (tiny sizes)**" if meta.get("quick") else ""),
        "", "One round per row. How to run it and what each case does: `docs/performance.md`, "
        "`bench/scale.py`.", "",
    ]
    if res["backlog"]:
        node = {r["n"]: r for r in res["backlog"] if r["impl"] == "node"}
        lines += ["## Backlog: N waiting no-op jobs, concurrency 100", "",
                  "| waiting jobs | impl | jobs/s | × Node | worker CPU µs/job | Redis CPU µs/job | "
                  "Redis cmds/job | Redis memory B/waiting job | load |", "|" + "---|" * 9]
        for r in res["backlog"]:
            ratio = r["jobs_per_s"] / node[r["n"]]["jobs_per_s"] if r["impl"] == "ours" and r["n"] in node else None
            lines.append(f"| {r['n']:,} | {r['impl']} | {_f(r['jobs_per_s'])} | {_f(ratio, 2)} | "
                         f"{_f(r['worker_cpu_us_per_job'])} | {_f(r['redis_cpu_us_per_job'])} | "
                         f"{_f(r['redis_cmds_per_job'], 1)} | {_f(r['memory_per_waiting_job_b'])} | {r['load1']} |")
        lines.append("")
    if res["admin"]:
        n = res["admin"][0]["n"]
        lines += [f"## Admin calls on {n:,} jobs", "",
                  f"Longest command: the slowest Redis command during the call (`SLOWLOG`, all of 1 ms "
                  f"or more); the target is {LONGEST_TARGET_MS:g} ms.", "",
                  "| call | impl | time ms | script calls | longest command ms | commands over 50 ms | "
                  "the longest command |", "|" + "---|" * 7]
        for r in res["admin"]:
            lines.append(f"| {r['op']} | {r['impl']} | {_f(r['ms'], 1)} | {r['script_calls']} | "
                         f"{_f(r['longest_ms'], 1)} | {r['over_target']} | `{r['longest_cmd'][:60]}` |")
        lines.append("")
    if res["delayed"]:
        r0 = res["delayed"][0]
        lines += [f"## {r0['n']:,} delayed jobs due over {r0['span_s']:g} s, concurrency 100", "",
                  "Lateness: the processor's start minus the due time in the job.", "",
                  "| impl | jobs | p50 ms | p99 ms | max ms | load |", "|" + "---|" * 6]
        for r in res["delayed"]:
            lines.append(f"| {r['impl']} | {r['samples']:,} | {_f(r['p50_ms'], 1)} | {_f(r['p99_ms'], 1)} | "
                         f"{_f(r['max_ms'], 1)} | {r['load1']} |")
        lines.append("")
    if res["idle"]:
        r0 = res["idle"][0]
        lines += [f"## {r0['queues']} idle queues in one worker process (concurrency 1 each)", "",
                  f"CPU over {r0['idle_s']:g} s with nothing to do; pick-up: a job added every 50 ms to one "
                  "queue, enqueue to processor start.", "",
                  "| impl | connections | worker CPU % of a core | Redis CPU % | RSS MB | pick-up p50 ms | "
                  "pick-up p99 ms | load |", "|" + "---|" * 8]
        for r in res["idle"]:
            lines.append(f"| {r['impl']} | {r['connections']} | {_f(r['idle_cpu_pct'], 2)} | "
                         f"{_f(r['redis_idle_cpu_pct'], 2)} | {_f(r['rss_mb'])} | {_f(r['p50_ms'], 2)} | "
                         f"{_f(r['p99_ms'], 2)} | {r['load1']} |")
        lines.append("")
    if meta.get("failures"):
        lines += ["Failed: " + "; ".join(meta["failures"]), ""]
    lines += ["Not measured yet: 1e5 prioritized jobs over 1,000 priorities, 1e4 job schedulers, "
              "payloads of 100 KB and 1 MB, dashboard pages.", ""]
    return "\n".join(lines)


def history_row(res: Dict[str, Any], meta: Dict[str, Any]) -> str:
    """One row for ``history.md``'s ratio table: the largest backlog's ratio to Node, and the
    longest admin command of ours."""
    big = max((r["n"] for r in res["backlog"]), default=0)
    by = {r["impl"]: r for r in res["backlog"] if r["n"] == big}
    ratio = (by["ours"]["jobs_per_s"] / by["node"]["jobs_per_s"]) if "ours" in by and "node" in by else None
    longest = max((r["longest_ms"] for r in res["admin"] if r["impl"] == "ours"), default=None)
    what = (f"scale: backlog {big:,} jobs/s" + (f" ({by['ours']['jobs_per_s']:,.0f} against "
                                                 f"{by['node']['jobs_per_s']:,.0f})" if ratio else "")
            + (f"; longest admin command of ours {longest:.1f} ms" if longest is not None else ""))
    machine = f"{meta['machine']}, {meta['cpu']}"
    return (f"| {meta['date']} | {meta['commit']} | {machine} | {meta['redis']} | 1 | "
            f"{meta.get('load1_min', '?')}–{meta.get('load1_max', '?')} | {what} | "
            f"{_f(ratio, 2) if ratio else '–'} |\n")

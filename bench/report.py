"""Turning measured runs into the summary, the Markdown table, the JSON file and the chart.

Called by :mod:`bench.run` once all rounds are done. Pure functions over the row dicts that
:class:`bench.harness.Bench` returns (plus ``case`` and ``round`` keys added by the runner).
"""
from __future__ import annotations

import json
import math
import os
import statistics
from typing import Any, Dict, List, Optional, Sequence

#: implementations in display order; ratios are taken against the two references
ORDER = ("ours", "node", "pyref")
REFERENCES = ("node", "pyref")
LABELS = {"ours": "echomq-gevent", "node": "BullMQ Node 6.7.0", "pyref": "bullmq Python 3.4.4"}

#: columns of the throughput table, in order (the smoke test checks these names)
THROUGHPUT_COLUMNS = ("case", "implementation", "jobs/s median", "jobs/s min–max", "× node",
                      "× pyref", "Redis cmds/job", "scripts/job", "Redis CPU µs/job",
                      "worker CPU µs/job", "peak RSS MB", "other work % CPU")
LATENCY_COLUMNS = ("case", "implementation", "p50 ms", "p99 ms", "max ms", "Redis cmds/job",
                   "worker CPU µs/job", "peak RSS MB")


def _median(values: Sequence[float]) -> float:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(vals) if vals else float("nan")


def summarize(runs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One summary row per (case, implementation): medians over rounds, min–max of jobs/s,
    and the ratio of this implementation's median jobs/s to each reference's, same run."""
    cases: List[str] = []
    for r in runs:
        if r["case"] not in cases:
            cases.append(r["case"])
    out: List[Dict[str, Any]] = []
    for case in cases:
        aside = [r for r in runs if r["case"] == case and r.get("set_aside")]
        rows = [r for r in runs if r["case"] == case and not r.get("set_aside")]
        if not rows:
            continue
        kind = rows[0]["kind"]
        by_impl: Dict[str, List[Dict[str, Any]]] = {}
        for r in rows:
            by_impl.setdefault(r["impl"], []).append(r)
        medians = {k: _median([r["jobs_per_s"] for r in v]) for k, v in by_impl.items()
                   if kind != "latency"}
        for impl in [k for k in ORDER if k in by_impl] + [k for k in by_impl if k not in ORDER]:
            rs = by_impl[impl]
            s: Dict[str, Any] = {"case": case, "kind": kind, "impl": impl, "rounds": len(rs),
                                 "set_aside": sum(1 for r in aside if r["impl"] == impl)}
            for key in ("redis_cmds_per_job", "redis_scripts_per_job", "redis_cpu_us_per_job",
                        "worker_cpu_us_per_job"):
                if key in rs[0]:
                    s[key] = _median([r[key] for r in rs])
            s["peak_rss_mb"] = max(r["peak_rss_mb"] for r in rs)
            others = [r["other_cpu_pct"] for r in rs if r.get("other_cpu_pct") is not None]
            if others:
                s["other_cpu_pct_min"], s["other_cpu_pct_max"] = min(others), max(others)
            if kind == "latency":
                for key in ("p50_ms", "p99_ms", "max_ms"):
                    s[key] = _median([r[key] for r in rs])
                s["samples"] = sum(r["samples"] for r in rs)
            else:
                jps = [r["jobs_per_s"] for r in rs]
                s["jobs_per_s"] = medians[impl]
                s["jobs_per_s_min"] = min(jps)
                s["jobs_per_s_max"] = max(jps)
                for ref in REFERENCES:
                    if ref in medians and medians[ref] > 0:
                        s[f"ratio_{ref}"] = medians[impl] / medians[ref]
            out.append(s)
    return out


def _fmt(v: Any, digits: int = 0) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return str(v)


def _others(s: Dict[str, Any]) -> str:
    if s.get("other_cpu_pct_max") is None:
        return "–"
    text = f"{_fmt(s['other_cpu_pct_min'])}–{_fmt(s['other_cpu_pct_max'])}"
    if s.get("set_aside"):
        text += f" ({s['set_aside']} set aside)"
    return text


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def markdown(summary: List[Dict[str, Any]], meta: Dict[str, Any]) -> str:
    """The Markdown report (``results.md``): a header with the run's conditions and two tables."""
    lines = [
        "# Benchmark results",
        "",
        f"Run {meta.get('date', '?')} at commit {meta.get('commit', '?')} on {meta.get('machine', '?')} "
        f"({meta.get('cpu', '?')}); Redis {meta.get('redis', '?')}, "
        f"Python {meta.get('python', '?')}, Node {meta.get('node', '?')}; "
        f"{meta.get('rounds', '?')} round(s) per case, implementations alternating"
        + (" (quick mode: tiny N, not representative)" if meta.get("quick") else "") + "."
        + (f" Load average (1 min) {meta['load1_min']:.1f}–{meta['load1_max']:.1f} during the runs "
           "(other work on the machine makes the spread wider)." if meta.get("load1_max") is not None else "")
        + (f" echomq-gevent ran as: {meta['ours_environment']}." if meta.get("ours_environment") else ""),
        "",
        "Jobs/s: N / (last `finishedOn` − first `processedOn`). Ratios: this row's median over the "
        "reference's median from the same run. Redis commands count every call, including those "
        "made inside Lua scripts; scripts/job counts EVALSHA/EVAL calls alone. Enqueue rows measure "
        "the producer (its CPU in the worker CPU column). Other work: the share of the machine's "
        "CPU time (all cores) that went to processes other than the worker, Redis and the harness "
        "while a round ran, min–max over the rounds (Linux `/proc/stat`); a round that competed "
        "with other work is slower for that reason alone"
        + (f"; a worker round in which it passed {meta['max_other_pct']:g} % was set aside and run again "
           f"(at most {meta['reruns']} time{'' if meta['reruns'] == 1 else 's'} a round; the last try counts), "
           "and how many were is "
           "in brackets (the set-aside rounds are in results.json, `set_aside`)."
           if meta.get("max_other_pct") is not None and meta["max_other_pct"] < 100 and meta.get("reruns")
           else "."),
        "",
        _row(THROUGHPUT_COLUMNS),
        _row(["---"] * len(THROUGHPUT_COLUMNS)),
    ]
    for s in summary:
        if s["kind"] == "latency":
            continue
        lines.append(_row([
            s["case"], LABELS.get(s["impl"], s["impl"]), _fmt(s["jobs_per_s"]),
            f"{_fmt(s['jobs_per_s_min'])}–{_fmt(s['jobs_per_s_max'])}",
            _fmt(s.get("ratio_node"), 2), _fmt(s.get("ratio_pyref"), 2),
            _fmt(s.get("redis_cmds_per_job"), 1), _fmt(s.get("redis_scripts_per_job"), 2),
            _fmt(s.get("redis_cpu_us_per_job"), 1), _fmt(s.get("worker_cpu_us_per_job"), 0),
            _fmt(s.get("peak_rss_mb"), 1), _others(s),
        ]))
    lat = [s for s in summary if s["kind"] == "latency"]
    if lat:
        lines += [
            "",
            "Pickup latency at low load: enqueue (Node `add`, stamped just before the call) to "
            "processor start, one job at a time into an idle worker. Redis cmds/job here include the add.",
            "",
            _row(LATENCY_COLUMNS),
            _row(["---"] * len(LATENCY_COLUMNS)),
        ]
        for s in lat:
            lines.append(_row([
                s["case"], LABELS.get(s["impl"], s["impl"]), _fmt(s["p50_ms"], 2), _fmt(s["p99_ms"], 2),
                _fmt(s["max_ms"], 2), _fmt(s.get("redis_cmds_per_job"), 1),
                _fmt(s.get("worker_cpu_us_per_job"), 0), _fmt(s.get("peak_rss_mb"), 1),
            ]))
    return "\n".join(lines) + "\n"


HISTORY_HEADER = ("# Ratio history\n\nOne row per `python -m bench.run` (not `--quick`): median jobs/s of "
                  "echomq-gevent over BullMQ Node's, same run, implementations alternating. Absolute "
                  "figures and the other columns are in that run's `results.json`.\n\n"
                  "| date | commit | machine | Redis | rounds | load 1 min | case | × Node |\n"
                  "| --- | --- | --- | --- | --- | --- | --- | --- |\n")


def append_history(path: str, summary: List[Dict[str, Any]], meta: Dict[str, Any]) -> None:
    """Append this run's ratios to Node (one row per case) to ``history.md``."""
    rows = [s for s in summary if s["impl"] == "ours" and s.get("ratio_node") is not None]
    if not rows:
        return
    new = not os.path.exists(path)
    load = (f"{meta['load1_min']:.1f}–{meta['load1_max']:.1f}" if meta.get("load1_max") is not None else "?")
    machine = f"{meta.get('machine', '?')}, {meta.get('cpu', '?')}"
    with open(path, "a", encoding="utf-8") as fh:
        if new:
            fh.write(HISTORY_HEADER)
        for s in rows:
            fh.write(_row([meta.get("date", "?"), str(meta.get("commit", "?")), machine, str(meta.get("redis", "?")),
                           str(meta.get("rounds", "?")), load, s["case"], _fmt(s["ratio_node"], 2)]) + "\n")


def write_json(path: str, meta: Dict[str, Any], runs: List[Dict[str, Any]],
               summary: List[Dict[str, Any]]) -> None:
    def clean(o: Any) -> Any:
        if isinstance(o, float) and (math.isnan(o) or math.isinf(o)):
            return None
        if isinstance(o, dict):
            return {k: clean(v) for k, v in o.items()}
        if isinstance(o, list):
            return [clean(v) for v in o]
        return o

    with open(path, "w", encoding="utf-8") as fh:
        json.dump(clean({"meta": meta, "summary": summary, "runs": runs}), fh, indent=1)
        fh.write("\n")


def chart(path: str, summary: List[Dict[str, Any]], title: Optional[str] = None) -> None:
    """Grouped bars of median jobs/s (min–max as error bars) per case, one colour per
    implementation; a second panel for pickup latency p50/p99 when measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"ours": "#2b8a3e", "node": "#1c7ed6", "pyref": "#e8590c"}
    tput = [s for s in summary if s["kind"] != "latency"]
    lat = [s for s in summary if s["kind"] == "latency"]
    cases: List[str] = []
    for s in tput:
        if s["case"] not in cases:
            cases.append(s["case"])
    impls = [k for k in ORDER if any(s["impl"] == k for s in summary)]
    ncols = 2 if lat else 1
    fig, axes = plt.subplots(1, ncols, figsize=(12 if lat else 9, 4.8),
                             gridspec_kw={"width_ratios": [4, 1]} if lat else None)
    ax = axes[0] if lat else axes
    width = 0.8 / max(1, len(impls))
    for j, impl in enumerate(impls):
        xs, ys, lo, hi = [], [], [], []
        for i, case in enumerate(cases):
            row = next((s for s in tput if s["case"] == case and s["impl"] == impl), None)
            if row is None:
                continue
            xs.append(i + (j - (len(impls) - 1) / 2) * width)
            ys.append(row["jobs_per_s"])
            lo.append(row["jobs_per_s"] - row["jobs_per_s_min"])
            hi.append(row["jobs_per_s_max"] - row["jobs_per_s"])
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=LABELS.get(impl, impl),
               color=colors.get(impl))
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels(cases, rotation=20, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("jobs/s (log scale; median, min–max)")
    ax.set_title(title or "Throughput")
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8)
    if lat:
        lax = axes[1]
        for j, impl in enumerate(impls):
            row = next((s for s in lat if s["impl"] == impl), None)
            if row is None:
                continue
            lax.bar([j - 0.2], [row["p50_ms"]], 0.4, color=colors.get(impl), label="p50" if j == 0 else None)
            lax.bar([j + 0.2], [row["p99_ms"]], 0.4, color=colors.get(impl), alpha=0.5,
                    label="p99" if j == 0 else None)
        lax.set_xticks(range(len(impls)))
        lax.set_xticklabels([k for k in impls], fontsize=8)
        lax.set_ylabel("ms")
        lax.set_title("Pickup latency (p50, p99)")
        lax.grid(axis="y", alpha=0.3)
        lax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def git_commit(root: str) -> str:
    """The short commit of the tree at ``root`` ("?" outside git)."""
    import subprocess

    try:
        return subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def save_case(out: str, name: str, text: str, data: Dict[str, Any], history_rows: Sequence[str] = ()) -> None:
    """Write one bench case's results as the other cases do: ``<name>.md`` (``text``) and
    ``<name>.json`` (``data``) in ``out``, and ``history_rows`` (table rows, each
    ``| date | commit | machine | Redis | rounds | load | case | figure |``) appended to
    ``out/history.md``, whose ratio table is last."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"{name}.md"), "w", encoding="utf-8") as fh:
        fh.write(text)
    with open(os.path.join(out, f"{name}.json"), "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1)
        fh.write("\n")
    if history_rows:
        with open(os.path.join(out, "history.md"), "a", encoding="utf-8") as fh:
            for row in history_rows:
                fh.write(row.rstrip("\n") + "\n")

"""``python -m bench.run --profile``: where a Python worker spends its time on the hot path.

Runs one no-op throughput case (default: N=20,000, concurrency 100) for a Python
implementation (ours or pyref) while ``py-spy record --format raw`` samples the worker
subprocess, then folds the collapsed stacks into two tables: self time per function (where
the CPU actually goes) and inclusive time per function (which layer costs what). Writes
``profile-<impl>.md`` (``profile-<impl>-c<N>.md`` for another concurrency) into the output folder and the raw stacks into ``raw/profile-<impl>.txt``.
py-spy must be installed (``pip install py-spy``) and allowed to ptrace the worker.
"""
from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Tuple

from .harness import PREFIX, Bench, BenchError, ProcWatch, RedisSnapshot, command_delta
from .impls import Impl
from echomq_gevent.protocol.keys import QueueKeys


def fold(raw_path: str) -> Tuple[int, Dict[str, int], Dict[str, int]]:
    """Read py-spy's raw (collapsed) output: ``frame;frame;... count`` lines.

    Returns (total samples, self samples per frame, inclusive samples per frame).
    """
    total = 0
    own: Dict[str, int] = collections.Counter()
    incl: Dict[str, int] = collections.Counter()
    with open(raw_path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            line = line.rstrip("\n")
            if not line or " " not in line:
                continue
            stack, _, count_s = line.rpartition(" ")
            try:
                count = int(count_s)
            except ValueError:
                continue
            frames = [f for f in stack.split(";") if f]
            if not frames:
                continue
            total += count
            own[_short(frames[-1])] += count
            for f in set(_short(x) for x in frames):
                incl[f] += count
    return total, own, incl


def _short(frame: str) -> str:
    """``func (path/to/module.py:123)`` -> ``func (module.py)``: lines split one function."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    path = where.rsplit(":", 1)[0]
    parts = path.replace("\\", "/").split("/")
    short = "/".join(parts[-2:]) if len(parts) > 1 else path
    return f"{name} ({short})" if where else name


def profile(bench: Bench, impl: Impl, out_dir: str, n: int = 20000, concurrency: int = 100,
            rate: int = 1000) -> str:
    """Profile ``impl``'s worker over one no-op run; return the Markdown text written."""
    # beside this interpreter first: `make bench` runs the venv's python without activating it
    spy = shutil.which("py-spy", path=os.path.dirname(sys.executable)) or shutil.which("py-spy")
    if not spy:
        raise BenchError("py-spy is not installed (pip install py-spy)")
    if not impl.worker_cmd()[-1].endswith(".py"):
        raise BenchError(f"{impl.key} is not a Python worker; py-spy profiles Python only")
    assert bench.client is not None
    bench.flush()
    queue = bench.new_queue()
    keys = QueueKeys(queue, PREFIX)
    bench.preload(queue, n, paused=True)
    report = tempfile.NamedTemporaryFile(prefix="echomq-prof-", suffix=".json", delete=False)
    report.close()
    os.makedirs(os.path.join(out_dir, "raw"), exist_ok=True)
    stem = f"profile-{impl.key}" + ("" if concurrency == 100 else f"-c{concurrency}")
    raw = os.path.join(out_dir, "raw", f"{stem}.txt")
    cfg = {"url": bench.url, "queue": queue, "prefix": PREFIX, "concurrency": concurrency,
           "mode": "noop", "sleep_ms": 0, "report": report.name}
    proc = bench.start_driver(impl.worker_cmd(), cfg)
    recorder = None
    try:
        bench.wait_blocked_client(15, proc)
        recorder = subprocess.Popen([spy, "record", "--pid", str(proc.pid), "--format", "raw",
                                     "--rate", str(rate), "--output", raw, "--nonblocking"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.0)  # py-spy attaches asynchronously; let it start sampling the idle worker
        if recorder.poll() is not None:
            raise BenchError(f"py-spy exited at once: {recorder.stderr.read().decode()[-2000:] if recorder.stderr else ''}")
        watch = ProcWatch(proc.pid)
        before = RedisSnapshot.take(bench.client)
        cpu0 = watch.cpu_s()
        harness = bench.resume(keys)
        _, _, polls = bench.wait_finished(keys, n, 600, proc)
        after = RedisSnapshot.take(bench.client)
        cpu1 = watch.cpu_s()
        harness["zcard"] = 2 * polls
        span, _ = bench.span_ms(keys)
        recorder.send_signal(signal.SIGINT)
        recorder.wait(30)
        bench.stop_driver(proc, report.name)
    finally:
        if recorder is not None and recorder.poll() is None:
            recorder.kill()
            recorder.wait()
        bench.reap(proc)
        os.unlink(report.name)
    total, own, incl = fold(raw)
    cmds = command_delta(before, after, harness)
    idle = sum(v for k, v in own.items() if _is_idle(k))
    lines = [
        f"# Hot-path profile: {impl.label}",
        "",
        f"No-op jobs, N={n}, concurrency {concurrency}: {n * 1000.0 / span:,.0f} jobs/s, worker CPU "
        f"{(cpu1 - cpu0) * 1e6 / n:,.0f} µs/job, {sum(cmds.values()) / n:.1f} Redis commands/job. "
        f"py-spy at {rate} Hz: {total} samples, {100.0 * idle / max(total, 1):.0f}% of them in event-loop "
        "or timed-wait frames (the hub's libev loop, selectors, watchdog waits), which py-spy does not "
        "always recognise as idle; the self-time tables below leave those out.",
        "",
        "## Self time (where the CPU goes), top 25, wait frames excluded",
        "",
        "| function | % of busy samples |",
        "| --- | --- |",
    ]
    busy = max(1, total - idle)
    for name, cnt in [(k, v) for k, v in own.most_common() if not _is_idle(k)][:25]:
        lines.append(f"| `{name}` | {100.0 * cnt / busy:.1f} |")
    lines += ["", "## Self time by package, wait frames excluded", "", "| package | % of busy samples |",
              "| --- | --- |"]
    by_pkg: Dict[str, int] = collections.Counter()
    for name, cnt in own.items():
        if not _is_idle(name):
            by_pkg[_package(name)] += cnt
    for pkg, cnt in by_pkg.most_common():
        lines.append(f"| {pkg} | {100.0 * cnt / busy:.1f} |")
    lines += ["", "## Inclusive time, top 40", "", "| function | % of all samples |", "| --- | --- |"]
    for name, cnt in incl.most_common(40):
        lines.append(f"| `{name}` | {100.0 * cnt / max(total, 1):.1f} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, f"{stem}.md"), "w", encoding="utf-8") as fh:
        fh.write(text)
    return text


def _package(frame: str) -> str:
    """The package a folded frame belongs to: the folder before the file, e.g. ``gevent``."""
    where = frame.partition(" (")[2].rstrip(")")
    if "/" not in where:
        return where or "?"
    folder = where.split("/")[0]
    return {"_parsers": "redis", "commands": "redis", "drivers": "driver"}.get(folder, folder)


#: frames where a thread waits for events rather than computes: the event loop in C (libev
#: under ``Hub.run``, the selector), and timed waits on native threads. py-spy's idle
#: detection does not always see these waits, so they are listed apart from the work.
_WAIT_FRAMES = ("Hub.run (gevent/hub.py)", "HubMonitor._watch (echomq_gevent/hub.py)",
                "poll.poll (gevent/select.py)", "EpollSelector.select (selectors.py)",
                "select (selectors.py)", "wait (threading.py)", "Event.wait (threading.py)")


def _is_idle(frame: str) -> bool:
    """Whether a folded frame is an event-loop or timed wait (see ``_WAIT_FRAMES``)."""
    return frame in _WAIT_FRAMES


def profile_all(bench: Bench, impls: List[Impl], out_dir: str, concurrency: int = 100) -> str:
    parts = []
    for impl in impls:
        if not impl.worker_cmd()[-1].endswith(".py"):
            continue
        bench.log(f"profiling {impl.key}")
        parts.append(profile(bench, impl, out_dir, concurrency=concurrency))
    return "\n".join(parts)

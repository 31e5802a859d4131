"""The measuring core of the benchmarks: a private Redis, subprocess drivers, INFO deltas.

Called by :mod:`bench.run` on the main thread (plain blocking code, no gevent). Each
measurement runs one implementation's driver in its own subprocess against a private
redis-server, and returns a plain dict (one row of ``results.json``).

How a worker run is timed (the same for every implementation):

1. the queue is paused and N jobs are pre-loaded with Node's ``addBulk`` (the same add
   path for all, so only the worker differs);
2. the worker subprocess starts, connects, finds the queue paused and blocks on the marker
   (seen as a blocked ``BZPOPMIN`` client in ``CLIENT LIST``);
3. Redis INFO (commandstats, cpu) and the worker's CPU times are sampled, then the queue is
   resumed (meta ``paused`` cleared, marker set, ``resumed`` event);
4. ``completed``/``failed`` are polled until all N jobs are finished, and INFO/CPU sampled again;
5. throughput is N / (last ``finishedOn`` - first ``processedOn``): both stamps are written by
   the worker into Redis, so the poll interval does not blur the timing.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import redis

from .impls import Impl, node_producer_cmd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREFIX = "bench"
POLL_S = 0.01

sys.path.insert(0, ROOT)
from echomq_gevent.protocol.keys import QueueKeys  # noqa: E402


def _load_redis_server_module() -> Any:
    """``tests/redis_server.py`` by path (the test tree is not a package)."""
    path = os.path.join(ROOT, "tests", "redis_server.py")
    spec = importlib.util.spec_from_file_location("echomq_bench_redis_server", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}: the benchmarks reuse the test suite's RedisServer")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BenchError(RuntimeError):
    """A run that could not be measured (driver crashed, timed out, lost jobs)."""


@dataclass
class RedisSnapshot:
    """INFO numbers at one instant: per-command call counts and the server's CPU seconds."""

    calls: Dict[str, int]
    cpu_s: float

    @classmethod
    def take(cls, client: "redis.Redis") -> "RedisSnapshot":
        info = client.info("commandstats")
        calls = {k[len("cmdstat_"):]: int(v["calls"]) for k, v in info.items() if k.startswith("cmdstat_")}
        cpu = client.info("cpu")
        return cls(calls, float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]))


#: commands the harness itself issues inside a measuring window; they are taken out of the counts
HARNESS_ONLY = ("info", "client", "client|list", "config", "config|get")


def command_delta(before: RedisSnapshot, after: RedisSnapshot,
                  harness_calls: Dict[str, int]) -> Dict[str, int]:
    """Calls per command between two snapshots, minus what the harness issued itself."""
    out: Dict[str, int] = {}
    for name, n in after.calls.items():
        if name in HARNESS_ONLY:
            continue
        d = n - before.calls.get(name, 0) - harness_calls.get(name, 0)
        if d > 0:
            out[name] = d
    return out


SCRIPT_COMMANDS = ("evalsha", "eval", "evalsha_ro", "eval_ro", "fcall")


def machine_cpu_s(stat_line: Optional[str] = None) -> Optional[Tuple[float, float]]:
    """(busy, idle) CPU seconds of the whole machine since boot, summed over its cores, from
    the ``cpu`` line of ``/proc/stat`` (``stat_line`` instead, for tests); None where there is
    none. Busy counts user, nice, system, irq, softirq and steal (time the hypervisor gave to
    other guests: lost to this machine all the same); idle counts idle and iowait. The guest
    fields are already inside user and nice."""
    if stat_line is None:
        try:
            with open("/proc/stat", encoding="ascii") as fh:
                stat_line = fh.readline()
        except OSError:
            return None
    fields = stat_line.split()
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    ticks = [int(x) for x in fields[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = ticks
    hz = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
    return (user + nice + system + irq + softirq + steal) / hz, (idle + iowait) / hz


def other_cpu_pct(before: Optional[Tuple[float, float]], after: Optional[Tuple[float, float]],
                  measured_s: float) -> Optional[float]:
    """The share (%) of the machine's CPU time between two :func:`machine_cpu_s` samples
    that went to anything but the ``measured_s`` CPU seconds of the processes under test
    (the worker, Redis, the harness): other work on the machine competing with the run.
    None when either sample is missing or no time passed."""
    if before is None or after is None:
        return None
    busy = after[0] - before[0]
    total = busy + after[1] - before[1]
    if total <= 0:
        return None
    return max(0.0, min(100.0, (busy - measured_s) * 100.0 / total))


@dataclass
class ProcWatch:
    """CPU and peak RSS of one driver subprocess (psutil; VmHWM where Linux has it)."""

    pid: int
    _proc: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        import psutil

        self._proc = psutil.Process(self.pid)

    def cpu_s(self) -> float:
        t = self._proc.cpu_times()
        return float(t.user + t.system)

    def peak_rss_mb(self) -> float:
        try:
            with open(f"/proc/{self.pid}/status", encoding="ascii") as fh:
                for line in fh:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) / 1024.0
        except OSError:
            pass
        return self._proc.memory_info().rss / (1024.0 * 1024.0)


def _own_cpu_s() -> float:
    """CPU seconds of this process (the harness and its polling)."""
    t = os.times()
    return t.user + t.system


class Bench:
    """One private redis-server and the helpers every measurement needs.

    Use as a context manager from the main thread; ``url`` is where the server listens.
    """

    def __init__(self, verbose: bool = True, binary: Optional[str] = None) -> None:
        self.verbose = verbose
        #: the redis-server binary (None: the test suite's choice, tests/redis_server.py)
        self.binary = binary
        self._server: Any = None
        self.url = ""
        self.client: Optional["redis.Redis"] = None
        self.redis_version = ""

    def __enter__(self) -> "Bench":
        mod = _load_redis_server_module()
        self._server = mod.RedisServer(binary=self.binary).start()
        self.url = self._server.url
        self.client = redis.Redis.from_url(self.url, decode_responses=True)
        self.redis_version = str(self.client.info("server").get("redis_version", "?"))
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.client is not None:
            self.client.close()
        if self._server is not None:
            self._server.stop()

    def log(self, msg: str) -> None:
        if self.verbose:
            sys.stderr.write(msg + "\n")
            sys.stderr.flush()

    # -- helpers --------------------------------------------------------------------------
    def new_queue(self) -> str:
        return "b" + uuid.uuid4().hex[:10]

    def flush(self) -> None:
        assert self.client is not None
        self.client.flushall()

    def preload(self, queue: str, n: int, paused: bool, timeout: float = 300, mix: bool = False) -> None:
        """N no-op jobs (or the realistic mix, ``node_producer.js``) through Node's ``addBulk``
        (optionally into a paused queue)."""
        cfg = {"url": self.url, "queue": queue, "prefix": PREFIX, "mode": "preload", "n": n,
               "chunk": 1000, "paused": paused, "mix": mix}
        res = subprocess.run(node_producer_cmd() + [json.dumps(cfg)], capture_output=True,
                             text=True, timeout=timeout)
        if res.returncode != 0:
            raise BenchError(f"preloading {n} jobs into {queue} with Node failed: {res.stderr.strip()[-2000:]}")

    def resume(self, keys: QueueKeys) -> Dict[str, int]:
        """Resume a paused v6 queue the way the protocol does it (meta flag off, marker on,
        ``resumed`` event), in one MULTI. Returns the commands it issued."""
        assert self.client is not None
        pipe = self.client.pipeline(transaction=True)
        pipe.hdel(keys.meta, "paused")
        pipe.zadd(keys.marker, {"0": 0})
        pipe.xadd(keys.events, {"event": "resumed"}, maxlen=10000, approximate=True)
        pipe.execute()
        return {"multi": 1, "exec": 1, "hdel": 1, "zadd": 1, "xadd": 1}

    def wait_blocked_client(self, deadline_s: float, proc: subprocess.Popen) -> bool:
        """Wait until some client is blocked (the idle worker's ``BZPOPMIN`` on the marker)."""
        assert self.client is not None
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if proc.poll() is not None:
                return False
            if any("b" in c.get("flags", "") for c in self.client.client_list()):
                return True
            time.sleep(0.02)
        return False

    def start_driver(self, cmd: List[str], cfg: Dict[str, Any], ready_timeout: float = 60,
                     stdin: bool = False) -> subprocess.Popen:
        """Start a driver subprocess and wait for its ``READY`` line.

        Its stdout lines are read by a daemon thread (see :meth:`read_line`), its stderr goes
        to a temporary file (a chatty driver can never block on a full pipe); the file's tail
        is quoted in errors and removed by :meth:`stop_driver`/:meth:`reap`.
        """
        err = tempfile.NamedTemporaryFile(prefix="echomq-bench-", suffix=".err", delete=False)
        proc = subprocess.Popen(cmd + [json.dumps(cfg)], stdout=subprocess.PIPE, stderr=err,
                                stdin=subprocess.PIPE if stdin else None, text=True, cwd=ROOT, bufsize=1)
        err.close()
        proc.bench_err_path = err.name  # type: ignore[attr-defined]
        lines: "queue.Queue[Optional[str]]" = queue.Queue()
        proc.bench_lines = lines  # type: ignore[attr-defined]

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line.rstrip("\n"))
            lines.put(None)

        threading.Thread(target=pump, name="bench-driver-stdout", daemon=True).start()
        try:
            while True:
                line = self.read_line(proc, ready_timeout)
                if line == "READY":
                    return proc
        except BenchError as exc:
            self.reap(proc)
            raise BenchError(f"driver {' '.join(cmd)} did not start: {exc}") from None

    def read_line(self, proc: subprocess.Popen, timeout: float) -> str:
        """The driver's next stdout line; BenchError (with its stderr tail) on exit or timeout."""
        try:
            line = proc.bench_lines.get(timeout=timeout)  # type: ignore[attr-defined]
        except queue.Empty:
            raise BenchError(f"no output within {timeout} s; stderr: {self.stderr_tail(proc)}") from None
        if line is None:
            proc.wait(10)
            raise BenchError(f"exited with {proc.returncode}; stderr: {self.stderr_tail(proc)}")
        return line

    @staticmethod
    def stderr_tail(proc: subprocess.Popen, limit: int = 3000) -> str:
        path = getattr(proc, "bench_err_path", None)
        if not path:
            return ""
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                return fh.read()[-limit:].strip()
        except OSError:
            return ""

    @staticmethod
    def reap(proc: Optional[subprocess.Popen]) -> None:
        """Kill a driver if it still runs and remove its stderr file."""
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        path = getattr(proc, "bench_err_path", None)
        if path and os.path.exists(path):
            if os.environ.get("ECHOMQ_BENCH_KEEP_STDERR"):  # kept to investigate a run
                sys.stderr.write(f"bench: the driver's stderr is kept in {path}\n")
                proc.bench_err_path = None  # type: ignore[attr-defined]
            else:
                os.unlink(path)

    def stop_driver(self, proc: subprocess.Popen, report_path: Optional[str],
                    timeout: float = 60) -> Dict[str, Any]:
        """SIGTERM a worker driver, wait for it and read its report file."""
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            tail = self.stderr_tail(proc)
            self.reap(proc)
            raise BenchError(f"worker driver did not exit within {timeout} s of SIGTERM: {tail}")
        if proc.returncode != 0:
            tail = self.stderr_tail(proc)
            self.reap(proc)
            raise BenchError(f"worker driver exited with {proc.returncode}: {tail}")
        self.reap(proc)
        if report_path is None:
            return {}
        with open(report_path, encoding="utf-8") as fh:
            return json.load(fh)

    def wait_finished(self, keys: QueueKeys, n: int, timeout: float,
                      proc: subprocess.Popen) -> Tuple[int, int, int]:
        """Poll ZCARD completed/failed until ``n`` jobs are finished.

        Returns (completed, failed, polls). Raises BenchError on timeout or a dead worker.
        """
        assert self.client is not None
        end = time.monotonic() + timeout
        polls = 0
        pipe = self.client.pipeline(transaction=False)
        while True:
            pipe.zcard(keys.completed)
            pipe.zcard(keys.failed)
            done, failed = pipe.execute()
            polls += 1
            if done + failed >= n:
                return done, failed, polls
            if proc.poll() is not None:
                raise BenchError(f"worker exited with {proc.returncode} after {done}/{n} jobs: "
                                 f"{self.stderr_tail(proc)}")
            if time.monotonic() > end:
                raise BenchError(f"only {done} completed and {failed} failed of {n} jobs after {timeout} s")
            time.sleep(POLL_S)

    def wait_drained(self, keys: QueueKeys, timeout: float, proc: subprocess.Popen) -> Tuple[int, int]:
        """Poll wait, prioritized, delayed and active until all are empty (the mix keeps only
        the last 1,000 completed jobs, so the completed set cannot be counted). Returns
        (failed, polls)."""
        assert self.client is not None
        end = time.monotonic() + timeout
        polls = 0
        pipe = self.client.pipeline(transaction=False)
        while True:
            pipe.llen(keys.wait)
            pipe.zcard(keys.prioritized)
            pipe.zcard(keys.delayed)
            pipe.llen(keys.active)
            pipe.zcard(keys.failed)
            *left, failed = pipe.execute()
            polls += 1
            if not any(left):
                return failed, polls
            if proc.poll() is not None:
                raise BenchError(f"worker exited with {proc.returncode} with {sum(left)} jobs left: "
                                 f"{self.stderr_tail(proc)}")
            if time.monotonic() > end:
                raise BenchError(f"{sum(left)} jobs still unfinished after {timeout} s")
            time.sleep(POLL_S)

    def span_ms(self, keys: QueueKeys) -> Tuple[float, int]:
        """(last finishedOn - first processedOn in ms, jobs seen) over the completed set."""
        assert self.client is not None
        ids = self.client.zrange(keys.completed, 0, -1)
        last = self.client.zrange(keys.completed, -1, -1, withscores=True)
        pipe = self.client.pipeline(transaction=False)
        first = None
        for i in range(0, len(ids), 5000):
            for jid in ids[i:i + 5000]:
                pipe.hget(keys.job(jid), "processedOn")
            for v in pipe.execute():
                if v is not None:
                    x = float(v)
                    first = x if first is None else min(first, x)
        if not last or first is None:
            return 0.0, len(ids)
        return max(float(last[0][1]) - first, 1.0), len(ids)

    # -- measurements ----------------------------------------------------------------------
    def run_worker(self, impl: Impl, n: int, concurrency: int, mode: str = "noop",
                   sleep_ms: int = 0, timeout: float = 600, metrics: int = 0,
                   fill: Optional[Callable[[str, QueueKeys], None]] = None) -> Dict[str, Any]:
        """Throughput of ``impl``'s worker over N pre-loaded jobs (module docstring).
        ``fill(queue, keys)`` loads the paused queue instead of Node's ``addBulk`` (the
        scale bench's backlogs of a million jobs)."""
        self.flush()
        queue = self.new_queue()
        keys = QueueKeys(queue, PREFIX)
        mix = mode == "mix"
        if fill is not None:
            fill(queue, keys)
        else:
            self.preload(queue, n, paused=True, mix=mix)
        report = tempfile.NamedTemporaryFile(prefix="echomq-bench-", suffix=".json", delete=False)
        report.close()
        cfg = {"url": self.url, "queue": queue, "prefix": PREFIX, "concurrency": concurrency,
               "mode": mode, "sleep_ms": sleep_ms, "report": report.name}
        if metrics:
            cfg["metrics"] = metrics
        proc = self.start_driver(impl.worker_cmd(), cfg)
        try:
            if not self.wait_blocked_client(15, proc):
                self.log(f"  {impl.key}: no blocked client seen; measuring anyway")
            watch = ProcWatch(proc.pid)
            assert self.client is not None
            before = RedisSnapshot.take(self.client)
            cpu0 = watch.cpu_s()
            own0 = _own_cpu_s()
            machine0 = machine_cpu_s()
            resumed_ms = time.time() * 1000.0
            harness = self.resume(keys)
            if mix:
                failed, polls = self.wait_drained(keys, timeout, proc)
                done = n - failed
            else:
                done, failed, polls = self.wait_finished(keys, n, timeout, proc)
            after = RedisSnapshot.take(self.client)
            cpu1 = watch.cpu_s()
            machine1 = machine_cpu_s()
            own1 = _own_cpu_s()
            rss = watch.peak_rss_mb()
            if mix:
                harness.update({"llen": 2 * polls, "zcard": 3 * polls})
                # the first processedOn may be gone (removeOnComplete): from the resume instead
                last = self.client.zrange(keys.completed, -1, -1, withscores=True)
                span = max(float(last[0][1]) - resumed_ms, 1.0) if last else 0.0
                seen = self.client.zcard(keys.completed)
            else:
                harness["zcard"] = 2 * polls
                span, seen = self.span_ms(keys)
            rep = self.stop_driver(proc, report.name)
        finally:
            self.reap(proc)
            os.unlink(report.name)
        cmds = command_delta(before, after, harness)
        total = sum(cmds.values())
        scripts = sum(v for k, v in cmds.items() if k in SCRIPT_COMMANDS)
        extra = {"order": rep["order"]} if rep.get("order") else {}  # mode "order": start order
        return {**extra,
            "impl": impl.key, "n": n, "concurrency": concurrency, "mode": mode,
            "completed": done, "failed": failed, "processed": int(rep.get("processed", -1)),
            "seconds": span / 1000.0, "jobs_per_s": n * 1000.0 / span,
            "redis_cmds_per_job": total / n, "redis_scripts_per_job": scripts / n,
            "redis_cpu_us_per_job": (after.cpu_s - before.cpu_s) * 1e6 / n,
            "worker_cpu_us_per_job": (cpu1 - cpu0) * 1e6 / n,
            "peak_rss_mb": rss, "commands": cmds, "jobs_seen": seen, "redis_version": self.redis_version,
            "other_cpu_pct": other_cpu_pct(machine0, machine1,
                                           (cpu1 - cpu0) + (after.cpu_s - before.cpu_s) + (own1 - own0)),
        }

    def run_enqueue(self, impl: Impl, n: int, mode: str, timeout: float = 600) -> Dict[str, Any]:
        """Enqueue rate of ``impl``'s producer: ``add`` one at a time, or ``bulk`` in chunks."""
        self.flush()
        queue = self.new_queue()
        keys = QueueKeys(queue, PREFIX)
        cfg = {"url": self.url, "queue": queue, "prefix": PREFIX, "mode": mode, "n": n, "chunk": 1000}
        cmd = impl.producer_cmd()
        proc = self.start_driver(cmd, cfg, stdin=True)
        assert self.client is not None and proc.stdin is not None
        try:
            before = RedisSnapshot.take(self.client)
            proc.stdin.write("GO\n")
            proc.stdin.flush()
            try:
                line = self.read_line(proc, timeout)
                after = RedisSnapshot.take(self.client)
                result = json.loads(line)
            except (BenchError, ValueError) as exc:
                raise BenchError(f"{impl.key} producer ({mode}) failed: {exc}") from None
            proc.wait(timeout)
        finally:
            self.reap(proc)
        waiting = self.client.llen(keys.wait)
        cmds = command_delta(before, after, {})
        total = sum(cmds.values())
        return {
            "impl": impl.key, "n": n, "mode": mode, "jobs_in_wait": waiting,
            "seconds": float(result["elapsed_s"]), "jobs_per_s": n / max(float(result["elapsed_s"]), 1e-9),
            "redis_cmds_per_job": total / n,
            "redis_scripts_per_job": sum(v for k, v in cmds.items() if k in SCRIPT_COMMANDS) / n,
            "redis_cpu_us_per_job": (after.cpu_s - before.cpu_s) * 1e6 / n,
            # the producer measures its own CPU and peak RSS (it exits right after)
            "worker_cpu_us_per_job": float(result["cpu_s"]) * 1e6 / n,
            "peak_rss_mb": float(result["maxrss_mb"]), "commands": cmds,
        }

    def run_latency(self, impl: Impl, n: int, interval_ms: int, concurrency: int = 1,
                    timeout: float = 300) -> Dict[str, Any]:
        """Pickup latency at low load: Node adds one job every ``interval_ms`` carrying its
        enqueue time; ``impl``'s idle worker reports processor-start minus enqueue time."""
        self.flush()
        queue = self.new_queue()
        keys = QueueKeys(queue, PREFIX)
        report = tempfile.NamedTemporaryFile(prefix="echomq-bench-", suffix=".json", delete=False)
        report.close()
        cfg = {"url": self.url, "queue": queue, "prefix": PREFIX, "concurrency": concurrency,
               "mode": "latency", "sleep_ms": 0, "report": report.name}
        worker = self.start_driver(impl.worker_cmd(), cfg)
        feeder: Optional[subprocess.Popen] = None
        try:
            self.wait_blocked_client(15, worker)
            watch = ProcWatch(worker.pid)
            fcfg = {"url": self.url, "queue": queue, "prefix": PREFIX, "mode": "feed", "n": n,
                    "interval_ms": interval_ms}
            feeder = self.start_driver(node_producer_cmd(), fcfg, stdin=True)
            assert self.client is not None and feeder.stdin is not None
            before = RedisSnapshot.take(self.client)
            cpu0 = watch.cpu_s()
            feeder.stdin.write("GO\n")
            feeder.stdin.flush()
            done, failed, polls = self.wait_finished(keys, n, timeout, worker)
            after = RedisSnapshot.take(self.client)
            cpu1 = watch.cpu_s()
            rss = watch.peak_rss_mb()
            feeder.wait(timeout)
            rep = self.stop_driver(worker, report.name)
        finally:
            self.reap(worker)
            self.reap(feeder)
            os.unlink(report.name)
        lat = sorted(float(x) for x in rep.get("latencies_ms", []))
        # the feeder's adds are in this window too, so these counts include one add per job
        cmds = command_delta(before, after, {"zcard": 2 * polls})
        return {
            "impl": impl.key, "n": n, "interval_ms": interval_ms, "concurrency": concurrency,
            "completed": done, "failed": failed, "samples": len(lat),
            "p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99),
            "max_ms": lat[-1] if lat else float("nan"),
            "redis_cmds_per_job": sum(cmds.values()) / n,
            "redis_cpu_us_per_job": (after.cpu_s - before.cpu_s) * 1e6 / n,
            "worker_cpu_us_per_job": (cpu1 - cpu0) * 1e6 / n, "peak_rss_mb": rss,
            "commands": cmds,
        }


def rotated(items: List[Any], rnd: int) -> List[Any]:
    """``items`` in round ``rnd``'s order: each round starts one further along, so no
    case always runs first (or right after the same one)."""
    k = rnd % len(items)
    return items[k:] + items[:k]


def percentile(sorted_values: List[float], pct: float) -> float:
    """Nearest-rank percentile of an ascending list (``nan`` when empty)."""
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, math.ceil(pct / 100.0 * len(sorted_values)) - 1))
    return sorted_values[k]

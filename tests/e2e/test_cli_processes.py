"""``echomq-gevent -c FILE`` with ``processes:``/``--processes`` and the recycling limits,
end to end: a real supervisor, real worker processes, a real Redis.

The processors (a test plugin module) append one line per run to a file opened with
``O_APPEND`` (``start <job id> <pid> <attempt>`` and ``done <job id> <pid>``), so a test
sees which process ran which job and that every job finished exactly once.
"""
from __future__ import annotations

import os
import re
import json
import signal
import subprocess
import textwrap
import time
import urllib.request
from typing import Dict, List, Optional, Set

import pytest

from echomq_gevent.queue.queue import Queue

from target import PYTHON
from test_cli_dashboard import get, start as start_dashboard
from test_cli_run import ROOT, Cli

PLUGIN = '''
"""Processors of the supervisor tests, for queue {queue!r}."""
import os

import gevent
from echomq_gevent import hookimpl

RUNS = {runs!r}
LEAKED = []

if os.path.exists(RUNS + ".crash"):  # the crash-loop test: every new process dies at once
    os._exit(9)


def record(*words):
    fd = os.open(RUNS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (" ".join(str(w) for w in words) + "\\n").encode())
    finally:
        os.close(fd)


def work(job):
    record("start", job.id, os.getpid(), job.attempts_started)
    first = (job.attempts_started or 0) <= 1
    gevent.sleep(float(job.data.get("first_s" if first else "s", job.data.get("s", 0.02))))
    record("done", job.id, os.getpid())
    return os.getpid()


def leak(job):
    record("start", job.id, os.getpid(), job.attempts_started)
    LEAKED.append(b"x" * (5 * 1024 * 1024))  # 5 MB that stay resident
    gevent.sleep(0.05)
    record("done", job.id, os.getpid())
    return len(LEAKED)


@hookimpl
def echomq_register_processors(registry):
    registry.add({queue!r}, "work", work)
    registry.add({queue!r}, "leak", leak)
'''

STARTED = re.compile(r"started process (\d+) \(pid (\d+)\)")


class Supervised:
    """The files of one test: the YAML, the plugin, the runs log; and the command."""

    def __init__(self, tmp_path, redis_url: str, prefix: str, queue: str) -> None:
        self.tmp = tmp_path
        self.redis_url, self.prefix, self.queue = redis_url, prefix, queue
        self.runs = str(tmp_path / "runs.log")
        (tmp_path / "plugins").mkdir()
        (tmp_path / "plugins" / "procplugin.py").write_text(PLUGIN.format(queue=queue, runs=self.runs))
        self.conf = tmp_path / "worker.yaml"
        self.cli: Optional[Cli] = None
        self.more_plugins = ""

    def write(self, extra: str = "", queue_options: str = "concurrency: 2") -> None:
        self.conf.write_text(textwrap.dedent(f"""\
            redis: {{url: "{self.redis_url}"}}
            prefix: {self.prefix}
            plugin_paths: [plugins]
            plugins: [procplugin{self.more_plugins}]
            entry_points: false
            logging: {{level: info, format: text}}
            """) + textwrap.dedent(extra) + textwrap.dedent(f"""\
            queues:
              {self.queue}: {{{queue_options}, lock_duration: 2000, stalled_interval: 1000, shutdown_timeout: 10}}
            """))

    def start(self, *args: str, env: Optional[Dict[str, str]] = None) -> Cli:
        self.cli = Cli(["-c", str(self.conf), "--no-progress", *args], cwd=str(self.tmp), env=env)
        return self.cli

    def children(self) -> Dict[int, int]:
        """pid -> slot of every child the supervisor said it started."""
        assert self.cli is not None
        out = {}
        for line in list(self.cli.lines):
            m = STARTED.search(line)
            if m:
                out[int(m.group(2))] = int(m.group(1))
        return out

    def ready(self, wait_for, count: int) -> List[int]:
        """Wait until ``count`` children have started their workers; their pids."""
        assert self.cli is not None
        cli = self.cli

        def up() -> Optional[List[int]]:
            pids = [int(m) for line in list(cli.lines)
                    for m in re.findall(r"process=\d+/(\d+) echomq_gevent.cli: echomq-gevent", line)]
            return pids if len(pids) >= count else None

        return wait_for(up, timeout=60, what=f"{count} worker processes up", details=cli.output,
                        give_up=cli.exited)

    def lines(self) -> List[List[str]]:
        try:
            with open(self.runs) as fh:
                return [line.split() for line in fh if line.strip()]
        except FileNotFoundError:
            return []

    def done_by_job(self) -> Dict[str, List[int]]:
        out: Dict[str, List[int]] = {}
        for words in self.lines():
            if words[0] == "done":
                out.setdefault(words[1], []).append(int(words[2]))
        return out

    def add(self, count: int, name: str = "work", **data: float) -> List[str]:
        q = Queue(self.queue, connection=self.redis_url, prefix=self.prefix)
        try:
            return [q.add(name, dict(data, n=i)).id for i in range(count)]
        finally:
            q.close()

    def completed_once(self, r, ids: List[str]) -> None:
        """Every job of ``ids`` is in completed, and finished (ran to its end) exactly once."""
        done = self.done_by_job()
        completed = set(r.zrange(f"{self.prefix}:{self.queue}:completed", 0, -1))
        assert set(ids) <= completed, f"not completed: {sorted(set(ids) - completed)}"
        twice = {j: pids for j, pids in done.items() if len(pids) != 1}
        assert not twice, f"jobs that finished more than once: {twice}"
        assert set(ids) <= set(done)

    def status(self, *args: str) -> str:
        """``echomq-gevent -c FILE status ...``: its output."""
        env = dict(os.environ, PYTHONPATH=ROOT)
        out = subprocess.run([PYTHON, "-m", "echomq_gevent", "-c", str(self.conf), "status", *args],
                             cwd=str(self.tmp), env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        assert self.cli is not None
        return self.cli.stop(sig, timeout=timeout)


@pytest.fixture
def sup(tmp_path, redis_url, prefix, qname):
    s = Supervised(tmp_path, redis_url, prefix, qname)
    yield s
    if s.cli is not None:
        s.cli.kill()
        for pid in s.children():  # no child outlives its test
            _kill(pid)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting to be reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def test_every_process_takes_jobs_and_sigterm_drains_in_flight_jobs_and_exits_0(sup, r, wait_for):
    sup.write("processes: 2\n")
    cli = sup.start()
    pids = sup.ready(wait_for, 2)
    ids = sup.add(40, s=0.1)
    wait_for(lambda: len(sup.done_by_job()) == 40, timeout=60, what="40 jobs done", details=cli.output)
    by_pid = {pid for pids_ in sup.done_by_job().values() for pid in pids_}
    assert by_pid == set(pids), f"jobs ran in {by_pid}, the worker processes are {pids}"
    # status lists each process: pid, queues, jobs done (reported every 2 s), RSS, started at
    def counted() -> Optional[dict]:
        states = json.loads(sup.status("--json")).get("echomq:supervisors")
        return states[0] if states and sum(p["jobs"] for p in states[0]["processes"]) == 40 else None

    state = wait_for(counted, timeout=30, what="status counting 40 jobs", details=cli.output)
    assert state["supervisor"]["pid"] == cli.proc.pid
    rows = state["processes"]
    assert sorted(p["pid"] for p in rows) == sorted(pids) and [p["index"] for p in rows] == [1, 2]
    assert all(p["queues"] == [sup.queue] and p["state"] == "running" and p["rss_mb"] > 5
               and p["started_at"] <= time.time() for p in rows), rows
    table = sup.status()
    assert f"supervisor pid {cli.proc.pid}" in table and all(f" {pid} " in table for pid in pids), table
    # and so does the dashboard of the same file
    dashboard, where = start_dashboard("-c", str(sup.conf), "dashboard", "--bind", "127.0.0.1:0")
    try:
        code, page = get(f"http://{where}/")
    finally:
        dashboard.terminate()
        dashboard.wait(10)
    assert code == 200 and f'data-supervisor="{cli.proc.pid}"' in page, page
    assert all(f'<tr data-pid="{pid}">' in page for pid in pids), page
    records = [line for line in cli.lines if re.match(r"\d{4}-\d\d-\d\d ", line)]
    assert records and all(re.search(r" process=(supervisor|[12])/\d+ ", line) for line in records), records
    # in-flight jobs at SIGTERM finish (shutdown_timeout 10 s) and the command exits 0
    slow = sup.add(4, first_s=1.5)
    wait_for(lambda: sum(1 for w in sup.lines() if w[0] == "start" and w[1] in slow) == 4, timeout=30,
             what="4 slow jobs running", details=cli.output)
    assert sup.stop() == 0, cli.output()
    assert cli.saw("SIGTERM: draining 2 worker process(es)")
    sup.completed_once(r, ids + slow)
    assert not any(alive(p) for p in pids)
    assert "supervisor pid" not in sup.status()  # the state file went with the supervisor


def test_a_child_killed_mid_job_is_restarted_and_its_job_recovered_once(sup, r, wait_for):
    sup.write("processes: 2\n")
    cli = sup.start()
    sup.ready(wait_for, 2)
    [job] = sup.add(1, first_s=60, s=0.05)
    first = wait_for(lambda: next((w for w in sup.lines() if w[:2] == ["start", job]), None), timeout=30,
                     what="the job started", details=cli.output)
    victim = int(first[2])
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: cli.saw(f"(pid {victim}) exited unexpectedly (killed by SIGKILL); restarting in"),
             timeout=30, what="the restart logged", details=cli.output)
    slot = sup.children()[victim]
    wait_for(lambda: any(s == slot and p != victim for p, s in sup.children().items()), timeout=30,
             what="a new process in the slot", details=cli.output)
    # the lock (2 s) expires, a stalled check (every 1 s) moves the job back to wait, it runs again
    wait_for(lambda: job in sup.done_by_job(), timeout=60, what="the job recovered", details=cli.output)
    assert sup.stop() == 0, cli.output()
    sup.completed_once(r, [job])
    starts = [w for w in sup.lines() if w[:2] == ["start", job]]
    assert len(starts) == 2 and int(starts[1][2]) != victim


def test_a_crash_loop_is_slowed_by_a_doubling_delay_and_ends_when_the_cause_goes(sup, wait_for):
    sup.write("max_jobs_per_process: 100000\n")  # one process, supervised
    cli = sup.start()
    [pid] = sup.ready(wait_for, 1)
    crash = sup.runs + ".crash"
    open(crash, "w").close()
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: cli.saw("exited unexpectedly (exit code 9); restarting in 2.0 s"), timeout=30,
             what="three failures in a row", details=cli.output)
    delays = [float(m) for line in list(cli.lines) for m in re.findall(r"restarting in ([\d.]+) s", line)]
    assert delays[:3] == [0.5, 1.0, 2.0], delays
    os.remove(crash)
    sup.ready(wait_for, 2)  # the next restart comes up
    assert sup.stop() == 0, cli.output()


def test_a_second_sigterm_hands_the_jobs_back_at_once(sup, r, wait_for):
    sup.write("processes: 2\n", queue_options="concurrency: 2")
    cli = sup.start()
    sup.ready(wait_for, 2)
    ids = sup.add(2, first_s=120)
    wait_for(lambda: sum(1 for w in sup.lines() if w[0] == "start") == 2, timeout=30, what="2 jobs running",
             details=cli.output)
    cli.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: cli.saw("SIGTERM: draining 2 worker process(es)"), timeout=10, what="the drain",
             details=cli.output)
    assert sup.stop(timeout=30) == 0, cli.output()  # well before the 10 s shutdown_timeout ran out twice
    assert cli.saw("SIGTERM again: the worker processes hand their jobs back now")
    waiting = set(r.lrange(f"{sup.prefix}:{sup.queue}:wait", 0, -1))
    assert set(ids) <= waiting, cli.output()
    assert not sup.done_by_job()


def test_max_jobs_per_process_recycles_one_process_and_every_job_completes_once(sup, r, wait_for):
    sup.write("max_jobs_per_process: 5\n")  # processes: 1 (the default): the supervisor runs for recycling
    cli = sup.start()
    sup.ready(wait_for, 1)
    ids = sup.add(30, s=0.02)
    wait_for(lambda: len(sup.done_by_job()) == 30, timeout=90, what="30 jobs done", details=cli.output)
    assert sup.stop() == 0, cli.output()
    sup.completed_once(r, ids)
    by_pid: Dict[int, int] = {}
    for pids in sup.done_by_job().values():
        by_pid[pids[0]] = by_pid.get(pids[0], 0) + 1
    assert len(by_pid) >= 4, f"jobs per process: {by_pid}"
    # a process finishes the jobs it holds when it reaches its count (concurrency 2, and the
    # next job a finishing one fetched in the same round trip): a few more, never many
    assert max(by_pid.values()) <= 5 + 2 * 2, by_pid
    assert cli.saw("jobs done (max_jobs_per_process 5") and cli.saw("takes its place")
    # capacity never dropped to zero: each replacement started before its predecessor exited
    lines = list(cli.lines)
    for i, line in enumerate(lines):
        m = re.search(r"\(pid (\d+)\) is recycling: .*; process 1 \(pid (\d+)\) takes its place", line)
        if m:
            started = next(j for j, x in enumerate(lines) if f"started process 1 (pid {m.group(2)})" in x)
            exited = next(j for j, x in enumerate(lines)  # (the last one may exit in the final drain)
                          if re.search(rf"\(pid {m.group(1)}\) (finished recycling|drained)", x))
            assert started < exited, (m.group(1), m.group(2))
    assert all(len(w) < 4 or w[3] == "1" for w in sup.lines() if w[0] == "start"), "a job ran twice"


def test_max_memory_per_process_recycles_a_leaking_process(sup, r, wait_for):
    sup.write("processes: 1\nmax_memory_per_process: 200\n", queue_options="concurrency: 1")
    cli = sup.start()
    sup.ready(wait_for, 1)
    ids = sup.add(60, name="leak")
    wait_for(lambda: len(sup.done_by_job()) == 60, timeout=120, what="60 leaking jobs done",
             details=cli.output)
    assert sup.stop() == 0, cli.output()
    sup.completed_once(r, ids)
    pids = {p[0] for p in sup.done_by_job().values()}
    assert len(pids) >= 2, "no process was recycled"
    assert cli.saw("> max_memory_per_process 200; draining")


def test_sighup_keeps_the_children_on_a_broken_file_and_replaces_them_on_a_valid_one(sup, r, wait_for):
    sup.write("processes: 2\n")
    cli = sup.start()
    before = sup.ready(wait_for, 2)
    good = sup.conf.read_text()
    sup.conf.write_text(good.replace("processes: 2", 'processes: "many"'))
    cli.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: cli.saw("SIGHUP: the configuration is not valid; the running processes stay"),
             timeout=30, what="the refusal logged", details=cli.output)
    assert cli.saw("processes: must be a whole number of processes")
    assert all(alive(p) for p in before)
    ids = sup.add(4)
    wait_for(lambda: len(sup.done_by_job()) == 4, timeout=30, what="jobs done after the refused reload",
             details=cli.output)
    # a valid file: the children are replaced one by one
    sup.conf.write_text(good)
    cli.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: cli.saw("SIGHUP: every worker process runs the new configuration"), timeout=60,
             what="the reload done", details=cli.output)
    wait_for(lambda: not any(alive(p) for p in before), timeout=30, what="the old processes gone",
             details=cli.output)
    now = sup.ready(wait_for, 4)[2:]
    assert len(set(now) - set(before)) == 2 and all(alive(p) for p in now)
    more = sup.add(4)
    wait_for(lambda: len(sup.done_by_job()) == 8, timeout=30, what="jobs done after the reload",
             details=cli.output)
    assert sup.stop() == 0, cli.output()
    sup.completed_once(r, ids + more)


def test_children_drain_and_exit_when_the_supervisor_is_killed(sup, wait_for):
    sup.write("processes: 2\n")
    cli = sup.start()
    pids = sup.ready(wait_for, 2)
    cli.proc.kill()
    cli.proc.wait(10)
    wait_for(lambda: not any(alive(p) for p in pids), timeout=30, what="the orphaned children to exit",
             details=cli.output)
    assert cli.saw("SIGTERM: stopping") or cli.saw("is gone: draining")


@pytest.mark.parametrize("extra, key, line", [
    ("processes: 0\n", "processes", 7),
    ("processes: -1\n", "processes", 7),
    ('processes: "many"\n', "processes", 7),
    ("max_jobs_per_process: 0\n", "max_jobs_per_process", 7),
    ('max_memory_per_process: "1GB"\n', "max_memory_per_process", 7),
])
def test_bad_process_values_are_refused_at_start_naming_the_key(sup, extra, key, line):
    sup.write(extra)
    cli = sup.start()
    assert cli.finish(60) == 2
    assert cli.saw(f"worker.yaml, line {line}, key {key}:"), cli.output()


def test_bad_processes_option_is_refused(sup):
    sup.write()
    cli = sup.start("--processes", "0")
    assert cli.finish(60) == 2
    assert cli.saw("argument --processes: must be a whole number of processes"), cli.output()


def test_prometheus_metrics_are_summed_over_the_processes_and_served_by_the_supervisor(sup, wait_for, tmp_path):
    pytest.importorskip("prometheus_client")
    from redis_server import free_port

    port = free_port()
    sup.more_plugins = ", echomq_gevent.contrib.prometheus"
    sup.write("processes: 2\n")
    metrics_dir = tmp_path / "prom"
    cli = sup.start(env={"ECHOMQ_PROMETHEUS_PORT": str(port), "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)})
    pids = sup.ready(wait_for, 2)
    sup.add(20, s=0.05)
    wait_for(lambda: len(sup.done_by_job()) == 20, timeout=60, what="20 jobs done", details=cli.output)
    assert {p for ps in sup.done_by_job().values() for p in ps} == set(pids)

    def completed() -> float:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in body.splitlines()
                   if line.startswith("echomq_jobs_completed_total{") and f'queue="{sup.queue}"' in line)

    assert wait_for(lambda: completed() == 20, timeout=20, what="the sum of both processes' counters",
                    details=cli.output)
    # the queues' own gauges, read from Redis by the supervisor at the scrape
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert "echomq_queue_stats_up 1.0" in body
    assert f'echomq_queue_oldest_age_seconds{{queue="{sup.queue}"}} 0.0' in body
    assert f'echomq_queue_jobs{{queue="{sup.queue}",state="completed"}} 20.0' in body
    assert list(metrics_dir.glob(f"gauge_live*_{pids[0]}.db"))
    os.kill(pids[0], signal.SIGKILL)  # its counters stay (they count what it did), its live gauge goes
    wait_for(lambda: cli.saw("restarting in"), timeout=20, what="the restart", details=cli.output)
    assert not list(metrics_dir.glob(f"gauge_live*_{pids[0]}.db"))
    assert completed() == 20
    assert sup.stop() == 0, cli.output()


def _scrape(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


def test_one_process_serves_the_queues_gauges_on_its_own_prometheus_port(sup, redis_url, wait_for, tmp_path):
    # no supervisor: the one process serves ECHOMQ_PROMETHEUS_PORT, and reads Redis for the
    # queues' gauges at each scrape, once, and never between scrapes
    pytest.importorskip("prometheus_client")
    from redis_server import Monitor, free_port

    port = free_port()
    sup.more_plugins = ", echomq_gevent.contrib.prometheus"
    sup.write()
    cli = sup.start(env={"ECHOMQ_PROMETHEUS_PORT": str(port)})

    def served() -> bool:
        try:
            return "echomq_queue_stats_up 1.0" in _scrape(port)
        except OSError:
            return False

    wait_for(served, timeout=60, what="the process's metrics port", details=cli.output, give_up=cli.exited)
    sup.add(4, s=0.01)
    wait_for(lambda: len(sup.done_by_job()) == 4, timeout=30, what="4 jobs done", details=cli.output)
    repeat = f'"ZRANGE" "{sup.prefix}:{sup.queue}:repeat"'  # read by the gauges only
    with Monitor(redis_url, str(tmp_path / "monitor.log")) as monitor:
        bodies = [_scrape(port) for _ in range(3)]
        time.sleep(1.0)  # nothing reads the queues between scrapes
    assert monitor.count(repeat) == 3, [line for line in monitor.lines() if "repeat" in line]
    for body in bodies:
        assert f'echomq_queue_jobs{{queue="{sup.queue}",state="completed"}} 4.0' in body
        assert f'echomq_queue_oldest_age_seconds{{queue="{sup.queue}"}} 0.0' in body
        assert f'echomq_queue_ready_jobs{{queue="{sup.queue}"}} 0.0' in body
    assert sup.stop() == 0, cli.output()

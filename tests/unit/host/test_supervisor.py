"""The supervisor's small rules without processes: the restart backoff, how an exit is
named, the job limit's jitter, the memory figure and the process label of log records."""
from __future__ import annotations

import io
import json
import logging
import signal

from echomq_gevent.host.logs import JsonFormatter, setup_logging
from echomq_gevent.host.supervised import EXIT_RECYCLE, SupervisedChild, rss_mb
from echomq_gevent.host.supervisor import BACKOFF_CAP, describe_exit, restart_delay


def test_restart_delay_doubles_and_is_capped():
    delays = [restart_delay(n) for n in range(1, 12)]
    assert delays[:4] == [0.5, 1.0, 2.0, 4.0]
    assert all(a <= b for a, b in zip(delays, delays[1:]))
    assert max(delays) == BACKOFF_CAP == delays[-1]


def test_exits_are_named_by_code_or_signal():
    assert describe_exit(1) == "exit code 1"
    assert describe_exit(-signal.SIGKILL) == "killed by SIGKILL"
    assert describe_exit(EXIT_RECYCLE) == f"exit code {EXIT_RECYCLE} (recycled)"
    assert describe_exit(None) == "still running"


def test_the_job_limit_is_jittered_upwards_by_at_most_a_tenth():
    limits = {SupervisedChild(1, max_jobs=1000).job_limit for _ in range(200)}
    assert min(limits) >= 1000 and max(limits) <= 1100 and len(limits) > 1
    assert SupervisedChild(1, max_jobs=5).job_limit == 5
    assert SupervisedChild(1).job_limit is None


def test_rss_is_a_plausible_number_of_megabytes():
    before = rss_mb()
    blob = b"x" * (40 * 1024 * 1024)
    assert 1 < before < 100_000
    assert rss_mb() > before + 30
    del blob


def test_log_records_name_the_process_in_text_and_json():
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        out = io.StringIO()
        setup_logging("info", "text", stream=out, process="2/4711")
        logging.getLogger("echomq_gevent.test").info("hello")
        assert " process=2/4711 echomq_gevent.test: hello" in out.getvalue()
        out = io.StringIO()
        setup_logging("info", "json", stream=out, process="supervisor/9")
        logging.getLogger("echomq_gevent.test").info("hello")
        record = json.loads(out.getvalue())
        assert record["process"] == "supervisor/9" and "echomq_process" not in record
        out = io.StringIO()
        setup_logging("info", "text", stream=out)
        logging.getLogger("echomq_gevent.test").info("hello")
        assert "process=" not in out.getvalue()
        assert isinstance(root.handlers[0].formatter, logging.Formatter)
        assert not isinstance(root.handlers[0].formatter, JsonFormatter)
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in saved[0]:
            root.addHandler(h)
        root.setLevel(saved[1])


def test_state_files_are_read_only_when_well_formed_and_their_supervisor_runs(tmp_path, monkeypatch):
    import os

    from echomq_gevent.host import process_state
    from echomq_gevent.host.process_state import RUN_DIR_ENV, read_states, remove_stale, state_path, write_state

    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path))
    # this test process stands for a running supervisor (its command line names no echomq)
    monkeypatch.setattr(process_state, "_alive", lambda pid: pid == os.getpid())
    conf = str(tmp_path / "worker.yaml")
    assert read_states(conf) == []
    path = state_path(conf)
    assert path == state_path(str(tmp_path / "." / "worker.yaml")) and path.startswith(str(tmp_path))
    assert path.endswith(f"-{os.getpid()}.json")
    good = {"supervisor": {"pid": os.getpid()}, "processes": [{"index": 1, "pid": 5}]}
    write_state(path, good)
    dead = state_path(conf, pid=2 ** 22 + 12345)
    write_state(dead, {"supervisor": {"pid": 2 ** 22 + 12345}, "processes": []})
    write_state(state_path(str(tmp_path / "other.yaml")), good)  # another file's supervisor
    assert read_states(conf) == [good]
    for bad in ({"supervisor": {"pid": os.getpid()}, "processes": "x"}, ["no"], {"processes": []},
                {"supervisor": {"pid": os.getpid() + 1}, "processes": []}):  # not the file's pid
        write_state(path, bad)
        assert read_states(conf) == [], bad
    with open(path, "w") as fh:
        fh.write("{half")
    assert read_states(conf) == []
    remove_stale(conf)
    assert os.path.exists(path) and not os.path.exists(dead)
    assert process_state._files(conf) == [(os.getpid(), path)]


def test_a_pid_taken_by_another_program_is_not_a_supervisor():
    import os

    from echomq_gevent.host.process_state import _alive

    assert not _alive(2 ** 22 + 12345) and not _alive(0) and not _alive("1")
    if os.path.exists("/proc/self/cmdline"):
        assert _alive(os.getpid()) == (b"echomq" in open("/proc/self/cmdline", "rb").read())


def _supervisor(tmp_path, monkeypatch, argv):
    from echomq_gevent.host.config import parse_config
    from echomq_gevent.host.process_state import RUN_DIR_ENV
    from echomq_gevent.host.supervisor import Supervisor

    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path))
    cfg = parse_config("queues: {q: {}}\n", filename=str(tmp_path / "worker.yaml"))
    sup = Supervisor(cfg, 1)
    sup._argv = lambda index: list(argv)  # the program a child runs, instead of the command
    return sup


def test_a_child_the_system_cannot_start_is_retried_after_the_backoff(tmp_path, monkeypatch):
    sup = _supervisor(tmp_path, monkeypatch, [str(tmp_path / "no-such-program")])
    try:
        assert sup._start_slot(1) is None
        assert not sup.children and 1 not in sup.current and sup._spawning == 0
        assert sup.failures[1] == 1 and 1 in sup._restarts  # after restart_delay(1) s
    finally:
        for g in sup._restarts.values():
            g.kill()


def test_a_child_started_while_a_sigterm_arrived_is_stopped_at_once(tmp_path, monkeypatch):
    import sys

    sup = _supervisor(tmp_path, monkeypatch, [sys.executable, "-c", "import time; time.sleep(60)"])
    sup.shutting_down = 1  # as when the signal handler ran while Popen waited for the exec
    child = sup._spawn(1)
    try:
        assert child is not None and child.retiring == "stopping"
        assert child.proc.wait(20) == -signal.SIGTERM
        child.exited.wait(5)
        assert sup._done.wait(5) and not sup.children
    finally:
        child.proc.kill()

"""Every import path users write keeps working: the names of ``from echomq_gevent import``,
the integration and plugin modules the docs name, the module paths documented as public,
and the flat module names of 0.1 (with a DeprecationWarning naming the new path)."""
from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
import warnings

import pytest

import echomq_gevent

#: ``from echomq_gevent import <name>`` for each of these.
TOP_LEVEL = [
    "Queue", "Job", "Worker", "ConnectionSettings", "FlowProducer", "JobTimeoutError", "QueueEvents",
    "QueueEventsProducer", "JobFailedError", "JobScheduler", "CronError", "hookimpl", "FailureDecision",
    "QueueKeys", "Pool", "EchoMQError", "ScriptError", "JobNotExist", "JobLockNotExist", "JobNotInState",
    "JobLockMismatch", "JobLockedError", "InvalidOptionError", "JobCancelled", "InvalidJobIdError",
    "InvalidJobDataError", "UnrecoverableError", "DelayedError", "RateLimitError", "WaitingChildrenError",
    "ConfigError", "WorkerStateError", "__version__",
]

#: (module, names) users import, and the YAML plugin and ``python -m`` module names.
MODULES = [
    ("echomq_gevent.errors", ["UnrecoverableError", "EchoMQError"]),
    ("echomq_gevent.contrib.gunicorn", ["install"]),
    ("echomq_gevent.contrib.wsgi", ["get_queue", "EchoMQMiddleware"]),
    ("echomq_gevent.contrib.django", ["enqueue_on_commit", "enqueue", "processor"]),
    ("echomq_gevent.contrib.django.gunicorn", ["install"]),
    ("echomq_gevent.contrib.flask", []),
    ("echomq_gevent.contrib.pyramid", ["enqueue_job"]),
    ("echomq_gevent.contrib.prometheus", ["render"]),
    ("echomq_gevent.contrib.otel", ["producer_plugins"]),
    ("echomq_gevent.contrib.logging", []),
    ("echomq_gevent.contrib.demo", []),
    ("echomq_gevent.contrib.dashboard", ["Dashboard"]),
    ("echomq_gevent.contrib.frameworks", ["enqueue_after_commit"]),
    # packages that replaced 0.1 modules of the same name export what those did
    ("echomq_gevent.queue", ["Queue", "JOB_TYPES", "DEFAULT_COUNT_TYPES", "CLEAN_TYPES"]),
    ("echomq_gevent.worker", ["Worker", "WorkerHealth", "ActiveJobs", "RATE_LIMIT_MESSAGE"]),
    ("echomq_gevent.plugins", ["PluginHost", "make_plugin_manager", "load_entry_points", "RENAMED_PLUGINS"]),
    ("echomq_gevent.connection", ["make_client", "clone_client", "close_client", "ConnectionSettings",
                                  "DEFAULT_URL", "redact_url", "ReadinessProbe"]),
    # the paths the guides give
    ("echomq_gevent.protocol.cron", ["next_run"]),
    ("echomq_gevent.host.runner", ["Runner"]),
    ("echomq_gevent.worker.options", ["validate_worker_options", "WORKER_OPTIONS"]),
    ("echomq_gevent.protocol.scripts", ["pack", "Scripts"]),
    ("echomq_gevent.plugins.builtin", []),
]


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_the_top_level_names(name):
    assert getattr(echomq_gevent, name) is not None
    if name != "__version__":
        assert name in echomq_gevent.__all__


def test_the_top_level_lists_nothing_it_cannot_give():
    for name in echomq_gevent.__all__:
        getattr(echomq_gevent, name)


@pytest.mark.parametrize("module,names", MODULES, ids=[m for m, _ in MODULES])
def test_the_modules_and_their_names(module, names):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        mod = importlib.import_module(module)
    for name in names:
        assert getattr(mod, name) is not None, f"{module}.{name}"


#: the command's module monkey-patches the process it is imported in: asked in a child
IN_A_CHILD = {"echomq_gevent.cli"}


@pytest.mark.parametrize("old,new", sorted(echomq_gevent.MOVED_MODULES.items()))
def test_the_flat_names_of_0_1_still_import(old, new):
    if old in IN_A_CHILD:
        code = (f"import warnings, importlib; warnings.simplefilter('always')\n"
                f"with warnings.catch_warnings(record=True) as w:\n"
                f"    m = importlib.import_module({old!r})\n"
                f"print(m is importlib.import_module({new!r}), any({new!r} in str(x.message) for x in w))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert out.stdout.split() == ["True", "True"], out.stdout + out.stderr
        return
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
        mod = importlib.import_module(old)
    assert mod is importlib.import_module(new)
    # the module keeps its own spec: its relative imports resolve in its own package
    assert mod.__spec__.name == new and mod.__package__ == mod.__spec__.parent


def test_a_name_that_never_existed_is_not_found():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("echomq_gevent.worker_fetchh")
    with pytest.raises(AttributeError, match="no attribute 'Quuee'"):
        echomq_gevent.Quuee  # noqa: B018


def test_forwarded_methods_show_their_signature_and_docs():
    from echomq_gevent import Job, Queue

    sig = inspect.signature(Queue.get_metrics)
    assert list(sig.parameters) == ["self", "type", "start", "end"]
    assert "metrics" in (Queue.get_metrics.__doc__ or "").lower()
    assert list(inspect.signature(Job.move_to_waiting_children).parameters)[:2] == ["self", "token"]


def test_the_command_entry_point_and_python_m():
    out = subprocess.run([sys.executable, "-m", "echomq_gevent", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "echomq-gevent" in out.stdout, out.stderr
    from importlib.metadata import entry_points

    eps = entry_points()
    scripts = eps.select(group="console_scripts") if hasattr(eps, "select") else eps.get("console_scripts", [])
    # Python 3.9 lists a distribution once per place it is found (site-packages and a
    # checkout's egg-info): the same entry point may come twice
    assert {e.value for e in scripts if e.name == "echomq-gevent"} == {"echomq_gevent.host.cli:main"}  # (loading it would monkey-patch this process)


def test_the_worker_keeps_its_public_surface():
    """What users call on a Worker (docs/worker.md, docs/node-api.md, contrib, the runner)
    is still there with the same signature, now carried out by the worker's parts."""
    from echomq_gevent import Worker

    params = {
        "run": ["self"], "start": ["self"], "close": ["self", "timeout", "reason"], "pause": ["self", "wait"],
        "resume": ["self"], "rate_limit": ["self", "ms"], "cancel_job": ["self", "job_id", "reason"],
        "cancel_all_jobs": ["self", "reason"], "get_next_job": ["self", "token", "block", "timeout"],
        "manual_complete": ["self", "job", "returnvalue", "token", "fetch_next"],
        "manual_fail": ["self", "job", "err", "token", "fetch_next"], "health": ["self"],
        "lock_thread_alive": ["self"], "hub_blocked_for": ["self"], "fetch_loop_alive": ["self"],
    }
    for name, expected in params.items():
        method = getattr(Worker, name)
        assert list(inspect.signature(method).parameters) == expected, name
        assert method.__doc__, f"Worker.{name} has no docstring"
    # attributes and properties users read, and the settings they may assign (no Redis needed)
    w = Worker("q", lambda job: None, connection="redis://127.0.0.1:1/0", name="a", limiter={"max": 1, "duration": 9})
    for name in ("options", "keys", "queue_name", "prefix", "connection_settings", "client", "scripts", "plugins",
                 "id", "counters", "active_jobs", "concurrency", "paused", "closed", "completed_count",
                 "failed_count", "running", "closing", "last_fetch_at"):
        getattr(w, name)
    assert (w.name, w.limiter, w.running, w.closing, w.paused, w.closed) == ("a", {"max": 1, "duration": 9}, False,
                                                                           False, False, False)
    for name, value in (("name", "b"), ("lock_duration", 1234), ("limiter", None), ("drain_delay", 1.5),
                        ("processor", None), ("concurrency", 3)):
        setattr(w, name, value)
        assert getattr(w, name) == value, name

"""A worker process for the chaos tests: gevent-patched like production, one Worker on the
queue named in its JSON argument, every run recorded straight into Redis (bypassing any
proxy under test) so the test can count how often each job ran.

    python chaos_worker.py '{"queue": ..., "url": ..., "record_url": ..., "prefix": ...,
                            "options": {...}, "settings": {...}}'

Jobs' data: ``{"s": seconds}`` sleeps that long (0 or absent: a no-op). ``"record": false``
skips the recording (the soak), ``"stats_every": s`` prints ``STAT completed failed
retried`` every s seconds. ``"freeze_on_active": true``: a job whose data has ``"freeze": true``
stops the whole process (SIGSTOP to itself) in the job's ``active`` hook, after recording its
id in ``<prefix>:chaos:frozen``: frozen between its pick-up and its processor's start, until
the test sends SIGCONT. Prints READY as it starts; exits 0 after SIGTERM.
"""
from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402

import gevent  # noqa: E402
import redis  # noqa: E402

from echomq_gevent import ConnectionSettings, Worker, hookimpl  # noqa: E402
from echomq_gevent.plugins import PluginHost, make_plugin_manager  # noqa: E402

cfg = json.loads(sys.argv[1])
logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                    format="%(asctime)s %(name)s %(levelname)s %(message)s")
recorder = redis.Redis.from_url(cfg["record_url"], decode_responses=True, socket_timeout=5)
runs_key = f"{cfg['prefix']}:chaos:runs"


record = cfg.get("record", True)


def processor(job):
    if record:
        recorder.rpush(runs_key, job.id)
    seconds = (job.data or {}).get("s") or 0
    if seconds:
        gevent.sleep(seconds)
    return None


class FreezeOnActive:
    """Stops the process in the ``active`` hook of a job marked ``"freeze": true``."""

    @hookimpl
    def echomq_job_active(self, worker, job):
        if (job.data or {}).get("freeze"):
            recorder.rpush(f"{cfg['prefix']}:chaos:frozen", job.id)
            os.kill(os.getpid(), signal.SIGSTOP)


plugins = PluginHost(make_plugin_manager([FreezeOnActive()])) if cfg.get("freeze_on_active") else None
settings = ConnectionSettings(**cfg["settings"]) if cfg.get("settings") else None
worker = Worker(cfg["queue"], processor, connection=cfg["url"], prefix=cfg["prefix"],
                connection_settings=settings, plugins=plugins, **cfg.get("options", {}))


def report(every: float) -> None:
    """Print the worker's counters every ``every`` s (the soak samples them)."""
    while True:
        gevent.sleep(every)
        c = worker.counters
        print(f"STAT {c['completed']} {c['failed']} {c['retried']}", flush=True)


if cfg.get("stats_every"):
    gevent.spawn(report, float(cfg["stats_every"]))
print("READY", flush=True)
worker.run()
print("EXITED", flush=True)

"""The job workers of one gunicorn worker process: start, drain, hand-back, health.

:class:`CoHost` is what the gunicorn hooks (:mod:`echomq_gevent.contrib.gunicorn`) drive
inside each ``-k gevent`` worker process. The workers themselves are run by the same
:class:`~echomq_gevent.host.runner.Runner` the command uses; this class adds what gunicorn
needs: the check that gevent patched the process, a hub heartbeat, noticing gunicorn's
decision to stop (``alive`` false), a drain budgeted by gunicorn's timeouts, a quick
hand-back for SIGINT/SIGQUIT and the report after SIGABRT, and the status the health
endpoints (:mod:`echomq_gevent.contrib.wsgi`) serve.

Everything here runs on the process's main thread; the job greenlets share the hub with
the request greenlets. gevent is imported inside the methods: the gunicorn master loads
this module at config time, before any worker patches its process.
"""
from __future__ import annotations

import gc
import logging
import os
import time
from typing import Any, Dict, List, Optional

from ..host.config import redact_url
from ..errors import ConfigError
from .state import Settings

__all__ = ["CoHost"]

log = logging.getLogger("echomq_gevent.gunicorn")


class CoHost:
    """The job workers of one gunicorn worker process and their shutdown.

    Built by the ``post_worker_init`` hook on the main greenlet. ``state`` goes
    ``starting`` -> ``running`` -> ``draining`` (stop fetching, in-flight jobs may finish)
    -> ``stopped``; ``handing_back`` when gunicorn asked for a quick exit, ``aborted``
    after SIGABRT.
    """

    def __init__(self, settings: Settings, gworker: Any) -> None:
        self.settings = settings
        self.gworker = gworker
        self.pid = os.getpid()
        self.state = "starting"
        #: the Runner of this process's job workers (built by :meth:`start`)
        self.runner: Any = None
        self.started_at = time.time()
        self.drain_started: Optional[float] = None
        self.deadline: Optional[float] = None
        self.last_tick = time.monotonic()
        self.max_lag = 0.0
        self._lag_window_start = time.monotonic()
        self._drain: Any = None
        self._watcher: Any = None
        self._heartbeat: Any = None
        self._readiness: Any = None
        self._thread_ident: Optional[int] = None
        self._hub: Any = None
        self._abort_snapshot: List[Any] = []

    @property
    def workers(self) -> List[Any]:
        return self.runner.workers if self.runner is not None else []

    # -- start ----------------------------------------------------------------------------
    def start(self) -> None:
        """Build and start the workers. Main greenlet of the gunicorn worker process.

        Raises ConfigError when gevent has not patched the process (gunicorn runs another
        worker class) or a processor or plugin cannot load; either stops the worker from
        booting.
        """
        import gevent
        from gevent import monkey

        missing = [m for m in ("socket", "threading", "time", "select", "ssl")
                   if not monkey.is_module_patched(m)]
        if missing:
            raise ConfigError(
                f"echomq_gevent: gunicorn worker {self.pid} is not monkey-patched by gevent "
                f"(not patched: {', '.join(missing)}). Run gunicorn with the gevent worker class "
                f"(-k gevent, or worker_class = 'gevent' in the config file); job greenlets cannot "
                f"share a sync or threaded worker"
            )
        self._hub = gevent.get_hub()
        self._thread_ident = monkey.get_original("threading", "get_ident")()
        self._wire_logging()
        cfg = self.settings.config
        cfg.activate_paths()
        from ..host.runner import Runner

        self.runner = Runner(cfg, self.settings.redis_url, extra_plugins=self.settings.extra_plugins)
        if self.settings.gc_freeze:
            # Everything loaded so far (gunicorn, the app, our modules) lives as long as the
            # process: keep it out of the cyclic collector, so a full collection under job
            # load scans only new objects (measured: 120-260 ms pauses -> under 10 ms).
            gc.collect()
            gc.freeze()
        self.runner.start()
        from .outbox.registry import start_relays

        start_relays()  # the outbox relays of the apps loaded in this process
        self.state = "running"
        self._heartbeat = gevent.spawn(self._beat)
        self._watcher = gevent.spawn(self._watch)
        log.info("gunicorn worker %s: job workers started for queue(s) %s on %s (prefix %s)",
                 self.pid, ", ".join(self.runner.queue_names), redact_url(self.settings.redis_url), cfg.prefix)

    def _wire_logging(self) -> None:
        """Send our log records to gunicorn's error log when the app configured none."""
        ours = logging.getLogger("echomq_gevent")
        level = getattr(logging, self.settings.config.log_level.upper(), logging.INFO)
        if ours.level == logging.NOTSET:
            ours.setLevel(level)
        if ours.handlers or logging.getLogger().handlers:
            return
        error_log = getattr(getattr(self.gworker, "log", None), "error_log", None)
        for h in getattr(error_log, "handlers", []):
            ours.addHandler(h)
        ours.propagate = False

    # -- background greenlets -------------------------------------------------------------
    def _beat(self) -> None:
        """Record hub ticks; the gap beyond the sleep is how long something held the hub."""
        import gevent

        period = 0.25
        while self.state not in ("stopped", "aborted"):
            before = time.monotonic()
            gevent.sleep(period)
            now = time.monotonic()
            lag = max(0.0, now - before - period)
            if now - self._lag_window_start > 60:
                self.max_lag, self._lag_window_start = 0.0, now
            self.max_lag = max(self.max_lag, lag)
            self.last_tick = now

    def _watch(self) -> None:
        """Notice gunicorn's shutdown (``alive`` false) and start the drain at once."""
        import gevent

        while self.state == "running" and getattr(self.gworker, "alive", True):
            gevent.sleep(self.settings.poll_interval)
        if self.state == "running":
            self.begin_drain("gunicorn worker is stopping")

    # -- shutdown -------------------------------------------------------------------------
    @property
    def limit(self) -> float:
        """Seconds from the shutdown decision until gunicorn kills this process:
        ``min(graceful_timeout, timeout)`` (``timeout`` 0 means no heartbeat kill)."""
        cfg = getattr(self.gworker, "cfg", None)
        limit = float(getattr(cfg, "graceful_timeout", 30) or 30)
        timeout = float(getattr(cfg, "timeout", 0) or 0)
        return min(limit, timeout) if timeout > 0 else limit

    def budget(self) -> float:
        """Seconds the in-flight jobs may still run once the drain starts:
        ``min(graceful_timeout, timeout) - margin``. The master kills a worker after
        ``graceful_timeout`` (SIGTERM) or ``timeout`` without a heartbeat (recycling,
        HUP); the margin is kept for the hand-back."""
        limit = self.limit
        margin = self.settings.drain_margin
        if margin is None:
            margin = min(2.0, limit / 4)
        return max(0.0, limit - margin)

    def begin_drain(self, reason: str) -> None:
        """Stop fetching everywhere and let in-flight jobs finish within :meth:`budget`;
        each worker hands back what is left when the budget runs out. Returns at once
        (the drain runs in its own greenlet)."""
        import gevent

        if self.state != "running":
            return
        self.state = "draining"
        self.drain_started = time.monotonic()
        budget = self.budget()
        self.deadline = self.drain_started + budget
        log.info("gunicorn worker %s: %s; draining %d in-flight job(s) for up to %.1f s, then "
                 "handing the rest back to wait", self.pid, reason, self.in_flight(), budget)
        self._drain = gevent.spawn(self._drain_all, budget)

    def _drain_all(self, timeout: float) -> None:
        self.runner.drain(timeout, "gunicorn").join()
        if self.state in ("draining", "handing_back"):
            self.state = "stopped"

    def finish(self) -> None:
        """``worker_exit``: the HTTP side has stopped. Wait for the drain until the
        deadline, hand back what is left, release connections. Main greenlet."""
        if self.state == "aborted":
            self._hand_back_after_abort()
        elif self.state == "running":
            self.begin_drain("gunicorn worker exiting")
        if self._drain is not None and self.deadline is not None:
            # The workers hand back by themselves at the deadline; give them half the margin
            # to do it, then force it with what is left before gunicorn's kill.
            margin = max(0.0, self.limit - self.budget())
            self._drain.join(timeout=max(0.0, self.deadline - time.monotonic()) + margin / 2)
            if not self._drain.dead:
                log.warning("gunicorn worker %s: drain deadline passed; handing back now", self.pid)
                hard_end = (self.drain_started or time.monotonic()) + self.limit - 0.1
                self._hand_back(limit=max(0.2, hard_end - time.monotonic()))
        self.state = "stopped" if self.state != "aborted" else self.state
        from .outbox.registry import stop_relays

        stop_relays(timeout=2.0)
        for g in (self._watcher, self._heartbeat, self._drain):
            if g is not None and not g.dead:
                g.kill(block=False)
        from .wsgi import close_queues

        close_queues()
        if self._readiness is not None:
            try:
                self._readiness.close()
            except Exception:
                pass
        left = self.in_flight()
        counts = self.counts()
        log.info("gunicorn worker %s: job workers stopped (%d completed, %d handed back, %d still "
                 "in flight)", self.pid, counts.get("completed", 0), counts.get("handed_back", 0), left)

    def _hand_back_after_abort(self) -> None:
        """After SIGABRT: hand back the jobs the workers still track. The job that held
        the hub was unwound by gunicorn's SystemExit and is no longer tracked; it is left
        active on purpose, so the stalled check recovers it once its lock expires and
        counts the stall: a job that always hogs the hub is failed after
        ``max_stalled_count`` instead of killing worker after worker."""
        for w, job in self._abort_snapshot:
            if job.id not in w.active_jobs:
                log.warning("gunicorn worker %s: job %s of queue %r was running when the hub got "
                            "stuck; it stays active and a stalled check will recover it (or fail it "
                            "after max_stalled_count)", self.pid, job.id, w.queue_name)
        self._hand_back(limit=1.0)

    def _hand_back(self, limit: float) -> None:
        if self.runner is not None:
            self.runner.hand_back(limit, "gunicorn")

    def hand_back_now(self, reason: str) -> None:
        """``worker_int``: hand every in-flight job back to ``wait`` now.

        gunicorn calls it on a greenlet (signals) or, with ``--reload``, from its
        reloader thread; from a foreign thread the work is passed to the hub and this
        waits for it (at most 5 s).
        """
        from gevent import monkey

        get_ident = monkey.get_original("threading", "get_ident")
        if self._thread_ident is not None and get_ident() != self._thread_ident:
            done = monkey.get_original("threading", "Event")()

            def on_hub() -> None:
                import gevent

                def run() -> None:
                    try:
                        self.hand_back_now(reason)
                    finally:
                        done.set()
                gevent.spawn(run)
            self._hub.loop.run_callback_threadsafe(on_hub)
            done.wait(5.0)
            return
        if self.state in ("stopped", "handing_back", "aborted"):
            return
        log.warning("gunicorn worker %s: %s; handing %d in-flight job(s) back to wait", self.pid,
                    reason, self.in_flight())
        self.state = "handing_back"
        if self.drain_started is None:
            self.drain_started = time.monotonic()
            self.deadline = self.drain_started
        self._hand_back(limit=5.0)
        self.state = "stopped"

    def report_abort(self) -> None:
        """``worker_abort``: the master found this process stuck (``timeout``) and sent
        SIGABRT. Log every greenlet's and thread's stack and the jobs in flight; the jobs
        are handed back in ``worker_exit`` if the hub still turns, else a stalled check
        elsewhere recovers them once their locks expire."""
        from gevent.util import format_run_info

        self.state = "aborted"
        self._abort_snapshot = self.runner.active() if self.runner is not None else []
        jobs = {w.queue_name: sorted(map(str, w.active_jobs)) for w in self.workers}
        try:
            info = "\n".join(format_run_info())
        except Exception as exc:  # never let the report itself fail the abort
            info = f"(format_run_info failed: {exc!r})"
        log.critical("gunicorn worker %s aborted (timeout: the hub did not turn for %s s). Jobs in "
                     "flight: %s\nWhat every greenlet and thread was doing:\n%s", self.pid,
                     getattr(getattr(self.gworker, "cfg", None), "timeout", "?"), jobs, info)

    # -- health ----------------------------------------------------------------------------
    def counts(self) -> Dict[str, int]:
        """The workers' counters (completed, failed, retried, stalled, lock_lost,
        handed_back) summed over this process's queues."""
        return self.runner.counts() if self.runner is not None else {}

    def in_flight(self) -> int:
        return self.runner.in_flight() if self.runner is not None else 0

    @property
    def draining(self) -> bool:
        """True from the moment gunicorn decided to stop this process."""
        return self.state != "running" or not getattr(self.gworker, "alive", True)

    def redis_ok(self) -> Optional[str]:
        """``None`` when Redis answers PING within 1 s (every primary, on a cluster), else
        the reason. Request greenlet."""
        if self._readiness is None:
            from ..connection.clients import ReadinessProbe

            self._readiness = ReadinessProbe(self.settings.redis_url, timeout=1.0)
        return self._readiness.check()

    def status(self) -> Dict[str, Any]:
        """This process's job workers as plain data (the health endpoints' JSON bodies)."""
        health = self.runner.health() if self.runner is not None else []
        return {
            "pid": self.pid,
            "state": self.state,
            "draining": self.draining,
            "hub": {"last_tick_age_ms": round((time.monotonic() - self.last_tick) * 1000, 1),
                    "max_lag_ms_60s": round(self.max_lag * 1000, 1),
                    "blocked_for_s": max([h.hub_blocked_for_s for h in health] or [0.0])},
            "queues": {h.queue: h.as_dict() for h in health},
            "counts": self.counts(),
            "outbox": _outbox_status(),
        }


def _outbox_status() -> List[Dict[str, Any]]:
    """Each registered outbox's numbers (from its relay's last reading)."""
    from .outbox.registry import status

    try:
        return status()
    except Exception as exc:  # a status must never fail the health endpoints
        return [{"error": f"{type(exc).__name__}: {exc}"}]


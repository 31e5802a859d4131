"""Sentry for jobs: a transaction per run, one error event per job that fails for good,
the producer's trace continued in the worker, and opt-in Crons check-ins for job schedulers.

Install the extra (``pip install 'echomq-gevent[sentry]'``, which brings ``sentry-sdk>=2,<4``)
and register the plugin on the worker host and on the queues that add jobs::

    # conf/worker.yaml: SENTRY_DSN in the environment, or sentry_sdk.init() done by your app
    plugins: ["echomq_gevent.contrib.sentry"]

    # code
    from echomq_gevent.contrib.sentry import SentryPlugin, producer_plugins
    host = PluginHost(make_plugin_manager([SentryPlugin(crons=True)]))
    queue = Queue("mail", connection=url, plugins=producer_plugins())

What it sends (``docs/observability.md`` has the whole story):

* per run of a job, on the job's greenlet, a fresh isolation scope (so breadcrumbs, tags
  and events of one job never reach another) with the tags ``echomq.queue``,
  ``echomq.job.name``, ``echomq.job.id``, ``echomq.attempt``, ``echomq.processor`` and the
  context ``echomq_job``; and a transaction, op ``queue.process``, named by the job name,
  continuing the trace the job carries (``sentry-trace``/``baggage`` in BullMQ's
  ``opts.telemetry.metadata``, or a W3C ``traceparent`` there); on sentry-sdk 3.x, which
  has no transactions, a root span of the same name and op (``.api`` has the calls that
  differ between the majors);
* one error event, with the exception and its traceback, when the job fails for good (its
  last attempt, an ``UnrecoverableError``, a policy's ``fail``); the earlier failed
  attempts are breadcrumbs of that event (category ``echomq.retry``), read from the job's
  stored stack traces, so they are there whichever worker ran them. A retried attempt
  sends no event;
* a warning event when this worker's stalled check finds a job stalled (grouped per queue);
* with ``crons=True`` (``ECHOMQ_SENTRY_CRONS=1`` for the module), a check-in
  ``in_progress`` when a job scheduler's run starts and ``ok`` or ``error`` when it ends,
  the monitor named by the scheduler id, its schedule sent with the check-in.

Off when Sentry is off: every hook first asks whether the SDK has a client with a
transport, and does nothing else when it has not. The plugin never calls
``sentry_sdk.init`` when the application already did.
"""
from __future__ import annotations

import json
import logging
import os
import re
import time
import uuid
import weakref
from typing import Any, Dict, Iterator, List, Optional

import sentry_sdk

# First, as it refuses a sentry-sdk major the plugin was not written for (a ConfigError naming
# the fix); SUPPORTED_SDK stays importable from here
from .api import SUPPORTED_SDK, sdk  # noqa: F401

import sentry_sdk.utils  # noqa: E402
from sentry_sdk.crons import capture_checkin  # noqa: E402

from ...plugins.hookspecs import hookimpl  # noqa: E402
from ..carrier import job_carrier  # noqa: E402

__all__ = ["SentryPlugin", "producer_plugins", "trace_headers", "monitor_config", "monitor_slug"]

log = logging.getLogger("echomq_gevent.sentry")

#: The transaction's op, and the producer span's, as Sentry's queue monitoring names them.
OP_PROCESS = "queue.process"
OP_PUBLISH = "queue.publish"
#: Sentry's monitor slugs: lower case letters, digits, ``-`` and ``_``, at most 50.
_SLUG_BAD = re.compile(r"[^a-z0-9_-]+")
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_CHECKIN_NS = uuid.UUID("6f1c2b8e-5d0a-4c4e-9a57-2f3d1e0b7c11")


def _sentry_on() -> bool:
    """Whether the SDK would send anything: a client that is set up and has a transport."""
    client = sentry_sdk.get_client()
    return client.is_active() and getattr(client, "transport", None) is not None


# --- trace context carried in the job ----------------------------------------------------------
def trace_headers(opts: Optional[Dict[str, Any]]) -> Dict[str, str]:
    """The ``sentry-trace`` and ``baggage`` a job carries, for ``sentry_sdk.continue_trace``.
    A job that carries only a W3C ``traceparent`` (an OpenTelemetry producer, ours or Node's
    ``bullmq-otel``) continues that trace id: it is turned into a ``sentry-trace``."""
    carrier = job_carrier(opts)
    if not carrier:
        return {}
    out: Dict[str, str] = {}
    sentry_trace = carrier.get("sentry-trace")
    if isinstance(sentry_trace, str) and sentry_trace:
        out["sentry-trace"] = sentry_trace
    else:
        match = _TRACEPARENT.match(str(carrier.get("traceparent") or "").strip().lower())
        if match and match.group(1) != "0" * 32:
            sampled = "1" if int(match.group(3), 16) & 1 else "0"
            out["sentry-trace"] = f"{match.group(1)}-{match.group(2)}-{sampled}"
    baggage = carrier.get("baggage")
    if isinstance(baggage, str) and baggage:
        out["baggage"] = baggage
    return out


def _outgoing_headers(span: Any) -> Dict[str, str]:
    """``sentry-trace`` and ``baggage`` of ``span`` (a producer span), or of the current
    scope's trace when there is no span (Sentry continues traces without transactions too)."""
    if span is not None:
        return sdk.span_headers(span)
    headers: Dict[str, str] = {}
    traceparent = sentry_sdk.get_traceparent()
    if traceparent:
        headers["sentry-trace"] = traceparent
    baggage_text = sentry_sdk.get_baggage()
    if baggage_text:
        headers["baggage"] = baggage_text
    return headers


def _carry(opts: Dict[str, Any], headers: Dict[str, str], keep_own: bool = False) -> None:
    """Merge ``headers`` into a job's ``opts.telemetry.metadata`` beside what another plugin
    (OpenTelemetry's ``traceparent``) put there. ``omitContext`` keeps them out; with
    ``keep_own`` a job that already carries a ``sentry-trace`` (a bulk's or flow's own) keeps it."""
    tel = opts.get("telemetry")
    tel = dict(tel) if isinstance(tel, dict) else {}
    if tel.get("omitContext") or not headers:
        return
    carrier = job_carrier({"telemetry": tel}) or {}
    if keep_own and carrier.get("sentry-trace"):
        return
    carrier = dict(carrier)
    carrier["sentry-trace"] = headers["sentry-trace"]
    if headers.get("baggage"):
        other = [item for item in str(carrier.get("baggage") or "").split(",")
                 if item.strip() and not item.strip().startswith("sentry-")]
        carrier["baggage"] = ",".join(other + [headers["baggage"]])
    tel["metadata"] = json.dumps(carrier)
    opts["telemetry"] = tel


# --- Crons --------------------------------------------------------------------------------------
def monitor_slug(scheduler_id: str) -> str:
    """The monitor slug of a job scheduler: its id, lower case, other characters as ``-``,
    at most 50 characters (Sentry's limit)."""
    slug = _SLUG_BAD.sub("-", scheduler_id.lower()).strip("-")
    return (slug or "echomq-scheduler")[:50]


def monitor_config(repeat: Any) -> Optional[Dict[str, Any]]:
    """Sentry's monitor schedule for a scheduler's repeat options, or None when Sentry cannot
    express it: a cron pattern of 5 fields (6 with a seconds field of ``0``), or ``every``
    in whole minutes; the time zone with it."""
    if not isinstance(repeat, dict):
        return None
    schedule: Optional[Dict[str, Any]] = None
    pattern = repeat.get("pattern")
    every = repeat.get("every")
    if isinstance(pattern, str):
        fields = pattern.split()
        if len(fields) == 6 and fields[0] == "0":
            fields = fields[1:]
        if len(fields) == 5:
            schedule = {"type": "crontab", "value": " ".join(fields)}
    elif isinstance(every, int) and not isinstance(every, bool) and every > 0 and every % 60000 == 0:
        minutes = every // 60000
        for unit, size in (("day", 1440), ("hour", 60), ("minute", 1)):
            if minutes % size == 0:
                schedule = {"type": "interval", "value": minutes // size, "unit": unit}
                break
    if schedule is None:
        return None
    config: Dict[str, Any] = {"schedule": schedule}
    if isinstance(repeat.get("tz"), str):
        config["timezone"] = repeat["tz"]
    return config


def _checkin_id(job: Any) -> str:
    """One check-in id per scheduler run, the same for all its attempts and on any worker."""
    return uuid.uuid5(_CHECKIN_NS, f"{job.prefix}:{job.queue_name}:{job.id}").hex


# --- the runs in flight -------------------------------------------------------------------------
class _Run:
    __slots__ = ("cm", "scope", "txn", "owner", "started", "slug")

    def __init__(self, cm: Any, scope: Any, txn: Any, owner: Any, started: float, slug: Optional[str]) -> None:
        self.cm = cm
        self.scope = scope
        self.txn = txn
        self.owner = owner
        self.started = started
        self.slug = slug


def _processor_path(worker: Any, job: Any) -> str:
    try:
        fn = getattr(worker, "processor", None)
        if fn is None:
            plugins = getattr(worker, "plugins", None)
            fn = plugins.get_processor(job.queue_name, job.name) if plugins is not None else None
    except Exception:
        fn = None
    if fn is None:
        return ""
    module = getattr(fn, "__module__", None) or ""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__qualname__
    return f"{module}:{name}" if module else str(name)


def _summary(trace: str) -> str:
    """The error line of a stored stack trace: a Python traceback's last line, a Node
    stack's first."""
    lines = [line.strip() for line in trace.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    return lines[-1] if lines[0].startswith("Traceback") else lines[0]


def _current_greenlet() -> Any:
    import greenlet

    return greenlet.getcurrent()


class SentryPlugin:
    """The plugin.

    ``crons``: send Crons check-ins for job schedulers' runs (``ECHOMQ_SENTRY_CRONS=1``
    for the module plugin). ``monitor_options``: added to every monitor's config
    (``checkin_margin``, ``max_runtime``, ``failure_issue_threshold``...).
    ``capture_stalled``: a warning event when this worker's stalled check moves a job back.
    ``init_options`` (``dsn=...``, ``traces_sample_rate=...``): passed to ``sentry_sdk.init``
    when the SDK is not set up yet and a DSN is given here or in ``SENTRY_DSN``; ignored
    (with a warning) when the application set it up already.
    """

    def __init__(self, crons: bool = False, monitor_options: Optional[Dict[str, Any]] = None,
                 capture_stalled: bool = True, **init_options: Any) -> None:
        self.__name__ = "echomq_gevent.contrib.sentry"
        self.crons = crons
        self.monitor_options = dict(monitor_options or {})
        self.capture_stalled = capture_stalled
        self._runs: "weakref.WeakKeyDictionary[Any, _Run]" = weakref.WeakKeyDictionary()
        self._warmed = False
        _ensure_init(init_options)

    # -- producer -------------------------------------------------------------------------
    @hookimpl(hookwrapper=True, trylast=True)
    def echomq_add_job(self, queue: Any, name: str, data: Any, opts: Dict[str, Any], add: Any) -> Any:
        with self._publishing(f"{queue.name}.{name}", queue.name) as span:
            try:
                if span is not False:
                    _carry(opts, _outgoing_headers(span))
            except Exception:
                log.exception("sentry: could not put the trace into job %s; it is added without it", name)
            outcome = yield
            if span and not outcome.excinfo:
                sdk.set_data(span, "messaging.message.id", str(getattr(outcome.get_result(), "id", "")))

    @hookimpl(hookwrapper=True, trylast=True)
    def echomq_add_bulk(self, queue: Any, jobs: List[Dict[str, Any]], add_bulk: Any) -> Any:
        with self._publishing(f"addBulk {queue.name}", queue.name) as span:
            try:
                if span is not False:
                    headers = _outgoing_headers(span)
                    for job in jobs:
                        if isinstance(job.get("opts"), dict):
                            _carry(job["opts"], headers, keep_own=True)
            except Exception:
                log.exception("sentry: could not put the trace into a bulk add; it is added without it")
            yield

    @hookimpl(hookwrapper=True, trylast=True)
    def echomq_add_flows(self, producer: Any, operation: str, flows: List[Any], add: Any) -> Any:
        root = flows[0] if flows and isinstance(flows[0], dict) else {}
        with self._publishing(f"{operation} {root.get('queueName', '')}".strip(), str(root.get("queueName", ""))) as span:
            try:
                if span is not False:
                    headers = _outgoing_headers(span)
                    for node in _nodes(flows):
                        if not isinstance(node.get("opts"), dict):
                            node["opts"] = {}
                        _carry(node["opts"], headers, keep_own=True)
            except Exception:
                log.exception("sentry: could not put the trace into a flow; it is added without it")
            yield

    @staticmethod
    def _publishing(name: str, queue_name: str) -> Any:
        """A ``queue.publish`` span under the caller's current span, when there is one; yields
        the span, None (Sentry on, no transaction: the scope's trace is carried) or False (off)."""
        import contextlib

        @contextlib.contextmanager
        def cm() -> Iterator[Any]:
            if not _sentry_on():
                yield False
                return
            if sentry_sdk.get_current_span() is None:
                yield None
                return
            with sdk.publishing(name, OP_PUBLISH, {"messaging.destination.name": queue_name,
                                                   "messaging.system": "bullmq"}) as span:
                yield span
        return cm()

    # -- consumer -------------------------------------------------------------------------
    @hookimpl(tryfirst=True)
    def echomq_job_active(self, worker: Any, job: Any) -> None:
        if not _sentry_on():
            return
        cm = sentry_sdk.isolation_scope()
        scope = cm.__enter__()
        try:
            processor = _processor_path(worker, job)
            attempt = int(job.attempts_made) + 1
            tags = {"echomq.queue": job.queue_name, "echomq.job.name": job.name, "echomq.job.id": str(job.id),
                    "echomq.attempt": str(attempt)}
            if processor:
                tags["echomq.processor"] = processor
            for key, value in tags.items():  # one by one: Scope.set_tags came in sentry-sdk 2.1
                scope.set_tag(key, value)
            context = {
                "queue": job.queue_name, "prefix": job.prefix, "id": str(job.id), "name": job.name,
                "attempt": attempt, "attempts": int(job.opts.get("attempts") or 1), "processor": processor,
                "worker": str(getattr(worker, "name", "") or getattr(worker, "id", "") or ""),
                "scheduler": job.repeat_job_key, "timestamp": job.timestamp}
            scope.set_context("echomq_job", context)
            data: Dict[str, Any] = {"messaging.message.id": str(job.id), "messaging.destination.name": job.queue_name,
                                    "messaging.system": "bullmq",
                                    "messaging.message.retry.count": int(job.attempts_made)}
            if job.processed_on and job.timestamp:
                latency = int(job.processed_on) - int(job.timestamp) - int(job.delay or 0)
                data["messaging.message.receive.latency"] = max(0, latency)
            txn = sdk.start_run(trace_headers(job.opts), job.name or job.queue_name, OP_PROCESS, tags, context, data,
                                {"echomq_job": {"queue": job.queue_name, "name": job.name, "id": str(job.id),
                                                "attempt": attempt}})
            slug = None
            if self.crons and job.repeat_job_key:
                slug = monitor_slug(job.repeat_job_key)
                self._checkin(job, slug, "in_progress")
        except BaseException:
            cm.__exit__(None, None, None)
            raise
        self._runs[job] = _Run(cm, scope, txn, _current_greenlet(), time.monotonic(), slug)

    def _checkin(self, job: Any, slug: str, status: str, duration: Optional[float] = None) -> None:
        config = monitor_config(job.opts.get("repeat")) if status == "in_progress" else None
        if config is not None and self.monitor_options:
            config.update(self.monitor_options)
        capture_checkin(monitor_slug=slug, check_in_id=_checkin_id(job), status=status,
                        duration=duration, monitor_config=config)

    def _end(self, job: Any, outcome: str, error: Optional[BaseException] = None) -> None:
        run = self._runs.pop(job, None)
        if run is None:
            return
        try:
            sdk.end_run(run.txn, outcome)
            if outcome == "failed" and error is not None:
                self._capture_failure(job, error)
            elif outcome == "retried":
                sentry_sdk.add_breadcrumb(category="echomq.retry", level="warning", type="error",
                                          message=f"attempt {int(job.attempts_made)} failed: {_describe(error)}")
            if run.slug and outcome in ("completed", "failed"):
                self._checkin(job, run.slug, "ok" if outcome == "completed" else "error",
                              time.monotonic() - run.started)
        finally:
            try:
                sdk.finish(run.txn)
            finally:
                if run.owner is _current_greenlet():
                    run.cm.__exit__(None, None, None)

    def _capture_failure(self, job: Any, error: BaseException) -> None:
        """The job's one error event: the exception with its traceback, the earlier failed
        attempts as breadcrumbs (from the stack traces stored in the job)."""
        attempts = int(job.attempts_made)
        stored = [s for s in (job.stacktrace or []) if isinstance(s, str)]
        earlier = stored[:-1][-(attempts - 1):] if attempts > 1 else []
        first = attempts - len(earlier)
        for n, trace in enumerate(earlier, start=first):
            sentry_sdk.add_breadcrumb(category="echomq.retry", level="warning", type="error",
                                      message=f"attempt {n} failed: {_summary(trace)}", data={"attempt": n})
        if attempts > 1 and not earlier:
            sentry_sdk.add_breadcrumb(category="echomq.retry", level="warning", type="error",
                                      message=f"{attempts - 1} earlier attempt(s) failed", data={"attempt": attempts - 1})
        event, hint = sdk.event_from_exception((type(error), error, _own_frames(error.__traceback__)),
                                               {"type": "echomq_gevent", "handled": False})
        event["level"] = "error"
        event.setdefault("extra", {})["echomq_attempts_made"] = attempts
        sentry_sdk.capture_event(event, hint=hint)

    @hookimpl(trylast=True)
    def echomq_job_completed(self, worker: Any, job: Any, result: Any, duration_ms: float) -> None:
        if self._runs:
            self._end(job, "completed")

    @hookimpl(trylast=True)
    def echomq_job_failed(self, worker: Any, job: Any, error: BaseException) -> None:
        if self._runs:
            self._end(job, "failed", error)

    @hookimpl(trylast=True)
    def echomq_job_retried(self, worker: Any, job: Any, error: BaseException, delay_ms: int) -> None:
        if self._runs:
            self._end(job, "retried", error)

    @hookimpl(trylast=True)
    def echomq_job_moved(self, worker: Any, job: Any, state: str, error: BaseException) -> None:
        if self._runs:
            self._end(job, "moved")

    @hookimpl(trylast=True)
    def echomq_job_lock_lost(self, worker: Any, job: Any) -> None:
        if self._runs:
            self._end(job, "lock_lost")

    @hookimpl(trylast=True)
    def echomq_job_handed_back(self, worker: Any, job: Any) -> None:
        if self._runs:
            self._end(job, "handed_back")

    @hookimpl
    def echomq_worker_started(self, worker: Any) -> None:
        """The SDK lists the installed packages on its first event (a few hundred ms of
        metadata reads, once a process): do it now on a native thread, off the hub."""
        warm = getattr(sentry_sdk.utils, "_get_installed_modules", None)
        if warm is None or self._warmed or not _sentry_on():
            return
        self._warmed = True
        try:
            import gevent

            gevent.get_hub().threadpool.spawn(warm)
        except Exception:
            log.debug("sentry: could not list the installed packages ahead", exc_info=True)

    @hookimpl
    def echomq_job_stalled(self, worker: Any, queue: str, job_id: str) -> None:
        if not (self.capture_stalled and _sentry_on()):
            return
        with sentry_sdk.new_scope() as scope:
            scope.set_tag("echomq.queue", queue)
            scope.set_tag("echomq.job.id", str(job_id))
            scope.fingerprint = ["echomq_gevent", "stalled", queue]
            sentry_sdk.capture_message(f"job {job_id} on {queue} stalled and was moved back to wait",
                                       level="warning")


def _own_frames(tb: Any) -> Any:
    """The traceback from the first frame that is not the worker's own (the processor's): the
    worker's frames are the same for every job, would group nothing and cost the most to
    serialise (their locals)."""
    start = tb
    while tb is not None and tb.tb_next is not None and \
            str(tb.tb_frame.f_globals.get("__name__", "")).startswith("echomq_gevent."):
        tb = tb.tb_next
    return tb if tb is not None else start


def _describe(error: Optional[BaseException]) -> str:
    return f"{type(error).__name__}: {error}" if error is not None else ""


def _nodes(flows: List[Any]) -> Iterator[Dict[str, Any]]:
    for node in flows:
        if isinstance(node, dict):
            yield node
            children = node.get("children")
            if isinstance(children, list):
                yield from _nodes(children)


def _ensure_init(options: Dict[str, Any]) -> None:
    """``sentry_sdk.init`` with ``options`` unless the application set Sentry up already;
    only when a DSN is given (here or in ``SENTRY_DSN``)."""
    if sentry_sdk.is_initialized():
        if options:
            log.warning("sentry: the SDK is set up already; the options given to SentryPlugin (%s) are ignored",
                        ", ".join(sorted(options)))
        return
    if options.get("dsn") or os.environ.get("SENTRY_DSN"):
        sentry_sdk.init(**options)


# --- the module as a plugin (``plugins: ["echomq_gevent.contrib.sentry"]``) ----------------------
_default: Optional[SentryPlugin] = None


def default_plugin() -> SentryPlugin:
    """The instance the module-level hooks use, made on first use (so a ``sentry_sdk.init``
    of the application's before the first job is the one used); ``ECHOMQ_SENTRY_CRONS=1``
    turns its check-ins on."""
    global _default
    if _default is None:
        _default = SentryPlugin(crons=os.environ.get("ECHOMQ_SENTRY_CRONS", "").lower() in ("1", "true", "yes"))
    return _default


@hookimpl(hookwrapper=True, trylast=True)
def echomq_add_job(queue: Any, name: str, data: Any, opts: Dict[str, Any], add: Any) -> Any:
    yield from default_plugin().echomq_add_job(queue, name, data, opts, add)


@hookimpl(hookwrapper=True, trylast=True)
def echomq_add_bulk(queue: Any, jobs: List[Dict[str, Any]], add_bulk: Any) -> Any:
    yield from default_plugin().echomq_add_bulk(queue, jobs, add_bulk)


@hookimpl(hookwrapper=True, trylast=True)
def echomq_add_flows(producer: Any, operation: str, flows: List[Any], add: Any) -> Any:
    yield from default_plugin().echomq_add_flows(producer, operation, flows, add)


@hookimpl(tryfirst=True)
def echomq_job_active(worker: Any, job: Any) -> None:
    default_plugin().echomq_job_active(worker, job)


@hookimpl(trylast=True)
def echomq_job_completed(worker: Any, job: Any, result: Any, duration_ms: float) -> None:
    default_plugin().echomq_job_completed(worker, job, result, duration_ms)


@hookimpl(trylast=True)
def echomq_job_failed(worker: Any, job: Any, error: BaseException) -> None:
    default_plugin().echomq_job_failed(worker, job, error)


@hookimpl(trylast=True)
def echomq_job_retried(worker: Any, job: Any, error: BaseException, delay_ms: int) -> None:
    default_plugin().echomq_job_retried(worker, job, error, delay_ms)


@hookimpl(trylast=True)
def echomq_job_moved(worker: Any, job: Any, state: str, error: BaseException) -> None:
    default_plugin().echomq_job_moved(worker, job, state, error)


@hookimpl(trylast=True)
def echomq_job_lock_lost(worker: Any, job: Any) -> None:
    default_plugin().echomq_job_lock_lost(worker, job)


@hookimpl(trylast=True)
def echomq_job_handed_back(worker: Any, job: Any) -> None:
    default_plugin().echomq_job_handed_back(worker, job)


@hookimpl
def echomq_worker_started(worker: Any) -> None:
    default_plugin().echomq_worker_started(worker)


@hookimpl
def echomq_job_stalled(worker: Any, queue: str, job_id: str) -> None:
    default_plugin().echomq_job_stalled(worker, queue, job_id)


def producer_plugins(plugin: Optional[SentryPlugin] = None) -> Any:
    """A :class:`~echomq_gevent.plugins.PluginHost` with the Sentry plugin, for
    ``Queue(..., plugins=producer_plugins())`` and ``FlowProducer(..., plugins=...)``."""
    from ...plugins.host import PluginHost, make_plugin_manager

    return PluginHost(make_plugin_manager([plugin or default_plugin()]))

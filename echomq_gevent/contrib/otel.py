"""OpenTelemetry traces for jobs, shaped like Node's ``bullmq-otel``.

Install the extra (``pip install 'echomq-gevent[otel]'``, which brings
``opentelemetry-api``), configure an OpenTelemetry SDK as usual, and register the plugin
on the worker host and on the queues that add jobs::

    # conf/worker.yaml
    plugins: ["echomq_gevent.contrib.otel"]

    # producer code
    from echomq_gevent.contrib.otel import producer_plugins
    queue = Queue("mail", connection=url, plugins=producer_plugins())
    flows = FlowProducer(connection=url, plugins=producer_plugins())

Spans (names, kinds and attributes as BullMQ 6 with ``bullmq-otel`` makes them):

* ``add <queue>.<job name>``, kind PRODUCER, on every :meth:`Queue.add` of a queue with
  the plugin: ``bullmq.queue.name``, ``bullmq.queue.operation`` = ``add``,
  ``bullmq.job.name``, ``bullmq.job.id``. The span's context is written into the job's
  options as BullMQ does (``opts.telemetry.metadata``, stored as ``tm``: a JSON object of
  the propagator's fields, e.g. ``{"traceparent": "00-..."}``), unless the job's
  ``telemetry.omitContext`` is true.
* ``addBulk <queue>``, kind PRODUCER, around :meth:`Queue.add_bulk`:
  ``bullmq.job.bulk.names``, ``bullmq.job.bulk.count``; every job of the bulk carries
  this span's context (a job's own ``telemetry.metadata`` is kept, ``omitContext`` too).
* ``addFlow <root queue>`` (:meth:`FlowProducer.add`, ``bullmq.flow.name``) or
  ``addBulkFlows`` (``add_bulk``, ``bullmq.job.bulk.count`` and ``.names``), kind
  PRODUCER, of a FlowProducer made with ``plugins=producer_plugins()``; under it one
  ``addNode <queue>`` span per job (``bullmq.job.name``, ``bullmq.job.id``), a child of
  its parent node's, whose context that job carries.
* ``process <queue>``, kind CONSUMER, around each run of a job by the worker, a child of
  the context in the job's ``tm`` (a Node producer's ``add`` span, or ours):
  ``bullmq.queue.name``, ``bullmq.queue.operation`` = ``process``, ``bullmq.worker.id``,
  ``bullmq.worker.name``, ``bullmq.job.id``, ``bullmq.job.name``,
  ``bullmq.job.attempts.made``, ``bullmq.job.processed.timestamp``,
  ``bullmq.job.attempt_finished_timestamp``; the event ``job completed`` (with
  ``bullmq.job.result``) or ``job failed`` (with ``bullmq.job.failed.reason``); and ours:
  ``echomq.job.outcome`` (``completed``, ``failed``, ``retried``, ``moved``,
  ``lock_lost``, ``handed_back``), ``bullmq.job.state`` where the job went, the
  exception recorded and the status ERROR when it failed. The span is the current one
  while the processor runs, so its own spans (and the jobs it adds) are its children.

Off by default: nothing of OpenTelemetry is imported or called unless the plugin is
registered. The propagator is OpenTelemetry's global one (W3C trace context unless
``OTEL_PROPAGATORS`` says otherwise), as ``bullmq-otel`` uses Node's global one.
"""
from __future__ import annotations

import json
import logging
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from ..protocol.clock import now_ms
from ..plugins.hookspecs import hookimpl

__all__ = ["OtelPlugin", "producer_plugins", "extract_context"]

log = logging.getLogger("echomq_gevent.otel")

#: The tracer name, like ``new BullMQOtel("bullmq")``'s default.
TRACER_NAME = "echomq_gevent"


def _version() -> str:
    from .. import __version__

    return __version__


def extract_context(opts: Optional[Dict[str, Any]]) -> Optional[Any]:
    """The OpenTelemetry context carried by a job's options (``telemetry.metadata``), or
    ``None`` when there is none, ``omitContext`` is set or it cannot be read."""
    from .carrier import job_carrier

    carrier = job_carrier(opts)
    if carrier is None:
        return None
    carrier = {str(k): str(v) for k, v in carrier.items() if isinstance(v, (str, int, float))}
    return propagate.extract(carrier)


def _jsonable(value: Any) -> str:
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        return repr(value)


class _Run:
    __slots__ = ("span", "token", "owner")

    def __init__(self, span: Any, token: Any, owner: Any) -> None:
        self.span = span
        self.token = token
        self.owner = owner


class OtelPlugin:
    """The plugin. ``tracer_provider`` defaults to OpenTelemetry's global one."""

    def __init__(self, tracer_provider: Any = None, tracer_name: str = TRACER_NAME) -> None:
        self.__name__ = "echomq_gevent.contrib.otel"
        provider = tracer_provider or trace.get_tracer_provider()
        self.tracer = provider.get_tracer(tracer_name, _version())
        self._runs: "weakref.WeakKeyDictionary[Any, _Run]" = weakref.WeakKeyDictionary()

    # -- producer -------------------------------------------------------------------------
    @hookimpl(hookwrapper=True)
    def echomq_add_job(self, queue: Any, name: str, data: Any, opts: Dict[str, Any], add: Any) -> Any:
        span = None
        try:
            span = self.tracer.start_span(f"add {queue.name}.{name}", kind=SpanKind.PRODUCER)
            span.set_attributes({"bullmq.queue.name": queue.name, "bullmq.queue.operation": "add"})
            tel = opts.get("telemetry")
            if not (isinstance(tel, dict) and tel.get("omitContext")):
                carrier: Dict[str, str] = {}
                propagate.inject(carrier, context=trace.set_span_in_context(span))
                opts["telemetry"] = {**(tel if isinstance(tel, dict) else {}), "metadata": json.dumps(carrier)}
        except Exception:
            log.exception("otel: could not start the producer span of %s; the job is added without it", name)
        yield from _around(span, lambda job: {"bullmq.job.name": name, "bullmq.job.id": str(getattr(job, "id", ""))})

    @hookimpl(hookwrapper=True)
    def echomq_add_bulk(self, queue: Any, jobs: List[Dict[str, Any]], add_bulk: Any) -> Any:
        span = None
        try:
            span = self.tracer.start_span(f"addBulk {queue.name}", kind=SpanKind.PRODUCER)
            span.set_attributes({"bullmq.queue.name": queue.name, "bullmq.queue.operation": "addBulk",
                                 "bullmq.job.bulk.names": [str(j["name"]) for j in jobs],
                                 "bullmq.job.bulk.count": len(jobs)})
            metadata = _metadata(span)
            for job in jobs:
                if isinstance(job["opts"], dict):
                    _carry(job["opts"], metadata)
        except Exception:
            log.exception("otel: could not start the producer span of a bulk add to %s; the jobs are added "
                          "without it", getattr(queue, "name", queue))
        yield from _around(span)

    @hookimpl(hookwrapper=True)
    def echomq_add_flows(self, producer: Any, operation: str, flows: List[Any], add: Any) -> Any:
        top = None
        nodes: List[Tuple[Any, Any]] = []
        try:
            if operation == "addFlow":
                root = flows[0] if flows and isinstance(flows[0], dict) else {}
                queue_name = str(root.get("queueName", ""))
                top = self.tracer.start_span(f"addFlow {queue_name}", kind=SpanKind.PRODUCER)
                top.set_attributes({"bullmq.queue.name": queue_name, "bullmq.queue.operation": operation,
                                    "bullmq.flow.name": str(root.get("name", ""))})
            else:  # Node names the span by the operation alone: its flows may span queues
                top = self.tracer.start_span(operation, kind=SpanKind.PRODUCER)
                top.set_attributes({"bullmq.queue.name": "", "bullmq.queue.operation": operation,
                                    "bullmq.job.bulk.count": len(flows),
                                    "bullmq.job.bulk.names": ",".join(str(f.get("name", "")) for f in flows
                                                                      if isinstance(f, dict))})
            parent = trace.set_span_in_context(top)
            for flow in flows:
                self._node_spans(flow, parent, nodes)
        except Exception:
            log.exception("otel: could not start the producer spans of a flow; it is added without them")
        token = otel_context.attach(trace.set_span_in_context(top)) if top is not None else None
        outcome = yield
        if token is not None:
            otel_context.detach(token)
        try:
            exc = outcome.excinfo[1] if outcome.excinfo else None
            if exc is None and nodes:
                created: List[Any] = []
                for tree in outcome.get_result():
                    _walk_trees(tree, created)
                for (_node, span), job in zip(nodes, created):
                    span.set_attribute("bullmq.job.id", str(getattr(job, "id", "")))
            if exc is not None and top is not None:
                top.record_exception(exc)
                top.set_status(Status(StatusCode.ERROR, str(exc)))
        finally:
            for _node, span in reversed(nodes):
                span.end()
            if top is not None:
                top.end()

    def _node_spans(self, node: Any, parent: Any, out: List[Tuple[Any, Any]]) -> None:
        """An ``addNode <queue>`` span per node, a child of its parent node's (as Node's
        FlowProducer nests them), its context stored in the node's options; pre-order,
        the order the FlowProducer returns the trees in."""
        if not isinstance(node, dict):
            return
        opts = node.get("opts")
        if opts is None:
            opts = node["opts"] = {}
        queue_name = str(node.get("queueName", ""))
        span = self.tracer.start_span(f"addNode {queue_name}", kind=SpanKind.PRODUCER, context=parent)
        out.append((node, span))
        span.set_attributes({"bullmq.queue.name": queue_name, "bullmq.queue.operation": "addNode",
                             "bullmq.job.name": str(node.get("name", ""))})
        if isinstance(opts, dict):
            _carry(opts, _metadata(span))
        children = node.get("children")
        if isinstance(children, list):
            context = trace.set_span_in_context(span)
            for child in children:
                self._node_spans(child, context, out)

    # -- consumer -------------------------------------------------------------------------
    @hookimpl
    def echomq_job_active(self, worker: Any, job: Any) -> None:
        parent = extract_context(job.opts)
        span = self.tracer.start_span(f"process {job.queue_name}", kind=SpanKind.CONSUMER, context=parent)
        worker_name = getattr(worker, "name", None)
        attrs = {"bullmq.queue.name": job.queue_name, "bullmq.queue.operation": "process",
                 "bullmq.job.id": str(job.id), "bullmq.job.name": job.name,
                 "bullmq.worker.id": str(getattr(worker, "id", "") or ""),
                 "bullmq.job.attempts.made": int(job.attempts_made)}
        if worker_name:
            attrs["bullmq.worker.name"] = str(worker_name)
        if job.processed_on:
            attrs["bullmq.job.processed.timestamp"] = int(job.processed_on)
        span.set_attributes(attrs)
        token = otel_context.attach(trace.set_span_in_context(span))
        self._runs[job] = _Run(span, token, _current_greenlet())

    def _end(self, job: Any, outcome: str, state: Optional[str], error: Optional[BaseException] = None,
             event: Optional[str] = None, event_attrs: Optional[Dict[str, Any]] = None) -> None:
        run = self._runs.pop(job, None)
        if run is None:
            return
        span = run.span
        try:
            if event:
                span.add_event(event, event_attrs or {})
            attrs: Dict[str, Any] = {"echomq.job.outcome": outcome,
                                     "bullmq.job.attempts.made": int(job.attempts_made),
                                     "bullmq.job.attempt_finished_timestamp": int(job.finished_on or now_ms())}
            if state:
                attrs["bullmq.job.state"] = state
            span.set_attributes(attrs)
            if error is not None and outcome in ("failed", "retried", "lock_lost"):
                span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            elif outcome == "lock_lost":
                span.set_status(Status(StatusCode.ERROR, "the worker lost the job's lock"))
        finally:
            span.end()
            if run.owner is _current_greenlet():
                otel_context.detach(run.token)

    @hookimpl
    def echomq_job_completed(self, worker: Any, job: Any, result: Any, duration_ms: float) -> None:
        self._end(job, "completed", "completed", event="job completed",
                  event_attrs={"bullmq.job.result": _jsonable(result)})

    @hookimpl
    def echomq_job_failed(self, worker: Any, job: Any, error: BaseException) -> None:
        self._end(job, "failed", "failed", error, "job failed", {"bullmq.job.failed.reason": str(error)})

    @hookimpl
    def echomq_job_retried(self, worker: Any, job: Any, error: BaseException, delay_ms: int) -> None:
        self._end(job, "retried", "delayed" if delay_ms else "waiting", error, "job failed",
                  {"bullmq.job.failed.reason": str(error)})

    @hookimpl
    def echomq_job_moved(self, worker: Any, job: Any, state: str, error: BaseException) -> None:
        self._end(job, "moved", state)

    @hookimpl
    def echomq_job_lock_lost(self, worker: Any, job: Any) -> None:
        self._end(job, "lock_lost", None)

    @hookimpl
    def echomq_job_handed_back(self, worker: Any, job: Any) -> None:
        self._end(job, "handed_back", "waiting")


def _metadata(span: Any) -> str:
    """The span's context as BullMQ stores it: JSON of the propagator's fields."""
    carrier: Dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span))
    return json.dumps(carrier)


def _carry(opts: Dict[str, Any], metadata: str) -> None:
    """Put ``metadata`` into a job's ``opts.telemetry`` as BullMQ's bulk and flow adds
    do: a job's own ``telemetry.metadata`` is kept, and ``omitContext`` keeps it out."""
    tel = opts.get("telemetry")
    tel = tel if isinstance(tel, dict) else {}
    omit = bool(tel.get("omitContext"))
    carried = tel.get("metadata") or (None if omit else metadata)
    if carried or omit:
        new: Dict[str, Any] = {}
        if carried:
            new["metadata"] = carried
        if omit:
            new["omitContext"] = True
        opts["telemetry"] = new


def _around(span: Any, on_result: Optional[Callable[[Any], Dict[str, Any]]] = None) -> Any:
    """The part of a producer hook wrapper from the ``yield`` on: the span is current
    while the add runs, records its error (or the attributes ``on_result`` makes of the
    result) and ends."""
    token = otel_context.attach(trace.set_span_in_context(span)) if span is not None else None
    outcome = yield
    if token is not None:
        otel_context.detach(token)
    if span is None:
        return
    try:
        exc = outcome.excinfo[1] if outcome.excinfo else None
        if exc is not None:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, str(exc)))
        elif on_result is not None:
            span.set_attributes(on_result(outcome.get_result()))
    finally:
        span.end()


def _walk_trees(tree: Any, out: List[Any]) -> None:
    """The jobs of a FlowProducer result tree, pre-order."""
    out.append(tree.get("job"))
    for child in tree.get("children") or ():
        _walk_trees(child, out)


def _current_greenlet() -> Any:
    try:
        import greenlet

        return greenlet.getcurrent()
    except ImportError:  # pragma: no cover - gevent brings greenlet
        import threading

        return threading.current_thread()


# --- the module as a plugin (``plugins: ["echomq_gevent.contrib.otel"]``) ------------------
_default: Optional[OtelPlugin] = None


def default_plugin() -> OtelPlugin:
    """The instance the module-level hooks use, on the global tracer provider (made on
    first use, so an SDK configured after the import is the one used)."""
    global _default
    if _default is None:
        _default = OtelPlugin()
    return _default


@hookimpl(hookwrapper=True)
def echomq_add_job(queue: Any, name: str, data: Any, opts: Dict[str, Any], add: Any) -> Any:
    yield from default_plugin().echomq_add_job(queue, name, data, opts, add)


@hookimpl(hookwrapper=True)
def echomq_add_bulk(queue: Any, jobs: List[Dict[str, Any]], add_bulk: Any) -> Any:
    yield from default_plugin().echomq_add_bulk(queue, jobs, add_bulk)


@hookimpl(hookwrapper=True)
def echomq_add_flows(producer: Any, operation: str, flows: List[Any], add: Any) -> Any:
    yield from default_plugin().echomq_add_flows(producer, operation, flows, add)


@hookimpl
def echomq_job_active(worker: Any, job: Any) -> None:
    default_plugin().echomq_job_active(worker, job)


@hookimpl
def echomq_job_completed(worker: Any, job: Any, result: Any, duration_ms: float) -> None:
    default_plugin().echomq_job_completed(worker, job, result, duration_ms)


@hookimpl
def echomq_job_failed(worker: Any, job: Any, error: BaseException) -> None:
    default_plugin().echomq_job_failed(worker, job, error)


@hookimpl
def echomq_job_retried(worker: Any, job: Any, error: BaseException, delay_ms: int) -> None:
    default_plugin().echomq_job_retried(worker, job, error, delay_ms)


@hookimpl
def echomq_job_moved(worker: Any, job: Any, state: str, error: BaseException) -> None:
    default_plugin().echomq_job_moved(worker, job, state, error)


@hookimpl
def echomq_job_lock_lost(worker: Any, job: Any) -> None:
    default_plugin().echomq_job_lock_lost(worker, job)


@hookimpl
def echomq_job_handed_back(worker: Any, job: Any) -> None:
    default_plugin().echomq_job_handed_back(worker, job)


def producer_plugins(tracer_provider: Any = None) -> Any:
    """A :class:`~echomq_gevent.plugins.PluginHost` with the tracing plugin, for
    ``Queue(..., plugins=producer_plugins())`` and ``FlowProducer(..., plugins=...)``
    (the global tracer provider by default)."""
    from ..plugins.host import PluginHost, make_plugin_manager

    plugin = OtelPlugin(tracer_provider) if tracer_provider is not None else default_plugin()
    return PluginHost(make_plugin_manager([plugin]))

"""The OpenTelemetry plugin with the SDK's in-memory exporter: producer and consumer
spans as bullmq-otel makes them, context carried in the job's options."""
from __future__ import annotations

import json
import time

import gevent
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from echomq_gevent import Queue, Worker
from echomq_gevent.contrib.otel import OtelPlugin, extract_context, producer_plugins
from echomq_gevent.plugins.host import PluginHost, make_plugin_manager
from running_command import run_python
from waiting import wait_until as wait_for


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    exporter.provider = provider
    yield exporter
    provider.shutdown()


def by_name(exporter, name):
    return [s for s in exporter.get_finished_spans() if s.name == name]


def test_add_makes_a_producer_span_and_stores_its_context_as_bullmq_does(spans, redis_url, prefix, qname, r):
    q = Queue(qname, connection=redis_url, prefix=prefix, plugins=producer_plugins(spans.provider))
    try:
        job = q.add("mail", {"to": "ann"})
        quiet = q.add("mail", {"to": "bob"}, {"telemetry": {"omitContext": True}})
    finally:
        q.close()
    first, second = by_name(spans, f"add {qname}.mail")
    assert first.kind == SpanKind.PRODUCER
    assert dict(first.attributes) == {"bullmq.queue.name": qname, "bullmq.queue.operation": "add",
                                      "bullmq.job.name": "mail", "bullmq.job.id": job.id}
    stored = json.loads(r.hget(f"{prefix}:{qname}:{job.id}", "opts"))
    carrier = json.loads(stored["tm"])  # BullMQ's short name for telemetry.metadata
    assert carrier["traceparent"] == f"00-{first.context.trace_id:032x}-{first.context.span_id:016x}-{first.context.trace_flags:02x}"
    assert "tm" not in json.loads(r.hget(f"{prefix}:{qname}:{quiet.id}", "opts"))
    assert second.attributes["bullmq.job.id"] == quiet.id


def test_the_worker_continues_the_trace_in_a_consumer_span(spans, redis_url, prefix, qname):
    plugin = OtelPlugin(spans.provider)
    seen = {}

    def process(job):
        seen[job.id] = trace.get_current_span().get_span_context().span_id
        if job.name == "bad":
            raise ValueError("no such mailbox")
        return {"sent": True}

    q = Queue(qname, connection=redis_url, prefix=prefix, plugins=producer_plugins(spans.provider))
    worker = Worker(qname, process, connection=redis_url, prefix=prefix, name="mailer", drain_delay=0.5,
                    plugins=PluginHost(make_plugin_manager([plugin])))
    try:
        good = q.add("good", {"n": 1})
        bad = q.add("bad", {"n": 2}, {"attempts": 2, "backoff": 0})
        worker.start()
        wait_for(lambda: len(by_name(spans, f"process {qname}")) == 3, what="3 consumer spans")
    finally:
        worker.close(timeout=5)
        q.close()
    add_good, = by_name(spans, f"add {qname}.good")
    add_bad, = by_name(spans, f"add {qname}.bad")
    runs = by_name(spans, f"process {qname}")
    ok = next(s for s in runs if s.attributes["bullmq.job.id"] == good.id)
    assert ok.kind == SpanKind.CONSUMER
    assert ok.context.trace_id == add_good.context.trace_id
    assert ok.parent.span_id == add_good.context.span_id
    assert ok.context.span_id == seen[good.id]  # the processor ran inside the span
    assert {k: ok.attributes[k] for k in ("bullmq.queue.name", "bullmq.queue.operation", "bullmq.job.name",
                                          "bullmq.worker.name", "echomq.job.outcome", "bullmq.job.state")} == {
        "bullmq.queue.name": qname, "bullmq.queue.operation": "process", "bullmq.job.name": "good",
        "bullmq.worker.name": "mailer", "echomq.job.outcome": "completed", "bullmq.job.state": "completed"}
    assert ok.attributes["bullmq.worker.id"] == worker.id
    assert [(e.name, dict(e.attributes)) for e in ok.events] == [
        ("job completed", {"bullmq.job.result": '{"sent": true}'})]
    bad_runs = sorted((s for s in runs if s.attributes["bullmq.job.id"] == bad.id), key=lambda s: s.start_time)
    assert [s.attributes["echomq.job.outcome"] for s in bad_runs] == ["retried", "failed"]
    assert [s.attributes["bullmq.job.attempts.made"] for s in bad_runs] == [1, 2]
    for s in bad_runs:
        assert s.context.trace_id == add_bad.context.trace_id and s.parent.span_id == add_bad.context.span_id
        assert s.status.status_code == StatusCode.ERROR
        assert ("job failed", {"bullmq.job.failed.reason": "no such mailbox"}) in [
            (e.name, dict(e.attributes)) for e in s.events]
        assert any(e.name == "exception" for e in s.events)


def test_unreadable_context_starts_a_new_trace():
    assert extract_context({"telemetry": {"metadata": "{not json"}}) is None
    assert extract_context({"telemetry": {"metadata": '["a"]'}}) is None
    assert extract_context({"telemetry": {"omitContext": True, "metadata": '{"traceparent": "x"}'}}) is None
    assert extract_context({}) is None


def test_off_by_default_the_plugin_is_not_loaded_and_jobs_carry_no_context(redis_url, prefix, qname):
    code = (
        "import sys\n"
        "from echomq_gevent import Queue, Worker\n"
        f"q = Queue({qname!r}, connection={redis_url!r}, prefix={prefix!r})\n"
        "job = q.add('x', {})\n"
        f"w = Worker({qname!r}, lambda j: 1, connection={redis_url!r}, prefix={prefix!r}, drain_delay=0.2)\n"
        "w.start()\n"
        "import gevent\n"
        "while q.get_job_state(job.id) != 'completed': gevent.sleep(0.02)\n"
        "w.close(timeout=5)\n"
        "print('echomq_gevent.contrib.otel' in sys.modules)\n"
        "print('telemetry' in q.get_job(job.id).opts)\n"
    )
    assert run_python(code).split("\n")[:2] == ["False", "False"]


def test_the_module_named_as_a_plugin_traces_on_the_global_provider(redis_url, prefix, qname):
    """``plugins: ["echomq_gevent.contrib.otel"]`` in the YAML registers the module itself."""
    code = (
        "import gevent\n"
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from opentelemetry.sdk.trace.export import SimpleSpanProcessor\n"
        "from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter\n"
        "exporter = InMemorySpanExporter()\n"
        "provider = TracerProvider(); provider.add_span_processor(SimpleSpanProcessor(exporter))\n"
        "trace.set_tracer_provider(provider)\n"
        "from echomq_gevent import Queue, Worker\n"
        "from echomq_gevent.plugins import PluginHost, make_plugin_manager\n"
        "host = PluginHost(make_plugin_manager(['echomq_gevent.contrib.otel']))\n"
        f"q = Queue({qname!r}, connection={redis_url!r}, prefix={prefix!r}, plugins=host)\n"
        "job = q.add('x', {})\n"
        f"w = Worker({qname!r}, lambda j: 1, connection={redis_url!r}, prefix={prefix!r}, drain_delay=0.2,"
        " plugins=host)\n"
        "w.start()\n"
        "while len(exporter.get_finished_spans()) < 2: gevent.sleep(0.02)\n"
        "w.close(timeout=5)\n"
        "a, p = sorted(exporter.get_finished_spans(), key=lambda s: s.start_time)\n"
        "print(a.name, p.name, p.context.trace_id == a.context.trace_id, p.parent.span_id == a.context.span_id)\n"
    )
    assert run_python(code).strip() == f"add {qname}.x process {qname} True True"


def test_the_shared_request_queue_takes_the_producer_plugin(spans, redis_url, prefix, qname):
    from echomq_gevent.contrib.wsgi import close_queues, get_queue

    try:
        q = get_queue(qname, connection=redis_url, prefix=prefix, plugins=producer_plugins(spans.provider))
        job = q.add("signup", {})
        assert get_queue(qname, connection=redis_url, prefix=prefix) is q
    finally:
        close_queues()
    span, = spans.get_finished_spans()
    assert span.name == f"add {qname}.signup" and span.attributes["bullmq.job.id"] == job.id


def _carried(r, prefix, qname, job_id):
    """The span context stored in a job's options (BullMQ's ``tm``), as (trace, span) ids."""
    stored = json.loads(r.hget(f"{prefix}:{qname}:{job_id}", "opts"))
    if "tm" not in stored:
        return None
    parts = json.loads(stored["tm"])["traceparent"].split("-")
    return int(parts[1], 16), int(parts[2], 16)


def _ids(span):
    return span.context.trace_id, span.context.span_id


def test_add_bulk_makes_one_producer_span_whose_context_every_job_carries(spans, redis_url, prefix, qname, r):
    q = Queue(qname, connection=redis_url, prefix=prefix, plugins=producer_plugins(spans.provider))
    own = json.dumps({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
    try:
        jobs = q.add_bulk([("mail", {"to": "ann"}),
                           {"name": "sms", "data": {"to": "bob"}, "opts": {"priority": 2}},
                           ("mail", {"to": "cy"}, {"telemetry": {"omitContext": True}}),
                           ("mail", {"to": "di"}, {"telemetry": {"metadata": own}})])
    finally:
        q.close()
    span, = spans.get_finished_spans()
    assert span.name == f"addBulk {qname}" and span.kind == SpanKind.PRODUCER
    assert dict(span.attributes) == {"bullmq.queue.name": qname, "bullmq.queue.operation": "addBulk",
                                     "bullmq.job.bulk.names": ("mail", "sms", "mail", "mail"),
                                     "bullmq.job.bulk.count": 4}
    assert [_carried(r, prefix, qname, j.id) for j in jobs[:2]] == [_ids(span)] * 2
    assert _carried(r, prefix, qname, jobs[2].id) is None  # omitContext: nothing stored
    assert _carried(r, prefix, qname, jobs[3].id) == (0x0af7651916cd43dd8448eb211c80319c, 0xb7ad6b7169203331)
    assert q.get_job(jobs[1].id).opts["priority"] == 2  # the options themselves untouched


def test_a_failed_bulk_add_ends_its_span_with_the_error(spans, redis_url, prefix, qname):
    from echomq_gevent.errors import ParentJobNotExist

    q = Queue(qname, connection=redis_url, prefix=prefix, plugins=producer_plugins(spans.provider))
    try:
        with pytest.raises(ParentJobNotExist):
            q.add_bulk([("child", {}, {"parent": {"id": "nope", "queue": f"{prefix}:{qname}"}})])
    finally:
        q.close()
    span, = spans.get_finished_spans()
    assert span.status.status_code == StatusCode.ERROR
    assert any(e.name == "exception" for e in span.events)


def test_a_flow_makes_nested_add_node_spans_and_each_job_carries_its_own(spans, redis_url, prefix, qname, r):
    from echomq_gevent import FlowProducer

    kids = f"{qname}-frames"
    flows = FlowProducer(connection=redis_url, prefix=prefix, plugins=producer_plugins(spans.provider))
    try:
        tree = flows.add({"name": "render", "queueName": qname, "data": {"movie": 7},
                          "children": [{"name": "frame", "queueName": kids, "data": {"n": 1}},
                                       {"name": "frame", "queueName": kids, "data": {"n": 2},
                                        "opts": {"jobId": "frame-2"}}]})
    finally:
        flows.close()
    top, = by_name(spans, f"addFlow {qname}")
    assert top.kind == SpanKind.PRODUCER
    assert dict(top.attributes) == {"bullmq.queue.name": qname, "bullmq.queue.operation": "addFlow",
                                    "bullmq.flow.name": "render"}
    root, = by_name(spans, f"addNode {qname}")
    children = sorted(by_name(spans, f"addNode {kids}"), key=lambda s: s.start_time)
    assert root.parent.span_id == top.context.span_id
    assert [c.parent.span_id for c in children] == [root.context.span_id] * 2
    assert {s.context.trace_id for s in [top, root, *children]} == {top.context.trace_id}
    assert dict(root.attributes) == {"bullmq.queue.name": qname, "bullmq.queue.operation": "addNode",
                                     "bullmq.job.name": "render", "bullmq.job.id": tree["job"].id}
    assert [c.attributes["bullmq.job.id"] for c in children] == [k["job"].id for k in tree["children"]]
    assert tree["children"][1]["job"].id == "frame-2"
    assert _carried(r, prefix, qname, tree["job"].id) == _ids(root)
    assert [_carried(r, prefix, kids, k["job"].id) for k in tree["children"]] == [_ids(c) for c in children]


def test_a_bulk_of_flows_makes_one_add_bulk_flows_span(spans, redis_url, prefix, qname, r):
    from echomq_gevent import FlowProducer

    flows = FlowProducer(connection=redis_url, prefix=prefix, plugins=producer_plugins(spans.provider))
    try:
        trees = flows.add_bulk([{"name": "a", "queueName": qname, "data": {}},
                                {"name": "b", "queueName": qname, "data": {},
                                 "opts": {"telemetry": {"omitContext": True}}}])
    finally:
        flows.close()
    top, = by_name(spans, "addBulkFlows")
    assert dict(top.attributes) == {"bullmq.queue.name": "", "bullmq.queue.operation": "addBulkFlows",
                                    "bullmq.job.bulk.count": 2, "bullmq.job.bulk.names": "a,b"}
    nodes = sorted(by_name(spans, f"addNode {qname}"), key=lambda s: s.start_time)
    assert [n.parent.span_id for n in nodes] == [top.context.span_id] * 2
    assert _carried(r, prefix, qname, trees[0]["job"].id) == _ids(nodes[0])
    assert _carried(r, prefix, qname, trees[1]["job"].id) is None


def test_our_worker_continues_the_trace_of_each_job_of_a_bulk_and_a_flow(spans, redis_url, prefix, qname):
    from echomq_gevent import FlowProducer

    host = producer_plugins(spans.provider)
    q = Queue(qname, connection=redis_url, prefix=prefix, plugins=host)
    flows = FlowProducer(connection=redis_url, prefix=prefix, plugins=host)
    worker = Worker(qname, lambda job: job.name, connection=redis_url, prefix=prefix, drain_delay=0.5,
                    plugins=PluginHost(make_plugin_manager([OtelPlugin(spans.provider)])))
    try:
        bulk = q.add_bulk([("one", {}), ("two", {})])
        tree = flows.add({"name": "parent", "queueName": qname, "data": {},
                          "children": [{"name": "child", "queueName": qname, "data": {}}]})
        worker.start()
        wait_for(lambda: len(by_name(spans, f"process {qname}")) == 4, what="4 consumer spans")
    finally:
        worker.close(timeout=5)
        flows.close()
        q.close()
    runs = {s.attributes["bullmq.job.id"]: s for s in by_name(spans, f"process {qname}")}
    add_bulk, = by_name(spans, f"addBulk {qname}")
    for job in bulk:
        assert runs[job.id].parent.span_id == add_bulk.context.span_id
        assert runs[job.id].context.trace_id == add_bulk.context.trace_id
    nodes = {s.attributes["bullmq.job.id"]: s for s in by_name(spans, f"addNode {qname}")}
    for job in (tree["job"], tree["children"][0]["job"]):
        assert runs[job.id].parent.span_id == nodes[job.id].context.span_id

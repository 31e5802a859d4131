"""One trace across Node and Python: Node's bullmq-otel producer -> our worker's span,
and our producer -> a Node worker's span (the OTel SDK's in-memory exporters on both sides)."""
from __future__ import annotations

import json
import os
import subprocess
import time

import gevent
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from echomq_gevent import Queue, Worker
from echomq_gevent.contrib.otel import OtelPlugin, producer_plugins
from echomq_gevent.plugins.host import PluginHost, make_plugin_manager
from interop_node import HERE, _node_binary

OTEL_TOOL = os.path.join(HERE, "node", "otel_tool.js")
PRODUCER, CONSUMER = 3, 4  # OpenTelemetry JS SpanKind values


def otel_tool(**cmd):
    proc = subprocess.run([_node_binary(), OTEL_TOOL], input=json.dumps(cmd) + "\n", capture_output=True,
                          text=True, timeout=60)
    lines = [ln for ln in proc.stdout.split("\n") if ln.strip()]
    assert lines, f"otel_tool.js printed nothing (exit {proc.returncode}): {proc.stderr[-2000:]}"
    out = json.loads(lines[-1])
    assert out["ok"], out.get("error")
    return out


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    exporter.provider = provider
    yield exporter
    provider.shutdown()


def test_a_trace_from_a_node_producer_continues_in_our_worker(spans, redis_url, prefix, qname):
    node = otel_tool(cmd="add", redis=redis_url, prefix=prefix, queue=qname, name="resize", data={"w": 64})
    add, = [s for s in node["spans"] if s["name"] == f"add {qname}.resize"]
    assert add["kind"] == PRODUCER and add["attributes"]["bullmq.job.id"] == node["jobId"]

    worker = Worker(qname, lambda job: {"ok": job.data["w"]}, connection=redis_url, prefix=prefix, drain_delay=0.5,
                    plugins=PluginHost(make_plugin_manager([OtelPlugin(spans.provider)])))
    worker.start()
    try:
        deadline = time.monotonic() + 15
        while not spans.get_finished_spans() and time.monotonic() < deadline:
            gevent.sleep(0.02)
    finally:
        worker.close(timeout=5)
    ours, = spans.get_finished_spans()
    assert ours.name == f"process {qname}" and ours.kind == SpanKind.CONSUMER
    assert f"{ours.context.trace_id:032x}" == add["traceId"]
    assert f"{ours.parent.span_id:016x}" == add["spanId"]
    assert ours.attributes["bullmq.job.id"] == node["jobId"]
    assert ours.attributes["echomq.job.outcome"] == "completed"


def test_a_trace_from_our_producer_continues_in_a_node_worker(spans, redis_url, prefix, qname):
    q = Queue(qname, connection=redis_url, prefix=prefix, plugins=producer_plugins(spans.provider))
    try:
        job = q.add("resize", {"w": 64})
    finally:
        q.close()
    ours, = spans.get_finished_spans()
    assert ours.kind == SpanKind.PRODUCER

    node = otel_tool(cmd="process", redis=redis_url, prefix=prefix, queue=qname, jobId=job.id)
    process, = [s for s in node["spans"] if s["name"] == f"process {qname}"]
    assert process["kind"] == CONSUMER
    assert process["traceId"] == f"{ours.context.trace_id:032x}"
    assert process["parentSpanId"] == f"{ours.context.span_id:016x}"
    assert process["attributes"]["bullmq.job.id"] == job.id
    assert [e["name"] for e in process["events"]] == ["job completed"]


def _process_in_our_worker(spans, redis_url, prefix, qname, count):
    worker = Worker(qname, lambda job: job.name, connection=redis_url, prefix=prefix, drain_delay=0.5,
                    plugins=PluginHost(make_plugin_manager([OtelPlugin(spans.provider)])))
    worker.start()
    try:
        deadline = time.monotonic() + 15
        while len(spans.get_finished_spans()) < count and time.monotonic() < deadline:
            gevent.sleep(0.02)
    finally:
        worker.close(timeout=5)
    runs = {s.attributes["bullmq.job.id"]: s for s in spans.get_finished_spans() if s.name == f"process {qname}"}
    assert len(runs) == count, runs
    return runs


def test_traces_of_a_node_bulk_add_and_flow_continue_in_our_worker(spans, redis_url, prefix, qname):
    bulk = otel_tool(cmd="addBulk", redis=redis_url, prefix=prefix, queue=qname,
                     jobs=[{"name": "a", "data": {}}, {"name": "b", "data": {}}])
    add_bulk, = [s for s in bulk["spans"] if s["name"] == f"addBulk {qname}"]
    assert add_bulk["kind"] == PRODUCER
    assert add_bulk["attributes"]["bullmq.job.bulk.count"] == 2
    # Node's FlowProducer stores the context only in nodes that have opts
    flow = otel_tool(cmd="addFlow", redis=redis_url, prefix=prefix,
                     flow={"name": "parent", "queueName": qname, "data": {}, "opts": {},
                           "children": [{"name": "child", "queueName": qname, "data": {}, "opts": {}}]})
    nodes = {s["attributes"]["bullmq.job.id"]: s for s in flow["spans"] if s["name"] == f"addNode {qname}"}
    assert set(nodes) == set(flow["jobIds"])

    runs = _process_in_our_worker(spans, redis_url, prefix, qname, 4)
    for job_id in bulk["jobIds"]:
        assert f"{runs[job_id].context.trace_id:032x}" == add_bulk["traceId"]
        assert f"{runs[job_id].parent.span_id:016x}" == add_bulk["spanId"]
    for job_id in flow["jobIds"]:
        assert f"{runs[job_id].context.trace_id:032x}" == nodes[job_id]["traceId"]
        assert f"{runs[job_id].parent.span_id:016x}" == nodes[job_id]["spanId"]


def test_traces_of_our_bulk_add_and_flow_continue_in_a_node_worker(spans, redis_url, prefix, qname):
    from echomq_gevent import FlowProducer

    host = producer_plugins(spans.provider)
    q = Queue(qname, connection=redis_url, prefix=prefix, plugins=host)
    flows = FlowProducer(connection=redis_url, prefix=prefix, plugins=host)
    try:
        bulk = q.add_bulk([("a", {}), ("b", {})])
        tree = flows.add({"name": "parent", "queueName": qname, "data": {},
                          "children": [{"name": "child", "queueName": qname, "data": {}}]})
    finally:
        flows.close()
        q.close()
    add_bulk, = [s for s in spans.get_finished_spans() if s.name == f"addBulk {qname}"]
    nodes = {s.attributes["bullmq.job.id"]: s for s in spans.get_finished_spans() if s.name == f"addNode {qname}"}
    flow_ids = [tree["job"].id, tree["children"][0]["job"].id]

    node = otel_tool(cmd="process", redis=redis_url, prefix=prefix, queue=qname,
                     jobIds=[j.id for j in bulk] + flow_ids)
    runs = {s["attributes"]["bullmq.job.id"]: s for s in node["spans"] if s["name"] == f"process {qname}"}
    assert all(run["kind"] == CONSUMER for run in runs.values())
    for job in bulk:
        assert runs[job.id]["traceId"] == f"{add_bulk.context.trace_id:032x}"
        assert runs[job.id]["parentSpanId"] == f"{add_bulk.context.span_id:016x}"
    for job_id in flow_ids:
        assert runs[job_id]["traceId"] == f"{nodes[job_id].context.trace_id:032x}"
        assert runs[job_id]["parentSpanId"] == f"{nodes[job_id].context.span_id:016x}"

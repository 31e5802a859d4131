#!/usr/bin/env node
'use strict';
/*
 * otel_tool.js: the Node side of the trace tests. BullMQ with bullmq-otel as its
 * telemetry, the OpenTelemetry SDK recording spans in memory (W3C trace context).
 *
 * Usage: echo '<json command>' | node otel_tool.js
 *   {"redis": URL, "prefix": P, "queue": Q, "cmd": "add", "name": N, "data": {...}}
 *       adds one job inside bullmq-otel's "add" span
 *   {"redis": URL, "prefix": P, "queue": Q, "cmd": "addBulk", "jobs": [{name, data, opts}]}
 *       adds the jobs with queue.addBulk (one "addBulk" span); answers their ids as jobIds
 *   {"redis": URL, "prefix": P, "cmd": "addFlow", "flow": {name, queueName, data, opts, children}}
 *       adds the tree with a FlowProducer ("addFlow" and "addNode" spans); answers the
 *       tree's ids, parents before children, as jobIds
 *   {"redis": URL, "prefix": P, "queue": Q, "cmd": "process", "jobId": ID | "jobIds": [...], "maxMs": 15000}
 *       runs a Worker until those jobs have completed, then closes it
 * Prints one JSON line: {"ok": true, "jobId": ..., "spans": [{name, kind, traceId, spanId,
 * parentSpanId, attributes, events: [{name, attributes}]}]} or {"ok": false, "error": ...}.
 */
const path = require('path');
const readline = require('readline');

const nodeModules = path.resolve(__dirname, '..', '..', 'node_modules');
const need = (name) => require(path.join(nodeModules, name));
const { NodeTracerProvider } = need('@opentelemetry/sdk-trace-node');
const { InMemorySpanExporter, SimpleSpanProcessor } = need('@opentelemetry/sdk-trace-base');

const exporter = new InMemorySpanExporter();
const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
provider.register(); // global tracer provider, W3C propagator, AsyncLocalStorage context

const { FlowProducer, Queue, Worker } = need(process.env.ECHOMQ_NODE_BULLMQ || 'bullmq');
const { BullMQOtel } = need('bullmq-otel');

function connection(url) {
  const u = new URL(url);
  return { host: u.hostname, port: Number(u.port || 6379), db: Number(u.pathname.slice(1) || 0),
           maxRetriesPerRequest: null };
}

function spans() {
  return exporter.getFinishedSpans().map((s) => {
    const ctx = s.spanContext();
    const parent = s.parentSpanContext ? s.parentSpanContext.spanId : s.parentSpanId;
    return {
      name: s.name, kind: s.kind, traceId: ctx.traceId, spanId: ctx.spanId, parentSpanId: parent || null,
      attributes: s.attributes, events: s.events.map((e) => ({ name: e.name, attributes: e.attributes || {} })),
    };
  });
}

async function run(cmd) {
  const opts = { connection: connection(cmd.redis), prefix: cmd.prefix, telemetry: new BullMQOtel('node-tests') };
  if (cmd.cmd === 'add') {
    const queue = new Queue(cmd.queue, opts);
    try {
      const job = await queue.add(cmd.name, cmd.data || {}, cmd.opts || {});
      return { jobId: job.id };
    } finally {
      await queue.close();
    }
  }
  if (cmd.cmd === 'addBulk') {
    const queue = new Queue(cmd.queue, opts);
    try {
      const jobs = await queue.addBulk(cmd.jobs);
      return { jobIds: jobs.map((j) => j.id) };
    } finally {
      await queue.close();
    }
  }
  if (cmd.cmd === 'addFlow') {
    const flows = new FlowProducer(opts);
    try {
      const tree = await flows.add(cmd.flow);
      const ids = [];
      const walk = (node) => { ids.push(node.job.id); (node.children || []).forEach(walk); };
      walk(tree);
      return { jobIds: ids };
    } finally {
      await flows.close();
    }
  }
  if (cmd.cmd === 'process') {
    const waiting = new Set((cmd.jobIds || [cmd.jobId]).map(String));
    let done;
    const finished = new Promise((resolve) => { done = resolve; });
    const worker = new Worker(cmd.queue, async (job) => ({ seen: job.id }),
                              Object.assign({ name: 'node-worker', drainDelay: 1 }, opts));
    worker.on('completed', (job) => { waiting.delete(String(job.id)); if (!waiting.size) done(); });
    const timer = setTimeout(() => done(new Error(`jobs ${[...waiting]} not completed in time`)), cmd.maxMs || 15000);
    const err = await finished;
    clearTimeout(timer);
    await worker.close();
    if (err) throw err;
    return { jobId: cmd.jobId, jobIds: cmd.jobIds };
  }
  throw new Error(`unknown cmd ${cmd.cmd}`);
}

const rl = readline.createInterface({ input: process.stdin });
rl.once('line', async (line) => {
  rl.close();
  try {
    const out = await run(JSON.parse(line));
    await provider.forceFlush();
    process.stdout.write(JSON.stringify(Object.assign({ ok: true, spans: spans() }, out)) + '\n');
    process.exit(0);
  } catch (e) {
    process.stdout.write(JSON.stringify({ ok: false, error: String(e && e.stack || e) }) + '\n');
    process.exit(1);
  }
});

// Benchmark driver: one BullMQ (Node) worker on a queue, configured by a JSON argument.
// Protocol shared by every worker driver of the harness (bench/harness.py):
//   argv[2] = JSON {url, queue (or queues: a list, one Worker each), prefix, concurrency, mode: noop|sleep|latency|mix|order|sched, sleep_ms, report,
//                   metrics (maxDataPoints; absent = no metrics)}
//   prints "READY" once connected; on SIGTERM closes gracefully, writes the report JSON
//   {processed, latencies_ms, order, tags} to cfg.report and exits 0.
//   order: data.p (the priority) of each job in start order; sched: a job scheduler's run
//   (id repeat:<id>:<millis>), start minus millis into latencies_ms and [data.k, millis] into tags.
'use strict';
const path = require('path');
const { Worker } = require(path.join(__dirname, '..', '..', 'tests', 'node_modules', 'bullmq'));

const cfg = JSON.parse(process.argv[2]);
const url = new URL(cfg.url);
const connection = { host: url.hostname, port: Number(url.port || 6379), db: Number((url.pathname || '/0').slice(1) || 0) };

let processed = 0;
const latencies = [];
const order = [];
const tags = [];
const nowMs = () => performance.timeOrigin + performance.now();

let processor;
if (cfg.mode === 'sleep') {
  const ms = cfg.sleep_ms;
  processor = () => new Promise((resolve) => { processed += 1; setTimeout(resolve, ms); });
} else if (cfg.mode === 'latency') {
  processor = async (job) => { latencies.push(nowMs() - job.data.t); processed += 1; };
} else if (cfg.mode === 'order') {
  processor = async (job) => { order.push(job.data.p); processed += 1; };
} else if (cfg.mode === 'sched') {
  processor = async (job) => {
    const id = String(job.id);
    latencies.push(nowMs() - Number(id.slice(id.lastIndexOf(':') + 1)));
    tags.push([job.data.k, Number(id.slice(id.lastIndexOf(':') + 1))]);
    processed += 1;
  };
} else if (cfg.mode === 'mix') {
  // the realistic mix (node_producer.js): jobs flagged data.f fail their first attempt
  processor = async (job) => {
    processed += 1;
    if (job.data.f && job.attemptsMade === 0) throw new Error('fails once');
  };
} else {
  processor = async () => { processed += 1; };
}

// cfg.queues (the scale bench's idle queues): one Worker per queue in this process
const workers = (cfg.queues || [cfg.queue]).map((name) => {
  const w = new Worker(name, processor, Object.assign({
    connection, prefix: cfg.prefix, concurrency: cfg.concurrency,
  }, cfg.metrics ? { metrics: { maxDataPoints: cfg.metrics } } : {}));
  w.on('error', (err) => { console.error('worker error', err); });
  return w;
});

let closing = false;
async function shutdown() {
  if (closing) return;
  closing = true;
  await Promise.all(workers.map((w) => w.close()));
  require('fs').writeFileSync(cfg.report, JSON.stringify({ processed, latencies_ms: latencies, order, tags }));
  process.exit(0);
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);

Promise.all(workers.map((w) => w.waitUntilReady())).then(() => { process.stdout.write('READY\n'); });

// Benchmark driver: Node bullmq's Relay, publisher and subscriber nodes in this process.
//   argv[2] = JSON {url, namespace, latencyN, throughputN}. Latency: latencyN messages one
//   at a time, each published once the previous one arrived; publish->deliver time from the
//   publisher's call to the listener (performance.now). Throughput: throughputN messages
//   published back to back (each publish awaited), until the last one is delivered.
//   Prints one JSON line {latency_ms: [...], throughput_s, cpu_s}.
'use strict';
const path = require('path');
const { performance } = require('perf_hooks');
const { Relay } = require(path.join(__dirname, '..', '..', 'tests', 'node_modules', 'bullmq'));

async function main() {
  const cfg = JSON.parse(process.argv[2]);
  const u = new URL(cfg.url);
  const connection = { host: u.hostname, port: Number(u.port), maxRetriesPerRequest: null };
  const sub = new Relay({ connection, namespace: cfg.namespace, nodeId: 'sub', blockTimeout: 1000 });
  const pub = new Relay({ connection, namespace: cfg.namespace, nodeId: 'pub' });
  await Promise.all([sub.waitUntilReady(), pub.waitUntilReady()]);
  let arrived = null;
  const latency = [];
  await sub.subscribe('bench.latency', msg => { latency.push(performance.now() - msg.data.s); arrived(); });
  let received = 0;
  let allIn = null;
  await sub.subscribe('bench.throughput', () => { received += 1; if (received === cfg.throughputN) allIn(); });
  const cpu0 = process.cpuUsage();
  for (let i = 0; i < cfg.latencyN; i++) {
    const got = new Promise(resolve => { arrived = resolve; });
    await pub.publish('bench.latency', { i, s: performance.now() });
    await got;
  }
  const done = new Promise(resolve => { allIn = resolve; });
  const t0 = performance.now();
  for (let i = 0; i < cfg.throughputN; i++) {
    await pub.publish('bench.throughput', { i });
  }
  await done;
  const throughputS = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  await Promise.all([sub.close(), pub.close()]);
  process.stdout.write(JSON.stringify({ latency_ms: latency, throughput_s: throughputS,
    cpu_s: (cpu.user + cpu.system) / 1e6 }) + '\n');
  process.exit(0);
}
main().catch(err => { process.stderr.write(String(err && err.stack || err) + '\n'); process.exit(1); });

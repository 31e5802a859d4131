// Benchmark driver: enqueues jobs with BullMQ (Node), configured by a JSON argument.
//   argv[2] = JSON {url, queue, prefix, mode, n, chunk, interval_ms, paused}
// Modes:
//   preload  pause the queue when cfg.paused, then addBulk n no-op jobs in chunks; exits.
//            With cfg.mix the realistic mix instead (mixJob below).
//   add      single awaited add() per job;  bulk: addBulk in chunks.  Both print "READY"
//            after warming up (connection and scripts), wait for "GO" on stdin, then print
//            a JSON line {n, elapsed_s, cpu_s, maxrss_mb} and exit.
//   feed     add n jobs one at a time, cfg.interval_ms apart, each carrying data.t = enqueue
//            time in epoch milliseconds (the latency probe); "READY"/"GO" as above.
'use strict';
const fs = require('fs');
const path = require('path');
const readline = require('readline');
const { Queue } = require(path.join(__dirname, '..', '..', 'tests', 'node_modules', 'bullmq'));

// This process's own peak RSS (VmHWM): resourceUsage().maxRSS would also count the
// harness's size at the spawn, which Linux hands down through exec (see peak_rss.py).
function peakRssMb() {
  try {
    const m = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync('/proc/self/status', 'utf8'));
    if (m) return Number(m[1]) / 1024;
  } catch (e) { /* no /proc: fall back */ }
  return process.resourceUsage().maxRSS / 1024;
}

const cfg = JSON.parse(process.argv[2]);
const url = new URL(cfg.url);
const connection = { host: url.hostname, port: Number(url.port || 6379), db: Number((url.pathname || '/0').slice(1) || 0) };
const nowMs = () => performance.timeOrigin + performance.now();
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function waitGo() {
  return new Promise((resolve) => {
    const rl = readline.createInterface({ input: process.stdin });
    rl.on('line', (line) => { if (line.trim() === 'GO') { rl.close(); resolve(); } });
  });
}

// The realistic mix: a 1 KB payload on every job; every job kept among the last 1,000
// completed (removeOnComplete {count: 1000}) and given 2 attempts with a fixed 50 ms backoff;
// 10 % fail their first attempt (data.f, the worker drivers throw), 10 % delayed by
// 100-300 ms from their add (due by the time the preload ends and the worker starts, so
// they are promoted from the delayed set during the run and their due times never decide
// when it ends), the rest spread over three priorities (none, 1, 10).
const PAYLOAD = 'x'.repeat(1024);
function mixJob(i) {
  const opts = { removeOnComplete: { count: 1000 }, attempts: 2, backoff: { type: 'fixed', delay: 50 } };
  if (i % 10 === 7) opts.delay = 100 + (i % 200);
  else if (i % 3 === 1) opts.priority = 1;
  else if (i % 3 === 2) opts.priority = 10;
  return { name: 'j', data: { i, p: PAYLOAD, f: i % 10 === 3 }, opts };
}

async function bulk(queue, n, chunk, offset, mix) {
  for (let start = 0; start < n; start += chunk) {
    const jobs = [];
    for (let i = start; i < Math.min(n, start + chunk); i++) {
      jobs.push(mix ? mixJob(offset + i) : { name: 'j', data: { i: offset + i } });
    }
    await queue.addBulk(jobs);
  }
}

async function main() {
  const queue = new Queue(cfg.queue, { connection, prefix: cfg.prefix });
  await queue.waitUntilReady();
  const n = cfg.n;
  const chunk = cfg.chunk || 1000;
  if (cfg.mode === 'preload') {
    if (cfg.paused) await queue.pause();
    await bulk(queue, n, chunk, 0, !!cfg.mix);
    await queue.close();
    return;
  }
  // warm up: load the add script on a queue nobody watches
  const warm = new Queue(cfg.queue + '-warm', { connection, prefix: cfg.prefix });
  await warm.add('w', {});
  await warm.addBulk([{ name: 'w', data: {} }]);
  await warm.obliterate({ force: true });
  await warm.close();
  process.stdout.write('READY\n');
  await waitGo();
  const cpu0 = process.cpuUsage();
  const t0 = nowMs();
  if (cfg.mode === 'add') {
    for (let i = 0; i < n; i++) await queue.add('j', { i });
  } else if (cfg.mode === 'bulk') {
    await bulk(queue, n, chunk, 0);
  } else if (cfg.mode === 'feed') {
    for (let i = 0; i < n; i++) {
      await queue.add('j', { t: nowMs(), i });
      await sleep(cfg.interval_ms);
    }
  } else {
    throw new Error('unknown producer mode ' + cfg.mode);
  }
  const elapsed = (nowMs() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  process.stdout.write(JSON.stringify({
    n, elapsed_s: elapsed, cpu_s: (cpu.user + cpu.system) / 1e6,
    maxrss_mb: peakRssMb(),
  }) + '\n');
  await queue.close();
}

main().then(() => process.exit(0), (err) => { console.error(err); process.exit(1); });

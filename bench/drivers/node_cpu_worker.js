// Benchmark driver of the CPU case (bench/cpu.py): one BullMQ (Node) worker whose jobs each
// burn data.loops rounds of the same integer arithmetic as bench.cpu.burn.
//   argv[2] = JSON {url, queue, prefix, concurrency}  -> prints "READY", closes on SIGTERM
//   argv[2] = JSON {calibrate: ms}                    -> prints the loop count that takes ms here
'use strict';
const path = require('path');

const cfg = JSON.parse(process.argv[2]);

function burn(loops) {
  let x = 0;
  for (let i = 0; i < loops; i++) x = (x + i * i) % 1000003;
  return x;
}

if (cfg.calibrate) {
  const timed = (loops) => {
    let best = Infinity;
    for (let k = 0; k < 5; k++) {
      const t0 = process.hrtime.bigint();
      burn(loops);
      best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e6);
    }
    return best;
  };
  let loops = 200000;
  loops = Math.max(1000, Math.round(loops * cfg.calibrate / timed(loops)));
  loops = Math.max(1000, Math.round(loops * cfg.calibrate / timed(loops)));
  console.log(JSON.stringify({ loops }));
  process.exit(0);
}

const { Worker } = require(path.join(__dirname, '..', '..', 'tests', 'node_modules', 'bullmq'));
const url = new URL(cfg.url);
const connection = { host: url.hostname, port: Number(url.port || 6379), db: Number((url.pathname || '/0').slice(1) || 0) };
const worker = new Worker(cfg.queue, async (job) => burn(job.data.loops),
  { connection, prefix: cfg.prefix, concurrency: cfg.concurrency });
worker.on('error', (err) => { console.error('worker error', err); });
worker.waitUntilReady().then(() => console.log('READY'));
process.on('SIGTERM', async () => { await worker.close(); process.exit(0); });

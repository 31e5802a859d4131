// Scale bench driver: admin calls of a BullMQ (Node) Queue on a big queue; the protocol of
// scale_admin_ours.py: argv[2] = JSON {url, queue, prefix}; prints READY, then one JSON
// request per stdin line ({op, start, end}) answered by {ms, result}.
'use strict';
const path = require('path');
const readline = require('readline');
const { Queue } = require(path.join(__dirname, '..', '..', 'tests', 'node_modules', 'bullmq'));

const cfg = JSON.parse(process.argv[2]);
const url = new URL(cfg.url);
const connection = { host: url.hostname, port: Number(url.port || 6379), db: Number((url.pathname || '/0').slice(1) || 0) };

async function run(queue, req) {
  switch (req.op) {
    case 'clean': return (await queue.clean(0, 0, 'completed')).length;
    case 'obliterate': return queue.obliterate({ force: true });
    case 'retry_jobs': return queue.retryJobs({ count: 1000, state: 'failed' });
    case 'get_jobs': return (await queue.getJobs(['completed'], req.start, req.end)).length;
    case 'get_job_counts': return queue.getJobCounts();
    case 'drain': return queue.drain();
    default: throw new Error('unknown op ' + req.op);
  }
}

async function main() {
  const queue = new Queue(cfg.queue, { connection, prefix: cfg.prefix });
  await queue.waitUntilReady();
  await queue.getJobCounts();
  process.stdout.write('READY\n');
  const rl = readline.createInterface({ input: process.stdin });
  for await (const line of rl) {
    const req = JSON.parse(line);
    const t0 = performance.now();
    const result = await run(queue, req);
    const ms = performance.now() - t0;
    process.stdout.write(JSON.stringify({ ms, result: result === undefined ? null : result }) + '\n');
  }
  await queue.close();
}

main().then(() => process.exit(0), (err) => { console.error(err); process.exit(1); });

// Scale bench driver: admin calls of a BullMQ (Node) Queue on a big queue; the protocol of
// scale_admin_ours.py: argv[2] = JSON {url, queue, prefix}; prints READY, then one JSON
// request per stdin line ({op, start, end, specs}) answered by {ms, result}.
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
    // what a bull-board-like job list reads: the first 50 waiting jobs and the counts
    case 'dash': return [(await queue.getJobs(['waiting'], 0, 49)).length, await queue.getJobCounts()];
    case 'schedulers': { // upsert each of specs ([id, repeat, template]), 100 at a time
      for (let i = 0; i < req.specs.length; i += 100) {
        await Promise.all(req.specs.slice(i, i + 100).map(([id, repeat, tpl]) => queue.upsertJobScheduler(id, repeat, tpl)));
      }
      return req.specs.length;
    }
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

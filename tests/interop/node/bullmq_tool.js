#!/usr/bin/env node
'use strict';
/*
 * bullmq_tool.js: drive the real npm `bullmq` from the Python interop tests.
 *
 * Usage:
 *   node bullmq_tool.js '<json command>'       (the command as the first argument)
 *   echo '<json command>' | node bullmq_tool.js  (or as the first line of stdin)
 *
 * Every command carries the connection and the queue:
 *   {"redis": "redis://127.0.0.1:PORT/0", "prefix": "bull", "queue": "q", "cmd": "...", ...}
 * A "redis+cluster://host:port,host:port/" URL gives every Queue/Worker/QueueEvents/
 * FlowProducer its own ioredis Cluster client (the prefix or queue name must carry a hash tag).
 *
 * Output is JSON, one object per line on stdout, each with "t" (Date.now() when printed):
 *   one-shot commands print exactly one line {"ok": true, "result": ...} or
 *   {"ok": false, "error": message, "name": error class, "stack": ...} (exit code 1);
 *   long-running commands ("worker", "events") print one line per event,
 *   {"event": name, ...}, end with {"event": "exit", ...} and exit 0.
 *
 * One-shot commands:
 *   add         {name, data, opts}                 -> job view of the added job
 *   addBulk     {jobs: [{name, data, opts}, ...]}   -> list of job views
 *   getJob      {jobId}                             -> job view, or null
 *   getJobs     {types, start, end, asc}            -> list of job views
 *   getJobLogs  {jobId}                             -> {logs, count}
 *   getState    {jobId}                             -> "waiting" / "active" / ...
 *   counts      {types: [...]} (optional)           -> {type: count}
 *   pause / resume / isPaused
 *   setGlobalConcurrency {concurrency} / setGlobalRateLimit {max, duration}
 *   getMeta     -> Queue.getMeta() (paused, concurrency, max, duration, version, ...)
 *   getWorkers  -> [{name, rawname}] of the workers Queue.getWorkers() finds (CLIENT LIST)
 *   updateProgress {jobId, progress}  /  log {jobId, line}
 *   remove      {jobId}                             -> Queue.remove result
 *   promote {jobId} / updateData {jobId, data} / drain {delayed} / obliterate {force}
 *   stalledCheck {workerOpts}  -> ids a Node worker's stall check moved back (one check)
 *   retry {jobId, state} / changePriority {jobId, priority, lifo} / changeDelay {jobId, delay}
 *   flow {tree}  -> FlowProducer.add(tree), answered as {id, queue, children: [...]}
 *   flowBulk {trees}  -> FlowProducer.addBulk(trees), a list of such answers
 *   getFlow {jobId, depth, maxChildren}  -> FlowProducer.getFlow as {job: job view, children}
 *   getChildrenValues / getFailedChildrenValues / getIgnoredChildrenFailures {jobId}
 *   getDependenciesCount {jobId, opts} / getDependencies {jobId, opts}
 *   removeChildDependency / removeUnprocessedChildren {jobId}
 *   queueGetDependencies {parentId, type, start, end}  -> Queue.getDependencies (paginate)
 *   waitUntilFinished {jobId, ttl, removed?}        -> {returnvalue} or an error line
 *   queueCall   {method, args}                      -> queue[method](...args) (Node's own getters)
 *   manualRun   {workerOpts, token, actions: [{do: 'complete', value} | {do: 'fail', message}]}
 *               -> ids taken by worker.getNextJob(token) and settled one by one (null: none)
 *   jobCall     {jobId, method, args}               -> (await Job.fromId(queue, jobId))[method](...args)
 *   upsertJobScheduler {schedulerId, repeat, template} -> job view of its upcoming run
 *   getJobScheduler {schedulerId} / getJobSchedulers {start, end, asc} / getJobSchedulersCount
 *   removeJobScheduler {schedulerId}                -> true when it existed
 *   batch       {steps: [command, ...]}             -> list of per-step {ok, result|error}
 *                                  (one process; a step may name another queue via "queue")
 *
 * Long-running commands:
 *   worker  {workerOpts, behaviour, byName, stopAfter, maxMs}
 *     Runs a Worker.  workerOpts go to `new Worker` (concurrency, drainDelay, lockDuration,
 *     stalledInterval, maxStalledCount, limiter, name, removeOnComplete, ...).
 *     behaviour (or byName[job.name]) drives the processor:
 *       sleepMs     wait this long (cooperatively) before finishing
 *       failTimes   throw Error(failMessage) while job.attemptsMade < failTimes
 *       failMessage message of that error (default "planned failure <attempt>")
 *       unrecoverable  throw UnrecoverableError(failMessage)
 *       progress    list of values passed to job.updateProgress, in order
 *       log         list of lines passed to job.log
 *       crash       process.exit(3) inside the processor (a worker dying holding a job)
 *       delayOnceMs     on the first start: job.moveToDelayed(now + ms) + DelayedError
 *       rateLimitOnceMs on the first start: worker.rateLimit(ms) + RateLimitError
 *       return      the value to return; returnData: true returns job.data;
 *                   with neither, the processor returns undefined
 *       waitChildren  the parent step pattern: on its first run the job calls
 *                   moveToWaitingChildren(token) and throws WaitingChildrenError when it
 *                   moved; once it runs again it returns getChildrenValues()
 *       returnChildrenValues  return getChildrenValues()
 *       spawnChildren {queue, n}  with waitChildren: on the first run, first add n children
 *                   ({i} as data, job name "spawned") to that queue with this job as parent
 *     Prints "ready" once connected, "process" (job view, at processor start),
 *     and every Worker event: active, completed, failed, drained, stalled, error,
 *     paused, resumed, closing, closed.
 *     Stops after `stopAfter` final outcomes (completed, or failed with no retry left),
 *     after `maxMs`, or when stdin says "stop" (or closes); "close-force" closes at once.
 *   events  {lastEventId, blockingTimeout, maxMs, stopOn: event name, stopAfter}
 *     Runs a QueueEvents and prints every event it emits ({"event": name, "args": ..., "id"}),
 *     and "error" lines if it errors.  Unless lastEventId is given it starts after the last
 *     entry the events stream holds when the tool starts, and prints "ready" once that is
 *     fixed, so nothing written after "ready" can be missed.  Stops on stdin "stop",
 *     after maxMs, or after `stopAfter` events named `stopOn`.
 *
 * Only bullmq and ioredis are used (both pinned in tests/package.json).
 */

const path = require('path');
const readline = require('readline');

// Resolve the pinned packages from tests/node_modules whatever the current directory is.
const nodeModules = path.resolve(__dirname, '..', '..', 'node_modules');
// ECHOMQ_NODE_BULLMQ: another install of bullmq under node_modules (bullmq-newest: the newest 6.7.x)
const bullmq = require(path.join(nodeModules, process.env.ECHOMQ_NODE_BULLMQ || 'bullmq'));
const IORedis = require(path.join(nodeModules, 'ioredis'));

const {
  Queue, Worker, QueueEvents, Job, FlowProducer, UnrecoverableError, DelayedError, RateLimitError,
  WaitingChildrenError,
} = bullmq;

/** Print one JSON line, stamped with the current time. */
function emitLine(obj) {
  process.stdout.write(JSON.stringify(Object.assign({ t: Date.now() }, obj)) + '\n');
}

/** Turn "redis://[:password@]host:port/db" into ioredis options. */
function connectionOptions(url) {
  const u = new URL(url || 'redis://127.0.0.1:6379/0');
  const opts = {
    host: u.hostname || '127.0.0.1',
    port: Number(u.port || 6379),
    db: Number((u.pathname || '/0').slice(1) || 0),
    // Workers and QueueEvents block; bullmq requires this to be null.
    maxRetriesPerRequest: null,
  };
  if (u.password) opts.password = decodeURIComponent(u.password);
  if (u.username) opts.username = decodeURIComponent(u.username);
  return opts;
}

/** An ioredis Cluster client for "redis+cluster://[user:password@]h1:p1,h2:p2/". */
function clusterClient(url) {
  const rest = url.slice('redis+cluster://'.length);
  const at = rest.lastIndexOf('@');
  const auth = at >= 0 ? rest.slice(0, at) : '';
  const hosts = (at >= 0 ? rest.slice(at + 1) : rest).replace(/\/.*$/, '');
  const nodes = hosts.split(',').map(h => {
    const i = h.lastIndexOf(':');
    return { host: h.slice(0, i), port: Number(h.slice(i + 1)) };
  });
  const redisOptions = { maxRetriesPerRequest: null };
  if (auth) {
    const [user, pass] = auth.split(':');
    if (user) redisOptions.username = decodeURIComponent(user);
    if (pass) redisOptions.password = decodeURIComponent(pass);
  }
  return new IORedis.Cluster(nodes, { redisOptions });
}

function isCluster(url) {
  return typeof url === 'string' && url.startsWith('redis+cluster://');
}

/** A client of the command's Redis (a Cluster client for a cluster URL). */
function newClient(url) {
  return isCluster(url) ? clusterClient(url) : new IORedis(connectionOptions(url));
}

/** Common constructor options for Queue / Worker / QueueEvents. */
function baseOpts(cmd) {
  const opts = { connection: isCluster(cmd.redis) ? clusterClient(cmd.redis) : connectionOptions(cmd.redis) };
  if (cmd.prefix) opts.prefix = cmd.prefix;
  return opts;
}

/** A plain view of a Node Job: exactly what Node's Job object holds after decoding. */
function jobView(job) {
  if (!job) return null;
  const view = {
    id: job.id,
    name: job.name,
    data: job.data,
    opts: job.opts,
    progress: job.progress,
    attemptsMade: job.attemptsMade,
    attemptsStarted: job.attemptsStarted,
    stalledCounter: job.stalledCounter,
    returnvalue: job.returnvalue,
    failedReason: job.failedReason,
    stacktrace: job.stacktrace,
    timestamp: job.timestamp,
    processedOn: job.processedOn,
    finishedOn: job.finishedOn,
    delay: job.delay,
    priority: job.priority,
    parentKey: job.parentKey,
    parent: job.parent,
    repeatJobKey: job.repeatJobKey,
    deferredFailure: job.deferredFailure,
    processedBy: job.processedBy,
    deduplicationId: job.deduplicationId,
  };
  // JSON drops undefined; keep the distinction visible with explicit nulls where Node has
  // the attribute but no value (returnvalue undefined vs null matters to the tests).
  view.hasReturnvalue = job.returnvalue !== undefined;
  return view;
}

function errorView(err) {
  return {
    error: err && err.message !== undefined ? err.message : String(err),
    name: err && err.name,
    stack: err && err.stack,
  };
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

/** Run one one-shot command against an open Queue; returns its result. */
async function runOne(queue, cmd) {
  switch (cmd.cmd) {
    case 'add':
      return jobView(await queue.add(cmd.name, cmd.data, cmd.opts));
    case 'addBulk':
      return (await queue.addBulk(cmd.jobs)).map(jobView);
    case 'getJob':
      return jobView(await queue.getJob(cmd.jobId));
    case 'getJobs': {
      const jobs = await queue.getJobs(cmd.types, cmd.start || 0, cmd.end === undefined ? -1 : cmd.end, !!cmd.asc);
      return jobs.map(jobView);
    }
    case 'getJobLogs':
      return queue.getJobLogs(cmd.jobId, cmd.start || 0, cmd.end === undefined ? -1 : cmd.end, cmd.asc !== false);
    case 'getState':
      return queue.getJobState(cmd.jobId);
    case 'counts':
      return cmd.types ? queue.getJobCounts(...cmd.types) : queue.getJobCounts();
    case 'pause':
      await queue.pause();
      return true;
    case 'resume':
      await queue.resume();
      return true;
    case 'isPaused':
      return queue.isPaused();
    case 'setGlobalConcurrency':
      await queue.setGlobalConcurrency(cmd.concurrency);
      return true;
    case 'setGlobalRateLimit':
      await queue.setGlobalRateLimit(cmd.max, cmd.duration);
      return true;
    case 'getMeta':
      return queue.getMeta();
    case 'getWorkers':
      return (await queue.getWorkers()).map(w => ({ name: w.name, rawname: w.rawname }));
    case 'updateProgress': {
      const job = await Job.fromId(queue, cmd.jobId);
      if (!job) throw new Error(`job ${cmd.jobId} not found`);
      await job.updateProgress(cmd.progress);
      return true;
    }
    case 'log': {
      const job = await Job.fromId(queue, cmd.jobId);
      if (!job) throw new Error(`job ${cmd.jobId} not found`);
      return job.log(cmd.line);
    }
    case 'remove':
      return queue.remove(cmd.jobId);
    case 'promote': {
      const job = await Job.fromId(queue, cmd.jobId);
      if (!job) throw new Error(`job ${cmd.jobId} not found`);
      await job.promote();
      return true;
    }
    case 'updateData': {
      const job = await Job.fromId(queue, cmd.jobId);
      if (!job) throw new Error(`job ${cmd.jobId} not found`);
      await job.updateData(cmd.data);
      return true;
    }
    case 'stalledCheck': {
      // One stall check as a Node worker runs it (no processing): returns the stalled ids.
      const opts = Object.assign(baseOpts(cmd), { autorun: false }, cmd.workerOpts || {});
      const worker = new Worker(cmd.queue, async () => undefined, opts);
      const stalled = [];
      worker.on('stalled', jobId => stalled.push(jobId));
      try {
        await worker.waitUntilReady();
        await worker.moveStalledJobsToWait();
      } finally {
        await worker.close();
      }
      return stalled;
    }
    case 'retry':
    case 'changePriority':
    case 'changeDelay': {
      const job = await Job.fromId(queue, cmd.jobId);
      if (!job) throw new Error(`job ${cmd.jobId} not found`);
      if (cmd.cmd === 'retry') await job.retry(cmd.state || 'failed');
      else if (cmd.cmd === 'changePriority') await job.changePriority({ priority: cmd.priority, lifo: !!cmd.lifo });
      else await job.changeDelay(cmd.delay);
      return true;
    }
    case 'flow': {
      // cmd.tree: {name, queueName, data, opts, children: [...]} as FlowProducer.add takes it.
      const flow = new FlowProducer(baseOpts(cmd));
      try {
        const added = await flow.add(cmd.tree);
        const ids = node => ({ id: node.job.id, queue: node.job.queueName,
                               children: (node.children || []).map(ids) });
        return ids(added);
      } finally {
        await flow.close();
      }
    }
    case 'flowBulk': {
      const flow = new FlowProducer(baseOpts(cmd));
      try {
        const added = await flow.addBulk(cmd.trees);
        const ids = node => ({ id: node.job.id, queue: node.job.queueName,
                               children: (node.children || []).map(ids) });
        return added.map(ids);
      } finally {
        await flow.close();
      }
    }
    case 'getFlow': {
      const flow = new FlowProducer(baseOpts(cmd));
      try {
        const opts = { id: cmd.jobId, queueName: cmd.queue };
        if (cmd.depth !== undefined) opts.depth = cmd.depth;
        if (cmd.maxChildren !== undefined) opts.maxChildren = cmd.maxChildren;
        const view = node => {
          if (!node) return null;
          const out = { job: jobView(node.job) };
          if (node.children) out.children = node.children.map(view);
          return out;
        };
        return view(await flow.getFlow(opts));
      } finally {
        await flow.close();
      }
    }
    case 'getChildrenValues':
    case 'getDependenciesCount':
    case 'getDependencies':
    case 'getIgnoredChildrenFailures':
    case 'removeChildDependency':
    case 'removeUnprocessedChildren':
    case 'getFailedChildrenValues': {
      const job = await Job.fromId(queue, cmd.jobId);
      if (!job) throw new Error(`job ${cmd.jobId} not found`);
      switch (cmd.cmd) {
        case 'getDependenciesCount': return job.getDependenciesCount(cmd.opts || {});
        case 'getDependencies': return job.getDependencies(cmd.opts || {});
        case 'getIgnoredChildrenFailures': return job.getIgnoredChildrenFailures();
        case 'removeChildDependency': return job.removeChildDependency();
        case 'removeUnprocessedChildren': await job.removeUnprocessedChildren(); return true;
        case 'getChildrenValues': return job.getChildrenValues();
        default: return job.getFailedChildrenValues();
      }
    }
    case 'queueGetDependencies': {
      const { items, total, jobs } = await queue.getDependencies(
        cmd.parentId, cmd.type, cmd.start || 0, cmd.end === undefined ? -1 : cmd.end);
      return { items, total, jobs: jobs.map(j => ({ name: j.name, data: j.data })) };
    }
    case 'upsertJobScheduler':
      return jobView(await queue.upsertJobScheduler(cmd.schedulerId, cmd.repeat, cmd.template));
    case 'getJobScheduler':
      return (await queue.getJobScheduler(cmd.schedulerId)) || null;
    case 'getJobSchedulers':
      return queue.getJobSchedulers(cmd.start || 0, cmd.end === undefined ? -1 : cmd.end, !!cmd.asc);
    case 'getJobSchedulersCount':
      return queue.getJobSchedulersCount();
    case 'removeJobScheduler':
      return queue.removeJobScheduler(cmd.schedulerId);
    case 'drain':
      await queue.drain(!!cmd.delayed);
      return true;
    case 'obliterate':
      await queue.obliterate({ force: !!cmd.force });
      return true;
    case 'queueCall': {
      // Any Queue method by name: {method, args} -> its result (undefined -> null).
      if (typeof queue[cmd.method] !== 'function') throw new Error(`Queue has no method ${cmd.method}`);
      const value = await queue[cmd.method](...(cmd.args || []));
      return value === undefined ? null : value;
    }
    case 'jobCall': {
      // Any Job method by name on Job.fromId(jobId): {jobId, method, args}.
      const job = await Job.fromId(queue, cmd.jobId);
      if (!job) throw new Error(`job ${cmd.jobId} not found`);
      if (typeof job[cmd.method] !== 'function') throw new Error(`Job has no method ${cmd.method}`);
      const value = await job[cmd.method](...(cmd.args || []));
      return value === undefined ? null : value;
    }
    case 'manualRun': {
      // Manual processing: a Worker without processor; per action take the next job with
      // getNextJob(token) and settle it: {do: 'complete', value} or {do: 'fail', message}.
      const worker = new Worker(cmd.queue, null, Object.assign({}, baseOpts(cmd), cmd.workerOpts || {}, { autorun: false }));
      const taken = [];
      try {
        for (const action of cmd.actions) {
          const job = await worker.getNextJob(cmd.token, { block: false });
          if (!job) { taken.push(null); continue; }
          taken.push(job.id);
          if (action.do === 'complete') await job.moveToCompleted(action.value, cmd.token, false);
          else await job.moveToFailed(new Error(action.message), cmd.token, false);
        }
      } finally {
        await worker.close();
      }
      return taken;
    }
    case 'waitUntilFinished': {
      const events = new QueueEvents(cmd.queue, baseOpts(cmd));
      try {
        await events.waitUntilReady();
        // {removed: true}: the job hash may be gone (removeOnComplete); wait on the id as
        // a Job object kept from its add would
        let job = await Job.fromId(queue, cmd.jobId);
        if (!job && cmd.removed) job = new Job(queue, cmd.name || 'removed', {}, {}, cmd.jobId);
        if (!job) throw new Error(`job ${cmd.jobId} not found`);
        const value = await job.waitUntilFinished(events, cmd.ttl);
        return { returnvalue: value === undefined ? null : value, undefined: value === undefined };
      } finally {
        await events.close();
      }
    }
    case 'batch': {
      // Steps may name another queue (same connection settings); one Queue per name.
      const queues = new Map([[cmd.queue, queue]]);
      const out = [];
      try {
        for (const step of cmd.steps) {
          const full = Object.assign({}, cmd, { steps: undefined }, step);
          if (!queues.has(full.queue)) queues.set(full.queue, new Queue(full.queue, baseOpts(full)));
          try {
            out.push({ ok: true, result: await runOne(queues.get(full.queue), full) });
          } catch (err) {
            out.push(Object.assign({ ok: false }, errorView(err)));
          }
        }
      } finally {
        for (const [name, other] of queues) if (name !== cmd.queue) await other.close();
      }
      return out;
    }
    default:
      throw new Error(`unknown command ${JSON.stringify(cmd.cmd)}`);
  }
}

async function runOneShot(cmd) {
  const queue = new Queue(cmd.queue, baseOpts(cmd));
  let code = 0;
  try {
    const result = await runOne(queue, cmd);
    emitLine({ ok: true, result: result === undefined ? null : result });
  } catch (err) {
    emitLine(Object.assign({ ok: false }, errorView(err)));
    code = 1;
  } finally {
    await queue.close();
  }
  return code;
}

/** Lines typed on stdin by the test ("stop", "close-force"); calls onLine for each. */
function watchStdin(onLine, onEnd) {
  const rl = readline.createInterface({ input: process.stdin });
  rl.on('line', line => onLine(line.trim()));
  rl.on('close', onEnd);
}

/** Build the processor function from the behaviour description. */
function makeProcessor(cmd, workerRef) {
  const byName = cmd.byName || {};
  return async (job, token) => {
    const how = byName[job.name] || cmd.behaviour || {};
    emitLine({ event: 'process', jobId: job.id, token, job: jobView(job) });
    if (how.crash) {
      // Simulate a worker that dies while holding the job's lock.
      process.exit(3);
    }
    for (const value of how.progress || []) {
      await job.updateProgress(value);
    }
    for (const line of how.log || []) {
      await job.log(line);
    }
    if (how.sleepMs) await sleep(how.sleepMs);
    if (how.delayOnceMs && job.attemptsStarted === 1) {
      // The processor postpones its job itself (no attempt counted), as BullMQ documents.
      await job.moveToDelayed(Date.now() + how.delayOnceMs, token);
      throw new DelayedError();
    }
    if (how.rateLimitOnceMs && job.attemptsStarted === 1) {
      // Manual rate limit: block the queue for a while and put this job back in front.
      await workerRef.worker.rateLimit(how.rateLimitOnceMs);
      throw new RateLimitError();
    }
    if (how.unrecoverable) {
      throw new UnrecoverableError(how.failMessage || 'planned unrecoverable failure');
    }
    if (how.failTimes && job.attemptsMade < how.failTimes) {
      throw new Error(how.failMessage || `planned failure ${job.attemptsMade + 1}`);
    }
    if (how.waitChildren && !(job.data && job.data.waited)) {
      // The step pattern: remember the step in the job's data, then wait for the children.
      await job.updateData(Object.assign({}, job.data, { waited: true }));
      if (how.spawnChildren) {
        const target = new Queue(how.spawnChildren.queue, baseOpts(cmd));
        try {
          for (let i = 0; i < how.spawnChildren.n; i += 1) {
            await target.add('spawned', { i }, { parent: { id: job.id, queue: job.queueQualifiedName } });
          }
        } finally {
          await target.close();
        }
      }
      if (await job.moveToWaitingChildren(token)) throw new WaitingChildrenError();
    }
    if (how.waitChildren || how.returnChildrenValues) return job.getChildrenValues();
    if (how.returnData) return job.data;
    if (Object.prototype.hasOwnProperty.call(how, 'return')) return how.return;
    return undefined;
  };
}

async function runWorker(cmd) {
  const opts = Object.assign(baseOpts(cmd), { autorun: false }, cmd.workerOpts || {});
  const workerRef = {};
  const worker = new Worker(cmd.queue, makeProcessor(cmd, workerRef), opts);
  workerRef.worker = worker;
  let outcomes = 0;
  let stopping = null;

  const stop = (reason, force) => {
    if (stopping) return stopping;
    emitLine({ event: 'stopping', reason });
    stopping = worker.close(!!force).then(
      () => emitLine({ event: 'exit', reason, outcomes }),
      err => emitLine(Object.assign({ event: 'exit', reason, outcomes }, errorView(err))),
    );
    return stopping;
  };

  worker.on('active', (job, prev) => emitLine({ event: 'active', jobId: job.id, prev, job: jobView(job) }));
  worker.on('completed', (job, result) => {
    outcomes += 1;
    emitLine({ event: 'completed', jobId: job.id, result: result === undefined ? null : result, job: jobView(job) });
    if (cmd.stopAfter && outcomes >= cmd.stopAfter) stop('stopAfter');
  });
  worker.on('failed', (job, err) => {
    // Node emits "failed" after every failed attempt; only a final one has finishedOn.
    const final = !!(job && job.finishedOn);
    if (final) outcomes += 1;
    emitLine(Object.assign({ event: 'failed', jobId: job && job.id, final, job: jobView(job) }, errorView(err)));
    if (final && cmd.stopAfter && outcomes >= cmd.stopAfter) stop('stopAfter');
  });
  worker.on('drained', () => emitLine({ event: 'drained' }));
  worker.on('stalled', (jobId, prev) => emitLine({ event: 'stalled', jobId, prev }));
  worker.on('error', err => emitLine(Object.assign({ event: 'error' }, errorView(err))));
  worker.on('paused', () => emitLine({ event: 'paused' }));
  worker.on('resumed', () => emitLine({ event: 'resumed' }));
  worker.on('closing', msg => emitLine({ event: 'closing', msg }));
  worker.on('closed', () => emitLine({ event: 'closed' }));

  watchStdin(
    line => {
      if (line === 'stop') stop('stdin');
      else if (line === 'close-force') stop('stdin', true);
    },
    () => stop('stdin-closed'),
  );
  if (cmd.maxMs) setTimeout(() => stop('maxMs'), cmd.maxMs).unref();

  await worker.waitUntilReady();
  if (!stopping) {
    emitLine({ event: 'ready', workerId: worker.id });
    worker.run().catch(err => emitLine(Object.assign({ event: 'error', where: 'run' }, errorView(err))));
  }
  await new Promise(resolve => {
    const poll = setInterval(() => {
      if (stopping) {
        clearInterval(poll);
        stopping.then(resolve);
      }
    }, 20);
  });
  return 0;
}

async function runEvents(cmd) {
  const opts = baseOpts(cmd);
  let lastId = cmd.lastEventId;
  if (!lastId) {
    // Start right after what the stream holds now, so "ready" is a real barrier.
    const client = newClient(cmd.redis);
    try {
      const eventsKey = `${cmd.prefix || 'bull'}:${cmd.queue}:events`;
      const last = await client.xrevrange(eventsKey, '+', '-', 'COUNT', 1);
      lastId = last.length ? last[0][0] : '0-0';
    } finally {
      client.disconnect();
    }
  }
  opts.lastEventId = lastId;
  if (cmd.blockingTimeout) opts.blockingTimeout = cmd.blockingTimeout;
  const events = new QueueEvents(cmd.queue, opts);
  let seen = 0;
  let stopping = null;
  const stop = reason => {
    if (stopping) return stopping;
    stopping = events.close().then(
      () => emitLine({ event: 'exit', reason, seen }),
      err => emitLine(Object.assign({ event: 'exit', reason, seen }, errorView(err))),
    );
    return stopping;
  };

  // QueueEvents emits "<event>" and "<event>:<jobId>" for each stream entry; report the
  // first form only (plus anything else it emits, such as "error").
  const originalEmit = events.emit.bind(events);
  events.emit = (name, ...args) => {
    if (typeof name === 'string' && !name.includes(':')) {
      if (name === 'error') {
        emitLine(Object.assign({ event: 'error' }, errorView(args[0])));
      } else if (name === 'drained') {
        emitLine({ event: 'drained', id: args[0] });
      } else {
        emitLine({ event: name, args: args[0], id: args[1] });
      }
      if (cmd.stopOn && name === cmd.stopOn) {
        seen += 1;
        if (seen >= (cmd.stopAfter || 1)) stop('stopOn');
      }
    }
    return originalEmit(name, ...args);
  };

  watchStdin(line => { if (line === 'stop') stop('stdin'); }, () => stop('stdin-closed'));
  if (cmd.maxMs) setTimeout(() => stop('maxMs'), cmd.maxMs).unref();

  await events.waitUntilReady();
  emitLine({ event: 'ready', lastEventId: lastId });
  await new Promise(resolve => {
    const poll = setInterval(() => {
      if (stopping) {
        clearInterval(poll);
        stopping.then(resolve);
      }
    }, 20);
  });
  return 0;
}

async function readCommand() {
  if (process.argv[2]) return JSON.parse(process.argv[2]);
  // First line of stdin; the rest of stdin stays available for "stop" lines.
  return new Promise((resolve, reject) => {
    let buffer = '';
    const onData = chunk => {
      buffer += chunk;
      const nl = buffer.indexOf('\n');
      if (nl >= 0) {
        process.stdin.removeListener('data', onData);
        process.stdin.pause();
        const rest = buffer.slice(nl + 1);
        if (rest) process.stdin.unshift(Buffer.from(rest));
        try { resolve(JSON.parse(buffer.slice(0, nl))); } catch (err) { reject(err); }
      }
    };
    process.stdin.setEncoding('utf8');
    process.stdin.on('data', onData);
    process.stdin.on('end', () => {
      try { resolve(JSON.parse(buffer)); } catch (err) { reject(err); }
    });
  });
}

async function main() {
  let cmd;
  try {
    cmd = await readCommand();
  } catch (err) {
    emitLine(Object.assign({ ok: false }, errorView(err)));
    return 2;
  }
  if (cmd.cmd === 'worker') return runWorker(cmd);
  if (cmd.cmd === 'events') return runEvents(cmd);
  return runOneShot(cmd);
}

/** Exit once everything written to stdout has reached the pipe (large answers). */
function exitAfterFlush(code) {
  process.stdout.write('', () => process.exit(code));
}

main().then(
  code => exitAfterFlush(code),
  err => {
    emitLine(Object.assign({ ok: false, event: 'fatal' }, errorView(err)));
    exitAfterFlush(1);
  },
);

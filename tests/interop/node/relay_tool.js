#!/usr/bin/env node
'use strict';
/*
 * relay_tool.js: one node of Node bullmq's Relay, driven from the Python interop tests.
 * py_relay.py is its twin on our Relay: same start command, same stdin operations, same
 * output lines, so a test drives either alike.
 *
 * Usage: node relay_tool.js '<json>' with
 *   {"redis": url, "prefix": p, "namespace": ns, "nodeId": id, "name"?: s,
 *    "opts"?: {leaseDuration, heartbeatInterval, sweepInterval, blockTimeout,
 *              inboxMaxLength, lagThreshold, maxMessageSize},
 *    "subscribe"?: [pattern, ...]}
 *
 * Prints one JSON line per event: ready {nodeId}; message {pattern, topic, mid, ts, data,
 * retained}; lag {backlog}; swept {nodes}; recovered; error {error}; result {tag, ok,
 * result | error, name, code}; exit.
 * Reads JSON lines on stdin, each answered by a result line with its tag:
 *   {"op": "publish", "topic", "data", "retain"?}   -> {mid, nodes, endpoints}
 *   {"op": "publishMany", "topic", "count"}         -> [mid, ...] (data: {"i": n, "sentAt": ms})
 *   {"op": "subscribe", "pattern"} / {"op": "unsubscribe", "pattern"}
 *   {"op": "deleteRetained", "topic"}, {"op": "getNodes"}, {"op": "getCounts"},
 *   {"op": "getSubscriptions"}, {"op": "getRetained"}, {"op": "sweep"}
 * "stop" (or stdin closing) closes the relay and exits.
 */
const path = require('path');
const { Relay } = require(path.join(__dirname, '..', '..', 'node_modules', process.env.ECHOMQ_NODE_BULLMQ || 'bullmq'));

const cmd = JSON.parse(process.argv[2]);
const emit = obj => process.stdout.write(JSON.stringify(Object.assign({ t: Date.now() }, obj)) + '\n');

function connectionOptions(url) {
  const u = new URL(url);
  const opts = {
    host: u.hostname || '127.0.0.1',
    port: Number(u.port || 6379),
    db: Number((u.pathname || '/0').slice(1) || 0),
    maxRetriesPerRequest: null,
  };
  if (u.password) opts.password = decodeURIComponent(u.password);
  return opts;
}

const relay = new Relay(Object.assign({
  connection: connectionOptions(cmd.redis),
  prefix: cmd.prefix,
  namespace: cmd.namespace,
  nodeId: cmd.nodeId,
  name: cmd.name,
}, cmd.opts || {}));
relay.on('error', err => emit({ event: 'error', error: String(err && err.message || err) }));
relay.on('lag', backlog => emit({ event: 'lag', backlog }));
relay.on('swept', nodes => emit({ event: 'swept', nodes }));
relay.on('recovered', () => emit({ event: 'recovered' }));

const subscriptions = new Map();
async function subscribe(pattern) {
  const sub = await relay.subscribe(pattern, msg => emit({
    event: 'message', pattern, topic: msg.topic, mid: msg.mid, ts: msg.ts, data: msg.data,
    retained: msg.retained,
  }));
  subscriptions.set(pattern, sub);
}

async function run(op) {
  switch (op.op) {
    case 'publish':
      return relay.publish(op.topic, op.data, op.retain ? { retain: op.retain } : {});
    case 'publishMany': {
      const mids = [];
      for (let i = 0; i < op.count; i++) {
        mids.push((await relay.publish(op.topic, { i, sentAt: Date.now() })).mid);
      }
      return mids;
    }
    case 'subscribe': await subscribe(op.pattern); return true;
    case 'unsubscribe': await subscriptions.get(op.pattern).unsubscribe(); return true;
    case 'deleteRetained': return relay.deleteRetained(op.topic);
    case 'getNodes': return relay.getNodes();
    case 'getCounts': return relay.getCounts();
    case 'getSubscriptions': return relay.getSubscriptions();
    case 'getRetained': return relay.getRetained();
    case 'sweep': return relay.backend.sweep(100);
    default: throw new Error(`unknown op ${op.op}`);
  }
}

let closing = null;
function stop() {
  if (!closing) {
    closing = relay.close().then(() => { emit({ event: 'exit' }); process.exit(0); });
  }
}

(async () => {
  await relay.waitUntilReady();
  for (const pattern of cmd.subscribe || []) await subscribe(pattern);
  emit({ event: 'ready', nodeId: relay.nodeId });
  let buf = '';
  process.stdin.setEncoding('utf8');
  process.stdin.on('data', chunk => {
    buf += chunk;
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (!line) continue;
      if (line === 'stop') { stop(); continue; }
      const op = JSON.parse(line);
      run(op).then(
        result => emit({ event: 'result', tag: op.tag, ok: true, result }),
        err => emit({ event: 'result', tag: op.tag, ok: false, error: err.message, name: err.name, code: err.code }),
      );
    }
  });
  process.stdin.on('end', stop);
})().catch(err => { emit({ event: 'error', error: err.message }); process.exit(2); });

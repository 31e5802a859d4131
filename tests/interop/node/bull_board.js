#!/usr/bin/env node
'use strict';
/*
 * bull_board.js: serve bull-board (@bull-board/api + @bull-board/express) over the
 * given queues, for the tests that compare it with our dashboard.
 *
 * Usage: echo '{"redis": URL, "prefix": P, "queues": ["a", "b"]}' | node bull_board.js
 * Prints {"port": N} once it listens on 127.0.0.1 (UI and JSON API under /ui); exits
 * when stdin closes.
 */
const path = require('path');
const readline = require('readline');

const nodeModules = path.resolve(__dirname, '..', '..', 'node_modules');
const need = (name) => require(path.join(nodeModules, name));
const express = need('express');
const { Queue } = need(process.env.ECHOMQ_NODE_BULLMQ || 'bullmq');
const { createBullBoard } = need('@bull-board/api');
const { BullMQAdapter } = need('@bull-board/api/bullMQAdapter');
const { ExpressAdapter } = need('@bull-board/express');

const rl = readline.createInterface({ input: process.stdin });
rl.once('line', (line) => {
  const cmd = JSON.parse(line);
  const u = new URL(cmd.redis);
  const connection = { host: u.hostname, port: Number(u.port || 6379), db: Number(u.pathname.slice(1) || 0) };
  const queues = cmd.queues.map((name) => new Queue(name, { connection, prefix: cmd.prefix }));
  const serverAdapter = new ExpressAdapter();
  serverAdapter.setBasePath('/ui');
  createBullBoard({ queues: queues.map((q) => new BullMQAdapter(q, { readOnlyMode: true })), serverAdapter });
  const app = express();
  app.use('/ui', serverAdapter.getRouter());
  const server = app.listen(0, '127.0.0.1', () => {
    process.stdout.write(JSON.stringify({ port: server.address().port }) + '\n');
  });
  rl.on('close', async () => {
    server.close();
    await Promise.all(queues.map((q) => q.close()));
    process.exit(0);
  });
});

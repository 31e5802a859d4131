#!/usr/bin/env node
'use strict';
/*
 * cron_next.js: next run times of cron patterns as the pinned npm `bullmq` computes them.
 *
 * Reads one JSON array of cases on stdin:
 *   [{"pattern": "0 9 * * 1-5", "tz": "Europe/Paris", "from": <ms>, "count": 5,
 *     "startDate": <ms>?, "endDate": <ms>?}, ...]
 * and prints one JSON array, one entry per case:
 *   {"next": [<ms>, ...]}   up to `count` runs, each computed from the previous one exactly as
 *                           a BullMQ worker computes a scheduler's next run
 *                           (bullmq's defaultRepeatStrategy, i.e. its pinned cron-parser);
 *                           the list ends early where BullMQ finds no next run (endDate)
 *   {"error": message}      when BullMQ refuses the pattern
 */
const path = require('path');

const nodeModules = path.resolve(__dirname, '..', '..', 'node_modules');
const { defaultRepeatStrategy } = require(path.join(nodeModules, process.env.ECHOMQ_NODE_BULLMQ || 'bullmq'));

function runCase(c) {
  const opts = { pattern: c.pattern };
  if (c.tz) opts.tz = c.tz;
  if (c.startDate !== undefined && c.startDate !== null) opts.startDate = c.startDate;
  if (c.endDate !== undefined && c.endDate !== null) opts.endDate = c.endDate;
  const next = [];
  let millis = c.from;
  try {
    for (let i = 0; i < (c.count || 1); i++) {
      const value = defaultRepeatStrategy(millis, opts);
      if (value === undefined) break;
      next.push(value);
      millis = value;
    }
  } catch (err) {
    return { error: err && err.message !== undefined ? err.message : String(err) };
  }
  return { next };
}

let input = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', chunk => { input += chunk; });
process.stdin.on('end', () => {
  const cases = JSON.parse(input);
  process.stdout.write(JSON.stringify(cases.map(runCase)) + '\n');
});

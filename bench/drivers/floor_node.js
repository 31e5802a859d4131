// Benchmark driver: the cost of one sequential Redis round trip from ioredis (what BullMQ uses).
//   argv[2] = JSON {url, n}. Times N sequential PINGs and N sequential EVALSHAs shaped like a
//   moveToFinished call (14 keys, 8 arguments) against a trivial script; prints one JSON line
//   per probe {probe, per_s, wall_us, cpu_us}.
'use strict';
const path = require('path');
const Redis = require(path.join(__dirname, '..', '..', 'tests', 'node_modules', 'ioredis'));

async function main() {
  const cfg = JSON.parse(process.argv[2]);
  const client = new Redis(cfg.url);
  const sha = await client.script('LOAD', 'return 1');
  const keys = Array.from({ length: 14 }, (_, i) => `bench:floor:k${i}`);
  const args = ['1', '1795968331925', 'returnvalue', 'null', 'completed', '1', 'bench:floor:', 'x'.repeat(120)];
  const probes = [['PING', () => client.ping()], ['EVALSHA 14 keys, 8 args', () => client.evalsha(sha, 14, ...keys, ...args)]];
  const n = cfg.n;
  for (const [label, fn] of probes) {
    for (let i = 0; i < Math.min(500, n); i++) await fn();
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    for (let i = 0; i < n; i++) await fn();
    const dt = performance.now() - t0;
    const cpu = process.cpuUsage(c0);
    process.stdout.write(JSON.stringify({
      probe: label, per_s: n / dt * 1000, wall_us: dt * 1000 / n, cpu_us: (cpu.user + cpu.system) / n,
    }) + '\n');
  }
  client.disconnect();
}

main().then(() => process.exit(0), (err) => { console.error(err); process.exit(1); });

// Lists the Redis commands of one FIFO handoff, step by step, as the server sees them (MONITOR,
// which shows every command a Lua script runs): the count the Redis README's "What a cycle cannot
// cost less than" works from. Two lockers (two processes' worth of backends, one process here): A
// takes the key, B asks and queues, A releases (handing the key to B), B releases. One handoff
// first, unrecorded, so B's subscription is in place as in a running system. MONITOR slows the
// server; run it on a Redis nothing else uses.
// Run after `bash test-matrix/up && pnpm build`:
// node packages/bench/experiments/redis-handoff-commands.mjs [redis://127.0.0.1:6379]
import { setTimeout as sleep } from 'node:timers/promises';
import { createLocker } from '@deadbolt/core';
import { redisBackend } from '@deadbolt/redis';
import { Redis } from 'ioredis';

const url = process.argv[2] ?? 'redis://127.0.0.1:6379';
const a = createLocker(redisBackend({ url }), { ttlMs: 10_000 });
const b = createLocker(redisBackend({ url }), { ttlMs: 10_000 });

/** A takes `key`, B queues behind it, A hands it over, B releases; `step` names each phase. */
async function handoff(key, step) {
  step('A acquires');
  const held = await a.lock(key);
  await sleep(50);
  step('B asks and queues');
  const asked = b.lock(key, { timeoutMs: 5000 });
  await sleep(50);
  step('A releases, handing over');
  await held.release();
  const handed = await asked;
  await sleep(50);
  step('B releases');
  await handed.release();
  await sleep(50);
}

await handoff(`handoff-commands:warm:${process.pid}`, () => {});
const client = new Redis(url);
const monitor = await client.monitor();
const seen = [];
let phase = '';
monitor.on('monitor', (_time, args, source) =>
  seen.push({ phase, command: `${source.includes('lua') ? '  ' : ''}${args[0].toUpperCase()}` }),
);
await handoff(`handoff-commands:${process.pid}`, (name) => (phase = name));
monitor.disconnect();
client.disconnect();
await Promise.all([a.close(), b.close()]);

for (const step of [...new Set(seen.map((s) => s.phase))]) {
  const commands = seen.filter((s) => s.phase === step).map((s) => s.command.trim());
  console.log(`${step}: ${commands.length} (${commands.join(' ')})`);
}
console.log(`in all: ${seen.length} for two acquisitions`);

// What a Redis semaphore hold costs, ours against redis-semaphore's `Semaphore`: 16 lockers, each
// with its own backend and connections (as 16 processes would have), take a semaphore of 4 for
// 1 ms holds; after a 1 s warm-up, SECONDS (default 4) are timed. Prints holds/s, this process's
// CPU per hold (process.cpuUsage) and the server's (INFO cpu), and the commands per hold with their
// server time (INFO commandstats, a script's inner commands included). The subjects run one after
// the other, so compare ratios within one run. Run after `bash test-matrix/up && pnpm build`:
//   node packages/bench/experiments/redis-semaphore-cost.mjs [ours|peer ...]
import { createLocker } from '@deadbolt/core';
import { Redis } from 'ioredis';
import { Semaphore } from 'redis-semaphore';
import { redisBackend } from '../../backend-redis/dist/index.js';

const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const seconds = Number(process.env.SECONDS ?? 4);
const clients = 16;
const admin = new Redis(url);
const serverCpu = async () => {
  const info = await admin.info('cpu');
  return Number(/used_cpu_user:([\d.]+)/.exec(info)[1]) + Number(/used_cpu_sys:([\d.]+)/.exec(info)[1]);
};
const commands = async () => {
  const stats = {};
  for (const [, name, calls, usec] of (await admin.info('commandstats')).matchAll(/cmdstat_(\w+):calls=(\d+),usec=(\d+)/g)) {
    stats[name] = [Number(calls), Number(usec)];
  }
  return stats;
};

/** `take(i)` for client i, and a close. */
function open(subject) {
  const key = `semaphore-cost:${subject}:${Date.now()}`;
  if (subject === 'ours') {
    const lockers = Array.from({ length: clients }, () => createLocker(redisBackend({ url }), { ttlMs: 10_000 }));
    return { take: (i) => lockers[i].semaphore(key, { limit: 4 }).acquire(), close: () => Promise.all(lockers.map((l) => l.close())) };
  }
  const connections = Array.from({ length: clients }, () => new Redis(url));
  return {
    take: async (i) => {
      const semaphore = new Semaphore(connections[i], key, 4, { lockTimeout: 10_000, acquireTimeout: 60_000 });
      await semaphore.acquire();
      return { release: () => semaphore.release() };
    },
    close: async () => connections.forEach((c) => c.disconnect()),
  };
}

async function holdFor(take, ms) {
  let holds = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: clients }, async (_, i) => {
      while (performance.now() - started < ms) {
        const permit = await take(i);
        await new Promise((r) => setTimeout(r, 1));
        await permit.release();
        holds++;
      }
    }),
  );
  return { holds, seconds: (performance.now() - started) / 1000 };
}

for (const subject of process.argv.length > 2 ? process.argv.slice(2) : ['ours', 'peer']) {
  const { take, close } = open(subject);
  await holdFor(take, 1000);
  const [cpu, server, stats] = [process.cpuUsage(), await serverCpu(), await commands()];
  const { holds, seconds: elapsed } = await holdFor(take, seconds * 1000);
  const used = process.cpuUsage(cpu);
  const serverUsed = (await serverCpu()) - server;
  const after = await commands();
  const perHold = Object.entries(after)
    .map(([name, [calls, usec]]) => [name, (calls - (stats[name]?.[0] ?? 0)) / holds, (usec - (stats[name]?.[1] ?? 0)) / holds])
    .filter(([, calls]) => calls >= 0.05)
    .map(([name, calls, usec]) => `${name} ${calls.toFixed(2)} (${usec.toFixed(1)} µs)`);
  console.log(
    `${subject}: ${Math.round(holds / elapsed)} holds/s, client CPU ${((used.user + used.system) / holds).toFixed(0)} µs/hold, server CPU ${((serverUsed * 1e6) / holds).toFixed(0)} µs/hold`,
  );
  console.log(`  per hold: ${perHold.join(', ')}`);
  await close();
}
admin.disconnect();

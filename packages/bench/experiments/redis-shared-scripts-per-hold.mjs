// Scripts per hold of a Redis semaphore or read-write lock under contention: 16 lockers, each with
// its own connection, take one key for 1 ms holds for SECONDS (default 3) and give it back; the
// server's `INFO commandstats` before and after counts the scripts (EVALSHA) every hold cost, its
// own attempts, its waiters' re-checks and its release. Prints holds/s and scripts per hold, for
// this build and any other named (a copy of an older build's dist/ placed inside
// packages/backend-redis/ finds its dependencies). Run after `bash test-matrix/up && pnpm build`:
//   node packages/bench/experiments/redis-shared-scripts-per-hold.mjs [semaphore|rw] [another build's backend-redis dist/index.js ...]
import { pathToFileURL } from 'node:url';
import { createLocker } from '@deadbolt/core';
import { Redis } from 'ioredis';

const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const family = process.argv[2] === 'semaphore' ? 'semaphore' : 'rw';
const builds = [
  new URL('../../backend-redis/dist/index.js', import.meta.url).href,
  ...process.argv.slice(3).map((path) => pathToFileURL(path).href),
];
const seconds = Number(process.env.SECONDS ?? 3);
const admin = new Redis(url);
const scripts = async () => {
  const info = await admin.info('commandstats');
  return Number(/cmdstat_evalsha:calls=(\d+)/.exec(info)?.[1] ?? 0) + Number(/cmdstat_eval:calls=(\d+)/.exec(info)?.[1] ?? 0);
};
for (const [i, build] of builds.entries()) {
  const { redisBackend } = await import(build);
  const lockers = Array.from({ length: 16 }, () => createLocker(redisBackend({ url }), { ttlMs: 10_000 }));
  const key = `shared-scripts:${family}:${i}:${Date.now()}`;
  const take = (locker) =>
    family === 'semaphore'
      ? locker.semaphore(key, { limit: 4 }).acquire()
      : Math.random() < 0.9
        ? locker.readWriteLock(key).read()
        : locker.readWriteLock(key).write();
  let holds = 0;
  let running = true;
  const before = await scripts();
  const started = performance.now();
  await Promise.all(
    lockers.map(async (locker) => {
      while (running) {
        const lock = await take(locker);
        await new Promise((r) => setTimeout(r, 1));
        await lock.release();
        holds++;
        if (performance.now() - started > seconds * 1000) running = false;
      }
    }),
  );
  const elapsed = (performance.now() - started) / 1000;
  const used = (await scripts()) - before;
  console.log(
    `${family} ${i === 0 ? 'this build' : build}: ${Math.round(holds / elapsed)} holds/s, ${(used / holds).toFixed(2)} scripts per hold`,
  );
  await Promise.all(lockers.map((l) => l.close()));
}
admin.disconnect();

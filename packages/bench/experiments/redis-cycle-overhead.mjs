// The Redis backend's uncontended lock cycle against the `SET NX PX` + `DEL` floor, for this build
// and any others named: the figure the Redis README's "Where the time goes" quotes. Every subject
// times 500-cycle blocks in turn, ROUNDS rounds (default 24, the first 2 discarded), so a drift in
// the machine's speed reaches them alike; it prints each one's p50, its ratio to the floor's, and
// this process's CPU time per cycle. Run after `bash test-matrix/up && pnpm build`:
// node packages/bench/experiments/redis-cycle-overhead.mjs [another build's backend-redis dist/index.js ...]
// (a copy of an older build's dist/ placed inside packages/backend-redis/ finds its dependencies).
import { pathToFileURL } from 'node:url';
import { createLocker } from '@deadbolt/core';
import { Redis } from 'ioredis';

const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const builds = [
  new URL('../../backend-redis/dist/index.js', import.meta.url).href,
  ...process.argv.slice(2).map((path) => pathToFileURL(path).href),
];
const raw = new Redis(url);
const subjects = {
  floor: async () => ((await raw.set('cycle-overhead:floor', 'x', 'NX', 'PX', 10_000)) ? raw.del('cycle-overhead:floor') : undefined),
};
const lockers = [];
for (const [i, build] of builds.entries()) {
  const { redisBackend } = await import(build);
  const locker = createLocker(redisBackend({ url }), { ttlMs: 10_000 });
  lockers.push(locker);
  subjects[i === 0 ? 'this build' : build] = async () => (await locker.lock(`cycle-overhead:${i}`)).release();
}
const rounds = Number(process.env.ROUNDS ?? 24);
const times = Object.fromEntries(Object.keys(subjects).map((name) => [name, []]));
const cpu = Object.fromEntries(Object.keys(subjects).map((name) => [name, 0]));
for (let round = 0; round < rounds; round++) {
  for (const [name, cycle] of Object.entries(subjects)) {
    const started = process.cpuUsage();
    for (let i = 0; i < 500; i++) {
      const at = performance.now();
      await cycle();
      if (round >= 2) times[name].push(performance.now() - at);
    }
    const used = process.cpuUsage(started);
    if (round >= 2) cpu[name] += used.user + used.system;
  }
}
const p50 = (list) => list.sort((a, b) => a - b)[list.length >> 1];
const floor = p50(times.floor);
for (const [name, list] of Object.entries(times)) {
  console.log(
    `${(p50(list) * 1000).toFixed(1)} µs p50  ${(p50(list) / floor).toFixed(3)} × floor  ${(cpu[name] / list.length).toFixed(1)} µs CPU per cycle  ${name}`,
  );
}
await Promise.all(lockers.map((locker) => locker.close()));
raw.disconnect();

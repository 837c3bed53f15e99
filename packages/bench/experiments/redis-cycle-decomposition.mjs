// Where an uncontended Redis (or Redlock) lock cycle's time goes, layer by layer, against the
// `SET NX PX` + `DEL` floor: the protocol's two scripts sent raw through ioredis (no deadbolt
// code: what the fencing token and the owner check cost the server and the command's text),
// the same on deadbolt's own connection (its per-command deadlines), the backend's acquire +
// release, the locker's lock + release, and the peer (redis-semaphore's Mutex, or
// @sesamecare-oss/redlock) on a plain client and on deadbolt's connection. Each subject times
// 1000-cycle blocks in turn, ROUNDS rounds (default 16, the first 4 discarded), alternating the
// order, so a drift in the machine's speed reaches them alike; it prints each one's p50, its
// ratio to the floor's, and this process's CPU time per cycle. Run after
// `bash test-matrix/up && pnpm build`:
//   node packages/bench/experiments/redis-cycle-decomposition.mjs [redis|redlock]
import { randomUUID } from 'node:crypto';
import { createLocker } from '@deadbolt/core';
import { wallMicros } from '@deadbolt/core/backend';
import { redisBackend, redlockBackend } from '@deadbolt/redis';
import { keysFor } from '@deadbolt/redis/testing';
import { Redis } from 'ioredis';
import { Redlock } from '@sesamecare-oss/redlock';
import { Mutex } from 'redis-semaphore';
import { scripts } from '../../backend-redis/dist/store.js';

const redlock = process.argv[2] === 'redlock';
const urls = redlock ? [6391, 6392, 6393].map((port) => `redis://127.0.0.1:${port}`) : ['redis://127.0.0.1:6379'];
const open = () => (redlock ? redlockBackend({ nodes: urls, maxTtlMs: 15_000 }) : redisBackend({ url: urls[0] }));
/** A backend's own ioredis clients: deadbolt's connection options. */
const clientsOf = (backend) => (redlock ? backend.nodes.map((node) => node.client) : [backend.client]);
const backend = open();
const locker = createLocker(open(), { ttlMs: 10_000 });
const peerBackend = open();
const rawBackend = open();
const plain = urls.map((url) => new Redis(url));
const peerPlain = urls.map((url) => new Redis(url));
const floorClients = urls.map((url) => new Redis(url));
const all = (clients, send) => Promise.all(clients.map(send));

// The scripts as the backend sends them (see `mutex` in scripts.ts for the options argument):
// Redlock's nodes run the guarded acquire, one attempt with a proposed least token.
// The key names the backend itself would use for `key` (its prefix and hash tag).
const names = (key) => Object.values(keysFor(rawBackend, key));
const id = randomUUID();
const rawCycle = (clients, tag) => async () => {
  const owner = randomUUID();
  const keys = names(tag);
  const least = wallMicros() + 100_000;
  await all(clients, (c) =>
    redlock
      ? c.evalsha(scripts.guardedAcquire.sha, 6, [
          ...keys,
          'deadbolt:born',
          'deadbolt:restart-guard',
          owner,
          '10000',
          `*00|${id}|10000|${least}`,
          '15000',
        ])
      : c.evalsha(scripts.acquire.sha, 4, [...keys, owner, '10000', `+11|${id}|10000|0`]),
  );
  await all(clients, (c) => c.evalsha(scripts.release.sha, 4, [...keys, owner, '0', `-0${redlock ? 0 : 1}|${id}|0|0`]));
};
const peer = (clients, key) => {
  if (redlock) {
    const r = new Redlock(clients);
    return async () => (await r.acquire([key], 10_000)).release();
  }
  return async () => {
    const mutex = new Mutex(clients[0], key, { lockTimeout: 10_000 });
    await mutex.acquire();
    await mutex.release();
  };
};
const subjects = {
  floor: () =>
    all(floorClients, (c) => c.set('decomp:floor', 'x', 'NX', 'PX', 10_000)).then(() => all(floorClients, (c) => c.del('decomp:floor'))),
  'scripts, raw': rawCycle(plain, 'decomp-raw'),
  "scripts, raw, deadbolt's connection": rawCycle(clientsOf(rawBackend), 'decomp-raw2'),
  'backend acquire + release': async () => {
    const lease = await backend.acquire({ key: 'decomp:backend', owner: randomUUID(), ttlMs: 10_000, wait: false });
    await backend.release(lease);
  },
  'locker lock + release': async () => (await locker.lock('decomp:locker')).release(),
  'peer, plain client': peer(peerPlain, 'decomp:peer'),
  "peer, deadbolt's connection": peer(clientsOf(peerBackend), 'decomp:peer2'),
};
for (const c of [...plain, ...clientsOf(rawBackend)])
  for (const s of [scripts.acquire, scripts.guardedAcquire, scripts.release]) await c.script('LOAD', s.source);
// A Redlock node found empty refuses grants for maxTtlMs (15 s here): wait until the backend is granted.
while (redlock && !(await backend.acquire({ key: 'decomp:ready', owner: randomUUID(), ttlMs: 100, wait: false })))
  await new Promise((r) => setTimeout(r, 500));
const rounds = Number(process.env.ROUNDS ?? 16);
const results = Object.fromEntries(Object.keys(subjects).map((name) => [name, { times: [], cpu: 0, cycles: 0 }]));
for (let round = 0; round < rounds; round++) {
  const order = round % 2 ? Object.entries(subjects).reverse() : Object.entries(subjects);
  for (const [name, cycle] of order) {
    const started = process.cpuUsage();
    const times = [];
    for (let i = 0; i < 1000; i++) {
      const at = performance.now();
      await cycle();
      times.push(performance.now() - at);
    }
    const used = process.cpuUsage(started);
    if (round < 4) continue;
    results[name].times.push(...times);
    results[name].cpu += used.user + used.system;
    results[name].cycles += 1000;
  }
}
const p50 = (list) => list.sort((a, b) => a - b)[list.length >> 1];
const floor = p50(results.floor.times);
for (const [name, r] of Object.entries(results)) {
  const median = p50(r.times);
  console.log(
    `${(median * 1000).toFixed(1).padStart(6)} µs p50  ${(median / floor).toFixed(2)} × floor  ${(r.cpu / r.cycles).toFixed(1).padStart(6)} µs CPU per cycle  ${name}`,
  );
}
await Promise.all([backend.close(), locker.close(), peerBackend.close(), rawBackend.close()]);
for (const c of [...plain, ...peerPlain, ...floorClients]) c.disconnect();

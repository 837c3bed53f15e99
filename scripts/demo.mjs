// The main job, for now: several workers increment one counter under one lock key, each write
// fenced by the lock's token, on the memory backend and on every real backend test-matrix has
// started. Then a paused holder shows why tokens matter. `pnpm demo`
import { matrixUrl } from '@deadbolt/conformance/test-matrix';
import { createLocker, memoryBackend } from '@deadbolt/core';
import { etcdBackend } from '@deadbolt/etcd';
import { mysqlBackend } from '@deadbolt/mysql';
import { postgresBackend } from '@deadbolt/postgres';
import { redisBackend } from '@deadbolt/redis';
import { zookeeperBackend } from '@deadbolt/zookeeper';
import { cassandraBackend } from '@deadbolt/cassandra';

const WORKERS = 4;
const ROUNDS = 100;

const backends = [
  { name: 'memory', make: () => memoryBackend() },
  {
    name: 'redis',
    url: matrixUrl('redis'),
    make() {
      return redisBackend({ url: this.url });
    },
  },
  {
    name: 'redis unordered',
    url: matrixUrl('redis'),
    make() {
      return redisBackend({ url: this.url, fifo: false });
    },
  },
  {
    name: 'mysql',
    url: matrixUrl('mysql'),
    make() {
      return mysqlBackend({ url: this.url });
    },
  },
  {
    name: 'postgres',
    url: matrixUrl('postgres'),
    make() {
      return postgresBackend({ url: this.url });
    },
  },
  {
    name: 'etcd',
    url: matrixUrl('etcd'),
    make() {
      return etcdBackend({ url: this.url });
    },
    ttlMs: 2000,
  },
  {
    name: 'zookeeper',
    url: matrixUrl('zookeeper'),
    make() {
      return zookeeperBackend({ url: this.url });
    },
    ttlMs: 1000,
  },
  {
    name: 'cassandra',
    url: matrixUrl('cassandra'),
    make() {
      return cassandraBackend({ url: this.url });
    },
    ttlMs: 2000,
  },
];

/** A store that accepts a write only with a token at least as new as the newest it has seen. */
class FencedCounter {
  value = 0;
  highest = -1n;
  rejected = 0;
  write(token, value) {
    if (token < this.highest) {
      this.rejected++;
      return false;
    }
    this.highest = token;
    this.value = value;
    return true;
  }
}

const quantile = (xs, q) => xs.slice().sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))];

for (const spec of backends) {
  const probe = createLocker(spec.make(), { ttlMs: 2000 });
  try {
    const lock = await probe.tryLock('demo:probe');
    await lock?.release();
  } catch (error) {
    console.log(`${spec.name.padEnd(13)} skipped: ${error.code ?? error.message} (start it with test-matrix/up)`);
    await probe.close().catch(() => {});
    continue;
  }
  await probe.close();

  const key = `demo:counter:${process.pid}`;
  const counter = new FencedCounter();
  const lockers = Array.from({ length: WORKERS }, () => createLocker(spec.make(), { ttlMs: 2000 }));
  const waits = [];
  const perWorker = new Array(WORKERS).fill(0);
  let lastToken = -1n,
    monotonic = true;
  const started = performance.now();
  await Promise.all(
    lockers.map(async (locker, w) => {
      for (let i = 0; i < ROUNDS; i++) {
        const asked = performance.now();
        await locker.withLock(key, async (lock) => {
          waits.push(performance.now() - asked);
          if (lock.token <= lastToken) monotonic = false;
          lastToken = lock.token;
          const seen = counter.value;
          await new Promise((r) => setImmediate(r)); // yield inside the critical section
          counter.write(lock.token, seen + 1);
          perWorker[w]++;
        });
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;

  // A holder that stops renewing (think: a long GC pause) loses its lease; its late write is refused.
  const pauseTtl = spec.ttlMs ?? 200;
  const stale = createLocker(spec.make(), { ttlMs: pauseTtl, autoRenew: false });
  const old = await stale.lock(`${key}:pause`);
  counter.write(old.token, counter.value);
  await new Promise((r) => setTimeout(r, pauseTtl + 300));
  const fresh = await lockers[1].lock(`${key}:pause`);
  counter.write(fresh.token, counter.value);
  const lateAccepted = counter.write(old.token, -1);
  await fresh.release();
  await stale.close();
  await Promise.all(lockers.map((l) => l.close()));

  console.log(
    `${spec.name.padEnd(13)} ${WORKERS} workers × ${ROUNDS}: counter ${counter.value}/${WORKERS * ROUNDS}` +
      `, tokens ${monotonic ? 'strictly increasing' : 'NOT increasing'}, ${Math.round((WORKERS * ROUNDS) / seconds)} holds/s` +
      `, wait p50 ${quantile(waits, 0.5).toFixed(2)} ms p99 ${quantile(waits, 0.99).toFixed(2)} ms, per worker ${perWorker.join('/')}` +
      `; paused holder's late write ${lateAccepted ? 'ACCEPTED (bug)' : `refused (token ${old.token} < ${fresh.token})`}`,
  );
}

// `pnpm demo`: a short tour of what a lock is for. Four workers each add 1 to one shared counter
// a hundred times, reading it, yielding, then writing it back: first without a lock (updates are
// lost), then under one lock key on the memory backend and every store test-matrix has started
// (400 of 400). Then on each store a holder paused past its lease comes back and writes: the
// counter refuses it, because its fencing token is older than the new holder's. Lines fit in 100
// columns; tests/test-matrix need not be running (a store that does not answer is named and skipped).
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
const yieldNow = () => new Promise((r) => setImmediate(r));

/** The workers' loop: read the counter, yield (as any I/O would), write it back plus one. */
async function work(counter, withHold) {
  const waits = [];
  let lastToken = -1n;
  let monotonic = true;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: WORKERS }, async (_, w) => {
      for (let i = 0; i < ROUNDS; i++) {
        const asked = performance.now();
        await withHold(w, async (token) => {
          waits.push(performance.now() - asked);
          if (token !== undefined && token <= lastToken) monotonic = false;
          if (token !== undefined) lastToken = token;
          const seen = counter.value;
          await yieldNow();
          counter.write(token ?? 0n, seen + 1);
        });
      }
    }),
  );
  return { waits, monotonic, seconds: (performance.now() - started) / 1000 };
}

console.log(`deadbolt demo: ${WORKERS} workers each add 1 to a shared counter ${ROUNDS} times (read, yield, write).`);
console.log(`Without a lock their read-modify-write cycles interleave and updates are lost:\n`);
{
  const counter = new FencedCounter();
  await work(counter, (_w, body) => body(undefined));
  console.log(`  ${'no lock'.padEnd(17)}counter ${counter.value}/${WORKERS * ROUNDS}: ${WORKERS * ROUNDS - counter.value} updates lost`);
}
console.log(`\nWith one lock key, each write carrying the lock's fencing token, on every store that answers:\n`);
const stale = [];
for (const spec of backends) {
  process.stdout.write(`  ${spec.name.padEnd(17)}`);
  const probe = createLocker(spec.make(), { ttlMs: 2000 });
  try {
    const lock = await probe.tryLock('demo:probe');
    await lock?.release();
  } catch (error) {
    console.log(`skipped: not answering at ${spec.url} (bash test-matrix/up starts it)`);
    await probe.close().catch(() => {});
    continue;
  }
  await probe.close();

  const key = `demo:counter:${process.pid}`;
  const counter = new FencedCounter();
  const lockers = Array.from({ length: WORKERS }, () => createLocker(spec.make(), { ttlMs: 2000 }));
  const { waits, monotonic, seconds } = await work(counter, (w, body) => lockers[w].withLock(key, (lock) => body(lock.token)));

  // A holder that stops renewing (think: a long GC pause) loses its lease; its late write is refused.
  const pauseTtl = spec.ttlMs ?? 200;
  const paused = createLocker(spec.make(), { ttlMs: pauseTtl, autoRenew: false });
  const old = await paused.lock(`${key}:pause`);
  counter.write(old.token, counter.value);
  await new Promise((r) => setTimeout(r, pauseTtl + 300));
  const fresh = await lockers[1].lock(`${key}:pause`);
  counter.write(fresh.token, counter.value);
  const lateAccepted = counter.write(old.token, -1);
  await fresh.release();
  await paused.close();
  await Promise.all(lockers.map((l) => l.close()));
  stale.push({ name: spec.name, ttl: pauseTtl, old: old.token, fresh: fresh.token, lateAccepted });

  console.log(
    `counter ${counter.value}/${WORKERS * ROUNDS}, tokens ${monotonic ? 'increasing' : 'NOT increasing'}, ` +
      `${Math.round((WORKERS * ROUNDS) / seconds)} holds/s, wait p50 ${quantile(waits, 0.5).toFixed(1)} ms p99 ${quantile(waits, 0.99).toFixed(1)} ms`,
  );
}
console.log(
  `\nA lease does not stop a holder that was paused past it (a GC pause, a stopped VM): when it runs\n` +
    `again, its write is already on its way. The counter above remembers the highest token it has seen\n` +
    `and refuses older ones. Here a holder takes the lock, stops renewing for its ttl, and writes after\n` +
    `another client took the lock:\n`,
);
for (const r of stale) {
  console.log(
    `  ${r.name.padEnd(17)}late write, token ${r.old}: ${r.lateAccepted ? 'ACCEPTED (a bug)' : `refused (the new holder's: ${r.fresh})`}`,
  );
}
if (stale.some((r) => r.lateAccepted)) process.exitCode = 1;

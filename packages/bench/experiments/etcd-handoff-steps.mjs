// Where an etcd handoff's time goes: the figure the etcd README's handoff paragraph quotes. Each
// round the parent process takes the lock, lets a waiter in a child process queue behind it, then
// releases, timing (1) a plain revoke of a lease with one key (the write a release is), done just
// before, (2) the release until it resolves, and (3) release start → the waiter's acquire resolved
// (clocks compared through `performance.timeOrigin`, so both processes share one time line).
//
// The subject is deadbolt's etcd backend, or with `etcd3-<ms>` the etcd3 package's `Lock` retried
// every <ms> ms (the bench's peer). Every round here is a handoff the waiter must take, so this
// compares the two on the same handoff. Scenario 3 of the bench counts only the handoffs that
// happen, and a polling peer's happen mostly when an attempt lands just after a release.
// Run after `bash test-matrix/up && pnpm build`:
// node packages/bench/experiments/etcd-handoff-steps.mjs [rounds, default 200] [deadbolt | etcd3-<ms>]
import { fork } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { createLocker } from '@deadbolt/core';
import { etcdBackend } from '@deadbolt/etcd';
import { Etcd3, EtcdLockFailedError } from 'etcd3';

const url = process.env.ETCD_URL ?? 'etcd://127.0.0.1:2379';
const key = 'handoff-steps';
const at = () => performance.timeOrigin + performance.now();
// The parent is called with [rounds] [subject], the waiter it forks with `waiter <subject>`.
const isWaiter = process.argv[2] === 'waiter';
const rounds = isWaiter ? 0 : Number(process.argv[2] ?? 200);
const subject = process.argv[3] ?? 'deadbolt';

/** A subject: `acquire` takes the lock (waiting as long as it takes) and returns its release; `close` ends its connection. */
function openSubject(name) {
  if (name === 'deadbolt') {
    const locker = createLocker(etcdBackend({ url }), { ttlMs: 10_000 });
    return {
      acquire: async () => {
        const lock = await locker.lock(key, { timeoutMs: 5000 });
        return () => lock.release();
      },
      close: () => locker.close(),
    };
  }
  const retryMs = Number(/^etcd3-(\d+)$/.exec(name)?.[1] ?? NaN);
  if (!Number.isFinite(retryMs)) throw new Error(`unknown subject ${name}: deadbolt or etcd3-<ms>`);
  const etcd = new Etcd3({ hosts: url.replace(/^etcd:\/\//, '') });
  return {
    // As the bench's etcd3 peer does: etcd3's Lock only try-locks, so a user retries it.
    acquire: async () => {
      for (;;) {
        const lock = etcd.lock(key).ttl(10);
        try {
          await lock.acquire();
          return () => lock.release();
        } catch (error) {
          if (!(error instanceof EtcdLockFailedError)) throw error;
          await sleep(retryMs);
        }
      }
    },
    close: async () => etcd.close(),
  };
}

const held = openSubject(subject);

if (isWaiter) {
  process.on('message', async (message) => {
    if (message === 'stop') {
      await held.close();
      process.exit(0);
    }
    const release = await held.acquire();
    const granted = at();
    await release();
    process.send(granted);
  });
  process.send('ready');
} else {
  const waiter = fork(new URL(import.meta.url).pathname, ['waiter', subject]);
  await new Promise((resolve) => waiter.once('message', resolve));
  const raw = new Etcd3({ hosts: url.replace(/^etcd:\/\//, '') });
  const times = { 'revoke of a leased key': [], release: [], 'release start → waiter granted': [] };
  for (let i = 0; i < rounds; i++) {
    const release = await held.acquire();
    const granted = new Promise((resolve) => waiter.once('message', resolve));
    waiter.send('go');
    // Time for the waiter's key and watch to be in place (or, polling, for it to have tried once).
    await sleep(15);
    const lease = raw.lease(10, { autoKeepAlive: false });
    await raw.put(`${key}-plain/${i}`).value('x').lease(await lease.grant()).exec();
    let started = at();
    await lease.revoke();
    times['revoke of a leased key'].push(at() - started);
    started = at();
    await release();
    times.release.push(at() - started);
    times['release start → waiter granted'].push((await granted) - started);
  }
  const quantile = (list, q) => list.sort((a, b) => a - b)[Math.floor(list.length * q)].toFixed(3);
  console.log(`subject: ${subject}, ${rounds} handoffs`);
  for (const [name, list] of Object.entries(times)) console.log(`${name}: p50 ${quantile(list, 0.5)} ms, p90 ${quantile(list, 0.9)} ms`);
  waiter.send('stop');
  await held.close();
  raw.close();
}

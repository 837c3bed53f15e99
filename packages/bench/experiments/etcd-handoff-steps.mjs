// Where an etcd handoff's time goes: the figure the etcd README's handoff paragraph quotes. Each
// round the parent process takes the lock, lets a waiter in a child process queue behind it, then
// releases, timing (1) a plain revoke of a lease with one key (the write a release is), done just
// before, (2) `lock.release()` until it resolves, and (3) release start → the waiter's `lock()`
// resolved (clocks compared through `performance.timeOrigin`, so both processes share one time
// line). Run after `bash test-matrix/up && pnpm build`:
// node packages/bench/experiments/etcd-handoff-steps.mjs [rounds, default 200]
import { fork } from 'node:child_process';
import { createLocker } from '@deadbolt/core';
import { etcdBackend } from '@deadbolt/etcd';
import { Etcd3 } from 'etcd3';

const url = process.env.ETCD_URL ?? 'etcd://127.0.0.1:2379';
const key = 'handoff-steps';
const at = () => performance.timeOrigin + performance.now();
const locker = createLocker(etcdBackend({ url }), { ttlMs: 10_000 });

if (process.argv[2] === 'waiter') {
  process.on('message', async (message) => {
    if (message === 'stop') {
      await locker.close();
      process.exit(0);
    }
    const lock = await locker.lock(key, { timeoutMs: 5000 });
    const granted = at();
    await lock.release();
    process.send(granted);
  });
  process.send('ready');
} else {
  const rounds = Number(process.argv[2] ?? 200);
  const waiter = fork(new URL(import.meta.url).pathname, ['waiter']);
  await new Promise((resolve) => waiter.once('message', resolve));
  const raw = new Etcd3({ hosts: url.replace(/^etcd:\/\//, '') });
  const times = { 'revoke of a leased key': [], 'lock.release()': [], 'release start → waiter granted': [] };
  for (let i = 0; i < rounds; i++) {
    const lock = await locker.lock(key, { timeoutMs: 5000 });
    const granted = new Promise((resolve) => waiter.once('message', resolve));
    waiter.send('go');
    // Time for the waiter's key and watch to be in place.
    await new Promise((resolve) => setTimeout(resolve, 15));
    const lease = raw.lease(10, { autoKeepAlive: false });
    await raw.put(`${key}-plain/${i}`).value('x').lease(await lease.grant()).exec();
    let started = at();
    await lease.revoke();
    times['revoke of a leased key'].push(at() - started);
    started = at();
    await lock.release();
    times['lock.release()'].push(at() - started);
    times['release start → waiter granted'].push((await granted) - started);
  }
  const quantile = (list, q) => list.sort((a, b) => a - b)[Math.floor(list.length * q)].toFixed(3);
  for (const [name, list] of Object.entries(times)) console.log(`${name}: p50 ${quantile(list, 0.5)} ms, p90 ${quantile(list, 0.9)} ms`);
  waiter.send('stop');
  await locker.close();
  raw.close();
}

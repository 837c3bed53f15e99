// Where an etcd handoff's time goes: the figure the etcd README's handoff paragraph quotes. Each
// round the parent process takes the lock, lets a waiter in a child process queue behind it, then
// releases, timing (1) a plain revoke of a lease with one key (the write a release is), done just
// before, (2) the release until it resolves, and (3) release start → the waiter's acquire resolved
// (clocks compared through `performance.timeOrigin`, so both processes share one time line).
//
// The subject is deadbolt's etcd backend, or with `etcd3-5` / `etcd3-100` the etcd3 package's
// `Lock` retried every 5 / 100 ms (the bench's own subjects, so the peer is retried exactly as
// there). Every round here is a handoff the waiter must take, so this compares the two on the
// same handoff. Scenario 3 of the bench counts only the handoffs that
// happen, and a polling peer's happen mostly when an attempt lands just after a release.
// Run after `bash test-matrix/up && pnpm build`:
// node packages/bench/experiments/etcd-handoff-steps.mjs [rounds, default 200] [deadbolt | etcd3-5 | etcd3-100]
// (the etcd address: test-matrix's, or DEADBOLT_ETCD_URL)
import { fork } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { Etcd3 } from 'etcd3';
import { subjects, urls } from '../dist/subjects.js';

const key = 'handoff-steps';
const at = () => performance.timeOrigin + performance.now();
// The parent is called with [rounds] [subject], the waiter it forks with `waiter <subject>`.
const isWaiter = process.argv[2] === 'waiter';
const rounds = isWaiter ? 0 : Number(process.argv[2] ?? 200);
const subject = process.argv[3] ?? 'deadbolt';
const names = { deadbolt: 'deadbolt etcd', 'etcd3-5': 'etcd3 Lock (retry every 5 ms)', 'etcd3-100': 'etcd3 Lock (retry every 100 ms)' };
if (!names[subject]) throw new Error(`unknown subject ${subject}: ${Object.keys(names).join(', ')}`);
const client = await subjects()
  .find((s) => s.name === names[subject])
  .client();

if (isWaiter) {
  process.on('message', async (message) => {
    if (message === 'stop') {
      await client.close();
      process.exit(0);
    }
    const lock = await client.acquire(key);
    const granted = at();
    await lock.release();
    process.send(granted);
  });
  process.send('ready');
} else {
  const waiter = fork(new URL(import.meta.url).pathname, ['waiter', subject]);
  await new Promise((resolve) => waiter.once('message', resolve));
  const raw = new Etcd3({ hosts: urls.etcd.replace(/^etcd:\/\//, '') });
  const times = { 'revoke of a leased key': [], release: [], 'release start → waiter granted': [] };
  for (let i = 0; i < rounds; i++) {
    const lock = await client.acquire(key);
    const granted = new Promise((resolve) => waiter.once('message', resolve));
    waiter.send('go');
    // Time for the waiter's key and watch to be in place (or, polling, for it to have tried once).
    await sleep(15);
    const lease = raw.lease(10, { autoKeepAlive: false });
    await raw
      .put(`${key}-plain/${i}`)
      .value('x')
      .lease(await lease.grant())
      .exec();
    let started = at();
    await lease.revoke();
    times['revoke of a leased key'].push(at() - started);
    started = at();
    await lock.release();
    times.release.push(at() - started);
    times['release start → waiter granted'].push((await granted) - started);
  }
  const quantile = (list, q) => list.sort((a, b) => a - b)[Math.floor(list.length * q)].toFixed(3);
  console.log(`subject: ${subject}, ${rounds} handoffs`);
  for (const [name, list] of Object.entries(times)) console.log(`${name}: p50 ${quantile(list, 0.5)} ms, p90 ${quantile(list, 0.9)} ms`);
  waiter.send('stop');
  await client.close();
  raw.close();
}

// The queue worker (worker.ts) tested with vitest on a test locker: what it does when its lock is
// lapsed mid-job, when renewals fail for longer than the lease, and when another worker holds the
// job. Each test runs in milliseconds: the test clock, not the real one, runs the leases.
import { createTestLocker, type TestLocker } from '@deadbolt/core/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { processJob } from './worker.js';

/** Work that finishes only when the test says (before or after it started), and stops (rejects) when its signal aborts. */
function controlledWork() {
  let finish!: (output: string) => void;
  const finished = new Promise<string>((resolve) => (finish = resolve));
  let stopped = false;
  const work = (_input: string, signal: AbortSignal) =>
    new Promise<string>((resolve, reject) => {
      void finished.then(resolve);
      signal.addEventListener('abort', () => ((stopped = true), reject(signal.reason)), { once: true });
    });
  return { work, finish, stopped: () => stopped };
}

describe('processJob', () => {
  let t: TestLocker;
  beforeEach(() => {
    t = createTestLocker({ ttlMs: 10_000 });
  });
  afterEach(() => t.close());

  it('stores the result with its token while the lock holds, across many lease lengths', async () => {
    const job = controlledWork();
    const outcome = processJob(t.locker, t.fence, { id: '1', input: 'a' }, job.work);
    await t.clock.advance(60_000); // a long job: renewed all along
    job.finish('A');
    expect(await outcome).toBe('done');
    expect((await t.fence.read('result:1'))?.value).toBe('A');
  });

  it('stops the work and writes nothing when its lock lapses mid-job; the next worker does the job', async () => {
    const job = controlledWork();
    const outcome = processJob(t.locker, t.fence, { id: '2', input: 'b' }, job.work);
    await t.clock.advance(1_000);
    t.expire('job:2');
    expect(await outcome).toBe('lost');
    expect(job.stopped()).toBe(true);
    expect(await t.fence.read('result:2')).toBeNull();
    const retry = controlledWork();
    const again = processJob(t.newLocker(), t.fence, { id: '2', input: 'b' }, retry.work);
    retry.finish('B');
    expect(await again).toBe('done');
  });

  it('is told its lock is lost when renewals fail for longer than the lease', async () => {
    const job = controlledWork();
    const outcome = processJob(t.locker, t.fence, { id: '3', input: 'c' }, job.work);
    await t.clock.advance(1_000);
    t.outage({ forMs: 60_000 });
    await t.clock.advance(10_000);
    expect(await outcome).toBe('lost');
  });

  it('leaves a job another worker holds', async () => {
    const other = await t.newLocker().lock('job:4');
    expect(await processJob(t.locker, t.fence, { id: '4', input: 'd' }, async () => 'never')).toBe('busy');
    await other.release();
  });
});

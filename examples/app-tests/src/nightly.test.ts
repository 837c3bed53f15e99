// The nightly job (nightly.ts) fired by three instances of the application at the same moment,
// and again a few minutes later and the next night, on a test locker's clock (vitest).
import { createTestLocker, type TestLocker } from '@deadbolt/core/testing';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { fireNightly } from './nightly.js';

let t: TestLocker;
beforeEach(() => {
  t = createTestLocker();
});
afterEach(() => t.close());

it('runs once per night across three instances, each run with a higher token', async () => {
  const instances = [t.locker, t.newLocker(), t.newLocker()];
  const tokens: bigint[] = [];
  const send = async (token: bigint) => (tokens.push(token), tokens.length);
  for (let night = 0; night < 3; night++) {
    const fired = await Promise.all(instances.map((locker) => fireNightly(locker, send)));
    expect(fired.filter((r) => r.ran)).toHaveLength(1);
    // An instance whose cron fires five minutes late still skips: the run claimed at least 10.
    await t.clock.advance(5 * 60_000);
    expect((await fireNightly(instances[2]!, send)).ran).toBe(false);
    await t.clock.advance(24 * 60 * 60_000 - 5 * 60_000);
  }
  expect(tokens).toHaveLength(3);
  expect([...tokens].sort((a, b) => (a < b ? -1 : 1))).toEqual(tokens);
});

it("a run's signal aborts when its claim is lost mid-run", async () => {
  let aborted = false;
  const run = fireNightly(t.locker, (_token, signal) => {
    signal.addEventListener('abort', () => (aborted = true));
    return new Promise((resolve) => signal.addEventListener('abort', () => resolve(0)));
  });
  await t.clock.advance(1_000);
  t.expire('nightly-report');
  await expect(run).rejects.toThrow();
  expect(aborted).toBe(true);
});

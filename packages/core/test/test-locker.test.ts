/**
 * `createTestLocker`: an application's test locker. Each test moves the test clock through hours of
 * leases, renewals and timeouts in well under a second of real time, and checks what a holder and
 * the next one see: a lease that lapses, renewals that fail, an outage, a lock-delay, an election's
 * next term, `runOnce`'s window. About 1 s for the file.
 */
import {
  BackendUnavailableError,
  createLocker,
  InvalidArgumentError,
  LockLostError,
  LockTimeoutError,
  memoryBackend,
  StaleTokenError,
} from '@deadbolt/core';
import { createTestLocker, wrapBackend, type TestLocker } from '@deadbolt/core/testing';
import { afterEach, describe, expect, it } from 'vitest';

let open: TestLocker | undefined;
const make = (...args: Parameters<typeof createTestLocker>) => (open = createTestLocker(...args));
afterEach(async () => {
  await open?.close();
  open = undefined;
});

describe('createTestLocker', () => {
  it('renews a held lock on the test clock: an hour later it is still held, by the same token, in little real time', async () => {
    const t = make({ ttlMs: 10_000 });
    const started = performance.now();
    const lock = await t.locker.lock('job');
    await t.clock.advance(3_600_000);
    expect(lock.held).toBe(true);
    expect(lock.signal.aborted).toBe(false);
    expect(t.clock.now()).toBe(3_600_000);
    const view = await t.inspect('job');
    expect(view.holders.map((h) => h.token)).toEqual([lock.token]);
    // 360 renewals at a third of the ttl, each with its settling turns: generous.
    expect(performance.now() - started).toBeLessThan(5_000);
    await lock.release();
  });

  it('expire(key): the holder is told at once, the next in line is granted with a higher token, and the old token is refused by the fence', async () => {
    const t = make();
    const rival = t.newLocker();
    const first = await t.locker.lock('orders');
    await t.fence.write('orders-table', first.token, 'first');
    const waiting = rival.lock('orders');
    expect(t.expire('orders')).toBe(1);
    expect(first.signal.aborted).toBe(true);
    expect(first.signal.reason).toBeInstanceOf(LockLostError);
    expect(first.held).toBe(false);
    const second = await waiting;
    expect(second.token).toBeGreaterThan(first.token);
    await t.fence.write('orders-table', second.token, 'second');
    await expect(t.fence.write('orders-table', first.token, 'late')).rejects.toBeInstanceOf(StaleTokenError);
    expect((await t.fence.read('orders-table'))?.value).toBe('second');
    expect(t.expire('nothing-held')).toBe(0);
    await second.release();
  });

  it('failNextRenewal: one failure is ridden out; failures until the ttl runs out lose the lock, with the staged error as its cause', async () => {
    const t = make({ ttlMs: 9_000 });
    const lock = await t.locker.lock('k');
    t.failNextRenewal('k');
    await t.clock.advance(20_000);
    expect(lock.held).toBe(true);
    const staged = new Error('disk full');
    for (let i = 0; i < 100; i++) t.failNextRenewal('k', staged);
    await t.clock.advance(9_000);
    expect(lock.held).toBe(false);
    expect(lock.signal.reason).toBeInstanceOf(LockLostError);
    expect((lock.signal.reason as LockLostError).cause).toBeInstanceOf(Error);
  });

  it('outage: calls reject with BackendUnavailableError; a wait rides out an outage shorter than its grace, a holder loses a lock it cannot renew within its ttl', async () => {
    const t = make({ ttlMs: 6_000, unavailableGraceMs: 5_000 });
    const held = await t.locker.lock('a');
    t.outage({ forMs: 3_000 });
    await expect(t.locker.tryLock('b')).rejects.toBeInstanceOf(BackendUnavailableError);
    const waiting = t.locker.lock('b', { timeoutMs: 20_000 });
    await t.clock.advance(4_000);
    const b = await waiting;
    expect(b.held).toBe(true);
    expect(held.held).toBe(true); // renewed once the store was back
    t.outage({ forMs: 60_000 });
    await t.clock.advance(6_000);
    expect(held.held).toBe(false);
    expect(b.held).toBe(false);
    await expect(t.locker.tryLock('c')).rejects.toBeInstanceOf(BackendUnavailableError);
  });

  it('a wait with a timeout gives up at its deadline on the test clock', async () => {
    const t = make();
    const holder = await t.newLocker().lock('busy');
    const waiting = t.locker.lock('busy', { timeoutMs: 30_000 });
    const settled = waiting.then(
      () => 'granted',
      (error: unknown) => error,
    );
    await t.clock.advance(29_000);
    expect(await Promise.race([settled, Promise.resolve('pending')])).toBe('pending');
    await t.clock.advance(1_000);
    expect(await settled).toBeInstanceOf(LockTimeoutError);
    await holder.release();
  });

  it('lock-delay: a holder that stops renewing is lost at its ttl, and the key stays taken for the delay after', async () => {
    const t = make({ ttlMs: 5_000, lockDelayMs: 2_000 });
    const rival = t.newLocker();
    const lock = await t.locker.lock('k');
    for (let i = 0; i < 100; i++) t.failNextRenewal('k');
    await t.clock.advance(5_000);
    expect(lock.held).toBe(false);
    expect(await rival.tryLock('k')).toBeNull();
    await t.clock.advance(2_000);
    const next = await rival.tryLock('k');
    expect(next?.token).toBeGreaterThan(lock.token);
  });

  it('elections: an expired leader is told, the candidate in line is the next term with a higher token, and leader() follows', async () => {
    const t = make();
    const a = await t.locker.elect('scheduler', { value: 'a' });
    const bLocker = t.newLocker();
    const b = bLocker.elect('scheduler', { value: 'b' });
    expect((await t.locker.leader('scheduler'))?.value).toBe('a');
    t.expire('scheduler');
    expect(a.signal.aborted).toBe(true);
    const next = await b;
    expect(next.term).toBe(2);
    expect(next.token).toBeGreaterThan(a.token);
    expect((await t.locker.leader('scheduler'))?.value).toBe('b');
    await next.resign();
  });

  it('runOnce: a second fire within lockAtLeastForMs skips, one after it runs', async () => {
    const t = make();
    const options = { lockAtMostForMs: 60_000, lockAtLeastForMs: 30_000 };
    const job = () => 'done';
    const first = await t.locker.runOnce('nightly', job, options);
    expect(first).toMatchObject({ ran: true, result: 'done' });
    await t.clock.advance(10_000);
    expect(await t.newLocker().runOnce('nightly', job, options)).toEqual({ ran: false, reason: 'ran-recently' });
    await t.clock.advance(20_000);
    const again = await t.newLocker().runOnce('nightly', job, options);
    expect(again).toMatchObject({ ran: true, result: 'done' });
    expect(again.ran && first.ran && again.token > first.token).toBe(true);
  });

  it('refuses bad input, a second test locker, and a locker over a real store while open; close puts the real clock back', async () => {
    const t = make();
    await expect(t.clock.advance(-1)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(t.clock.advance(Number.NaN)).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(() => t.outage({ forMs: -5 })).toThrow(InvalidArgumentError);
    expect(() => t.expire(7 as unknown as string)).toThrow(InvalidArgumentError);
    expect(() => createTestLocker()).toThrow(InvalidArgumentError);
    const crossProcess = wrapBackend(memoryBackend(), { capabilities: { ...memoryBackend().capabilities, crossProcess: true } });
    expect(() => createLocker(crossProcess)).toThrow(InvalidArgumentError);
    await t.close();
    await expect(t.clock.advance(1)).rejects.toBeInstanceOf(InvalidArgumentError);
    // The real clock again: a lease of 200 ms renews on real timers.
    const locker = createLocker(crossProcess, { ttlMs: 200 });
    const lock = await locker.lock('real');
    await new Promise((resolve) => setTimeout(resolve, 450));
    expect(lock.held).toBe(true);
    await locker.close();
  });
});

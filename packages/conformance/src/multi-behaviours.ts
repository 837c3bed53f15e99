/**
 * Behaviours 27 and 28 (the conformance README, the lock family): `lockAll` / `tryLockAll` (canonical
 * order, all-or-nothing, one deadline), reentrancy (the scope of `withLock`), the self-deadlock
 * error, and lock-delay. Core's, so they run on every backend, through the backend's real store
 * (lock-delay also through the session-mode backends' own markers).
 */
import { createLocker, MAX_LOCK_ALL_KEYS, SelfDeadlockError, type Locker } from '@deadbolt/core';
import { sleep } from '@deadbolt/core/backend';
import { countingBackend } from './counting.js';
import type { SuiteContext } from './context.js';
import { abortedWithin, untyped } from './helpers.js';

type Hold = [number, number];

const overlaps = (a: Hold, b: Hold) => a[0] < b[1] && b[0] < a[1];

export function defineMultiBehaviours(ctx: SuiteContext): void {
  const { describe, it, expect } = ctx.runner;
  const { options, harness, capabilities, T, renewMs, roundTtl, freshKey, makeLocker, spawnChild, crossProcessIt, hookIt } = ctx;
  // A lock-delay the backend accepts on top of T (whole seconds where ttls are), long enough to measure.
  const D = roundTtl(1500);

  describe('multi-key locks and reentrancy', () => {
    it('27a. lockAll: callers locking overlapping key sets in opposite orders (processes and in-process) never deadlock and never overlap', async () => {
      const [k1, k2, k3, k4] = ['a', 'b', 'c', 'd'].map((l) => freshKey(`multi-${l}`)) as [string, string, string, string];
      const forward = [k1, k2, k3];
      const backward = [k4, k3, k2];
      const rounds = 8;
      const holdMs = Math.max(5, T / 100);
      const worker = async (locker: Locker, keys: string[]) => {
        const holds: Hold[] = [];
        for (let i = 0; i < rounds; i++) {
          const all = await locker.lockAll(keys, { timeoutMs: 60_000 });
          const start = Number(process.hrtime.bigint());
          await sleep(holdMs * Math.random());
          holds.push([start, Number(process.hrtime.bigint())]);
          await all.release();
        }
        return holds;
      };
      const runs: Promise<Hold[]>[] = [worker(await makeLocker(), forward), worker(await makeLocker(), backward)];
      if (capabilities.crossProcess) {
        for (const keys of [backward, forward]) runs.push((await spawnChild()).rpc.call<Hold[]>('lockAllWork', keys, rounds, holdMs));
      }
      const [a, b, ...children] = await Promise.all(runs);
      // Every caller here shares k2 and k3 with every other: no two holds may overlap.
      const all = [a!, b!, ...children].flat();
      expect(all.length).toBe(rounds * runs.length);
      for (let i = 0; i < all.length; i++) for (let j = i + 1; j < all.length; j++) expect(overlaps(all[i]!, all[j]!)).toBe(false);
      for (const key of [k1, k2, k3, k4]) expect(await harness.inspect(key), key).toEqual([]);
    }, 180_000);

    it('27b. lockAll is all or nothing: a timeout, an abort and a busy tryLockAll leave nothing; the timeout bounds the whole call', async () => {
      const [k1, k2, k3] = ['a', 'b', 'c'].map((l) => freshKey(`all-${l}`)) as [string, string, string];
      const [a, b] = [await makeLocker(), await makeLocker()];
      const blocker = await a.lock(k3);
      const started = performance.now();
      await expect(b.lockAll([k2, k1, k3], { timeoutMs: 400 })).rejects.toMatchObject({ code: 'LOCK_TIMEOUT' });
      const elapsed = performance.now() - started;
      expect(elapsed).toBeGreaterThanOrEqual(400);
      expect(elapsed).toBeLessThan(400 + 1500);
      const controller = new AbortController();
      const aborted = b.lockAll([k1, k2, k3], { signal: controller.signal });
      await sleep(150);
      controller.abort(new Error('stop'));
      await expect(aborted).rejects.toThrow('stop');
      expect(await b.tryLockAll([k3, k1, k2])).toBeNull();
      for (const key of [k1, k2]) expect(await harness.inspect(key), key).toEqual([]);
      expect(await harness.inspect(k3)).toEqual([blocker.owner]);
      await blocker.release();
      // The same keys in another order, duplicates included: one canonical set.
      const all = (await b.tryLockAll([k3, k1, k2, k1]))!;
      expect(all.keys).toEqual([k1, k2, k3].sort());
      expect(all.locks.map((l) => l.key)).toEqual(all.keys);
      expect([...all.tokens.keys()].sort()).toEqual(all.keys);
      expect(all.held).toBe(true);
      expect(await a.tryLock(k2)).toBeNull();
      await all.release();
      for (const key of [k1, k2, k3]) expect(await harness.inspect(key), key).toEqual([]);
    }, 60_000);

    hookIt(
      'loseClaim',
      '27c. a MultiLock: its signal aborts when any member is lost; extend and release reach every member',
      async () => {
        const [k1, k2] = ['a', 'b'].map((l) => freshKey(`member-${l}`)) as [string, string];
        const locker = await makeLocker();
        const all = await locker.lockAll([k1, k2]);
        await all.extend();
        expect(all.held).toBe(true);
        await harness.loseClaim!(k2);
        await abortedWithin(all, T + 2000);
        expect(all.signal.reason).toMatchObject({ code: 'LOCK_LOST' });
        expect(all.held).toBe(false);
        await all.release();
        expect(await harness.inspect(k1)).toEqual([]);
      },
      30_000,
    );

    it('27d. reentrancy: nested holds share the lease and token and end with the outermost; without it a self-deadlock is a typed error at once', async () => {
      const key = freshKey('reentrant');
      const plain = await makeLocker();
      const reentrant = await makeLocker({ reentrant: true });
      await plain.withLock(key, async (outer) => {
        const started = performance.now();
        await expect(plain.lock(key, { timeoutMs: 10_000 })).rejects.toBeInstanceOf(SelfDeadlockError);
        await expect(plain.withLock(key, () => undefined)).rejects.toMatchObject({ code: 'SELF_DEADLOCK', key });
        await expect(plain.lockAll([freshKey('other'), key])).rejects.toMatchObject({ code: 'SELF_DEADLOCK' });
        expect(await plain.tryLock(key)).toBeNull();
        expect(performance.now() - started).toBeLessThan(2000);
        // Per call, reentrancy can still be asked for.
        const inner = await plain.lock(key, { reentrant: true });
        expect(inner.token).toBe(outer.token);
        await inner.release();
        expect(outer.held).toBe(true);
      });
      await reentrant.withLock(key, async (outer) => {
        const inner = await reentrant.withLock(key, async (nested) => {
          expect(nested.token).toBe(outer.token);
          const third = (await reentrant.tryLock(key))!;
          expect(third.token).toBe(outer.token);
          await third.release();
          return nested;
        });
        // The inner hold ended; the lease did not.
        expect(inner.held).toBe(false);
        expect(outer.held).toBe(true);
        expect(await harness.inspect(key)).toEqual([outer.owner]);
        const all = await reentrant.lockAll([key, freshKey('more')]);
        expect(all.tokens.get(key)).toBe(outer.token);
        await all.release();
        expect(outer.held).toBe(true);
      });
      expect(await harness.inspect(key)).toEqual([]);
    }, 30_000);

    it('27e. reentrancy is per async context: two concurrent contexts in one process still exclude each other', async () => {
      const key = freshKey('contexts');
      // Leases are not what this checks: a ttl of at least 2 s keeps a busy machine's event-loop
      // stall from expiring the hold (the memory suite's 300 ms ttl once did, in CI).
      const locker = await makeLocker({ reentrant: true, ttlMs: Math.max(T, 2000) });
      const events: string[] = [];
      const task = (name: string) =>
        locker.withLock(key, async () => {
          events.push(`${name} in`);
          await sleep(100);
          // A nested take inside the scope does not wait; the other context's take does.
          await locker.withLock(key, () => undefined);
          events.push(`${name} out`);
        });
      await Promise.all([task('a'), task('b')]);
      expect(events).toHaveLength(4);
      expect(events[1]).toBe(`${events[0]!.split(' ')[0]} out`);
      expect(events[3]).toBe(`${events[2]!.split(' ')[0]} out`);
      expect(await harness.inspect(key)).toEqual([]);
    }, 30_000);

    it('27f. bad input (not an array, empty, too many keys, a bad key inside, a bad reentrant flag) rejects with InvalidArgumentError before any I/O', async () => {
      const { backend: counting, calls } = countingBackend(await options.createBackend());
      const locker = createLocker(counting, { ttlMs: T });
      ctx.lockers.push(locker);
      const good = freshKey();
      const bad: unknown[] = [
        undefined,
        'k',
        [],
        Array.from({ length: MAX_LOCK_ALL_KEYS + 1 }, (_, i) => `k${i}`),
        [good, ''],
        [good, 42],
        [good, 'x'.repeat(1025)],
      ];
      for (const keys of bad) {
        await expect(locker.lockAll(keys as string[]), String(keys).slice(0, 20)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
        await expect(locker.tryLockAll(keys as string[])).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      }
      await expect(locker.lockAll([good], { ttlMs: -1 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      await expect(locker.withLockAll([good], untyped<() => void>('no'))).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      expect(() => createLocker(counting, { reentrant: untyped<boolean>('yes') })).toThrow(
        expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
      );
      expect(calls).toEqual([]);
    });

    crossProcessIt(
      '28a. lock-delay: after a kill -9 of a holder with lock-delay, the next holder (without one) is granted no earlier than lease end + delay, and not much later',
      async () => {
        const key = freshKey('delay-crash');
        const child = await spawnChild({ lockDelayMs: D });
        await child.lock(key);
        const b = await makeLocker();
        const killedAt = performance.now();
        await child.kill();
        const lock = await b.lock(key, { timeoutMs: 3 * (T + D) + 5000 });
        const elapsed = performance.now() - killedAt;
        // The last renewal was at most one renewal period before the kill; the store keeps T + D from it.
        expect(elapsed).toBeGreaterThanOrEqual(T - renewMs + D - 50);
        expect(elapsed).toBeLessThanOrEqual(T + renewMs + D + 1000);
        await lock.release();
      },
      60_000,
    );

    it('28b. lock-delay: a normal release frees the key at once', async () => {
      const key = freshKey('delay-release');
      const [a, b] = [await makeLocker({ lockDelayMs: D }), await makeLocker()];
      const held = await a.lock(key);
      const next = b.lock(key, { timeoutMs: 10_000 });
      await sleep(200);
      const releasedAt = performance.now();
      await held.release();
      const lock = await next;
      expect(performance.now() - releasedAt).toBeLessThan(Math.min(1000, D));
      await lock.release();
      // And again from a fresh acquisition after an uncontended release.
      await (await a.lock(key)).release();
      const again = (await b.tryLock(key))!;
      expect(again.held).toBe(true);
      await again.release();
    }, 30_000);

    ctx.itWhen(
      () => (capabilities.lease === 'ttl' ? undefined : 'a session lease lives as long as its session, which a stalled holder keeps'),
      '28c. lock-delay: a holder that stops renewing counts itself lost after its ttl, while the store keeps the key for the delay more',
      async () => {
        const key = freshKey('delay-drain');
        const [a, b] = [await makeLocker({ autoRenew: false, lockDelayMs: D }), await makeLocker()];
        // The store starts the lease (and the delay) after the request is sent and before the grant
        // is back: the first bounds when the key frees, the second when the holder counts itself lost.
        const askedAt = performance.now();
        const held = await a.lock(key);
        const takenAt = performance.now();
        await abortedWithin(held, T + 1000);
        const lostAfter = performance.now() - takenAt;
        expect(lostAfter).toBeLessThanOrEqual(T + 100);
        expect(await b.tryLock(key), 'the key was free inside the delay').toBeNull();
        const next = await b.lock(key, { timeoutMs: T + D + 5000 });
        expect(performance.now() - askedAt).toBeGreaterThanOrEqual(T + D - 100);
        expect(next.token).toBeGreaterThan(held.token);
        await next.release();
      },
      30_000,
    );

    it('28d. lock-delay bad input (negative, fractional, not a number; ttl + delay past the maximum) rejects with InvalidArgumentError before any I/O', async () => {
      const { backend: counting, calls } = countingBackend(await options.createBackend());
      const locker = createLocker(counting, { ttlMs: T });
      ctx.lockers.push(locker);
      const key = freshKey();
      for (const bad of [-1, 1.5, NaN, Infinity, '5', null]) {
        expect(() => createLocker(counting, { lockDelayMs: bad as number }), String(bad)).toThrow(
          expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
        );
        await expect(locker.lock(key, { lockDelayMs: bad as number })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
        await expect(locker.tryLock(key, { lockDelayMs: bad as number })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
        await expect(locker.lockAll([key], { lockDelayMs: bad as number })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      }
      const max = capabilities.maxTtlMs;
      await expect(locker.lock(key, { lockDelayMs: max })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      expect(calls).toEqual([]);
    });
  });
}

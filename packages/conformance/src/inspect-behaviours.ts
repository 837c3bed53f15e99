/**
 * Behaviour 37 (the conformance README, "introspection"): `locker.inspect(key)` and the families'
 * `inspect()` report exactly the holders, tokens and waiters the suite made, in queue order where
 * the store keeps a queue, with the time left on the store's clock, and change nothing.
 */
import type { ClaimInfo, Inspection, Lock, Locker } from '@deadbolt/core';
import { sleep } from '@deadbolt/core/backend';
import { randomUUID } from 'node:crypto';
import type { SuiteContext } from './context.js';
import { abortedWithin, pending, waitersSeen } from './helpers.js';

export function defineInspectBehaviours(ctx: SuiteContext): void {
  const { describe, it, expect } = ctx.runner;
  const { T, renewMs, freshKey, makeLocker, capabilities, harness, itWhen, semIt, rwIt } = ctx;
  const session = capabilities.lease === 'session';

  /** A holder as the suite holds it: its owner and token, and a time left within its ttl (none for a session lease). */
  function expectHolder(claim: ClaimInfo | undefined, lock: Lock, mode?: ClaimInfo['mode']): void {
    expect(claim?.owner).toBe(lock.owner);
    // A migration's dual phase shows no holder's token (migrating-backend.ts says why); every store shows its own.
    expect(claim?.token).toBe(ctx.dualMigration ? null : lock.token);
    if (session) expect(claim?.ttlLeftMs).toBeNull();
    else {
      expect(claim?.ttlLeftMs).toBeGreaterThan(0);
      // The store's ttl is whole units of its granularity, counted from its own clock.
      expect(claim?.ttlLeftMs).toBeLessThanOrEqual(T + capabilities.ttlGranularityMs + 50);
    }
    if (mode) expect(claim?.mode).toBe(mode);
  }

  /**
   * The waiters a store listed are the suite's, in arrival order: `granted[i]` is the lock the i-th
   * listed waiter got, so its owner (and its token, where the store gives one at arrival) match.
   */
  function expectListed(seen: Inspection, modes: NonNullable<ClaimInfo['mode']>[] | number, i: number, granted: Lock): void {
    if (seen.waiters === null) return;
    expect(seen.waiters).toHaveLength(typeof modes === 'number' ? modes : modes.length);
    const listed = seen.waiters[i]!;
    if (listed.owner !== null) expect(listed.owner).toBe(granted.owner);
    if (listed.token !== null) expect(listed.token).toBe(granted.token);
    if (typeof modes !== 'number') expect(listed.mode).toBe(modes[i]);
  }

  describe('introspection', () => {
    it("37e. forceRelease(key, owner): frees that owner's lock (its signal aborts, the waiter is granted with a larger token), never a later holder's; false for an owner holding nothing; a permit by its owner; refused, typed, only where claims are server sessions", async () => {
      const key = freshKey();
      const [a, b, operator] = [await makeLocker(), await makeLocker(), await makeLocker()];
      await expect(operator.forceRelease(key, '')).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      await expect(operator.forceRelease('', randomUUID())).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      const held = await a.lock(key);
      const stranger = operator.forceRelease(key, randomUUID());
      const refused = await stranger.then(
        () => undefined,
        (error: unknown) => error,
      );
      if (refused !== undefined) {
        // Only a store whose claims are server sessions may refuse, and nothing was freed.
        expect(refused).toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/cannot free|session/) });
        expect(session, `a ${capabilities.lease} store refused: ${String(refused)}`).toBe(true);
        expect(held.held).toBe(true);
        expect(await harness.inspect(key)).toEqual([held.owner]);
        await held.release();
        return;
      }
      expect(await stranger).toBe(false);
      expect(await harness.inspect(key)).toEqual([held.owner]);
      const next = pending(b.lock(key, { timeoutMs: 30_000 }));
      await waitersSeen(() => operator.inspect(key), 1);
      expect(await operator.forceRelease(key, held.owner)).toBe(true);
      const got = await next;
      expect(got.token).toBeGreaterThan(held.token);
      await abortedWithin(held, renewMs + 2000);
      expect(held.signal.reason).toMatchObject({ code: 'LOCK_LOST' });
      // The owner no longer holds it: the later holder is never freed by the same call.
      expect(await operator.forceRelease(key, held.owner)).toBe(false);
      expect(got.held).toBe(true);
      expect(await harness.inspect(key)).toEqual([got.owner]);
      await got.release();
      await held.release();
      if (!capabilities.semaphore) return;
      const shared = freshKey('permits');
      const [p1, p2] = [await a.semaphore(shared, { limit: 2 }).acquire(), await b.semaphore(shared, { limit: 2 }).acquire()];
      expect(await operator.forceRelease(shared, p1.owner)).toBe(false); // the lock namespace: no such lock there
      expect(await operator.forceRelease(shared, p1.owner, { shared: true })).toBe(true);
      await abortedWithin(p1, renewMs + 2000);
      expect(p2.held).toBe(true);
      expect(await harness.inspectShared!(shared)).toEqual([p2.owner]);
      await Promise.all([p1.release(), p2.release()]);
    }, 60_000);

    it('37a. inspect(key): free, held, contended (waiters in queue order), released; it changes nothing', async () => {
      const key = freshKey();
      const [a, b, c] = [await makeLocker(), await makeLocker(), await makeLocker()];
      await expect(a.inspect('')).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      const free = await a.inspect(key);
      expect(free.key).toBe(key);
      expect(free.holders).toEqual([]);
      expect(free.waiters ?? []).toEqual([]);

      const held = await a.lock(key);
      const before = await harness.inspect(key);
      expectHolder((await b.inspect(key)).holders[0], held);
      expect((await b.inspect(key)).holders).toHaveLength(1);
      // Read-only: the store holds what it held, and the key is still taken.
      expect(await harness.inspect(key)).toEqual(before);
      expect(await c.tryLock(key)).toBeNull();
      expect(held.held).toBe(true);

      const first = pending(b.lock(key, { timeoutMs: 30_000 }));
      await waitersSeen(() => a.inspect(key), 1);
      const second = pending(c.lock(key, { timeoutMs: 30_000 }));
      const contended = await waitersSeen(() => a.inspect(key), 2);
      expectHolder(contended.holders[0], held);
      await held.release();
      // Listed first, granted first: the owner the store showed is the lock the waiter got. (A
      // store without a queue may grant either waiter first: it lists none.)
      const gotFirst = await Promise.race([first, second]);
      if (capabilities.fairness === 'fifo') expect(gotFirst).toBe(await Promise.race([first, sleep(0)]));
      expectListed(contended, 2, 0, gotFirst);
      expectHolder((await a.inspect(key)).holders[0], gotFirst);
      await gotFirst.release();
      const gotSecond = (await Promise.all([first, second])).find((l) => l !== gotFirst)!;
      expectListed(contended, 2, 1, gotSecond);
      await gotSecond.release();
      await expect.poll(async () => (await a.inspect(key)).holders, { timeout: 2000, interval: 50 }).toEqual([]);
      await a.close();
      await expect(a.inspect(key)).rejects.toMatchObject({ code: 'LOCKER_CLOSED' });
    }, 60_000);

    itWhen(
      () => (session ? 'a session lease ends with its session, not on the store clock' : undefined),
      '37b. a lease is shown held for as long as it lasts on the store clock, and free once it ran out',
      async () => {
        const key = freshKey();
        const a = await makeLocker({ autoRenew: false });
        const asked = performance.now();
        const lock = await a.lock(key);
        expectHolder((await a.inspect(key)).holders[0], lock);
        // Read until it shows free: never before the lease (which began after `asked`) ran out.
        let seen = await a.inspect(key);
        while (seen.holders.length > 0 && performance.now() - asked < T + capabilities.ttlGranularityMs + 2000) {
          await sleep(50);
          seen = await a.inspect(key);
        }
        const freeAt = performance.now() - asked;
        expect(seen.holders, 'shown free once the lease ran out').toEqual([]);
        // [etcd counts a lease's time left in whole seconds, rounded down, and a claim with 0 s
        // (up to 999 ms) left was shown free though its key still excluded every taker]
        expect(freeAt, 'ms after the lock was asked for that inspect first showed it free').toBeGreaterThanOrEqual(T - 50);
      },
      30_000,
    );

    semIt(
      '37c. semaphore.inspect(): the permits held, the claim waiting, the limit',
      async () => {
        const key = freshKey();
        const lockers: Locker[] = [await makeLocker(), await makeLocker(), await makeLocker()];
        const [a, b, c] = lockers.map((l) => l.semaphore(key, { limit: 2 }));
        const empty = await a!.inspect();
        expect(empty.holders).toEqual([]);
        const permits = [await a!.acquire(), await b!.acquire()];
        const waiting = pending(c!.acquire({ timeoutMs: 30_000 }));
        const seen = await waitersSeen(() => a!.inspect(), 1);
        expect(seen.limit).toBe(2);
        expect(seen.holders).toHaveLength(2);
        for (const permit of permits)
          expectHolder(
            seen.holders.find((h) => h.owner === permit.owner),
            permit,
            'shared',
          );
        await permits[0]!.release();
        const third = await waiting;
        expectListed(seen, ['shared'], 0, third);
        await Promise.all([permits[1]!.release(), third.release()]);
        await expect.poll(async () => (await a!.inspect()).holders, { timeout: 2000, interval: 50 }).toEqual([]);
      },
      60_000,
    );

    rwIt(
      '37d. readWriteLock.inspect(): the reader holding, then a writer and a reader waiting in order, with their modes',
      async () => {
        const key = freshKey();
        const [r1, w, r2] = (await Promise.all([makeLocker(), makeLocker(), makeLocker()])).map((l) => l.readWriteLock(key));
        const read = await r1!.read();
        const writing = pending(w!.write({ timeoutMs: 30_000 }));
        await waitersSeen(() => r1!.inspect(), 1);
        const reading = pending(r2!.read({ timeoutMs: 30_000 }));
        const seen = await waitersSeen(() => r1!.inspect(), 2);
        expect(seen.limit).toBe(0);
        expect(seen.holders).toHaveLength(1);
        expectHolder(seen.holders[0], read, 'shared');
        await read.release();
        const written = await writing;
        expectListed(seen, ['exclusive', 'shared'], 0, written);
        expectHolder((await r1!.inspect()).holders[0], written, 'exclusive');
        await written.release();
        const second = await reading;
        expectListed(seen, ['exclusive', 'shared'], 1, second);
        await second.release();
      },
      60_000,
    );
  });
}

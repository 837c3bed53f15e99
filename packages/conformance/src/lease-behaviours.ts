/**
 * Behaviours 8–11 (the conformance README, "lease"): renewal, extend, expiry, lost claims and paused
 * holders.
 */
import { BackendUnavailableError } from '@deadbolt/core';
import { sleep } from '@deadbolt/core/backend';
import { backendOf } from '@deadbolt/core/testing';
import type { SuiteContext } from './context.js';
import { abortedWithin, expectSoon } from './helpers.js';
import { retryFor } from './test-matrix.js';

export function defineLeaseBehaviours(ctx: SuiteContext): void {
  const { describe, it, expect } = ctx.runner;
  const {
    options,
    harness,
    capabilities,
    T,
    renewMs,
    freshKey,
    makeLocker,
    makeFence,
    warmLocker,
    spawnChild,
    crossProcessIt,
    hookIt,
    register,
  } = ctx;

  describe('lease', () => {
    it('8. renewal: a live holder keeps the lock for 5 × ttl; contenders stay out', async () => {
      const key = freshKey();
      const [a, b] = [await makeLocker(), await makeLocker()];
      const lock = await a.lock(key);
      const until = performance.now() + 5 * T;
      while (performance.now() < until) {
        expect(await b.tryLock(key)).toBeNull();
        await sleep(T / 4);
      }
      expect(lock.held).toBe(true);
      expect(lock.signal.aborted).toBe(false);
      await lock.release();
    }, 60_000);

    it('8b. a waiter granted after waiting longer than ttl still holds a full lease', async () => {
      const key = freshKey();
      const [a, b, c] = [await makeLocker(), await makeLocker(), await makeLocker()];
      const held = await a.lock(key);
      const waiting = b.lock(key);
      await sleep(2 * T);
      await held.release();
      const lock = await waiting;
      await sleep(1.5 * T);
      expect(lock.held).toBe(true);
      expect(lock.signal.aborted).toBe(false);
      expect(await c.tryLock(key)).toBeNull();
      expect(await harness.inspect(key)).toEqual([lock.owner]);
      await lock.release();
    }, 60_000);

    crossProcessIt(
      '9a. crash: a kill -9ed holder is replaced after its lease, never before',
      async () => {
        const key = freshKey();
        const b = await warmLocker((l) => l.tryLock(key));
        const child = await spawnChild();
        await child.lock(key);
        const killedAt = performance.now();
        await child.kill();
        const lock = await b.lock(key, { timeoutMs: 3 * T + 5000 });
        const elapsed = performance.now() - killedAt;
        // A ttl lease: the last renewal was at most one renewal period before the kill, so the lease
        // lives at least that much longer. A session lease ends when the store sees the session end,
        // which may be at once (a closed connection).
        if (capabilities.lease === 'ttl') expect(elapsed).toBeGreaterThanOrEqual(T - renewMs - 50);
        expect(elapsed).toBeLessThanOrEqual(T + renewMs + 1000);
        await lock.release();
      },
      60_000,
    );

    crossProcessIt(
      '9b. crash: a kill -9ed waiter blocks nobody beyond ttl, whatever its poll delay',
      async () => {
        const key = freshKey();
        const [a, b] = [await makeLocker(), await makeLocker()];
        const held = await a.lock(key);
        // A waiter that polls far more rarely than its ttl: its place in the store must still last about a ttl.
        const child = await spawnChild({}, undefined, options.slowPollChild?.(5 * T) ?? options.child);
        void child.lock(key).catch(() => undefined);
        await sleep(300);
        await child.kill();
        const next = b.lock(key, { timeoutMs: 3 * T + 5000 });
        await sleep(50);
        const releasedAt = performance.now();
        await held.release();
        const lock = await next;
        expect(performance.now() - releasedAt).toBeLessThanOrEqual(T + renewMs + 1000);
        await lock.release();
      },
      60_000,
    );

    crossProcessIt(
      '10. pause: a SIGSTOPped holder learns it lost the lock before its next fenced write',
      async () => {
        const key = freshKey();
        const child = await spawnChild();
        const { id } = await child.lock(key);
        child.rpc.call('fencedWrites', id, 20).catch(() => undefined);
        // The pause must come after the writer's first accepted write; how soon that is depends
        // on the child's first round trip, slow on a loaded machine.
        await expectSoon(async () => register().accepted.length > 0, true, 5000);
        child.signal('SIGSTOP');
        const b = await makeLocker();
        const lock = await b.lock(key, { timeoutMs: 3 * T + 5000 });
        expect(register().write(lock.token, 'new holder', 'parent')).toBe(true);
        const resumedAt = process.hrtime.bigint(); // the child is stopped: any check of its is before or after this
        child.signal('SIGCONT');
        await child.waitFor('writer-stopped', 2 * T + 2000);
        expect(child.events.some((e) => e.name === 'lost')).toBe(true);
        await sleep(renewMs + 200);
        // A write the child checked before the pause may arrive after it and be refused: that is
        // what the token is for. After it resumes, the child sees its lock lost before it writes
        // again, and its renewer does not re-create its claim.
        expect(register().rejected.filter((w) => w.checkedAt === undefined || w.checkedAt >= resumedAt)).toEqual([]);
        expect(await harness.inspect(key)).toEqual([lock.owner]);
        expect(lock.held).toBe(true);
        await lock.release();
      },
      60_000,
    );

    hookIt('loseClaim', '11a. lost claim: lock.signal aborts with LockLostError within one renewal period; extend rejects', async () => {
      const key = freshKey();
      const a = await makeLocker();
      const lock = await a.lock(key);
      await harness.loseClaim!(key);
      const lostAt = performance.now();
      await abortedWithin(lock, renewMs + 1000);
      expect(performance.now() - lostAt).toBeLessThanOrEqual(renewMs + 1000);
      expect(lock.signal.reason).toMatchObject({ code: 'LOCK_LOST', name: 'LockLostError' });
      await expect(lock.extend()).rejects.toMatchObject({ code: 'LOCK_LOST' });
      await lock.release();
    });

    hookIt(
      'dropConnection',
      '11b. dropped connection: never reported held when it is not',
      async () => {
        const key = freshKey();
        const a = await makeLocker();
        const b = await makeLocker();
        const lock = await a.lock(key);
        await harness.dropConnection!(backendOf(a), key);
        if (capabilities.lease === 'session') {
          await abortedWithin(lock, T + renewMs + 2000);
        } else {
          await sleep(renewMs + 500);
        }
        if (lock.held) {
          expect(await b.tryLock(key)).toBeNull();
          await lock.extend();
        } else {
          expect(lock.signal.reason).toMatchObject({ code: 'LOCK_LOST' });
        }
        await lock.release().catch(() => undefined);
      },
      60_000,
    );

    hookIt(
      'restartServer',
      '11c. server restart: a lock, and a leader where the store has a fence, each either lost (signal aborted) or still really held',
      async () => {
        const key = freshKey();
        const a = await makeLocker();
        const b = await makeLocker();
        const lock = await a.lock(key);
        // A leader beside the lock: a term is a lock whose value is published in the fence.
        const fence = options.fence ? await makeFence() : undefined;
        const candidates = fence ? [await makeLocker({ fence }), await makeLocker({ fence })] : [];
        const term = await candidates[0]?.elect(key + '/leader', { value: 'before' });
        await harness.restartServer!();
        await sleep(renewMs + 1000);
        if (lock.held) {
          expect(await b.tryLock(key)).toBeNull();
        } else {
          expect(lock.signal.reason).toMatchObject({ code: 'LOCK_LOST' });
          const next = await b.lock(key, { timeoutMs: 3 * T + 5000 });
          expect(next.token).toBeGreaterThan(lock.token);
          await next.release();
        }
        await lock.release().catch(() => undefined);
        if (!term) return;
        if (term.held) {
          expect(await candidates[1]!.tryElect(key + '/leader', { value: 'rival' }), 'a second leader').toBeNull();
        } else {
          expect(term.signal.reason).toMatchObject({ code: 'LOCK_LOST' });
          // The next term publishes in the fence, whose connection may still be coming back.
          const next = await retryFor(
            30_000,
            () => candidates[1]!.elect(key + '/leader', { value: 'after', timeoutMs: 3 * T + 5000 }),
            (e) => e instanceof BackendUnavailableError,
          );
          expect(next.token).toBeGreaterThan(term.token);
          await next.resign();
        }
        await term.resign().catch(() => undefined);
      },
      180_000,
    );
  });
}

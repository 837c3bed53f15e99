/**
 * Behaviours 25 (semaphores) and 26 (read-write locks), as the conformance README lists them. Each group switches on by
 * the backend's `capabilities.semaphore` / `readWrite`; both are claims on shared keys, so what one
 * proves about expiry, waiting and cleanup the other relies on. One long file: the two groups
 * share their workload (`contend`) and their checks.
 */
import { createLocker, LimitMismatchError, LockUpgradeError, MAX_SEMAPHORE_LIMIT, type Lock, type Locker } from '@deadbolt/core';
import { sleep } from '@deadbolt/core/backend';
import type { SuiteContext } from './context.js';
import { countingBackend } from './counting.js';
import { sharedHoldMs, takeShared, type SharedFamily } from './shared-family.js';
import { abortedWithin, pending, untyped, waitersSeen } from './helpers.js';

/** A hold: [start, end] in monotonic ns, comparable across processes on one machine. */
type Hold = [number, number];

/** The most holds that overlap at any instant. */
function maxOverlap(holds: Hold[]): number {
  const events = holds.flatMap(([s, e]) => [[s, 1] as const, [e, -1] as const]);
  // An end and a start at the same instant do not overlap: ends first.
  events.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let now = 0;
  let most = 0;
  for (const [, d] of events) most = Math.max(most, (now += d));
  return most;
}

export function defineSharedBehaviours(ctx: SuiteContext): void {
  const { describe, expect } = ctx.runner;
  const {
    options,
    harness,
    capabilities,
    T,
    renewMs,
    roundTtl,
    freshKey,
    makeLocker,
    warmLocker,
    spawnChild,
    itWhen,
    probeFloor,
    semIt,
    rwIt,
  } = ctx;
  const semProcIt = (name: string, fn: () => Promise<void>, timeout?: number) =>
    itWhen(
      () => (!capabilities.semaphore ? 'the backend has no semaphores' : capabilities.crossProcess ? undefined : 'in-process backend'),
      name,
      fn,
      timeout,
    );
  // Holds long enough beside a store's round trips (slowest: Cassandra's Paxos rounds) to overlap.
  const holdMs = Math.max(20, T / 40);

  /** The owners the store has for a shared key; the harness must be able to say (checked once). */
  const inspect = (key: string) => {
    expect(harness.inspectShared, 'a backend with shared claims needs harness.inspectShared').toBeDefined();
    return harness.inspectShared!(key);
  };

  /** In-process lockers and (cross-process backends) children all run `family` workloads on `key`. */
  async function contend(
    key: string,
    families: SharedFamily[],
    rounds: number,
    holdMs: (family: SharedFamily) => number,
  ): Promise<{ family: SharedFamily; holds: Hold[] }[]> {
    const worker = async (family: SharedFamily, locker: Locker) => {
      const holds: Hold[] = [];
      for (let i = 0; i < rounds; i++) {
        const lock = await takeShared(locker, key, family, { timeoutMs: 60_000 });
        const start = Number(process.hrtime.bigint());
        await sleep(sharedHoldMs(holdMs(family)));
        holds.push([start, Number(process.hrtime.bigint())]);
        await lock.release();
      }
      return { family, holds };
    };
    // Every process and locker is ready before any worker starts: a worker started while the next
    // child was still spawning could finish before the others begin, and never meet them.
    const starts: (() => Promise<{ family: SharedFamily; holds: Hold[] }>)[] = [];
    for (const [i, family] of families.entries()) {
      if (capabilities.crossProcess && i % 2 === 1) {
        const child = await spawnChild();
        starts.push(() => child.rpc.call<Hold[]>('sharedWork', key, family, rounds, holdMs(family)).then((holds) => ({ family, holds })));
      } else {
        const locker = await makeLocker();
        starts.push(() => worker(family, locker));
      }
    }
    return Promise.all(starts.map((start) => start()));
  }

  describe('semaphores', () => {
    semIt(
      '25a. never more than limit holders (processes and in-process), and the limit is reached',
      async () => {
        const key = freshKey('semaphore');
        const limit = 3;
        const results = await contend(
          key,
          Array.from({ length: 6 }, () => ({ limit })),
          12,
          () => holdMs,
        );
        const holds = results.flatMap((r) => r.holds);
        expect(holds.length).toBe(6 * 12);
        const most = maxOverlap(holds);
        expect(most).toBeLessThanOrEqual(limit);
        expect(most, 'permits were never held side by side: a mutex, not a semaphore').toBeGreaterThanOrEqual(2);
        expect(await inspect(key)).toEqual([]);
      },
      180_000,
    );

    semIt('25b. tryAcquire: limit permits, then null without waiting and without a trace; a release frees one', async () => {
      const key = freshKey();
      const [a, b] = [await makeLocker(), await makeLocker()];
      const permits: Lock[] = [];
      for (let i = 0; i < 2; i++) permits.push((await a.semaphore(key, { limit: 2 }).tryAcquire())!);
      expect(permits.every((p) => p?.held)).toBe(true);
      const started = performance.now();
      expect(await b.semaphore(key, { limit: 2 }).tryAcquire()).toBeNull();
      expect(performance.now() - started).toBeLessThan(2000);
      expect(new Set(await inspect(key))).toEqual(new Set(permits.map((p) => p.owner)));
      await permits[0]!.release();
      const third = await b.semaphore(key, { limit: 2 }).tryAcquire();
      expect(third?.held).toBe(true);
      await Promise.all([permits[1]!.release(), third!.release()]);
      expect(await inspect(key)).toEqual([]);
    });

    semProcIt(
      "25c. crash: a kill -9ed holder's permit returns after its lease, never before",
      async () => {
        const key = freshKey();
        const b = await warmLocker((l) => l.semaphore(key, { limit: 1 }).tryAcquire());
        const child = await spawnChild();
        await child.acquireShared(key, { limit: 1 });
        const killedAt = performance.now();
        await child.kill();
        expect(await b.semaphore(key, { limit: 1 }).tryAcquire()).toBeNull();
        const permit = await b.semaphore(key, { limit: 1 }).acquire({ timeoutMs: 3 * T + 5000 });
        const elapsed = performance.now() - killedAt;
        if (capabilities.lease === 'ttl') expect(elapsed).toBeGreaterThanOrEqual(T - renewMs - 50);
        expect(elapsed).toBeLessThanOrEqual(T + renewMs + 1000);
        await permit.release();
      },
      60_000,
    );

    semIt(
      '25d. limit mismatch: another limit while permits exist is a typed error naming both; an idle semaphore takes the new limit',
      async () => {
        const key = freshKey();
        const [a, b] = [await makeLocker(), await makeLocker()];
        const held = await a.semaphore(key, { limit: 2 }).acquire();
        // The wait's deadline is far off, so only a refusal before waiting gives LimitMismatchError
        // within one operation timeout (a store answering slowly under load took over 500 ms).
        for (const attempt of [
          () => b.semaphore(key, { limit: 3 }).acquire({ timeoutMs: 30_000 }),
          () => b.semaphore(key, { limit: 3 }).tryAcquire(),
        ]) {
          const started = performance.now();
          const error = await attempt().then(
            () => undefined,
            (e: unknown) => e,
          );
          expect(performance.now() - started, 'refused before waiting').toBeLessThan(4000);
          expect(error).toBeInstanceOf(LimitMismatchError);
          expect(error).toMatchObject({ code: 'LIMIT_MISMATCH', key, storedLimit: 2, requestedLimit: 3 });
          expect((error as Error).message).toMatch(/2.*3/);
        }
        if (capabilities.readWrite) await expect(b.readWriteLock(key).tryRead()).rejects.toBeInstanceOf(LimitMismatchError);
        expect(await inspect(key)).toEqual([held.owner]);
        await held.release();
        const again = await b.semaphore(key, { limit: 3 }).acquire({ timeoutMs: 5000 });
        await expect(a.semaphore(key, { limit: 2 }).tryAcquire()).rejects.toMatchObject({ storedLimit: 3, requestedLimit: 2 });
        await again.release();
      },
    );

    semIt(
      '25e. abort, timeout and close leave nothing in the store; the permits stay with their holders',
      async () => {
        const key = freshKey();
        const [a, b] = [await makeLocker(), await makeLocker()];
        const held = await a.semaphore(key, { limit: 1 }).acquire();
        const controller = new AbortController();
        const aborted = b.semaphore(key, { limit: 1 }).acquire({ signal: controller.signal });
        await sleep(100);
        controller.abort(new Error('stop'));
        await expect(aborted).rejects.toThrow('stop');
        await expect(b.semaphore(key, { limit: 1 }).acquire({ timeoutMs: 200 })).rejects.toMatchObject({ code: 'LOCK_TIMEOUT' });
        const closing = expect(b.semaphore(key, { limit: 1 }).acquire()).rejects.toMatchObject({ code: 'LOCKER_CLOSED' });
        await sleep(100);
        await b.close();
        await closing;
        expect(await inspect(key)).toEqual([held.owner]);
        // Closing a locker also gives its permits back.
        const c = await makeLocker();
        await held.release();
        const last = (await c.semaphore(key, { limit: 1 }).tryAcquire())!;
        expect(last.held).toBe(true);
        await c.close();
        expect(await inspect(key)).toEqual([]);
      },
      30_000,
    );

    semIt(
      '25f. fencing: every permit gets a token above every earlier grant, across lockers, processes and expiry',
      async () => {
        const key = freshKey();
        const lockersList = [await makeLocker(), await makeLocker(), await makeLocker({ autoRenew: false })];
        const child = capabilities.crossProcess ? await spawnChild() : undefined;
        let last = -1n;
        const held: Lock[] = [];
        for (let i = 0; i < 9; i++) {
          if (child && i % 3 === 1) {
            const { id, token } = await child.acquireShared(key, { limit: 2 });
            expect(token).toBeGreaterThan(last);
            last = token;
            await child.release(id);
            continue;
          }
          const permit = await lockersList[i % 3]!.semaphore(key, { limit: 2 }).acquire();
          expect(permit.token).toBeGreaterThan(last);
          last = permit.token;
          held.push(permit);
          if (held.length === 2) await held.shift()!.release();
        }
        await Promise.all(held.splice(0).map((p) => p.release()));
        // A permit left to expire (no renewal) is replaced by a larger token.
        const stale = await lockersList[2]!.semaphore(key, { limit: 1 }).acquire();
        const next = await lockersList[0]!.semaphore(key, { limit: 1 }).acquire({ timeoutMs: 3 * T + 5000 });
        expect(next.token).toBeGreaterThan(stale.token);
        expect(stale.signal.aborted).toBe(true);
        await next.release();
      },
      60_000,
    );

    itWhen(
      () =>
        !capabilities.semaphore ? 'the backend has no semaphores' : harness.loseSharedClaim ? undefined : 'harness has no loseSharedClaim',
      "25g. a lost permit aborts its signal within a renewal period; the others' permits stay",
      async () => {
        const key = freshKey();
        const [a, b] = [await makeLocker(), await makeLocker()];
        const lost = await a.semaphore(key, { limit: 2 }).acquire();
        const kept = await b.semaphore(key, { limit: 2 }).acquire();
        await harness.loseSharedClaim!(key, lost.owner);
        await abortedWithin(lost, renewMs + 2000);
        expect(lost.signal.reason).toMatchObject({ code: 'LOCK_LOST' });
        expect(kept.held).toBe(true);
        await sleep(renewMs + 200);
        expect(kept.held).toBe(true);
        await kept.release();
      },
      30_000,
    );

    semIt(
      '25h. bad input (limit, key, ttl) rejects with InvalidArgumentError before any I/O; no garbage after many cycles',
      async () => {
        const { backend, calls } = countingBackend(await options.createBackend());
        const locker = createLocker(backend, { ttlMs: T });
        ctx.lockers.push(locker);
        const key = freshKey();
        for (const limit of [0, -1, 1.5, NaN, Infinity, '3', null, undefined, MAX_SEMAPHORE_LIMIT + 1]) {
          expect(() => locker.semaphore(key, { limit: limit as number }), `limit ${String(limit)}`).toThrow(
            expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
          );
        }
        for (const badKey of ['', 42, 'x'.repeat(1025)]) {
          expect(() => locker.semaphore(badKey as string, { limit: 2 })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
          expect(() => locker.readWriteLock(badKey as string)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
        }
        await expect(locker.semaphore(key, { limit: 2 }).acquire({ ttlMs: -1 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
        await expect(locker.semaphore(key, { limit: 2 }).withPermit(untyped<() => void>('no'))).rejects.toMatchObject({
          code: 'INVALID_ARGUMENT',
        });
        expect(calls).toEqual([]);
        // Many cycles on rotating keys leave nothing behind.
        const keys = Array.from({ length: 20 }, (_, i) => freshKey(`sem-garbage-${i}`));
        let next = 0;
        await Promise.all(
          Array.from({ length: 6 }, async () => {
            while (next < 600) {
              const k = keys[next++ % keys.length]!;
              await locker.semaphore(k, { limit: 2 }).withPermit(() => undefined, { timeoutMs: 30_000 });
            }
          }),
        );
        for (const k of keys) expect(await inspect(k), k).toEqual([]);
      },
      120_000,
    );

    itWhen(
      () =>
        !capabilities.semaphore ? 'the backend has no semaphores' : probeFloor() ? undefined : 'the backend cannot raise its token floor',
      '25i. token floors on shared keys (migration support): a raised floor holds for every later permit, two holders raising in either order never lower it, a released permit cannot raise it',
      async () => {
        const key = freshKey();
        const backend = await options.createBackend();
        const request = (minToken?: bigint) => ({
          key,
          owner: crypto.randomUUID(),
          ttlMs: T,
          wait: false,
          signal: new AbortController().signal,
          mode: 'shared' as const,
          limit: 3,
          ...(minToken === undefined ? {} : { minToken }),
        });
        try {
          const a = (await backend.acquire(request()))!;
          const b = (await backend.acquire(request()))!;
          const high = b.token + 2_000_000n;
          expect(await backend.raiseTokenFloor!(b, high)).toBe(true);
          // The other holder raises to less afterwards: the floor stays where it was.
          expect(await backend.raiseTokenFloor!(a, a.token + 1_000_000n)).toBe(true);
          const c = (await backend.acquire(request()))!;
          expect(c.token).toBeGreaterThan(high);
          await Promise.all([a, b, c].map((l) => backend.release(l)));
          expect(await backend.raiseTokenFloor!(a, high + 1_000_000n), 'a released permit raised the floor').toBe(false);
          const d = (await backend.acquire(request()))!;
          expect(d.token).toBeGreaterThan(c.token);
          expect(d.token).toBeLessThan(high + 1_000_000n);
          await backend.release(d);
          if (capabilities.minToken) {
            const wanted = d.token + 5_000_000n;
            const e = (await backend.acquire(request(wanted)))!;
            expect(e.token).toBeGreaterThanOrEqual(wanted);
            await backend.release(e);
          }
        } finally {
          await backend.close();
        }
      },
    );
  });

  describe('semaphores: a client configured with another limit', () => {
    semIt(
      '25j. a client asking with another limit is refused without failing, blocking or over-admitting the clients configured right',
      async () => {
        const key = freshKey('misconfigured');
        const [a, b, c, wrong] = [await makeLocker(), await makeLocker(), await makeLocker(), await makeLocker()];
        const held = await a.semaphore(key, { limit: 1 }).acquire();
        const waiting = b.semaphore(key, { limit: 1 }).acquire({ timeoutMs: 10_000 });
        await sleep(200);
        // Refused both ways, again and again, while a right one waits.
        for (let i = 0; i < 3; i++) {
          await expect(wrong.semaphore(key, { limit: 3 }).acquire({ timeoutMs: 2000 })).rejects.toMatchObject({
            code: 'LIMIT_MISMATCH',
            storedLimit: 1,
            requestedLimit: 3,
          });
          await expect(wrong.semaphore(key, { limit: 3 }).tryAcquire()).rejects.toMatchObject({ code: 'LIMIT_MISMATCH' });
        }
        // One more, racing the holder's release.
        const racing = wrong
          .semaphore(key, { limit: 3 })
          .acquire({ timeoutMs: 2000 })
          .then(
            (p) => p,
            (e: unknown) => e,
          );
        await held.release();
        const permit = await waiting;
        expect(permit.held).toBe(true);
        const raced = await racing;
        expect(raced, 'the other limit got a permit beside a right one').toMatchObject({ code: 'LIMIT_MISMATCH' });
        // The one permit is taken: a right client is refused, not admitted.
        expect(await c.semaphore(key, { limit: 1 }).tryAcquire()).toBeNull();
        expect(await inspect(key)).toEqual([permit.owner]);
        await permit.release();
      },
      30_000,
    );
  });

  describe('read-write locks', () => {
    rwIt(
      '26a. readers share, a writer excludes everyone (processes and in-process)',
      async () => {
        const key = freshKey('rw');
        const families: SharedFamily[] = ['read', 'read', 'write', 'read', 'write', 'read'];
        // Where waiters poll (`wake: 'poll'`), a reader holds long enough for a reader granted with
        // it to find out and overlap it: with every backend's defaults a polling waiter sleeps at
        // most min(ttl/4, 250 ms) between looks, and a hold here lasts at least half of readHoldMs.
        // With short holds, two child readers granted together learned it at their own polls (and
        // MySQL's attempts on a key run one at a time), so on a loaded machine they could miss each
        // other every time. A waiter that is told (`push`) learns at once.
        const readHoldMs = capabilities.wake === 'poll' ? Math.min(T / 2, 500) : holdMs;
        const results = await contend(key, families, 10, (family) => (family === 'read' ? readHoldMs : holdMs));
        const reads = results.filter((r) => r.family === 'read').flatMap((r) => r.holds);
        const writes = results.filter((r) => r.family === 'write').flatMap((r) => r.holds);
        for (const [ws, we] of writes) {
          for (const [s, e] of [...reads, ...writes]) {
            if (s === ws && e === we) continue;
            expect(e <= ws || s >= we, 'a write overlapped another hold').toBe(true);
          }
        }
        expect(maxOverlap(reads), 'readers never shared').toBeGreaterThanOrEqual(2);
        expect(await inspect(key)).toEqual([]);
      },
      180_000,
    );

    rwIt(
      '26b. a waiting writer is not overtaken by readers that come after it; grants follow arrival',
      async () => {
        const key = freshKey();
        const [a, b, c] = [await makeLocker(), await makeLocker(), await makeLocker()];
        const order: string[] = [];
        const r1 = await a.readWriteLock(key).read();
        const queue = () => a.readWriteLock(key).inspect();
        // Arrival is when the store shows the waiter: a fixed pause (200 ms) can end before a slow
        // store (a dual migration's two, on a loaded machine) has the writer queued.
        const writer = pending(
          b
            .readWriteLock(key)
            .write({ timeoutMs: 10_000 })
            .then((w) => (order.push('write'), w)),
        );
        await waitersSeen(queue, 1);
        expect(await c.readWriteLock(key).tryRead()).toBeNull();
        const reader = pending(
          c
            .readWriteLock(key)
            .read({ timeoutMs: 10_000 })
            .then((r) => (order.push('read'), r)),
        );
        await waitersSeen(queue, 2);
        expect(order).toEqual([]);
        await r1.release();
        const w = await writer;
        await sleep(100);
        expect(order).toEqual(['write']);
        expect(await a.readWriteLock(key).tryWrite()).toBeNull();
        await w.release();
        const r2 = await reader;
        expect(order).toEqual(['write', 'read']);
        expect(r2.token).toBeGreaterThan(w.token);
        expect(w.token).toBeGreaterThan(r1.token);
        await r2.release();
      },
      30_000,
    );

    rwIt('26c. upgrade refused: a write inside withRead of the same key rejects with LockUpgradeError at once', async () => {
      const key = freshKey();
      const locker = await makeLocker();
      const rw = locker.readWriteLock(key);
      await rw.withRead(async () => {
        const started = performance.now();
        await expect(rw.write({ timeoutMs: 10_000 })).rejects.toBeInstanceOf(LockUpgradeError);
        await expect(rw.tryWrite()).rejects.toMatchObject({ code: 'LOCK_UPGRADE', key });
        await expect(rw.withWrite(() => undefined)).rejects.toBeInstanceOf(LockUpgradeError);
        expect(performance.now() - started).toBeLessThan(1000);
        // Another key, or another locker's read lock, is not an upgrade.
        const other = await locker.readWriteLock(`${key}/other`).tryWrite();
        expect(other?.held).toBe(true);
        await other!.release();
      });
      // Outside the read scope the same write is an ordinary wait.
      const w = await rw.write({ timeoutMs: 5000 });
      await w.release();
    });

    rwIt('26d. tryRead/tryWrite: readers join readers, nobody joins a writer; tokens increase over every grant', async () => {
      const key = freshKey();
      const [a, b] = [await makeLocker(), await makeLocker()];
      const r1 = (await a.readWriteLock(key).tryRead())!;
      const r2 = (await b.readWriteLock(key).tryRead())!;
      expect(r2.token).toBeGreaterThan(r1.token);
      expect(await b.readWriteLock(key).tryWrite()).toBeNull();
      expect(new Set(await inspect(key))).toEqual(new Set([r1.owner, r2.owner]));
      await Promise.all([r1.release(), r2.release()]);
      const w = (await a.readWriteLock(key).tryWrite())!;
      expect(w.token).toBeGreaterThan(r2.token);
      expect(await b.readWriteLock(key).tryRead()).toBeNull();
      expect(await b.readWriteLock(key).tryWrite()).toBeNull();
      await w.release();
      expect(await inspect(key)).toEqual([]);
    });

    rwIt(
      '26e. an aborted or timed-out writer leaves nothing: the readers behind it go on at once',
      async () => {
        const key = freshKey();
        const [a, b, c] = [await makeLocker(), await makeLocker(), await makeLocker()];
        const r1 = await a.readWriteLock(key).read();
        const controller = new AbortController();
        const writer = b.readWriteLock(key).write({ signal: controller.signal });
        await sleep(150);
        expect(await c.readWriteLock(key).tryRead()).toBeNull();
        controller.abort(new Error('stop'));
        await expect(writer).rejects.toThrow('stop');
        const r2 = await c.readWriteLock(key).read({ timeoutMs: 2000 });
        await expect(b.readWriteLock(key).write({ timeoutMs: 200 })).rejects.toMatchObject({ code: 'LOCK_TIMEOUT' });
        const r3 = await c.readWriteLock(key).read({ timeoutMs: 2000 });
        expect(new Set(await inspect(key))).toEqual(new Set([r1.owner, r2.owner, r3.owner]));
        await Promise.all([r1.release(), r2.release(), r3.release()]);
        expect(await inspect(key)).toEqual([]);
      },
      30_000,
    );

    itWhen(
      () =>
        !capabilities.readWrite ? 'the backend has no read-write locks' : capabilities.crossProcess ? undefined : 'in-process backend',
      "26f. crash: a kill -9ed writer's lock returns after its lease, and a kill -9ed queued writer blocks readers no longer than its ttl",
      async () => {
        const key = freshKey();
        const b = await warmLocker((l) => l.readWriteLock(key).tryRead());
        const child = await spawnChild();
        await child.acquireShared(key, 'write');
        const killedAt = performance.now();
        await child.kill();
        const r = await b.readWriteLock(key).read({ timeoutMs: 3 * T + 5000 });
        const elapsed = performance.now() - killedAt;
        if (capabilities.lease === 'ttl') expect(elapsed).toBeGreaterThanOrEqual(T - renewMs - 50);
        expect(elapsed).toBeLessThanOrEqual(T + renewMs + 1000);
        // A writer that dies while queued behind r (and polls far more rarely than its ttl).
        const waiter = await spawnChild({}, undefined, options.slowPollChild?.(5 * T) ?? options.child);
        void waiter.acquireShared(key, 'write').catch(() => undefined);
        await sleep(300);
        await waiter.kill();
        const queuedAt = performance.now();
        const r2 = await b.readWriteLock(key).read({ timeoutMs: 3 * T + 5000 });
        expect(performance.now() - queuedAt).toBeLessThanOrEqual(T + renewMs + 1000);
        await Promise.all([r.release(), r2.release()]);
      },
      60_000,
    );

    rwIt('26g. extended to another ttl, a claim keeps what it claims: a write still excludes, a permit still counts', async () => {
      const key = freshKey();
      const [a, b] = [await makeLocker(), await makeLocker()];
      const step = capabilities.ttlGranularityMs;
      const longer = Math.min(roundTtl(2 * T), Math.floor(capabilities.maxTtlMs / step) * step);
      const extend = async (lock: Lock) => {
        // A lease that is a session of fixed length may refuse a new length (as in 20a); it stays held.
        const error = await lock.extend(longer).then(
          () => undefined,
          (e: { code?: string }) => e,
        );
        if (error) expect(error.code).toBe('INVALID_ARGUMENT');
        expect(lock.held).toBe(true);
      };
      const w = (await a.readWriteLock(key).tryWrite())!;
      await extend(w);
      expect(await b.readWriteLock(key).tryRead()).toBeNull();
      expect(await b.readWriteLock(key).tryWrite()).toBeNull();
      await w.release();
      const r = (await b.readWriteLock(key).tryRead())!;
      expect(r.token).toBeGreaterThan(w.token);
      await r.release();
      if (capabilities.semaphore) {
        const permits = freshKey();
        const first = (await a.semaphore(permits, { limit: 2 }).tryAcquire())!;
        await extend(first);
        const second = await b.semaphore(permits, { limit: 2 }).tryAcquire();
        expect(second?.held).toBe(true);
        expect(await b.semaphore(permits, { limit: 2 }).tryAcquire()).toBeNull();
        await Promise.all([first.release(), second!.release()]);
        expect(await inspect(permits)).toEqual([]);
      }
      expect(await inspect(key)).toEqual([]);
    });
  });
}

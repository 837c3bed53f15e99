/**
 * Behaviours 14–17 (the conformance README, "bad input and failure"): typed errors before any I/O,
 * a store that is down, close(), and no garbage after many cycles.
 */
import { createLocker, type LockBackend, type LockerOptions } from '@deadbolt/core';
import { sleep } from '@deadbolt/core/backend';
import type { SuiteContext } from './context.js';
import type { Expect } from './expect.js';
import { ChildHolder } from './children.js';
import { countingBackend, withoutFloorRead } from './counting.js';
import { untyped } from './helpers.js';

export function defineInputBehaviours(ctx: SuiteContext): void {
  const { describe, it, expect } = ctx.runner;
  const { options, harness, capabilities, T, lockers, freshKey, makeLocker, spawnChild, itWhen, roundTtl } = ctx;

  /** A locker (closed after the test) on the backend pointed at a closed port (behaviours 15, 15b). */
  const unreachable = async (lockerOptions: LockerOptions) => {
    if (capabilities.crossProcess) expect(options.createUnreachableBackend).toBeDefined();
    const backend = await options.createUnreachableBackend!();
    const locker = createLocker(backend, { ttlMs: T, ...lockerOptions });
    lockers.push(locker);
    return { backend, locker };
  };

  describe('bad input and failure', () => {
    it('14. bad input rejects with InvalidArgumentError before any I/O', async () => {
      const { backend: counting, calls } = countingBackend(await options.createBackend());
      const locker = createLocker(counting, { ttlMs: T });
      lockers.push(locker);
      const fraction = capabilities.ttlGranularityMs > 1 ? T + capabilities.ttlGranularityMs / 2 : 1.5;
      const badTtls: unknown[] = [0, -1, NaN, Infinity, '5', fraction, null];
      if (capabilities.minTtlMs > capabilities.ttlGranularityMs) badTtls.push(capabilities.minTtlMs - capabilities.ttlGranularityMs);
      const key = freshKey();
      for (const ttlMs of badTtls) {
        await expect(locker.lock(key, { ttlMs: ttlMs as number }), `ttlMs ${String(ttlMs)}`).rejects.toMatchObject({
          code: 'INVALID_ARGUMENT',
        });
        await expect(locker.tryLock(key, { ttlMs: ttlMs as number })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
        expect(() => createLocker(counting, { ttlMs: ttlMs as number })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
      }
      for (const timeoutMs of [-1, NaN, '10']) {
        await expect(locker.lock(key, { timeoutMs: timeoutMs as number })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      }
      for (const badKey of ['', 42, undefined, null, {}, 'x'.repeat(1025), 'é'.repeat(513)]) {
        await expect(locker.lock(badKey as string), `key ${String(badKey).slice(0, 10)}`).rejects.toMatchObject({
          code: 'INVALID_ARGUMENT',
        });
        await expect(locker.tryLock(badKey as string)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      }
      await expect(locker.lock(key, { signal: untyped<AbortSignal>('no') })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      await expect(locker.withLock(key, untyped<() => void>('no'))).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      expect(calls).toEqual([]);
      const lock = await locker.lock(key);
      await expect(lock.extend(0)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      expect(withoutFloorRead(calls)).toEqual(['acquire']);
      await lock.release();
    });

    itWhen(
      () => (options.createUnreachableBackend ? undefined : 'no store to be down'),
      '15. store down: lock() and tryLock() reject with BackendUnavailableError naming the backend, its address and the cause, never a Lock',
      async () => {
        // A wait tries an unreachable store again for the locker's grace (core's own tests cover
        // its length); a short one here keeps this about the backend's answer to a closed port.
        const { backend, locker } = await unreachable({ unavailableGraceMs: 500 });
        const started = performance.now();
        const failures = [
          await locker.tryLock(freshKey()).then(
            (lock) => expect.fail(`granted: ${String(lock)}`),
            (error: unknown) => error,
          ),
          await locker.lock(freshKey(), { timeoutMs: 30_000 }).then(
            (lock) => expect.fail(`granted: ${String(lock)}`),
            (error: unknown) => error,
          ),
        ];
        expect(performance.now() - started).toBeLessThan(25_000);
        for (const error of failures) expectPlaceAndCause(expect, backend, error);
      },
      60_000,
    );

    itWhen(
      () => (options.createUnreachableBackend ? undefined : 'no store to be down'),
      "15b. store down: a 30 s wait gives up within the locker's grace plus one operation timeout, naming the store, its address and the cause",
      async () => {
        // The default operation timeout and a grace shorter than the default 5 s, so that the
        // check costs a second, not five: a backend that adds a ride-out of its own to the
        // locker's, or whose every attempt waits for a timeout, still ends far past the bound.
        const [graceMs, operationTimeoutMs] = [1000, 4000];
        const { backend, locker } = await unreachable({ unavailableGraceMs: graceMs, operationTimeoutMs });
        const started = performance.now();
        const error = await locker.lock(freshKey(), { timeoutMs: 30_000 }).then(
          (lock) => expect.fail(`granted: ${String(lock)}`),
          (error: unknown) => error,
        );
        expect(performance.now() - started, String(error)).toBeLessThan(graceMs + operationTimeoutMs);
        expectPlaceAndCause(expect, backend, error);
      },
      60_000,
    );

    it('16. close: pending waits reject with LockerClosedError, held locks are released', async () => {
      const [a, b] = [await makeLocker(), await makeLocker()];
      const [k1, k2] = [freshKey('held'), freshKey('wanted')];
      await a.lock(k1);
      const other = await b.lock(k2);
      const pending = a.lock(k2).catch((e: unknown) => e);
      await sleep(100);
      await a.close();
      expect(await pending).toMatchObject({ code: 'LOCKER_CLOSED' });
      const free = await b.tryLock(k1);
      expect(free).not.toBeNull();
      await free!.release();
      await other.release();
      await expect(a.lock(k1)).rejects.toMatchObject({ code: 'LOCKER_CLOSED' });
      expect(await harness.inspect(k2)).toEqual([]);
    });

    itWhen(
      () => (options.child ? undefined : 'no child config'),
      '16b. close: the process exits on its own afterwards (no open handles), also after a runOnce whose window is still open',
      async () => {
        const child = await spawnChild();
        await child.lock(freshKey());
        // A window's lock is left to the store to expire (to a timer of the locker's on a session
        // store): what the backend made for it while held must still end when the locker closes.
        expect(await child.rpc.call('runOnce', freshKey('job'), roundTtl(Math.max(3000, T)))).toBe(true);
        await sleep(500);
        await child.rpc.call('closeAndDetach');
        const exit = await Promise.race([child.exited, sleep(15_000).then(() => 'still running' as const)]);
        expect(exit).toEqual({ code: 0, signal: null });
      },
      30_000,
    );

    itWhen(
      () => (options.child ? undefined : 'no child config'),
      '16c. a backend made and never used, one refused by createLocker, and the fence made and never used keep no process alive',
      async () => {
        const child = await ChildHolder.bare();
        const refusal = await child.rpc.call('unusedAndDetach', options.child, options.fence);
        expect(refusal, 'createLocker(backend, { ttlMs: 0 })').toBe('InvalidArgumentError');
        const exit = await Promise.race([child.exited, sleep(15_000).then(() => 'still running' as const)]);
        if (exit === 'still running') await child.kill();
        expect(exit).toEqual({ code: 0, signal: null });
      },
      30_000,
    );

    it('17. no garbage: after many acquire/release cycles on rotating keys the store holds nothing for them', async () => {
      const cycles = options.garbageCycles ?? 10_000;
      const locker = await makeLocker();
      const keys = Array.from({ length: 50 }, (_, i) => freshKey(`garbage-${i}`));
      let next = 0;
      await Promise.all(
        Array.from({ length: 10 }, async () => {
          while (next < cycles) {
            const key = keys[next++ % keys.length]!;
            const lock = await locker.lock(key, { timeoutMs: 30_000 });
            await lock.release();
          }
        }),
      );
      const waiter = await makeLocker();
      const held = await locker.lock(keys[0]!);
      await waiter.lock(keys[0]!, { timeoutMs: 50 }).catch(() => undefined);
      await waiter.tryLock(keys[0]!);
      // A wait that timed out gives its backend 50 ms to leave the queue before it rejects; a slow
      // store finishes later, and close() is what waits for that (it leaves nothing behind).
      await waiter.close();
      await held.release();
      for (const key of keys) expect(await harness.inspect(key), key).toEqual([]);
    }, 300_000);
  });
}

/**
 * What an operator reads first in a store-down error: which store, where, and why, on one line, in
 * the words of the failure (not of a driver option the user never set). A migration passes on its
 * stores' errors: each names the store it came from.
 */
function expectPlaceAndCause(expect: Expect, backend: LockBackend, error: unknown): void {
  expect(backend.address, 'a backend made from a URL knows its servers').toBeDefined();
  const places = [backend, ...((backend as { stores?: readonly LockBackend[] }).stores ?? [])];
  const place = places.find((p) => p.name === (error as { backend?: string }).backend);
  expect(place, `the error names the backend: ${String(error)}`).toBeDefined();
  expect(error).toMatchObject({ code: 'BACKEND_UNAVAILABLE', address: place!.address });
  const { message, cause } = error as Error;
  expect(message).toContain(`${place!.name} at ${place!.address}`);
  expect(cause, 'the driver error as cause').toBeInstanceOf(Error);
  expect(message, 'the cause in the message').toContain((cause as Error).message);
  expect(message).not.toMatch(/\n|maxRetriesPerRequest|circuit breaker/);
}

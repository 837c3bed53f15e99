// Core's side of `inspect` (the stores' sides are conformance behaviour 37): what it does with a
// backend that has none, one that never answers, one that fails, and a migration's merge of two
// stores. On the memory backend; well under a second.
import { describe, expect, it } from 'vitest';
import { createLocker, memoryBackend, MemoryLockStore, migratingBackend, type LockBackend } from '../src/index.js';
import { wrapBackend } from '../src/testing.js';

const memory = () => memoryBackend({ store: new MemoryLockStore() });

describe('Locker.inspect', () => {
  it('refuses a backend without inspect, and a bad key, before any store call', async () => {
    let calls = 0;
    const inner = memory();
    const backend = wrapBackend(inner, { inspect: undefined, acquire: (req) => (calls++, inner.acquire(req)) });
    const locker = createLocker(backend);
    await expect(locker.inspect('k')).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: /cannot inspect/ });
    await expect(createLocker(memory()).inspect(42 as unknown as string)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(calls).toBe(0);
  });

  it('answers within the operation timeout when the store does not: BackendUnavailableError', async () => {
    const backend: LockBackend = wrapBackend(memory(), { inspect: () => new Promise(() => undefined) });
    const locker = createLocker(backend, { operationTimeoutMs: 100 });
    const started = performance.now();
    await expect(locker.inspect('k')).rejects.toMatchObject({ code: 'BACKEND_UNAVAILABLE', operation: 'inspect' });
    expect(performance.now() - started).toBeLessThan(1000);
  });

  it("types a store's own failure as BackendError with the cause", async () => {
    const cause = new Error('the store said no');
    const locker = createLocker(wrapBackend(memory(), { inspect: () => Promise.reject(cause) }));
    await expect(locker.inspect('k')).rejects.toMatchObject({ code: 'BACKEND_ERROR', cause });
  });

  it('a dual migration shows a holder once, without a token, with the shorter time left; waiters only when both stores list them', async () => {
    const [from, to] = [memory(), memory()];
    const locker = createLocker(migratingBackend({ from, to, phase: 'dual' }), { ttlMs: 5000 });
    const held = await locker.lock('k');
    const seen = await locker.inspect('k');
    expect(seen.holders).toEqual([{ owner: held.owner, token: null, ttlLeftMs: expect.any(Number) }]);
    expect(seen.holders[0]!.ttlLeftMs).toBeLessThanOrEqual(5000);
    expect(seen.waiters).toEqual([]);
    const waiting = locker.lock('k', { timeoutMs: 5000 });
    await new Promise((r) => setTimeout(r, 20));
    expect((await locker.inspect('k')).waiters).toHaveLength(1);
    const noQueue = createLocker(
      migratingBackend({ from: wrapBackend(from, { inspect: async () => ({ holders: [], waiters: null }) }), to, phase: 'dual' }),
    );
    expect((await noQueue.inspect('k')).waiters).toBeNull();
    await held.release();
    await (await waiting).release();
  });
});

describe('Locker.forceRelease', () => {
  it('refuses bad input, a backend without it and a closed locker before any store call', async () => {
    let calls = 0;
    const inner = memory();
    const counted = (extra: Partial<LockBackend> = {}) =>
      wrapBackend(inner, { inspect: (k, s) => (calls++, inner.inspect(k, s)), ...extra });
    const locker = createLocker(counted());
    for (const [key, owner] of [
      ['', 'o'],
      ['k', ''],
      ['k', 42],
      ['k', 'x\uD800'],
    ] as [string, string][])
      await expect(locker.forceRelease(key, owner)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(locker.forceRelease('k', 'o', { shared: 'yes' as unknown as boolean })).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
    });
    const without = createLocker(counted({ forceRelease: undefined }));
    await expect(without.forceRelease('k', 'o')).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
      message: /cannot free another client's lock/,
    });
    await locker.close();
    await expect(locker.forceRelease('k', 'o')).rejects.toMatchObject({ code: 'LOCKER_CLOSED' });
    expect(calls).toBe(0);
  });

  it("frees a holder, not a waiter: a waiting owner keeps its place; the holder's signal aborts", async () => {
    const store = new MemoryLockStore();
    const [a, b, operator] = [0, 1, 2].map(() => createLocker(memoryBackend({ store }), { ttlMs: 600 })) as [
      ReturnType<typeof createLocker>,
      ReturnType<typeof createLocker>,
      ReturnType<typeof createLocker>,
    ];
    const held = await a.lock('k');
    const waiting = b.lock('k');
    // Queued once its locker has read the store's token floor (a turn or two).
    let seen = await operator.inspect('k');
    while (seen.waiters!.length === 0) seen = await new Promise<void>((resolve) => setImmediate(resolve)).then(() => operator.inspect('k'));
    const waiter = seen.waiters![0]!.owner!;
    expect(await operator.forceRelease('k', waiter)).toBe(false);
    expect((await operator.inspect('k')).waiters!.map((w) => w.owner)).toEqual([waiter]);
    expect(await operator.forceRelease('k', held.owner)).toBe(true);
    const next = await waiting;
    expect(next.owner).toBe(waiter);
    // It learns at its next renewal (a third of its ttl).
    await new Promise((resolve) => held.signal.addEventListener('abort', resolve, { once: true }));
    expect(held.signal.reason).toMatchObject({ code: 'LOCK_LOST' });
    await Promise.all([next.release(), a.close(), b.close(), operator.close()]);
  });
});

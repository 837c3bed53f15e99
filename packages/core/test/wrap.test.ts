import { describe, expect, it } from 'vitest';
import { createLocker, memoryBackend, MemoryLockStore } from '../src/index.js';
import { observeBackend, wrapBackend } from '../src/testing.js';

describe('wrapBackend', () => {
  it('forwards every member it does not replace, the optional ones included', async () => {
    const inner = memoryBackend({ store: new MemoryLockStore() });
    const wrapped = wrapBackend(inner, { name: 'wrapped' });
    expect(wrapped.name).toBe('wrapped');
    expect(wrapped.capabilities).toBe(inner.capabilities);
    for (const member of ['acquire', 'acquireNow', 'releaseNow', 'renew', 'release', 'raiseTokenFloor', 'close'] as const) {
      expect(typeof wrapped[member], member).toBe('function');
    }
    // Bound to the inner backend: a semaphore through the wrapper works.
    const locker = createLocker(wrapped);
    const permit = await locker.semaphore('s', { limit: 1 }).acquire();
    expect(await locker.semaphore('s', { limit: 1 }).tryAcquire()).toBeNull();
    await permit.release();
    await locker.close();
  });

  it('an override of acquire or release leaves out the on-the-spot form; undefined leaves a member out', async () => {
    const inner = memoryBackend({ store: new MemoryLockStore() });
    const acquired: string[] = [];
    const wrapped = wrapBackend(inner, { acquire: (req) => (acquired.push(req.key), inner.acquire(req)), raiseTokenFloor: undefined });
    expect(wrapped.acquireNow).toBeUndefined();
    expect(typeof wrapped.releaseNow).toBe('function');
    expect(wrapped.raiseTokenFloor).toBeUndefined();
    const locker = createLocker(wrapped);
    await (await locker.lock('k')).release();
    expect(acquired).toEqual(['k']);
    await locker.close();
  });
});

describe('observeBackend', () => {
  it('reports every store call by name, the on-the-spot ones included', async () => {
    const calls: string[] = [];
    const locker = createLocker(observeBackend(memoryBackend({ store: new MemoryLockStore() }), (method) => calls.push(method)));
    // The first acquisition reads the store's token floor first, so it goes through `acquire`.
    await (await locker.lock('k')).release();
    await (await locker.lock('k')).release();
    await (await locker.semaphore('s', { limit: 2 }).acquire()).release();
    await locker.close();
    expect(calls).toContain('tokenFloor');
    expect(calls).toContain('acquireNow');
    expect(calls.filter((c) => c === 'acquire').length).toBe(2);
    expect(calls.filter((c) => c.startsWith('release')).length).toBe(3);
  });
});

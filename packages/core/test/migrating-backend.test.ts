import { describe, expect, it } from 'vitest';
import {
  createLocker,
  memoryBackend,
  MemoryLockStore,
  migratingBackend,
  type LockBackend,
  type Locker,
  type MigrationPhase,
} from '../src/index.js';
import { sleep } from '../src/backend-api.js';
import type { MemoryLease } from '../src/stores/memory-backend.js';

/** Two memory stores standing in for the old and the new store, and a locker per phase over them. */
function stores() {
  const [a, b] = [new MemoryLockStore(), new MemoryLockStore()];
  const lockers: Locker[] = [];
  const locker = (phase: MigrationPhase, ttlMs = 300) => {
    const l = createLocker(migratingBackend({ from: memoryBackend({ store: a }), to: memoryBackend({ store: b }), phase }), { ttlMs });
    lockers.push(l);
    return l;
  };
  const close = () => Promise.all(lockers.map((l) => l.close()));
  return { a, b, locker, close };
}

/** Takes `key` through a plain backend on `store` `n` times, moving that store's counter on. */
async function advance(store: MemoryLockStore, key: string, n: number): Promise<void> {
  const locker = createLocker(memoryBackend({ store }), { ttlMs: 1000 });
  for (let i = 0; i < n; i++) await (await locker.lock(key)).release();
  await locker.close();
}

describe('migratingBackend: bad input', () => {
  const from = memoryBackend({ store: new MemoryLockStore() });
  const to = memoryBackend({ store: new MemoryLockStore() });

  it('rejects a bad phase, from === to, non-backends and backends that cannot raise their token floor', () => {
    for (const phase of ['both', '', undefined, 'FROM']) {
      expect(() => migratingBackend({ from, to, phase: phase as MigrationPhase })).toThrow(
        expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
      );
    }
    expect(() => migratingBackend({ from, to: from, phase: 'dual' })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    for (const bad of [null, {}, 'redis://x', { acquire: () => null }]) {
      expect(() => migratingBackend({ from: bad as unknown as LockBackend, to, phase: 'dual' })).toThrow(
        expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
      );
      expect(() => migratingBackend({ from, to: bad as unknown as LockBackend, phase: 'from' })).toThrow(
        expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
      );
    }
    const { raiseTokenFloor: _, ...withoutFloor } = {
      ...to,
      acquire: to.acquire.bind(to),
      renew: to.renew.bind(to),
      release: to.release.bind(to),
      close: to.close.bind(to),
      raiseTokenFloor: undefined,
      name: 'x',
      capabilities: to.capabilities,
    };
    expect(() => migratingBackend({ from, to: withoutFloor as LockBackend, phase: 'to' })).toThrow(
      /to \(x\) has no raiseTokenFloor, tokenFloor, tokenCeiling, so tokens could go backwards/,
    );
    expect(() => migratingBackend(undefined as never)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
  });

  it('declares what both stores offer, in every phase', () => {
    const fifo = memoryBackend({ store: new MemoryLockStore() });
    const fake = (caps: Partial<LockBackend['capabilities']>): LockBackend => ({
      ...fifo,
      acquire: fifo.acquire.bind(fifo),
      renew: fifo.renew.bind(fifo),
      release: fifo.release.bind(fifo),
      close: fifo.close.bind(fifo),
      raiseTokenFloor: fifo.raiseTokenFloor.bind(fifo),
      tokenFloor: fifo.tokenFloor.bind(fifo),
      tokenCeiling: fifo.tokenCeiling.bind(fifo),
      name: 'fake',
      capabilities: { ...fifo.capabilities, ...caps },
    });
    for (const phase of ['from', 'dual', 'to'] as const) {
      const caps = migratingBackend({
        from: fake({ fairness: 'none', minTtlMs: 1000, ttlGranularityMs: 1000, lease: 'ttl', wake: 'poll', crossProcess: true }),
        to: fake({
          fairness: 'fifo',
          minTtlMs: 1500,
          ttlGranularityMs: 1,
          maxTtlMs: 40_000,
          lease: 'session',
          wake: 'push',
          crossProcess: true,
        }),
        phase,
      }).capabilities;
      // Shared claims when both stores serve them (the fakes are memory stores: they do).
      expect(caps).toEqual({
        fairness: 'none',
        lease: 'session',
        wake: 'poll',
        minTtlMs: 2000,
        ttlGranularityMs: 1000,
        maxTtlMs: 40_000,
        crossProcess: true,
        semaphore: true,
        readWrite: true,
      });
    }
    const both = migratingBackend({ from: memoryBackend({ store: new MemoryLockStore() }), to: fifo, phase: 'dual' }).capabilities;
    expect([both.semaphore, both.readWrite]).toEqual([true, true]);
    expect(() => migratingBackend({ from: fake({ minTtlMs: 50_000 }), to: fake({ maxTtlMs: 40_000 }), phase: 'dual' })).toThrow(
      /no common ttl/,
    );
  });
});

describe('migratingBackend: a rolling migration', () => {
  it('excludes and keeps tokens strictly increasing across adjacent phases, forwards and back, whichever store counts ahead', async () => {
    for (const ahead of ['from', 'to'] as const) {
      const { a, b, locker, close } = stores();
      const key = `rollout-${ahead}`;
      // Each store has its own history of this key before the migration starts.
      await advance(a, key, ahead === 'from' ? 50 : 3);
      await advance(b, key, ahead === 'to' ? 50 : 3);
      const steps: MigrationPhase[][] = [
        ['from', 'dual'],
        ['dual', 'to'],
        ['dual', 'to'],
        ['from', 'dual'],
      ];
      let last = -1n;
      for (const pair of steps) {
        const [x, y] = [locker(pair[0]!), locker(pair[1]!)];
        for (let i = 0; i < 10; i++) {
          const [first, second] = i % 3 === 0 ? [y, x] : [x, y];
          const lock = await first.lock(key);
          expect(lock.token).toBeGreaterThan(last);
          last = lock.token;
          expect(await second.tryLock(key), `${pair.join('+')}: two holders`).toBeNull();
          await lock.release();
        }
      }
      await close();
    }
  });

  it('tokens stay above a dual holder killed while holding (its leases expire, nothing released)', async () => {
    const { a, b, locker, close } = stores();
    const key = 'killed';
    await advance(b, key, 40);
    const dual = createLocker(migratingBackend({ from: memoryBackend({ store: a }), to: memoryBackend({ store: b }), phase: 'dual' }), {
      ttlMs: 200,
      autoRenew: false,
    });
    const crashed = await dual.lock(key);
    expect(crashed.token).toBeGreaterThan(40n);
    // No release: the next holder in the old store gets the key once the lease runs out.
    const next = await locker('from').lock(key, { timeoutMs: 2000 });
    expect(next.token).toBeGreaterThan(crashed.token);
    await next.release();
    await close();
    await dual.close().catch(() => undefined);
  });
});

/** A backend over `store` whose acquire can be made to hang (a store that stops answering), counting calls. */
function recording(store: MemoryLockStore, log: string[], name: string) {
  const inner = memoryBackend({ store });
  const state = { silent: false };
  const backend: LockBackend<MemoryLease> = {
    name,
    capabilities: inner.capabilities,
    acquire: (req) => (log.push(`${name}.acquire`), state.silent ? new Promise<never>(() => undefined) : inner.acquire(req)),
    renew: (lease: MemoryLease, ttl: number) => (log.push(`${name}.renew`), inner.renew(lease, ttl)),
    release: (lease) => (log.push(`${name}.release`), inner.release(lease)),
    raiseTokenFloor: (lease, floor) => (log.push(`${name}.raise`), inner.raiseTokenFloor(lease, floor)),
    tokenFloor: (raise) => inner.tokenFloor(raise),
    tokenCeiling: () => inner.tokenCeiling(),
    close: () => inner.close(),
  };
  return { backend, state };
}

describe('migratingBackend: dual', () => {
  it('takes from, then to; releases to, then from; raises only the store that counted lower, and only once', async () => {
    const [a, b] = [new MemoryLockStore(), new MemoryLockStore()];
    await advance(b, 'order', 5);
    const log: string[] = [];
    const locker = createLocker(
      migratingBackend({ from: recording(a, log, 'from').backend, to: recording(b, log, 'to').backend, phase: 'dual' }),
      { ttlMs: 1000 },
    );
    const lock = await locker.lock('order');
    expect(lock.token).toBe(6n);
    await lock.release();
    expect(log).toEqual(['from.acquire', 'to.acquire', 'from.raise', 'to.release', 'from.release']);
    // `from` was lifted with headroom, and `to` grants the token `from` asks for: no more raises.
    log.length = 0;
    const again = await locker.lock('order');
    expect(again.token).toBe(6n + 2n ** 40n + 1n);
    await again.release();
    expect(log).toEqual(['from.acquire', 'to.acquire', 'to.release', 'from.release']);
    await locker.close();
  });

  it('a silent second store: lock({ timeoutMs }) settles on time and the first store keeps nothing', async () => {
    const [a, b] = [new MemoryLockStore(), new MemoryLockStore()];
    const log: string[] = [];
    const to = recording(b, log, 'to');
    to.state.silent = true;
    const locker = createLocker(migratingBackend({ from: memoryBackend({ store: a }), to: to.backend, phase: 'dual' }), {
      ttlMs: 1000,
      operationTimeoutMs: 300,
    });
    const started = performance.now();
    await expect(locker.lock('silent', { timeoutMs: 200 })).rejects.toMatchObject({ code: 'LOCK_TIMEOUT' });
    await expect(locker.tryLock('silent')).rejects.toMatchObject({ code: 'BACKEND_UNAVAILABLE' });
    expect(performance.now() - started).toBeLessThan(1000);
    await sleep(20);
    expect(a.inspect('silent')).toBeUndefined();
    await locker.close();
  });

  it('a wait for the second store keeps the first lease alive, and queues again if it is lost meanwhile', async () => {
    const [a, b] = [new MemoryLockStore(), new MemoryLockStore()];
    const toPhase = createLocker(migratingBackend({ from: memoryBackend({ store: a }), to: memoryBackend({ store: b }), phase: 'to' }), {
      ttlMs: 200,
    });
    const dual = createLocker(migratingBackend({ from: memoryBackend({ store: a }), to: memoryBackend({ store: b }), phase: 'dual' }), {
      ttlMs: 200,
    });
    const held = await toPhase.lock('wait');
    const waiting = dual.lock('wait');
    await sleep(500); // more than two ttls: the first lease lives only if it is renewed
    expect(a.inspect('wait')?.holder).toBeDefined();
    a.evictAll(); // the old store loses it: the waiter must start over, not hold half a lock
    await sleep(100);
    await held.release();
    const lock = await waiting;
    expect(lock.token).toBeGreaterThan(held.token);
    expect(a.inspect('wait')?.holder).toBe(lock.owner);
    expect(b.inspect('wait')?.holder).toBe(lock.owner);
    await lock.release();
    await Promise.all([toPhase.close(), dual.close()]);
  });

  it('a loss in either store aborts lock.signal and gives the other part back', async () => {
    for (const side of ['from', 'to'] as const) {
      const [a, b] = [new MemoryLockStore(), new MemoryLockStore()];
      const locker = createLocker(migratingBackend({ from: memoryBackend({ store: a }), to: memoryBackend({ store: b }), phase: 'dual' }), {
        ttlMs: 300,
      });
      const lock = await locker.lock('loss');
      (side === 'from' ? a : b).evictAll();
      await new Promise<void>((resolve) => lock.signal.addEventListener('abort', () => resolve(), { once: true }));
      expect(lock.signal.reason).toMatchObject({ code: 'LOCK_LOST' });
      expect(a.inspect('loss')?.holder).toBeUndefined();
      expect(b.inspect('loss')?.holder).toBeUndefined();
      await locker.close();
    }
  });
});

import { describe, expect, it } from 'vitest';
import { BackendError, BackendUnavailableError, createLocker, memoryBackend, MemoryLockStore, type LockBackend } from '../src/index.js';
import type { MemoryLease } from '../src/stores/memory-backend.js';
import { BlockedWatch, cancelOnAbort } from '../src/sql/session-locks.js';
import { pollForLease, ReleaseNotifier, sleep, UnavailableGrace } from '../src/kit/wait.js';

/** The memory backend with a switch that makes renewals fail as an unreachable store would. */
function flakyBackend() {
  const inner = memoryBackend({ store: new MemoryLockStore() });
  const state = { failRenew: false, renewCalls: 0 };
  const backend: LockBackend<MemoryLease> = {
    name: 'flaky',
    capabilities: inner.capabilities,
    acquire: (req) => inner.acquire(req),
    renew: async (lease: MemoryLease, ttl: number) => {
      state.renewCalls++;
      if (state.failRenew) throw new Error('connection refused');
      return inner.renew(lease, ttl);
    },
    release: (lease) => inner.release(lease),
    close: () => inner.close(),
  };
  return { backend, state };
}

describe('Locker renewal', () => {
  it('aborts lock.signal when renewals keep failing until the lease could have expired, with the cause', async () => {
    const { backend, state } = flakyBackend();
    const locker = createLocker(backend, { ttlMs: 300 });
    const lock = await locker.lock('k');
    state.failRenew = true;
    const started = performance.now();
    await new Promise<void>((resolve) => lock.signal.addEventListener('abort', () => resolve(), { once: true }));
    const elapsed = performance.now() - started;
    expect(elapsed).toBeLessThan(300 + 100);
    expect(lock.signal.reason).toMatchObject({ code: 'LOCK_LOST' });
    expect((lock.signal.reason as Error).cause).toMatchObject({ code: 'BACKEND_ERROR', cause: { message: 'connection refused' } });
    expect(state.renewCalls).toBeGreaterThan(1); // it kept retrying, not giving up on the first error
    await expect(lock.extend()).rejects.toMatchObject({ code: 'LOCK_LOST' });
    await locker.close();
  });

  it('a renewal queued behind an extend() sends the extended ttl, never the old one', async () => {
    const inner = memoryBackend({ store: new MemoryLockStore() });
    const sentTtls: number[] = [];
    let hold: Promise<void> | undefined;
    const backend: LockBackend<MemoryLease> = {
      ...inner,
      name: 'slow',
      capabilities: inner.capabilities,
      acquire: (req) => inner.acquire(req),
      release: (lease) => inner.release(lease),
      close: () => inner.close(),
      renew: async (lease: MemoryLease, ttl: number) => {
        sentTtls.push(ttl);
        await hold;
        return inner.renew(lease, ttl);
      },
    };
    const locker = createLocker(backend, { ttlMs: 300 });
    const lock = await locker.lock('k');
    let open!: () => void;
    hold = new Promise((r) => (open = r));
    const extended = lock.extend(3000); // held back in the store call...
    await new Promise((r) => setTimeout(r, 150)); // ...while the 100 ms renewal comes due behind it
    hold = undefined;
    open();
    await extended;
    await new Promise((r) => setTimeout(r, 50));
    expect(sentTtls.slice(0, 2)).toEqual([3000, 3000]);
    expect(lock.held).toBe(true);
    await locker.close();
  });

  it('renews a lease granted late (already a third through its ttl) at once, not a third of a ttl later', async () => {
    const inner = memoryBackend({ store: new MemoryLockStore() });
    const renewedAt: number[] = [];
    const backend: LockBackend<MemoryLease> = {
      name: 'late',
      capabilities: inner.capabilities,
      // As a slow store (or a migration's second store) does: the lease started 200 ms before the grant arrived.
      acquire: async (req) => {
        const lease = await inner.acquire(req);
        return lease && { ...lease, acquiredAt: lease.acquiredAt - 200 };
      },
      renew: (lease: MemoryLease, ttl: number) => (renewedAt.push(performance.now()), inner.renew(lease, ttl)),
      release: (lease) => inner.release(lease),
      close: () => inner.close(),
    };
    const locker = createLocker(backend, { ttlMs: 300 });
    const granted = performance.now();
    const lock = await locker.lock('late');
    await new Promise((r) => setTimeout(r, 150));
    expect(renewedAt.length).toBeGreaterThan(0);
    expect(renewedAt[0]! - granted).toBeLessThan(50);
    expect(lock.held).toBe(true);
    await locker.close();
  });

  it('keeps the lock through a transient renewal failure', async () => {
    const { backend, state } = flakyBackend();
    const locker = createLocker(backend, { ttlMs: 600 });
    const lock = await locker.lock('k');
    await new Promise((r) => setTimeout(r, 150));
    state.failRenew = true;
    await new Promise((r) => setTimeout(r, 150));
    state.failRenew = false;
    await new Promise((r) => setTimeout(r, 900));
    expect(lock.held).toBe(true);
    await locker.close();
  });

  it('extend() after release rejects with NotOwnerError; release is idempotent', async () => {
    const locker = createLocker(memoryBackend({ store: new MemoryLockStore() }), { ttlMs: 1000 });
    const lock = await locker.lock('k');
    await lock.release();
    await lock.release();
    await expect(lock.extend()).rejects.toMatchObject({ code: 'NOT_OWNER' });
    await locker.close();
  });

  it('a lease lost before anyone read lock.signal gives a signal already aborted with the LockLostError; extend rejects with that same error', async () => {
    const store = new MemoryLockStore();
    const locker = createLocker(memoryBackend({ store }), { ttlMs: 300 });
    const lock = await locker.lock('k');
    store.evictAll();
    // The next renewal (at ttl / 3) finds the lease gone; nothing has read the signal yet.
    await new Promise((resolve) => setTimeout(resolve, 250));
    const signal = lock.signal;
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toMatchObject({ code: 'LOCK_LOST' });
    expect(lock.held).toBe(false);
    await expect(lock.extend()).rejects.toBe(signal.reason);
    await lock.release();
    await locker.close();
  });

  it('close() ends a wait that has no deadline and no caller signal, and releases what it holds', async () => {
    const store = new MemoryLockStore();
    const [a, b] = [createLocker(memoryBackend({ store })), createLocker(memoryBackend({ store }))];
    const held = await a.lock('k');
    const waiting = b.lock('k');
    await b.close();
    await expect(waiting).rejects.toMatchObject({ code: 'LOCKER_CLOSED' });
    expect(store.inspect('k')).toEqual({ holder: held.owner, waiters: [] });
    await a.close();
    expect(store.size).toBe(0);
  });

  it('the lock table keeps at most 1 024 freed entries, and one kept entry taken again works as a new one', async () => {
    const store = new MemoryLockStore();
    const locker = createLocker(memoryBackend({ store }), { ttlMs: 1000 });
    // Taken again while kept, then held while 2 000 other keys pass through: it is not dropped
    // while held, and waiters on it are served in order.
    const first = await locker.lock('again');
    await first.release();
    const held = await locker.lock('again');
    expect(held.token).toBeGreaterThan(first.token);
    for (let i = 0; i < 2000; i++) await (await locker.lock(`k${i}`)).release();
    expect(store.retained).toBe(1024 + 1);
    expect(store.size).toBe(1);
    expect(store.inspect('k1999')).toBeUndefined();
    const waiting = locker.lock('again');
    expect(store.inspect('again')).toEqual({ holder: held.owner, waiters: [expect.any(String)] });
    await held.release();
    const next = await waiting;
    expect(next.token).toBeGreaterThan(held.token);
    await next.release();
    expect(store.size).toBe(0);
    expect(store.retained).toBeLessThanOrEqual(1024);
    await locker.close();
  });

  it('withLock: the body error wins and the lock is released', async () => {
    const store = new MemoryLockStore();
    const locker = createLocker(memoryBackend({ store }), { ttlMs: 1000 });
    await expect(locker.withLock('k', () => Promise.reject(new Error('body')))).rejects.toThrow('body');
    expect(store.size).toBe(0);
    expect(await locker.withLock('k', () => 42)).toBe(42);
    await locker.close();
  });
});

/**
 * The memory backend whose next `failures` acquisitions fail with `error` (an unreachable store by
 * default) before reaching the store; logs each acquisition's owner.
 */
function unreachableFor(
  failures: number,
  error: () => Error = () => new BackendUnavailableError('down', 'connect', { cause: new Error('connect ETIMEDOUT') }),
) {
  const inner = memoryBackend({ store: new MemoryLockStore() });
  const owners: string[] = [];
  let left = failures;
  const backend: LockBackend<MemoryLease> = {
    name: 'down',
    capabilities: inner.capabilities,
    acquire: async (req) => {
      owners.push(req.owner);
      if (left-- > 0) throw error();
      return inner.acquire(req);
    },
    renew: (lease: MemoryLease, ttl: number) => inner.renew(lease, ttl),
    release: (lease) => inner.release(lease),
    close: () => inner.close(),
  };
  return { backend, owners };
}

describe('Locker: a wait rides out an unreachable store (unavailableGraceMs)', () => {
  it('tries again with a new owner id each time, and is granted once the store answers', async () => {
    const { backend, owners } = unreachableFor(3);
    const locker = createLocker(backend, { ttlMs: 1000 });
    const lock = await locker.lock('k', { timeoutMs: 5000 });
    expect(lock.held).toBe(true);
    expect(owners).toHaveLength(4);
    expect(new Set(owners).size).toBe(4);
    expect(lock.owner).toBe(owners[3]);
    await locker.close();
  });

  it('rejects with the last error once failures have gone on for the grace; 0 fails at the first', async () => {
    const { backend, owners } = unreachableFor(1000);
    const started = performance.now();
    await expect(createLocker(backend, { unavailableGraceMs: 300 }).lock('k', { timeoutMs: 10_000 })).rejects.toBeInstanceOf(
      BackendUnavailableError,
    );
    expect(performance.now() - started).toBeGreaterThanOrEqual(300);
    expect(performance.now() - started).toBeLessThan(3000);
    expect(owners.length).toBeGreaterThan(1);
    owners.length = 0;
    await expect(createLocker(backend, { unavailableGraceMs: 0 }).lock('k', { timeoutMs: 10_000 })).rejects.toBeInstanceOf(
      BackendUnavailableError,
    );
    expect(owners).toHaveLength(1);
  });

  it('the grace starts again when the store was reached since the failures began (slow, not down)', async () => {
    let reachedAt = -Infinity;
    const down = new BackendUnavailableError('store', 'acquire');
    const grace = new UnavailableGrace(30, () => reachedAt);
    grace.failed(down, performance.now());
    await sleep(40);
    expect(() => grace.failed(down, performance.now())).toThrow(down); // 40 ms of failures, nothing reached meanwhile
    const slow = new UnavailableGrace(30, () => reachedAt);
    slow.failed(down, performance.now());
    await sleep(20);
    reachedAt = performance.now(); // someone's connect got through
    await sleep(20);
    slow.failed(down, performance.now()); // 40 ms since the first failure, but the store answered 20 ms ago
    await sleep(40);
    expect(() => slow.failed(down, performance.now())).toThrow(down); // and nobody since
  });

  it('an attempt slow to fail does not use the grace up, after quick failures or before them', async () => {
    // With a grace of 300 ms, attempts that fail quickly (q) or after 400 ms (s), then one that
    // is granted. q q s: the slow one began some 30 ms after the first failure, so the store was
    // never tried after the grace (a request a driver lost, ended only by its timeout). s q: the
    // quick one began just after the slow one failed (reconnecting after a request timeout).
    for (const pattern of ['qqs', 'sq']) {
      const inner = memoryBackend({ store: new MemoryLockStore() });
      let calls = 0;
      const down = () => new BackendUnavailableError('down', 'acquire', { cause: new Error('Socket was closed') });
      const backend: LockBackend<MemoryLease> = {
        name: 'down',
        capabilities: inner.capabilities,
        acquire: async (req) => {
          const kind = pattern[calls++];
          if (kind === 'q') throw down();
          if (kind === 's') return sleep(400).then(() => Promise.reject(down()));
          return inner.acquire(req);
        },
        renew: (lease: MemoryLease, ttl: number) => inner.renew(lease, ttl),
        release: (lease) => inner.release(lease),
        close: () => inner.close(),
      };
      const locker = createLocker(backend, { unavailableGraceMs: 300 });
      const lock = await locker.lock('k', { timeoutMs: 5000 });
      expect(calls, pattern).toBe(pattern.length + 1);
      await lock.release();
      await locker.close();
    }
  });

  it('never retries a one-shot attempt, another kind of error, or past the deadline', async () => {
    const down = unreachableFor(1000);
    const locker = createLocker(down.backend);
    await expect(locker.tryLock('k')).rejects.toBeInstanceOf(BackendUnavailableError);
    expect(down.owners).toHaveLength(1);
    const started = performance.now();
    await expect(locker.lock('k', { timeoutMs: 200 })).rejects.toMatchObject({ code: 'LOCK_TIMEOUT' });
    expect(performance.now() - started).toBeLessThan(450);
    const broken = unreachableFor(1, () => new BackendError('broken', 'acquire', { cause: new Error('syntax error') }));
    await expect(createLocker(broken.backend).lock('k', { timeoutMs: 5000 })).rejects.toBeInstanceOf(BackendError);
    expect(broken.owners).toHaveLength(1);
    expect(() => createLocker(memoryBackend(), { unavailableGraceMs: -1 })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
  });

  it('a grant whose answer came after its ttl ran out is renewed before it is reported; one the store let go is waited for again', async () => {
    const store = new MemoryLockStore();
    const inner = memoryBackend({ store });
    let renewals = 0;
    let lateGrants = 1;
    let letGo = false;
    const backend: LockBackend<MemoryLease> = {
      name: 'late',
      capabilities: inner.capabilities,
      // The store started the lease a whole ttl before its answer arrived.
      acquire: async (req) => {
        const lease = await inner.acquire(req);
        return lease && lateGrants-- > 0 ? { ...lease, acquiredAt: lease.acquiredAt - 1000 } : lease;
      },
      renew: async (lease: MemoryLease, ttl: number) => {
        renewals++;
        if (letGo) {
          letGo = false;
          await inner.release(lease);
          return false;
        }
        return inner.renew(lease, ttl);
      },
      release: (lease) => inner.release(lease),
      close: () => inner.close(),
    };
    const locker = createLocker(backend, { ttlMs: 1000 });
    const lock = await locker.lock('k', { timeoutMs: 5000 });
    expect(renewals).toBe(1);
    expect(lock.held).toBe(true);
    expect(lock.signal.aborted).toBe(false);
    await lock.release();
    [lateGrants, letGo, renewals] = [1, true, 0];
    const again = await locker.lock('k', { timeoutMs: 5000 });
    expect(renewals).toBe(1); // the first grant was gone; the second came in time
    expect(again.held).toBe(true);
    expect(again.token).toBeGreaterThan(lock.token + 1n);
    await locker.close();
  });
});

/** The memory backend, logging which of its entry points core calls; renewals wait for `gate`. */
function loggedBackend() {
  const inner = memoryBackend({ store: new MemoryLockStore() });
  const state: { calls: string[]; gate: Promise<void> | undefined; failNow: boolean } = { calls: [], gate: undefined, failNow: false };
  const backend: LockBackend<MemoryLease> = {
    name: 'logged',
    capabilities: inner.capabilities,
    acquireNow: (req) => {
      state.calls.push(`acquireNow ${req.owner}`);
      if (state.failNow) throw new Error('table broken');
      return inner.acquireNow(req);
    },
    acquire: (req) => (state.calls.push(`acquire ${req.owner}`), inner.acquire(req)),
    renew: async (lease: MemoryLease, ttl: number) => {
      state.calls.push('renew');
      await state.gate;
      return inner.renew(lease, ttl);
    },
    release: (lease) => (state.calls.push('release'), inner.release(lease)),
    releaseNow: (lease) => {
      state.calls.push('releaseNow');
      if (state.failNow) throw new Error('table broken');
      inner.releaseNow(lease);
    },
    close: () => inner.close(),
  };
  return { backend, state, store: inner.store };
}

describe('in-process answers (acquireNow, releaseNow)', () => {
  it('a free key is granted and given back on the spot; a busy single attempt is answered there; a wait goes on to acquire with the same owner', async () => {
    const { backend, state, store } = loggedBackend();
    const locker = createLocker(backend, { ttlMs: 10_000 });
    const first = await locker.lock('k', { timeoutMs: 1000 });
    expect(state.calls).toEqual([`acquireNow ${first.owner}`]);
    expect(await locker.tryLock('k')).toBeNull();
    expect(state.calls.slice(1)).toEqual([expect.stringMatching(/^acquireNow /)]);
    state.calls.length = 0;
    const waiting = locker.lock('k');
    await first.release();
    const second = await waiting;
    const [asked, queued, released] = state.calls;
    expect(asked).toBe(`acquireNow ${second.owner}`);
    expect(queued).toBe(`acquire ${second.owner}`);
    expect(released).toBe('releaseNow');
    expect(second.token).toBeGreaterThan(first.token);
    await second.release();
    expect(store.size).toBe(0);
    await locker.close();
  });

  it('a release waits behind a renewal under way, through release (one store call per lease at a time)', async () => {
    const { backend, state, store } = loggedBackend();
    const locker = createLocker(backend, { ttlMs: 10_000 });
    const lock = await locker.lock('k');
    let open!: () => void;
    state.gate = new Promise<void>((resolve) => (open = resolve));
    const extending = lock.extend();
    const releasing = lock.release();
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(state.calls.slice(1)).toEqual(['renew']);
    expect(store.inspect('k')?.holder).toBe(lock.owner);
    open();
    await extending.catch(() => undefined);
    await releasing;
    expect(state.calls.slice(1)).toEqual(['renew', 'release']);
    expect(store.size).toBe(0);
    await locker.close();
  });

  it('a store that throws there rejects with a typed error carrying the cause, and reports nothing held', async () => {
    const { backend, state, store } = loggedBackend();
    const locker = createLocker(backend, { ttlMs: 10_000 });
    state.failNow = true;
    await expect(locker.lock('k')).rejects.toMatchObject({ code: 'BACKEND_ERROR', cause: { message: 'table broken' } });
    expect(store.size).toBe(0);
    state.failNow = false;
    const lock = await locker.lock('k');
    state.failNow = true;
    await expect(lock.release()).rejects.toMatchObject({ code: 'BACKEND_ERROR', cause: { message: 'table broken' } });
    // As for a store that could not be reached: the handle is done with, and the lease runs out in the store.
    expect(lock.held).toBe(false);
    expect(store.inspect('k')?.holder).toBe(lock.owner);
    await locker.close();
  });
});

describe('pollForLease', () => {
  it('is woken by a release notification long before its backoff', async () => {
    const notifier = new ReleaseNotifier();
    let free = false;
    const started = performance.now();
    setTimeout(() => {
      free = true;
      notifier.notify('k');
    }, 50);
    const lease = await pollForLease(
      'k',
      new AbortController().signal,
      async () => (free ? { key: 'k', owner: 'o', token: 1n, acquiredAt: performance.now() } : null),
      async () => undefined,
      { notifier, minDelayMs: 5000, maxDelayMs: 5000 },
    );
    expect(lease.token).toBe(1n);
    expect(performance.now() - started).toBeLessThan(1000);
    expect(notifier.size).toBe(0);
  });

  it('ignores a notification addressed to another owner, and rejects with the abort reason', async () => {
    const notifier = new ReleaseNotifier();
    const controller = new AbortController();
    let attempts = 0;
    const waiting = pollForLease(
      'k',
      controller.signal,
      async () => (attempts++, null),
      async () => undefined,
      {
        notifier,
        owner: 'me',
        minDelayMs: 5000,
        maxDelayMs: 5000,
      },
    ).catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 20));
    notifier.notify('k', 'someone-else');
    await new Promise((r) => setTimeout(r, 20));
    expect(attempts).toBe(1);
    notifier.notify('k', 'me');
    await new Promise((r) => setTimeout(r, 20));
    expect(attempts).toBe(2);
    const reason = new Error('stop');
    controller.abort(reason);
    expect(await waiting).toBe(reason);
  });
  it('with `wakes`, counts every notification not addressed to it (to nobody, to another owner), and one addressed to it always wakes it', async () => {
    const notifier = new ReleaseNotifier();
    const controller = new AbortController();
    let attempts = 0;
    const counted: (string | undefined)[] = [];
    const waiting = pollForLease(
      'k',
      controller.signal,
      async () => (attempts++, null),
      async () => undefined,
      { notifier, owner: 'me', minDelayMs: 5000, maxDelayMs: 5000, wakes: (target) => counted.push(target) === 3 },
    ).catch((e: unknown) => e);
    const settle = () => new Promise((r) => setTimeout(r, 20));
    await settle();
    notifier.notify('k');
    notifier.notify('k', 'someone-else');
    await settle();
    expect([attempts, counted]).toEqual([1, [undefined, 'someone-else']]);
    notifier.notify('k', 'me');
    await settle();
    expect([attempts, counted.length]).toEqual([2, 2]);
    notifier.notify('k', 'someone-else');
    await settle();
    expect([attempts, counted.length]).toEqual([3, 3]);
    // After a notification channel was down, its releases lost: every waiter looks again, whatever it counted.
    notifier.notifyAll();
    await settle();
    expect([attempts, counted.length]).toEqual([4, 3]);
    controller.abort(new Error('stop'));
    await waiting;
  });
});

describe('cancelOnAbort', () => {
  it('cancels once the signal aborts, then again after each attempt settles, never two at once, until stopped', async () => {
    const controller = new AbortController();
    let calls = 0;
    let inFlight = 0;
    let overlapped = false;
    const stop = cancelOnAbort(
      controller.signal,
      async () => {
        calls++;
        overlapped ||= inFlight > 0;
        inFlight++;
        await new Promise((r) => setTimeout(r, 20));
        inFlight--;
      },
      10,
    );
    await new Promise((r) => setTimeout(r, 50));
    expect(calls).toBe(0); // nothing before the abort
    controller.abort();
    await new Promise((r) => setTimeout(r, 120));
    stop();
    const atStop = calls;
    expect(atStop).toBeGreaterThanOrEqual(3);
    expect(overlapped).toBe(false);
    await new Promise((r) => setTimeout(r, 80));
    expect(calls).toBeLessThanOrEqual(atStop + 1); // at most the attempt already running when stopped
  });
});

describe('BlockedWatch: waits blocked in the store, on connections that may have gone silent', () => {
  const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
  const never = new Promise<never>(() => undefined);

  it('fails a wait, typed, once the store has shown it granted or gone for the grace; checks stop once none is watched', async () => {
    let checks = 0;
    const watch = new BlockedWatch<string>('store', async (waits) => (checks++, waits.map(() => true)), 100, 20);
    const started = performance.now();
    const outcome = await watch.watch('a', never).catch((e: unknown) => e);
    expect(outcome).toBeInstanceOf(BackendUnavailableError);
    expect(performance.now() - started).toBeGreaterThanOrEqual(100);
    const atEnd = checks;
    await pause(80);
    expect(checks).toBe(atEnd);
  });

  it('settles as the blocked statement does while the store shows it waiting, a check fails, or the suspicion lifts', async () => {
    let checks = 0;
    // Yes, no, failing, yes, ...: never yes for the grace in a row.
    const watch = new BlockedWatch<string>(
      'store',
      async (waits) => {
        const n = checks++ % 3;
        if (n === 2) throw new Error('check failed');
        return waits.map(() => n === 0);
      },
      50,
      10,
    );
    const granted = pause(300).then(() => 'granted');
    expect(await watch.watch('a', granted)).toBe('granted');
    expect(checks).toBeGreaterThanOrEqual(6);
    const cut = new Error('connection cut');
    await expect(watch.watch('b', Promise.reject(cut))).rejects.toBe(cut);
  });

  it('checks every wait blocked at the moment in one call, and judges each by its own answers', async () => {
    const calls: string[][] = [];
    // 'silent' is shown stranded every time, 'queued' never.
    const watch = new BlockedWatch<string>('store', async (waits) => (calls.push([...waits]), waits.map((w) => w === 'silent')), 100, 20);
    const queued = pause(400).then(() => 'granted');
    const [silent, other] = await Promise.all([watch.watch('silent', never).catch((e: unknown) => e), watch.watch('queued', queued)]);
    expect(silent).toBeInstanceOf(BackendUnavailableError);
    expect(other).toBe('granted');
    expect(calls.length).toBeGreaterThanOrEqual(4);
    expect(calls[0]).toEqual(['silent', 'queued']); // both in one check, not one check each
    expect(calls.at(-1)).toEqual(['queued']); // the failed wait is no longer asked about
  });
});

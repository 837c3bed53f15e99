// The events a locker publishes on node:diagnostics_channel (src/diagnostics.ts), on the memory
// backend: what each carries, that an acquisition's span ends exactly once however it ends, and
// that nothing is published to nobody. About a second.
import { createHash } from 'node:crypto';
import { subscribe, tracingChannel, unsubscribe } from 'node:diagnostics_channel';
import { afterEach, describe, expect, it } from 'vitest';
import {
  BackendUnavailableError,
  createLocker,
  diagnostics,
  memoryBackend,
  MemoryLockStore,
  type AcquireEvent,
  type LeaseLostEvent,
  type LockBackend,
} from '../src/index.js';
import type { MemoryLease } from '../src/stores/memory-backend.js';
import { wrapBackend } from '../src/testing.js';

type Seen = { channel: string; event: Record<string, unknown> };
const undo: Array<() => void> = [];
afterEach(() => {
  for (const u of undo.splice(0)) u();
});

/** Every event of every deadbolt channel, in order, as `tracing:…:start`, `lease-lost`, …. */
function record(): Seen[] {
  const seen: Seen[] = [];
  for (const name of ['acquire', 'release', 'extend']) {
    const handlers = Object.fromEntries(
      (['start', 'end', 'asyncStart', 'asyncEnd', 'error'] as const).map((phase) => [
        phase,
        (event: unknown) => seen.push({ channel: `${name}:${phase}`, event: { ...(event as object) } }),
      ]),
    );
    const channel = tracingChannel(`deadbolt:${name}`);
    channel.subscribe(handlers as never);
    undo.push(() => channel.unsubscribe(handlers as never));
  }
  for (const name of ['renewal-failed', 'lease-lost', 'wait-abandoned', 'store-unavailable']) {
    const handler = (event: unknown) => seen.push({ channel: name, event: { ...(event as object) } });
    subscribe(`deadbolt:${name}`, handler);
    undo.push(() => unsubscribe(`deadbolt:${name}`, handler));
  }
  return seen;
}
const phases = (seen: Seen[], prefix: string) => seen.filter((s) => s.channel.startsWith(prefix)).map((s) => s.channel);

describe('diagnostics_channel events', () => {
  it('a lock and its release: one span each, with key, backend, family, ttl, deadline, token and times', async () => {
    const seen = record();
    const locker = createLocker(memoryBackend({ store: new MemoryLockStore() }), { ttlMs: 5000 });
    const lock = await locker.lock('orders/42', { timeoutMs: 1000 });
    await lock.release();
    expect(phases(seen, 'acquire')).toEqual(['acquire:start', 'acquire:end', 'acquire:asyncStart', 'acquire:asyncEnd']);
    const end = seen.find((s) => s.channel === 'acquire:asyncEnd')!.event as unknown as AcquireEvent;
    expect(end).toMatchObject({ key: 'orders/42', backend: 'memory', family: 'mutex', ttlMs: 5000, timeoutMs: 1000, token: lock.token });
    expect(end.waitedMs).toBeGreaterThanOrEqual(0);
    expect(end.attempts).toBe(1);
    expect(end.result).toBe(lock);
    expect(phases(seen, 'release')).toEqual(['release:start', 'release:end', 'release:asyncStart', 'release:asyncEnd']);
    expect(seen.find((s) => s.channel === 'release:start')!.event).toMatchObject({ key: 'orders/42', token: lock.token });
    // A second release is the first one's answer: no second span.
    await lock.release();
    expect(phases(seen, 'release')).toHaveLength(4);
    await locker.close();
  });

  it("every event names the store's address when the backend has one (and none when it has not)", async () => {
    const seen = record();
    const backend = wrapBackend(memoryBackend({ store: new MemoryLockStore() }), { address: 'db1:5432,db2:5432' });
    const locker = createLocker(backend, { ttlMs: 5000 });
    const lock = await locker.lock('k', { timeoutMs: 1000 });
    await lock.extend();
    await lock.release();
    const named = seen.filter((s) => s.channel.endsWith(':start'));
    expect(named.map((s) => s.channel)).toEqual(['acquire:start', 'extend:start', 'release:start']);
    for (const s of named) expect(s.event['address']).toBe('db1:5432,db2:5432');
    await locker.close();
    const plain = createLocker(memoryBackend({ store: new MemoryLockStore() }));
    await (await plain.lock('k')).release();
    expect(seen.filter((s) => s.channel === 'acquire:start').at(-1)!.event).not.toHaveProperty('address');
    await plain.close();
  });

  it('a one-shot call that finds the key taken ends with result null and no token; a timed-out wait with one error, one end and a wait-abandoned event', async () => {
    const store = new MemoryLockStore();
    const holder = createLocker(memoryBackend({ store }));
    const held = await holder.lock('k');
    const seen = record();
    const other = createLocker(memoryBackend({ store }));
    expect(await other.tryLock('k')).toBeNull();
    const busy = seen.find((s) => s.channel === 'acquire:asyncEnd')!.event;
    expect(busy).toMatchObject({ timeoutMs: 0, result: null, attempts: 1 });
    expect(busy['token']).toBeUndefined();
    seen.length = 0;
    await expect(other.lock('k', { timeoutMs: 50 })).rejects.toMatchObject({ code: 'LOCK_TIMEOUT' });
    expect(phases(seen, 'acquire')).toEqual(['acquire:start', 'acquire:end', 'acquire:error', 'acquire:asyncStart', 'acquire:asyncEnd']);
    expect(seen.find((s) => s.channel === 'acquire:asyncEnd')!.event['error']).toMatchObject({ code: 'LOCK_TIMEOUT' });
    const abandoned = seen.filter((s) => s.channel === 'wait-abandoned');
    expect(abandoned).toHaveLength(1);
    expect(abandoned[0]!.event).toMatchObject({ key: 'k', backend: 'memory', family: 'mutex', reason: { code: 'LOCK_TIMEOUT' } });
    expect(abandoned[0]!.event['waitedMs']).toBeGreaterThanOrEqual(45);
    // The caller's own abort is given as it gave it.
    seen.length = 0;
    const controller = new AbortController();
    const waiting = other.lock('k', { signal: controller.signal });
    controller.abort(new Error('shutting down'));
    await expect(waiting).rejects.toThrow('shutting down');
    expect(seen.filter((s) => s.channel === 'wait-abandoned')[0]!.event['reason']).toMatchObject({ message: 'shutting down' });
    await held.release();
    await Promise.all([holder.close(), other.close()]);
  });

  it('names the family: a permit with its limit, a read lock, a write lock; an extend is a span with the ttl asked', async () => {
    const seen = record();
    const locker = createLocker(memoryBackend({ store: new MemoryLockStore() }), { ttlMs: 5000 });
    const permit = await locker.semaphore('s', { limit: 3 }).acquire();
    const read = await locker.readWriteLock('rw').read();
    await read.release();
    const write = await locker.readWriteLock('rw').write();
    await write.extend(8000);
    const starts = seen.filter((s) => s.channel === 'acquire:start').map((s) => s.event);
    expect(starts.map((e) => [e['family'], e['limit']])).toEqual([
      ['semaphore', 3],
      ['read', undefined],
      ['write', undefined],
    ]);
    expect(phases(seen, 'extend')).toEqual(['extend:start', 'extend:end', 'extend:asyncStart', 'extend:asyncEnd']);
    expect(seen.find((s) => s.channel === 'extend:start')!.event).toMatchObject({ key: 'rw', ttlMs: 8000, token: write.token });
    await Promise.all([permit.release(), write.release()]);
    await locker.close();
  });

  it('a lease that runs out is lost: lease-lost with its LockLostError, the token and how long it was held', async () => {
    const seen = record();
    const locker = createLocker(memoryBackend({ store: new MemoryLockStore() }), { ttlMs: 100, autoRenew: false });
    const lock = await locker.lock('short');
    await new Promise<void>((resolve) => lock.signal.addEventListener('abort', () => resolve(), { once: true }));
    const lost = seen.filter((s) => s.channel === 'lease-lost');
    expect(lost).toHaveLength(1);
    expect(lost[0]!.event).toMatchObject({ key: 'short', backend: 'memory', token: lock.token, reason: lock.signal.reason });
    expect(lost[0]!.event['heldMs']).toBeGreaterThanOrEqual(90);
    await locker.close();
  });

  it('a renewal the store cannot answer: store-unavailable and renewal-failed with the time still counted on', async () => {
    const inner = memoryBackend({ store: new MemoryLockStore() });
    let down = false;
    const backend: LockBackend<MemoryLease> = {
      name: 'flaky',
      capabilities: inner.capabilities,
      acquire: (request) => inner.acquire(request),
      renew: async (lease, ttl) => {
        if (down) throw new BackendUnavailableError('flaky', 'renew', { cause: new Error('connection refused') });
        return inner.renew(lease, ttl);
      },
      release: (lease) => inner.release(lease),
      close: () => inner.close(),
    };
    const seen = record();
    const locker = createLocker(backend, { ttlMs: 300 });
    const lock = await locker.lock('r');
    down = true;
    await new Promise<void>((resolve) => lock.signal.addEventListener('abort', () => resolve(), { once: true }));
    const failed = seen.filter((s) => s.channel === 'renewal-failed');
    expect(failed.length).toBeGreaterThan(0);
    expect(failed[0]!.event).toMatchObject({ key: 'r', backend: 'flaky', token: lock.token, error: { code: 'BACKEND_UNAVAILABLE' } });
    expect(failed[0]!.event['leftMs']).toBeLessThanOrEqual(300);
    expect(seen.filter((s) => s.channel === 'store-unavailable')[0]!.event).toMatchObject({ backend: 'flaky', operation: 'renew' });
    expect(seen.filter((s) => s.channel === 'lease-lost')).toHaveLength(1);
    down = false;
    await locker.close();
  });

  it('attempts: one per request the store was sent, a waiting grant included; more when the wait rode out an unreachable store', async () => {
    const inner = memoryBackend({ store: new MemoryLockStore() });
    let refusals = 0;
    const backend: LockBackend<MemoryLease> = {
      name: 'flaky',
      capabilities: inner.capabilities,
      acquire: async (request) => {
        if (refusals > 0) {
          refusals--;
          throw new BackendUnavailableError('flaky', 'acquire', { cause: new Error('connection refused') });
        }
        return inner.acquire(request);
      },
      renew: (lease, ttl) => inner.renew(lease, ttl),
      release: (lease) => inner.release(lease),
      close: () => inner.close(),
    };
    const seen = record();
    const locker = createLocker(backend, { ttlMs: 5000 });
    const attempts = () => seen.filter((s) => s.channel === 'acquire:asyncEnd').map((s) => s.event['attempts']);
    const held = await locker.lock('a');
    const waiting = locker.lock('a', { timeoutMs: 5000 });
    setTimeout(() => void held.release(), 30);
    await (await waiting).release();
    refusals = 2;
    await (await locker.lock('a', { timeoutMs: 5000 })).release();
    expect(attempts()).toEqual([1, 1, 3]);
    await locker.close();
  });

  it('redactKeys gives each key as a prefix of its SHA-256, the same one every time', async () => {
    const seen = record();
    const locker = createLocker(memoryBackend({ store: new MemoryLockStore() }), { redactKeys: true });
    await (await locker.lock('user:alice@example.com')).release();
    await (await locker.lock('user:alice@example.com')).release();
    const keys = seen.filter((s) => s.channel === 'acquire:start' || s.channel === 'release:start').map((s) => s.event['key']);
    const hash = createHash('sha256').update('user:alice@example.com').digest('hex').slice(0, 16);
    expect(keys).toEqual(Array(4).fill(`sha256:${hash}`));
    // Only `result`, the lock itself, still has the key as given (lock.key).
    const fields = seen.map(({ event: { result: _lock, ...rest } }) => rest);
    expect(JSON.stringify(fields, (_k, v: unknown) => (typeof v === 'bigint' ? String(v) : v))).not.toContain('alice');
    await locker.close();
  });

  it('publishes nothing while nobody listens (each site asks hasSubscribers first), and a nested take publishes nothing', async () => {
    expect(diagnostics.acquire.hasSubscribers).toBe(false);
    expect(diagnostics.leaseLost.hasSubscribers).toBe(false);
    const locker = createLocker(memoryBackend({ store: new MemoryLockStore() }), { reentrant: true });
    // With nobody subscribed, the traced paths are never entered.
    const traced = [diagnostics.acquire, diagnostics.release, diagnostics.extend];
    const kept = traced.map((c) => c.tracePromise);
    for (const c of traced)
      c.tracePromise = () => {
        throw new Error('traced with no subscriber');
      };
    try {
      const lock = await locker.lock('quiet', { timeoutMs: 1000 });
      await lock.extend();
      await lock.release();
      expect(await locker.tryLock('quiet')).not.toBeNull();
    } finally {
      traced.forEach((c, i) => (c.tracePromise = kept[i]!));
    }
    await locker.withLock('n', async () => {
      const seen = record();
      const inner = await locker.lock('n');
      await inner.release();
      expect(seen).toEqual([]);
    });
    await locker.close();
  });

  it("the observability guide's example runs as written (apart from the stand-ins for metrics and log)", async () => {
    const recorded: Array<[string, number, Record<string, unknown>]> = [];
    const warned: string[] = [];
    const metrics = {
      record: (name: string, value: number, attributes: Record<string, unknown>) => recorded.push([name, value, attributes]),
    };
    const log = { warn: (line: string) => warned.push(line) };
    // A tracing channel's five events are plain channels too: tracing:deadbolt:acquire:start, …:asyncEnd.
    const onEnd = (message: unknown) => {
      const event = message as AcquireEvent;
      const outcome = event.error ? (event.error as { code?: string }).code : event.result ? 'granted' : 'busy';
      metrics.record('lock.wait', event.waitedMs ?? 0, { backend: event.backend, family: event.family, outcome });
    };
    subscribe('tracing:deadbolt:acquire:asyncEnd', onEnd);
    const onLost = (message: unknown) => {
      const event = message as LeaseLostEvent; // the lock's signal has aborted
      log.warn(`lost ${event.key} (token ${event.token}) after ${Math.round(event.heldMs)} ms`);
    };
    subscribe('deadbolt:lease-lost', onLost);
    undo.push(
      () => unsubscribe('tracing:deadbolt:acquire:asyncEnd', onEnd),
      () => unsubscribe('deadbolt:lease-lost', onLost),
    );
    const locker = createLocker(memoryBackend({ store: new MemoryLockStore() }), { ttlMs: 100, autoRenew: false });
    const lock = await locker.lock('invoice:42');
    expect(await locker.tryLock('invoice:42')).toBeNull();
    await new Promise<void>((resolve) => lock.signal.addEventListener('abort', () => resolve(), { once: true }));
    expect(recorded.map(([name, , a]) => [name, a['outcome']])).toEqual([
      ['lock.wait', 'granted'],
      ['lock.wait', 'busy'],
    ]);
    expect(warned).toHaveLength(1);
    expect(warned[0]).toMatch(new RegExp(`^lost invoice:42 \\(token ${lock.token}\\) after \\d+ ms$`));
    await locker.close();
  });
});

// PostgreSQL behind PgBouncer (test-matrix's pgbouncer profile), what the shared suite does not
// show: session mode through pooling by transaction is refused with a typed error before anything
// is held, and through pooling by session it works, its server-side waits cancelled on the right
// server process (PgBouncer hands clients process ids of its own). The lease-mode suite through
// pooling by transaction is conformance-pgbouncer.test.ts. A few seconds.
import { createLocker } from '@deadbolt/core';
import { closeLockersAfterEach, matrixUrl } from '@deadbolt/conformance';
import { postgresBackend } from '@deadbolt/postgres';
import { describe, expect, it } from 'vitest';
import { postgresHarness } from './harness.js';

const direct = matrixUrl('postgres');
const byTransaction = matrixUrl('pgbouncer');
const bySession = byTransaction.replace(/\/[^/]*$/, '/deadbolt_session');
const track = closeLockersAfterEach();
const key = () => `pgbouncer-test/${Math.random().toString(36).slice(2)}`;
const sessions = postgresHarness(direct, 'session');

describe('postgres behind PgBouncer', () => {
  it('session mode through pooling by transaction: refused, typed, naming the pooler; nothing held', async () => {
    const locker = track(createLocker(postgresBackend({ url: byTransaction, mode: 'session' }), { ttlMs: 3000 }));
    const k = key();
    const refusal = {
      code: 'BACKEND_ERROR',
      name: 'BackendError',
      cause: expect.objectContaining({ message: expect.stringMatching(/PgBouncer.*transaction/) }),
    };
    await expect(locker.lock(k, { timeoutMs: 2000 })).rejects.toMatchObject(refusal);
    // Found once: the next call is refused the same way without asking again.
    const again = performance.now();
    await expect(locker.tryLock(k)).rejects.toMatchObject(refusal);
    expect(performance.now() - again).toBeLessThan(500);
    expect(await sessions.inspect(k)).toEqual([]);
    const other = track(createLocker(postgresBackend({ url: direct, mode: 'session' }), { ttlMs: 3000 }));
    const lock = await other.tryLock(k);
    expect(lock, 'the key is free for a client connected directly').not.toBeNull();
    await lock!.release();
  });

  it('session mode through pooling by session: excludes, hands over, and a wait given up leaves no waiting server session', async () => {
    const [a, b] = [0, 1].map(() => track(createLocker(postgresBackend({ url: bySession, mode: 'session' }), { ttlMs: 3000 })));
    const k = key();
    const held = await a!.lock(k);
    expect(await b!.tryLock(k)).toBeNull();
    // The wait blocks in the server; given up, it is cancelled on the server process that waits
    // (asked of the server: the process id PgBouncer gave the connection is its own).
    await expect(b!.lock(k, { timeoutMs: 300 })).rejects.toMatchObject({ code: 'LOCK_TIMEOUT' });
    await expect.poll(() => sessions.inspect(k), { timeout: 2000 }).toEqual([held.owner]);
    const next = b!.lock(k, { timeoutMs: 5000 });
    await expect.poll(async () => (await sessions.inspect(k)).length).toBe(2);
    await held.release();
    const got = await next;
    expect(got.token).toBeGreaterThan(held.token);
    await got.release();
  });
});

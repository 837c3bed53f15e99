import { createLocker } from '@deadbolt/core';
import { abortedWithin, closeLockersAfterEach, matrixUrl, storeAddress } from '@deadbolt/conformance';
import { redisBackend } from '@deadbolt/redis';
import { keysFor } from '@deadbolt/redis/testing';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';

// test-matrix's `redis-replica`: a primary, and one replica on the next port.
const url = matrixUrl('redis-replica');
const { host, port } = storeAddress(url);
const replicaUrl = `redis://${host}:${port + 1}`;
const primary = new Redis(url);
const replica = new Redis(replicaUrl);
const track = closeLockersAfterEach();
const key = () => `replica-test/${Math.random().toString(36).slice(2)}`;
const keys = redisBackend({ url });

afterAll(async () => {
  primary.disconnect();
  replica.disconnect();
  await keys.close();
});

/** Makes the replica a replica of the primary again and waits until it has caught up. */
async function reattach(): Promise<void> {
  await replica.replicaof(host, String(port));
  // Until the replica reports its link up with no sync in progress, and a fresh write reaches it:
  // the primary may still count the replica's old link for a moment.
  for (let i = 0; i < 100; i++) {
    const info = await replica.info('replication');
    if (/master_link_status:up/.test(info) && /master_sync_in_progress:0/.test(info)) {
      await primary.set('replica-test/probe', String(i));
      if ((await primary.wait(1, 200)) >= 1) return;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('the replica did not reattach');
}

/** Stops the replica process (a replica that stopped answering) while `fn` runs. */
async function replicaStopped<T>(fn: () => Promise<T>): Promise<T> {
  // process_id from INFO: the replica may be test-matrix's or one a developer started by hand.
  const pid = Number(/process_id:(\d+)/.exec(await replica.info('server'))![1]);
  process.kill(pid, 'SIGSTOP');
  try {
    return await fn();
  } finally {
    process.kill(pid, 'SIGCONT');
  }
}

describe('redis replica sync (syncReplicas)', () => {
  it('lock() resolves only once the replica has the grant, so a failover to it keeps the lock', async () => {
    const locker = track(createLocker(redisBackend({ url, syncReplicas: 1, syncTimeoutMs: 5000 }), { ttlMs: 2000 }));
    const k = key();
    let settled = false;
    // Asked for once the replica is stopped: started before, the grant and its WAIT could beat the
    // stop (a race this test lost once in CI).
    const { taking } = await replicaStopped(async () => {
      const pending = locker.lock(k).finally(() => (settled = true));
      await new Promise((r) => setTimeout(r, 300));
      expect(settled, 'lock() resolved while the replica could not have the grant').toBe(false);
      return { taking: pending }; // wrapped: returned bare, it would be awaited with the replica still stopped
    });
    const lock = await taking;
    // One read, asserted: WAIT has already confirmed the replica holds the write.
    expect(await replica.get(keysFor(keys, k).lock)).toBe(lock.owner);
    try {
      await replica.replicaof('NO', 'ONE'); // the failover: the replica is the primary now
      const other = track(createLocker(redisBackend({ url: replicaUrl }), { ttlMs: 2000 }));
      expect(await other.tryLock(k), 'the promoted replica knows the lock').toBeNull();
      const next = await other.lock(k, { timeoutMs: 10_000 }); // after the holder's lease ends there
      expect(lock.held, 'two holders across the failover').toBe(false);
      expect(next.token).toBeGreaterThan(lock.token);
      await next.release();
    } finally {
      await reattach();
    }
  }, 30_000);

  it('a shortfall fails the acquisition with BackendError within syncTimeoutMs and leaves nothing held', async () => {
    const locker = track(createLocker(redisBackend({ url, syncReplicas: 2, syncTimeoutMs: 300 }), { ttlMs: 10_000 }));
    const k = key();
    const started = performance.now();
    const error = await locker.lock(k, { timeoutMs: 5000 }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'BACKEND_ERROR', cause: { message: expect.stringMatching(/1 of 2 replicas/) } });
    expect(performance.now() - started).toBeLessThan(300 + 1000);
    expect(await primary.get(keysFor(keys, k).lock)).toBeNull();
    expect(await locker.tryLock(k).catch((e: unknown) => e)).toMatchObject({ code: 'BACKEND_ERROR' });
  });

  it('a stopped replica fails acquisitions and, while held, loses the lock within its ttl', async () => {
    const ttlMs = 1500;
    const locker = track(createLocker(redisBackend({ url, syncReplicas: 1, syncTimeoutMs: 200 }), { ttlMs }));
    const [held, refused] = [key(), key()];
    const lock = await locker.lock(held);
    await replicaStopped(async () => {
      expect(await locker.tryLock(refused).catch((e: unknown) => e)).toMatchObject({ code: 'BACKEND_ERROR' });
      expect(await primary.get(keysFor(keys, refused).lock)).toBeNull();
      await abortedWithin(lock, ttlMs + 1000);
      expect(lock.signal.reason).toMatchObject({ code: 'LOCK_LOST' });
    });
    const again = await locker.lock(refused, { timeoutMs: 5000 });
    expect(again.held).toBe(true);
    await again.release();
  }, 20_000);

  it('rejects bad sync options before any I/O', () => {
    for (const bad of [-1, 1.5, NaN]) {
      expect(() => redisBackend({ url, syncReplicas: bad })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
      expect(() => redisBackend({ url, syncReplicas: 1, syncTimeoutMs: bad })).toThrow(
        expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
      );
    }
    expect(() => redisBackend({ url, cluster: true, syncReplicas: 1 })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
  });
});

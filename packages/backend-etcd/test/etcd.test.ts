import { randomUUID } from 'node:crypto';
import { backendOf, MUTEX } from '@deadbolt/core/testing';
import { createLocker } from '@deadbolt/core';
import { abortedWithin, closeLockersAfterEach, matrixUrl } from '@deadbolt/conformance';
import { etcdBackend, type EtcdBackend } from '@deadbolt/etcd';
import { prefixFor } from '@deadbolt/etcd/testing';
import { afterAll, describe, expect, it } from 'vitest';

const url = matrixUrl('etcd');
const admin = etcdBackend({ url });
const track = closeLockersAfterEach();
const newLocker = (ttlMs = 2000) => track(createLocker(etcdBackend({ url }), { ttlMs }));
const key = () => `etcd-test/${Math.random().toString(36).slice(2)}`;

afterAll(() => admin.close());

describe('etcd backend', () => {
  it('aborts lock.signal as soon as the lease is revoked, long before the next renewal', async () => {
    const locker = newLocker(30_000); // renewal every 10 s: only the key watch can be this quick
    const k = key();
    const lock = await locker.lock(k);
    const kv = (await admin.client.getAll().prefix(prefixFor(admin, k)).exec()).kvs[0]!;
    expect(BigInt(kv.create_revision)).toBe(lock.token); // the token is the key's create revision
    await new Promise((r) => setTimeout(r, 200)); // the loss watch starts in the background
    const revokedAt = performance.now();
    await admin.client.leaseClient.leaseRevoke({ ID: kv.lease });
    await abortedWithin(lock, 2000);
    expect(performance.now() - revokedAt).toBeLessThan(2000);
    expect(lock.signal.reason).toMatchObject({ code: 'LOCK_LOST' });
  });

  it('a waiter that waits longer than its ttl still holds a live lease when granted', async () => {
    const [a, b] = [newLocker(2000), newLocker(2000)];
    const k = key();
    const held = await a.lock(k);
    const waiting = b.lock(k);
    await new Promise((r) => setTimeout(r, 5000)); // 2.5 × ttl
    await held.release();
    const lock = await waiting;
    await new Promise((r) => setTimeout(r, 2500));
    expect(lock.held).toBe(true);
    expect((await admin.client.getAll().prefix(prefixFor(admin, k)).keys()).length).toBe(1);
    await lock.release();
  }, 30_000);

  it('watch streams carry no call deadline: the loss watch stays connected past it', async () => {
    const backend = etcdBackend({ url, commandTimeoutMs: 300 });
    try {
      const lease = (await backend.acquire({
        ...MUTEX,
        key: key(),
        owner: crypto.randomUUID(),
        ttlMs: 10_000,
        wait: false,
        signal: new AbortController().signal,
      }))!;
      const watcher = (await (lease as unknown as { watcher: Promise<import('etcd3').Watcher> }).watcher)!;
      let drops = 0;
      watcher.on('disconnected', () => drops++);
      await new Promise((r) => setTimeout(r, 1500)); // five call deadlines
      expect(drops, 'times the watch stream was torn down').toBe(0);
      await backend.release(lease);
    } finally {
      await backend.close();
    }
  });

  it('rejects ttls etcd cannot honour, before any I/O', async () => {
    const locker = newLocker();
    await expect(locker.lock(key(), { ttlMs: 1000 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(locker.lock(key(), { ttlMs: 2500 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await (await locker.lock(key(), { ttlMs: 3000 })).release();
  });

  it('extend() to a different ttl moves the key to a new lease and keeps the token', async () => {
    const locker = newLocker();
    const k = key();
    const lock = await locker.lock(k);
    await lock.extend(6000);
    const kv = (await admin.client.getAll().prefix(prefixFor(admin, k)).exec()).kvs[0]!;
    expect(BigInt(kv.create_revision)).toBe(lock.token);
    const ttl = await admin.client.leaseClient.leaseTimeToLive({ ID: kv.lease });
    expect(Number(ttl.grantedTTL)).toBe(6);
    await lock.release();
  });

  it('a waiter behind the holder alone is granted on its deletion, and a token floor the holder raised meanwhile still counts', async () => {
    // The holder through the backend itself, to raise its floor as a migration's dual phase does.
    const backend = backendOf(track(createLocker(etcdBackend({ url })))) as EtcdBackend;
    const k = key();
    const holder = (await backend.acquire({
      ...MUTEX,
      key: k,
      owner: randomUUID(),
      ttlMs: 10_000,
      wait: false,
      signal: new AbortController().signal,
    }))!;
    const waiting = newLocker(10_000).lock(k);
    await new Promise((r) => setTimeout(r, 500)); // the waiter has looked and watches the holder's key
    const floor = holder.token + 1_000_000n;
    expect(await backend.raiseTokenFloor(holder, floor)).toBe(true);
    await backend.release(holder);
    const lock = await waiting;
    // The offset the waiter read before the raise is stale: the raise wrote the holder's key too, so
    // the waiter looked again instead of granting on the deletion alone.
    expect(lock.token).toBeGreaterThan(floor);
    await lock.release();
  });

  it('a waiter whose own key is deleted fails at once with BackendUnavailableError, not when the holder leaves', async () => {
    const a = newLocker(10_000);
    // With its default grace the locker would queue again (a new key) and wait for the holder.
    const b = track(createLocker(etcdBackend({ url }), { ttlMs: 10_000, unavailableGraceMs: 0 }));
    const k = key();
    const held = await a.lock(k);
    const waiting = b.lock(k).catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 500));
    const keys = await admin.client.getAll().prefix(prefixFor(admin, k)).keys();
    const theirs = keys.find((name) => !name.endsWith(held.owner))!;
    const deletedAt = performance.now();
    await admin.client.delete().key(theirs).exec();
    expect(await waiting).toMatchObject({ code: 'BACKEND_UNAVAILABLE' });
    expect(performance.now() - deletedAt).toBeLessThan(3000);
    expect(held.held).toBe(true);
    await held.release();
  });
});

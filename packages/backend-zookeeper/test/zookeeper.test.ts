import { createLocker } from '@deadbolt/core';
import { abortedWithin, closeLockersAfterEach, matrixUrl } from '@deadbolt/conformance';
import { zookeeperBackend } from '@deadbolt/zookeeper';
import { claimsOf, pathFor, session, sessions } from '@deadbolt/zookeeper/testing';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { bySequence, sequenceOf } from '../src/zookeeper-backend.js';
import { expireSession } from './harness.js';

const url = matrixUrl('zookeeper');
const admin = zookeeperBackend({ url });
const claims = claimsOf(admin);
const track = closeLockersAfterEach();
const newLocker = (ttlMs = 2000) => track(createLocker(zookeeperBackend({ url }), { ttlMs }));
const key = () => `zookeeper-test/${Math.random().toString(36).slice(2)}`;

const stat = async (path: string) => {
  const { client } = await session(admin, 10_000);
  return new Promise<{ czxid: Buffer } | null>((resolve, reject) => client.exists(path, undefined, (e, s) => (e ? reject(e) : resolve(s))));
};
const children = async (path: string) => {
  const { client } = await session(admin, 10_000);
  return new Promise<string[]>((resolve) => client.getChildren(path, undefined, (e, c) => resolve(e ? [] : c)));
};

afterAll(() => admin.close());

/** A sequential node's name as ZooKeeper makes it: `<name>` + the parent's cversion as Java's `%010d`. */
const sequential = (name: string, cversion: number) =>
  `${name}${cversion < 0 ? `-${String(-cversion).padStart(9, '0')}` : String(cversion).padStart(10, '0')}`;

describe('zookeeper backend', () => {
  it('the queue keeps its order across the wrap of the 32-bit sequence (2^31 − 1 is followed by −2^31)', async () => {
    // A real name first: the format is the server's.
    const locker = newLocker();
    const k = key();
    const lock = await locker.lock(k);
    const [real] = await children(pathFor(admin, k));
    const prefix = real!.slice(0, real!.lastIndexOf('-') + 1);
    expect(sequential(prefix, sequenceOf(real!))).toBe(real);
    await lock.release();
    // A key busy for ~10^9 cycles: its holder was created just before the wrap, its waiters after;
    // and, 2^31 cycles later again, a queue across zero.
    for (const arrival of [
      [2_147_483_645, 2_147_483_646, 2_147_483_647, -2_147_483_648, -2_147_483_647, -2_147_483_000],
      [-7, -5, -1, 0, 7, 1_000_000],
    ]) {
      const names = arrival.map((cversion, i) => sequential(`lock-${i}-owner-`, cversion));
      expect(names.map(sequenceOf)).toEqual(arrival);
      const shuffled = [...names].sort(() => Math.random() - 0.5);
      expect(shuffled.sort(bySequence)).toEqual(names);
    }
    // Shared claims' names carry their mode and limit before the owner.
    expect(
      [sequential('lock-S3-b-', -2_147_483_648), sequential('lock-X3-a-', 2_147_483_647)].sort(bySequence).map((n) => n.slice(0, 8)),
    ).toEqual(['lock-X3-', 'lock-S3-']);
  });

  it('the token is the holder node’s creation zxid; the queue is one node per waiter, in order', async () => {
    const [a, b, c] = [newLocker(), newLocker(), newLocker()];
    const k = key();
    const lock = await a.lock(k);
    const [node] = await children(pathFor(admin, k));
    expect(node).toMatch(new RegExp(`^lock-${lock.owner}-\\d{10}$`));
    expect((await stat(`${pathFor(admin, k)}/${node}`))!.czxid.readBigInt64BE()).toBe(lock.token);
    const waiting = [b.lock(k)];
    await new Promise((r) => setTimeout(r, 300)); // b queues before c
    waiting.push(c.lock(k));
    await new Promise((r) => setTimeout(r, 300));
    expect((await claims.inspect(k))[0]).toBe(lock.owner);
    expect(await claims.inspect(k)).toHaveLength(3);
    await lock.release();
    const second = await waiting[0]!;
    expect(second.token).toBeGreaterThan(lock.token);
    await second.release();
    await (await waiting[1]!).release();
  });

  it('aborts lock.signal at once when the holder node is deleted, long before a renewal', async () => {
    const locker = newLocker(30_000); // renewal every 10 s: only the node watch can be this quick
    const k = key();
    const lock = await locker.lock(k);
    const [node] = await children(pathFor(admin, k));
    const { client } = await session(admin, 10_000);
    const deletedAt = performance.now();
    await new Promise<void>((resolve, reject) => client.remove(`${pathFor(admin, k)}/${node}`, -1, (e) => (e ? reject(e) : resolve())));
    await abortedWithin(lock, 2000);
    expect(performance.now() - deletedAt).toBeLessThan(2000);
    expect(lock.signal.reason).toMatchObject({ code: 'LOCK_LOST' });
  });

  it('a lost session aborts every lock on it, and the next acquisition opens a new session', async () => {
    const backend = zookeeperBackend({ url });
    const locker = track(createLocker(backend, { ttlMs: 2000 }));
    const [k1, k2] = [key(), key()];
    const [l1, l2] = [await locker.lock(k1), await locker.lock(k2)];
    // The locks' session, by their ttl: the floor read before the first lock borrowed one of its own.
    const session = sessions(backend).find((s) => s.ttlMs === 2000);
    await expireSession(url, session!);
    await abortedWithin(l1, 3000);
    await abortedWithin(l2, 3000);
    // The server deletes the session's nodes when it ends it (the twin's close or our own, whichever lands).
    await vi.waitFor(async () => expect(await claims.inspect(k1)).toEqual([]), { timeout: 3000 });
    const again = await locker.lock(k1, { timeoutMs: 5000 });
    expect(sessions(backend)[0]).not.toBe(session);
    expect(again.token).toBeGreaterThan(l1.token);
    await again.release();
  });

  it('refuses a ttl the server will not grant as a session timeout, and extend() to another ttl', async () => {
    const locker = newLocker();
    // Above the claimed maximum (ZooKeeper's default 40 s): bad input before any I/O.
    await expect(locker.lock(key(), { ttlMs: 45_000 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    // Claimed by a misconfigured backend but above test-matrix's maxSessionTimeout (60 s): the server says no.
    const generous = track(createLocker(zookeeperBackend({ url, maxSessionTimeoutMs: 120_000 }), { ttlMs: 2000 }));
    await expect(generous.lock(key(), { ttlMs: 90_000 })).rejects.toMatchObject({ code: 'BACKEND_ERROR' });
    const lock = await locker.lock(key());
    await expect(lock.extend(5000)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await lock.extend(2000);
    expect(lock.held).toBe(true);
    await lock.release();
  });

  it('removes the key node about a second after the last waiter leaves, and on close', async () => {
    const locker = newLocker();
    const [k1, k2] = [key(), key()];
    await (await locker.lock(k1)).release();
    await (await locker.lock(k2)).release();
    expect(await stat(pathFor(admin, k1))).not.toBeNull(); // kept for the next acquisition a moment
    await vi.waitFor(async () => expect(await stat(pathFor(admin, k1))).toBeNull(), { timeout: 3000 });
    const other = newLocker();
    const k3 = key();
    await (await other.lock(k3)).release();
    await other.close();
    expect(await stat(pathFor(admin, k3))).toBeNull();
  });

  it('creates a missing root path (every level) on first use, as on a fresh server', async () => {
    const top = `/deadbolt-test-${Math.random().toString(36).slice(2)}`;
    const fresh = zookeeperBackend({ url, root: `${top}/nested/locks` });
    const locker = track(createLocker(fresh, { ttlMs: 2000 }));
    const [first, second] = [locker.lock(key(), { timeoutMs: 5000 }), locker.lock(key(), { timeoutMs: 5000 })];
    for (const lock of await Promise.all([first, second])) await lock.release();
    await locker.close();
    const { client } = await session(admin, 10_000);
    for (const path of [`${top}/nested/locks`, `${top}/nested`, top]) {
      expect(await stat(path)).not.toBeNull();
      await new Promise<void>((resolve, reject) => client.remove(path, -1, (e) => (e ? reject(e) : resolve())));
    }
  });
});

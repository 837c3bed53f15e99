import { createLocker } from '@deadbolt/core';
import { backendOf } from '@deadbolt/core/testing';
import {
  closeLockersAfterEach,
  expectAbortsPastFullPool,
  expectWaitsThroughBusyServer,
  expectWaitThroughSlowConnect,
  matrixUrl,
} from '@deadbolt/conformance';
import { mysqlBackend, type MysqlBackend } from '@deadbolt/mysql';
import { threadIds } from '@deadbolt/mysql/testing';
import { createPool } from 'mysql2/promise';
import { afterAll, describe, expect, it } from 'vitest';

const url = matrixUrl('mysql');
const admin = createPool({ uri: url, connectionLimit: 2 });
const track = closeLockersAfterEach();
const key = () => `mysql-test/${Math.random().toString(36).slice(2)}`;
/** A session-mode backend at `u` (the shared fault helpers' `SessionBackendAt`). */
const session = (u: string, connectTimeoutMs?: number) => mysqlBackend({ url: u, mode: 'session', connectTimeoutMs });

afterAll(async () => {
  await admin.query('DROP TABLE IF EXISTS deadbolt_race, deadbolt_broken');
  await admin.end();
});

describe('mysql backend', () => {
  it('creates its table race-free when many lockers start at once', async () => {
    await admin.query('DROP TABLE IF EXISTS deadbolt_race');
    const many = Array.from({ length: 8 }, () => track(createLocker(mysqlBackend({ url, table: 'deadbolt_race' }), { ttlMs: 5000 })));
    const locks = await Promise.all(many.map((l, i) => l.lock(`${key()}-${i}`)));
    expect(locks.every((l) => l.held && l.token === 1n)).toBe(true); // each key its own counter
    await Promise.all(locks.map((l) => l.release()));
  });

  it('reports an SQL error as BackendError, never as busy', async () => {
    await admin.query('DROP TABLE IF EXISTS deadbolt_broken');
    await admin.query('CREATE TABLE deadbolt_broken (something INT)');
    const locker = track(createLocker(mysqlBackend({ url, table: 'deadbolt_broken' }), { ttlMs: 5000 }));
    await expect(locker.tryLock(key())).rejects.toMatchObject({ code: 'BACKEND_ERROR' });
    await expect(locker.lock(key(), { timeoutMs: 1000 })).rejects.toMatchObject({ code: 'BACKEND_ERROR' });
  });

  it('session mode: a dead holder connection frees the lock at once, and the waiter blocked in the server gets it', async () => {
    const a = track(createLocker(mysqlBackend({ url, mode: 'session' }), { ttlMs: 30_000 }));
    const b = track(createLocker(mysqlBackend({ url, mode: 'session' }), { ttlMs: 30_000 }));
    const k = key();
    const held = await a.lock(k);
    const waiting = b.lock(k, { timeoutMs: 10_000 });
    await new Promise((r) => setTimeout(r, 200));
    const killedAt = performance.now();
    for (const id of threadIds(backendOf(a) as MysqlBackend)) await admin.query('KILL ?', [id]).catch(() => undefined);
    const lock = await waiting;
    expect(performance.now() - killedAt).toBeLessThan(2000); // not the 30 s ttl
    expect(lock.token).toBeGreaterThan(held.token);
    await lock.release();
  });

  it('session mode: with the pool full of waits, the cancels of aborted ones still reach the server', async () => {
    // Before, every pooled connection could hold a wait: the cancels (KILL QUERY) queued in the pool
    // for one of them, and the aborted waits went on in the server until the lock came to them.
    const holder = track(createLocker(mysqlBackend({ url, mode: 'session' }), { ttlMs: 30_000 }));
    const backend = mysqlBackend({ url, mode: 'session', connectionLimit: 4 });
    const waiter = track(createLocker(backend, { ttlMs: 30_000 }));
    const serverWaits = async () => {
      const ids = [...threadIds(backend)];
      if (!ids.length) return 0;
      const [rows] = await admin.query(`SELECT COUNT(*) AS n FROM information_schema.processlist WHERE id IN (?) AND state = 'User lock'`, [
        ids,
      ]);
      return Number((rows as Array<{ n: number }>)[0]!.n);
    };
    await expectAbortsPastFullPool(holder, waiter, 4, key(), serverWaits);
  });

  it('session mode: an abort while the pool is full ends the wait; the connection it later gets is not spent on GET_LOCK', async () => {
    // One connection: while K2 is held, an acquisition of K queues for the connection itself.
    const x = track(createLocker(mysqlBackend({ url, mode: 'session', connectionLimit: 1 }), { ttlMs: 30_000 }));
    const y = track(createLocker(mysqlBackend({ url, mode: 'session' }), { ttlMs: 30_000 }));
    const [k, k2, k3] = [key(), key(), key()];
    const other = await y.lock(k); // K stays held elsewhere: a GET_LOCK on it would block
    const mine = await x.lock(k2);
    const controller = new AbortController();
    const waiting = x.lock(k, { signal: controller.signal }).catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 100));
    controller.abort(new Error('gave up'));
    expect(await waiting).toMatchObject({ message: 'gave up' });
    await mine.release(); // the connection goes to the aborted acquisition first
    const next = await x.lock(k3, { timeoutMs: 3000 }); // fails if that connection sits in GET_LOCK
    await next.release();
    await other.release();
  });

  it('session mode: waits ride out a server too busy to start every session within the connect timeout', async () => {
    // In CI, on a loaded machine, connects to the server took longer than the connect timeout while
    // others went through; each failed one failed every waiter queued to open one, and waits that
    // kept failing for the grace failed although the server was up.
    await expectWaitsThroughBusyServer(url, session, key());
  }, 30_000);

  it('session mode: a waiter whose connection is not accepted within the connect timeout keeps waiting, and gets the lock', async () => {
    // In CI, 250 waiters opening 200 connections at once on the loaded machine took longer than a
    // connect timeout, and the waiters whose connect timed out failed as unavailable.
    await expectWaitThroughSlowConnect(url, session, key());
  });

  it('stores a 1024-byte key with any characters, binary-exact', async () => {
    const locker = track(createLocker(mysqlBackend({ url }), { ttlMs: 5000 }));
    const long = 'é'.repeat(512);
    const lock = await locker.lock(long);
    expect(await locker.tryLock('é'.repeat(511) + 'e')).not.toBeNull();
    await lock.release();
  });
});

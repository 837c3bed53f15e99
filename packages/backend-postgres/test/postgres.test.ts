import { BackendUnavailableError, createLocker } from '@deadbolt/core';
import { backendOf } from '@deadbolt/core/testing';
import { sleep } from '@deadbolt/core/backend';
import {
  closeLockersAfterEach,
  expectAbortsPastFullPool,
  expectWaitsThroughBusyServer,
  expectSoon,
  expectWaitThroughSlowConnect,
  FaultProxy,
  matrixUrl,
  storeAddress,
  viaUrl,
} from '@deadbolt/conformance';
import { postgresBackend, postgresFence, type PostgresBackend } from '@deadbolt/postgres';
import postgresJs from 'postgres';
import { pids } from '@deadbolt/postgres/testing';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';

const url = matrixUrl('postgres');
const admin = new pg.Pool({ connectionString: url, max: 2 });
const track = closeLockersAfterEach();
const key = () => `postgres-test/${Math.random().toString(36).slice(2)}`;
/** A session-mode backend at `u` (the shared fault helpers' `SessionBackendAt`). */
const session = (u: string, connectTimeoutMs?: number) => postgresBackend({ url: u, mode: 'session', connectTimeoutMs });

afterAll(async () => {
  await admin.query('DROP TABLE IF EXISTS deadbolt_race, deadbolt_race_waiters, deadbolt_broken, deadbolt_broken_waiters');
  await admin.end();
});

/** Counts the notifications on the default channel while it listens. */
/** A lock table of this file's own: its notification channel hears no other test's releases. */
const NOTIFY_TABLE = 'deadbolt_notify_test';

async function listen() {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const payloads: string[] = [];
  client.on('notification', (m) => payloads.push(m.payload ?? ''));
  await client.query(`LISTEN "${NOTIFY_TABLE}_released"`);
  return { payloads, close: () => client.end() };
}

describe('postgres backend', () => {
  it('rejects bad options before connecting', () => {
    for (const options of [
      {},
      { url: 'mysql://x' },
      { url, table: 'Bad-Name' },
      { url, mode: 'both' },
      { url, maxPollDelayMs: 0 },
      { url, advisoryNamespace: -1 },
    ]) {
      expect(() => postgresBackend(options as never)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    }
  });

  it('refuses a postgres.js instance as its client, before any I/O, saying what to pass instead', async () => {
    // postgres.js connects on its first query: making one opens nothing.
    const sql = postgresJs(url, { max: 1 });
    try {
      for (const make of [() => postgresBackend({ client: sql as never }), () => postgresFence({ client: sql as never })])
        expect(make).toThrow(
          expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/postgres\.js .* pass a pg Pool, or a url/) }),
        );
    } finally {
      await sql.end();
    }
  });

  it('creates its tables race-free when many lockers start at once', async () => {
    await admin.query('DROP TABLE IF EXISTS deadbolt_race, deadbolt_race_waiters');
    const many = Array.from({ length: 8 }, (_, i) =>
      track(createLocker(postgresBackend({ url, table: 'deadbolt_race', mode: i % 2 ? 'session' : 'lease' }), { ttlMs: 5000 })),
    );
    const locks = await Promise.all(many.map((l, i) => l.lock(`${key()}-${i}`)));
    expect(locks.every((l) => l.held && l.token === 1n)).toBe(true); // each key its own counter
    await Promise.all(locks.map((l) => l.release()));
  });

  it('reports an SQL error as BackendError, never as busy', async () => {
    await admin.query('DROP TABLE IF EXISTS deadbolt_broken, deadbolt_broken_waiters');
    await admin.query('CREATE TABLE deadbolt_broken (something int)');
    const locker = track(createLocker(postgresBackend({ url, table: 'deadbolt_broken' }), { ttlMs: 5000 }));
    await expect(locker.tryLock(key())).rejects.toMatchObject({ code: 'BACKEND_ERROR' });
    await expect(locker.lock(key(), { timeoutMs: 1000 })).rejects.toMatchObject({ code: 'BACKEND_ERROR' });
  });

  it('a release notifies only when someone waits, and names the head of the queue', async () => {
    const listener = await listen();
    try {
      const [a, b, c] = [1, 2, 3].map(() => track(createLocker(postgresBackend({ url, table: NOTIFY_TABLE }), { ttlMs: 5000 })));
      const k = key();
      await (await a!.lock(k)).release();
      await sleep(100);
      expect(listener.payloads, 'a release with nobody waiting notified').toEqual([]);
      const held = await a!.lock(k);
      // Deadlines of their own: a wait that hangs fails here, naming itself, not at the test's timeout.
      const first = b!.lock(k, { timeoutMs: 20_000 });
      await sleep(100);
      const second = c!.lock(k, { timeoutMs: 20_000 });
      await sleep(100);
      await held.release();
      const granted = await first;
      await sleep(100);
      // Each waiting backend's listener also sends itself a probe (does NOTIFY reach it?): not a release's.
      const probe = (payload: string) => payload.startsWith('deadbolt-probe ');
      const [probes, releases] = [listener.payloads.filter(probe), listener.payloads.filter((p) => !probe(p))];
      expect(probes.length, "the waiters' listeners probed their connection").toBeGreaterThan(0);
      expect(releases).toHaveLength(1);
      expect(releases[0]!.endsWith(` ${granted.owner}`)).toBe(true);
      await granted.release();
      await (await second).release();
    } finally {
      await listener.close();
    }
  });

  it('a lost notification (listening connection cut) costs at most one re-check period', async () => {
    const a = track(createLocker(postgresBackend({ url }), { ttlMs: 5000 }));
    const b = track(createLocker(postgresBackend({ url, maxPollDelayMs: 200 }), { ttlMs: 5000 }));
    const k = key();
    const held = await a.lock(k);
    const waiting = b.lock(k, { timeoutMs: 10_000 });
    await sleep(100);
    // Cut every connection of the waiter's backend, its listener among them.
    for (const pid of pids(backendOf(b) as PostgresBackend)) await admin.query('SELECT pg_terminate_backend($1)', [pid]);
    await held.release();
    const releasedAt = performance.now();
    const lock = await waiting;
    expect(performance.now() - releasedAt).toBeLessThan(1000);
    await lock.release();
  });

  it('session mode: keys of any length get distinct advisory locks (1024-byte keys differing in the last byte)', async () => {
    const a = track(createLocker(postgresBackend({ url, mode: 'session' }), { ttlMs: 5000 }));
    const b = track(createLocker(postgresBackend({ url, mode: 'session' }), { ttlMs: 5000 }));
    const base = `${key()}/`.padEnd(1023, 'x');
    const keys = Array.from({ length: 20 }, (_, i) => base + String.fromCharCode(65 + i));
    const held = await Promise.all(keys.map((k) => a.lock(k, { timeoutMs: 5000 })));
    for (const k of keys) expect(await b.tryLock(k)).toBeNull();
    const other = await b.tryLock(`${base}z`);
    expect(other).not.toBeNull();
    await other!.release();
    await Promise.all(held.map((l) => l.release()));
  });

  it('session mode: a released lock (and a refused try) leaves its pooled connection with the idle limit it had', async () => {
    // One connection: every step below runs on it. The lock sets the session's idle limit to its ttl.
    const backend = postgresBackend({ url, mode: 'session', connectionLimit: 1 });
    const locker = track(createLocker(backend, { ttlMs: 7000 }));
    const other = track(createLocker(postgresBackend({ url, mode: 'session' }), { ttlMs: 5000 }));
    const limit = async () => (await backend.client.query('SHOW idle_session_timeout')).rows[0].idle_session_timeout as string;
    const before = await limit();
    expect(before).not.toBe('7s');
    const k = key();
    const held = await locker.lock(k);
    await held.release();
    expect(await limit()).toBe(before);
    const theirs = await other.lock(k);
    expect(await locker.tryLock(k)).toBeNull();
    expect(await limit()).toBe(before);
    await theirs.release();
  });

  it('session mode: a wait aborted just as the server granted it (the cancel lands on the statement that won) leaves nothing held', async () => {
    // The race, staged exactly: the waiter's server process is stopped (SIGSTOP) while queued; the
    // holder releases, so the server grants the stopped waiter; the caller aborts, so a cancel
    // reaches the stopped process; then it resumes, finds the lock granted, and the cancel ends its
    // statement with an error. A session advisory lock outlives the failed statement: the waiter
    // must unlock it. (Reset alone put the connection back in the pool still holding the lock, with
    // no idle limit, until the pool closed it: the key stayed taken by nobody.)
    const a = track(createLocker(postgresBackend({ url, mode: 'session' }), { ttlMs: 30_000 }));
    const waiter = postgresBackend({ url, mode: 'session' });
    const b = track(createLocker(waiter, { ttlMs: 30_000 }));
    const c = track(createLocker(postgresBackend({ url, mode: 'session' }), { ttlMs: 30_000 }));
    const k = key();
    const held = await a.lock(k);
    const abort = new AbortController();
    const waiting = b.lock(k, { signal: abort.signal, timeoutMs: 20_000 }).then(
      (lock) => lock,
      (error: unknown) => error,
    );
    const entry = (granted: boolean) =>
      admin.query(`SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted = $1 AND pid = ANY($2)`, [granted, [...pids(waiter)]]);
    await expectSoon(async () => (await entry(false)).rowCount, 1, 5000); // the waiter queued in the server
    const pid = (await entry(false)).rows[0]!.pid as number;
    process.kill(pid, 'SIGSTOP');
    try {
      await held.release();
      await expectSoon(async () => (await entry(true)).rowCount, 1, 5000); // the server granted the stopped waiter
      abort.abort(new Error('the caller gave up'));
      await sleep(1000); // the cancel (sent again every 100 ms while the statement runs) reaches the process, even on a loaded machine
    } finally {
      process.kill(pid, 'SIGCONT');
    }
    expect(await waiting).toEqual(new Error('the caller gave up'));
    // Another client takes the key within moments (the waiter unlocks in the background after the abort was reported).
    const taken = async () => {
      const lock = await c.tryLock(k);
      await lock?.release();
      return lock !== null;
    };
    await expectSoon(taken, true, 3000);
  });

  it('session mode: with the pool full of waits, the cancels of aborted ones still reach the server', async () => {
    // Before, every pooled connection could hold a wait: the cancels queued in the pool for one of
    // them, and the aborted waits went on in the server until the lock came to them.
    const holder = track(createLocker(postgresBackend({ url, mode: 'session' }), { ttlMs: 30_000 }));
    const backend = postgresBackend({ url, mode: 'session', connectionLimit: 4 });
    const waiter = track(createLocker(backend, { ttlMs: 30_000 }));
    const serverWaits = async () =>
      Number(
        (
          await admin.query(`SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND pid = ANY($1)`, [
            [...pids(backend)],
          ])
        ).rows[0].n,
      );
    await expectAbortsPastFullPool(holder, waiter, 4, key(), serverWaits);
  });

  it('session mode: a dead holder connection frees the lock at once, and the waiter blocked in the server gets it', async () => {
    const a = track(createLocker(postgresBackend({ url, mode: 'session' }), { ttlMs: 30_000 }));
    const b = track(createLocker(postgresBackend({ url, mode: 'session' }), { ttlMs: 30_000 }));
    const k = key();
    const held = await a.lock(k);
    const waiting = b.lock(k, { timeoutMs: 10_000 });
    await sleep(200);
    const killedAt = performance.now();
    for (const pid of pids(backendOf(a) as PostgresBackend)) await admin.query('SELECT pg_terminate_backend($1)', [pid]);
    const lock = await waiting;
    expect(performance.now() - killedAt).toBeLessThan(2000); // not the 30 s ttl
    expect(lock.token).toBeGreaterThan(held.token);
    await lock.release();
  });

  it('session mode: a paused holder (idle past its ttl) loses the lock to the server, not to a client clock', async () => {
    const a = track(createLocker(postgresBackend({ url, mode: 'session' }), { ttlMs: 1000, autoRenew: false }));
    const b = track(createLocker(postgresBackend({ url, mode: 'session' }), { ttlMs: 5000 }));
    const k = key();
    const held = await a.lock(k);
    const started = performance.now();
    const lock = await b.lock(k, { timeoutMs: 10_000 });
    const elapsed = performance.now() - started;
    expect(elapsed).toBeGreaterThan(900);
    expect(elapsed).toBeLessThan(3000);
    expect(lock.token).toBeGreaterThan(held.token);
    await lock.release();
  });

  it('session mode: waits ride out a server too busy to start every session within the connect timeout', async () => {
    // In CI, on a loaded machine, connects to the server took longer than the connect timeout while
    // others went through; each failed one failed every waiter queued to open one, and waits that
    // kept failing for the grace failed although the server was up.
    await expectWaitsThroughBusyServer(url, session, key());
  }, 30_000);

  it('session mode: a waiter whose connection is not accepted within the connect timeout keeps waiting, and gets the lock', async () => {
    await expectWaitThroughSlowConnect(url, session, key());
  });

  it('session mode: a pooled connection that went silent for good is found out within a command timeout and the wait goes on on a new one', async () => {
    const proxy = await FaultProxy.start(storeAddress(url));
    try {
      const backend = postgresBackend({ url: viaUrl(url, proxy.address), mode: 'session', commandTimeoutMs: 1000 });
      const locker = track(createLocker(backend, { ttlMs: 5000 }));
      const k = key();
      // The tables exist and the key's id is known; the connection goes back to the pool idle.
      await (await locker.lock(k)).release();
      proxy.strand(); // it answers nothing from now on (never closed); a new connection works
      const started = performance.now();
      // Before, the wait's first statement was the blocking advisory lock (no timeout: it may rightly
      // wait for ever), sent on the dead connection, and only the caller's deadline ended it.
      const lock = await locker.lock(k, { timeoutMs: 10_000 });
      expect(performance.now() - started).toBeLessThan(5000);
      expect(lock.held).toBe(true);
      await lock.release();
    } finally {
      await proxy.close();
    }
  }, 30_000);

  it('session mode: waiters queued to open connections fail with the opening when the server stops answering, not one batch after another', async () => {
    const proxy = await FaultProxy.start(storeAddress(url));
    try {
      const backend = postgresBackend({ url: viaUrl(url, proxy.address), mode: 'session', connectTimeoutMs: 300, commandTimeoutMs: 1000 });
      // The backend's own retries are measured here, not the locker's (which would go on for its grace).
      const locker = track(createLocker(backend, { ttlMs: 5000, unavailableGraceMs: 0 }));
      await (await locker.lock(key())).release(); // the tables exist; one connection stays idle
      proxy.blackhole();
      // 80 waiters open connections 8 at a time. Were the queued ones to wait their turn, each
      // batch would take a connect timeout before the next could even start failing: 3 s for
      // the last batch to fail once, and each waiter retries for two connect timeouts after that.
      const started = performance.now();
      const outcomes = await Promise.allSettled(Array.from({ length: 80 }, () => locker.lock(key())));
      const elapsed = performance.now() - started;
      expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(0);
      for (const o of outcomes) expect((o as PromiseRejectedResult).reason).toBeInstanceOf(BackendUnavailableError);
      expect(elapsed).toBeLessThan(2500);
    } finally {
      await proxy.close();
    }
  }, 30_000);
});

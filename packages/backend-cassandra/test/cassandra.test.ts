import { cassandraBackend, cassandraFence, CassandraTimeService, dropSchema } from '@deadbolt/cassandra';
import { idFor } from '@deadbolt/cassandra/testing';
import { createLocker } from '@deadbolt/core';
import { MUTEX } from '@deadbolt/core/testing';
import { closeLockersAfterEach, matrixUrl } from '@deadbolt/conformance';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { cassandraHarness } from './harness.js';

const url = matrixUrl('cassandra');
const harness = cassandraHarness(url);
const { admin } = harness;
const track = closeLockersAfterEach();
const newLocker = (algorithm: 'queue' | 'shadow' | 'lwt' = 'queue', ttlMs = 3000) =>
  track(createLocker(cassandraBackend({ url, algorithm }), { ttlMs }));
const key = () => `cassandra-test/${Math.random().toString(36).slice(2)}`;
const cql = async (query: string, params: unknown[] = []) => {
  await harness.inspect('warm-up'); // creates the schema on first use
  // A schema change waits for every node to agree; under the test lanes' load that outlasted the 8 s a read is given.
  return admin.client.execute(query, params, { prepare: true, readTimeout: 60_000 });
};

afterAll(() => admin.close());

describe('cassandra backend', () => {
  it('dropSchema drops a keyspace, and the next backend in this process makes it again', async () => {
    // `deadbolt check` and the tests drop their scratch keyspaces; the process remembered having
    // made a keyspace, so a backend made after the drop skipped the schema and failed every call.
    const keyspace = `deadbolt_drop_${randomBytes(4).toString('hex')}`;
    const inKeyspace = new URL(url);
    inKeyspace.pathname = `/${keyspace}`;
    const cycle = async () => {
      const locker = createLocker(cassandraBackend({ url: inKeyspace.href }), { ttlMs: 3000 });
      try {
        await (await locker.lock(key())).release();
      } finally {
        await locker.close();
      }
    };
    await cycle();
    await dropSchema(admin.client, keyspace);
    const left = await admin.client.execute('SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = ?', [keyspace], {
      prepare: true,
    });
    expect(left.rowLength, 'the keyspace is gone').toBe(0);
    try {
      await cycle();
    } finally {
      await dropSchema(admin.client, keyspace);
    }
  }, 180_000);

  it("a renewal finds its own cell among newcomers' cells beside it, however many sort before it", async () => {
    // A newcomer's first attempt writes the main table before it knows its place, and a slow store
    // lets such cells stand a while (behaviour 20c). Two that sorted before the holder's cell hid it
    // from a renewal that read two rows, and the holder gave up a healthy lock.
    for (const [algorithm, table] of [
      ['queue', 'lock_holders'],
      ['shadow', 'shadow_holders'],
    ] as const) {
      const lock = await newLocker(algorithm, 3000).lock(key());
      for (const slot of ['!newcomer-a/0', '!newcomer-b/0'])
        await cql(`INSERT INTO ${admin.keyspace}.${table} (lock_id, slot, owner) VALUES (?, ?, ?) USING TTL 5`, [
          idFor(lock.key),
          slot,
          slot,
        ]);
      await sleep(2500); // two renewals (one a second) or more
      expect(lock.held, `${algorithm}: the holder gave up its lock`).toBe(true);
      await lock.release();
    }
  });

  it("queue: inspect names the queue's head as holder when a renewal made its cell newer than a newcomer's", async () => {
    // A newcomer's first attempt writes the main table before it knows its place; a renewal landing
    // while that cell stands makes the holder's cell the later-written one, and inspect, which took
    // the earliest-written cell, named the newcomer (the CLI's inspect printed the wrong holder).
    const lock = await newLocker('queue', 3000).lock(key());
    const id = idFor(lock.key);
    const later = `${'9'.repeat(20)}/!newcomer`;
    await cql(`INSERT INTO ${admin.keyspace}.lock_waiters (lock_id, slot, entry, owner) VALUES (?, ?, ?, ?) USING TTL 5`, [
      id,
      '!newcomer/0',
      later,
      '!newcomer',
    ]);
    await cql(`INSERT INTO ${admin.keyspace}.lock_holders (lock_id, slot, owner) VALUES (?, ?, ?) USING TTL 5`, [
      id,
      '!newcomer/0',
      '!newcomer',
    ]);
    await sleep(1500); // a renewal (one a second) rewrites the holder's cell after the newcomer's
    const view = await admin.inspect(lock.key, 'mutex');
    expect(view.holders.map((h) => h.owner)).toEqual([lock.owner]);
    expect(view.waiters?.map((w) => w.owner)).toEqual(['!newcomer']);
    await lock.release();
  });

  it('queue: the queue cell sorts by time-service microseconds, then owner; the main cell names the holder', async () => {
    const [a, b] = [newLocker(), newLocker()];
    const k = key();
    const held = await a.lock(k);
    const waiting = b.lock(k);
    await new Promise((r) => setTimeout(r, 300));
    const queue = (await cql(`SELECT entry, owner FROM deadbolt.lock_waiters WHERE lock_id = ?`, [idFor(k)])).rows;
    queue.sort((x, y) => String(x['entry']).localeCompare(String(y['entry'])));
    expect(queue.map((r) => r['owner'])).toEqual([held.owner, expect.any(String)]);
    for (const row of queue) expect(row['entry']).toMatch(new RegExp(`^\\d{20}/${row['owner']}$`));
    const main = (await cql(`SELECT owner FROM deadbolt.lock_holders WHERE lock_id = ?`, [idFor(k)])).rows;
    expect(main.map((r) => r['owner'])).toEqual([held.owner]);
    await held.release();
    const next = await waiting;
    expect(next.token).toBeGreaterThan(held.token);
    await next.release();
  });

  it('queue: a renewal that lands after the release never resurrects the released cells', async () => {
    const locker = newLocker('queue');
    const k = key();
    const lock = await locker.lock(k);
    const slot = (await cql(`SELECT slot FROM deadbolt.lock_holders WHERE lock_id = ?`, [idFor(k)])).first()['slot'] as string;
    // A renewal's write, sent before the release but delivered after it, carries an older timestamp.
    const lateTimestamp = String(Math.floor((performance.timeOrigin + performance.now()) * 1000) - 1000);
    await lock.release();
    await cql(`INSERT INTO deadbolt.lock_holders (lock_id, slot, owner) VALUES (?, ?, ?) USING TTL 10 AND TIMESTAMP ?`, [
      idFor(k),
      slot,
      lock.owner,
      lateTimestamp,
    ]);
    expect(await harness.inspect(k)).toEqual([]);
  });

  for (const algorithm of ['queue', 'shadow'] as const) {
    it(`${algorithm}: a lease released twice never deletes the rows of the next acquisition in its slot`, async () => {
      const backend = cassandraBackend({ url, algorithm });
      try {
        const k = key();
        const ask = () =>
          backend.acquire({ ...MUTEX, key: k, owner: crypto.randomUUID(), ttlMs: 3000, wait: false, signal: new AbortController().signal });
        const first = (await ask())!;
        await backend.release(first);
        const second = (await ask())!; // this backend's first free slot again: the same row
        await backend.release(first); // a late or repeated release of the old lease
        expect(await harness.inspect(k)).toEqual([second.owner]);
        expect(await backend.renew(second, 3000)).toBe(true);
        await backend.release(second);
        expect(await harness.inspect(k)).toEqual([]);
      } finally {
        await backend.close();
      }
    });
  }

  it('queue: a first attempt on a quiet key is one batch, then the queue and main side by side; a busy key sends it to wait in the queue', async () => {
    const [a, b] = [cassandraBackend({ url }), cassandraBackend({ url })];
    try {
      const k = key();
      const ask = (backend: typeof a, wait: boolean, signal = new AbortController().signal) =>
        backend.acquire({ ...MUTEX, key: k, owner: crypto.randomUUID(), ttlMs: 3000, wait, signal });
      await ask(a, false).then((lease) => a.release(lease!)); // connects, prepares, sees the token
      // Each request a's client starts, with how many of them were in flight then.
      const sent: string[] = [];
      let inFlight = 0;
      const client = a.client as unknown as Record<'batch' | 'execute', (...args: unknown[]) => Promise<unknown>>;
      for (const name of ['batch', 'execute'] as const) {
        const original = client[name]!.bind(a.client);
        client[name] = (...args) => {
          sent.push(`${name}@${inFlight++}`);
          return original(...args).finally(() => inFlight--);
        };
      }
      const held = (await ask(a, true))!;
      // Both cells in one batch; the queue and main read side by side; the token's compare-and-set.
      expect(sent).toEqual(['batch@0', 'execute@0', 'execute@1', 'execute@0']);
      // b has not seen the key: its first attempt writes main beside the holder, finds both, takes
      // its cell out again and waits in the queue.
      const waiting = ask(b, true);
      await new Promise((r) => setTimeout(r, 300));
      const main = await cql(`SELECT owner FROM deadbolt.lock_holders WHERE lock_id = ?`, [idFor(k)]);
      expect(main.rows.map((r) => r['owner'])).toEqual([held.owner]);
      expect(await harness.inspect(k)).toHaveLength(2); // b's queue cell
      expect(await a.renew(held, 3000)).toBe(true);
      await a.release(held);
      const next = (await waiting)!;
      expect(next.token).toBeGreaterThan(held.token);
      await b.release(next);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('shared: a waiter granted by its serial read writes nothing more, and its row outlives the lease as it counts it', async () => {
    const [a, b] = [cassandraBackend({ url }), cassandraBackend({ url })];
    try {
      const k = key();
      // Long enough that neither of b's writes falls due on a loaded machine while it waits (its
      // row's rewrite after a third of its ttl; the grant's own write once half the lease since
      // its last write has passed): whether the grant writes must be decided by the rule alone.
      const ttlMs = 20_000;
      const claim = (wait: boolean) => ({
        key: k,
        owner: crypto.randomUUID(),
        ttlMs,
        wait,
        signal: new AbortController().signal,
        mode: 'shared' as const,
        limit: 1,
      });
      const held = (await a.acquire(claim(false)))!;
      // The statements b's client sends, by their first words.
      const sent: string[] = [];
      const client = b.client as unknown as Record<'batch' | 'execute', (...args: unknown[]) => Promise<unknown>>;
      for (const name of ['batch', 'execute'] as const) {
        const original = client[name]!.bind(b.client);
        client[name] = (...args) => (sent.push(name === 'batch' ? 'batch' : String(args[0]).trim().split(/\s+/)[0]!), original(...args));
      }
      const waiting = b.acquire(claim(true));
      while (!sent.includes('BEGIN')) await new Promise((r) => setTimeout(r, 5)); // b has joined (one conditional batch)
      await new Promise((r) => setTimeout(r, 200));
      const before = sent.length;
      await a.release(held);
      const lease = (await waiting)!;
      // Only reads after the release: the grant is the serial read that found our claim first.
      expect(new Set(sent.slice(before))).toEqual(new Set(['SELECT']));
      expect(lease.token).toBeGreaterThan(held.token);
      // The row's ttl (whole seconds, read after our clock) covers what is left of the lease.
      const leftMs = lease.acquiredAt + ttlMs - performance.now();
      const row = await cql(`SELECT TTL(owner) AS ttl FROM deadbolt.shared_claims WHERE lock_id = ? AND seq = ?`, [
        idFor(k),
        String(lease.token),
      ]);
      expect(Number(row.rows[0]!['ttl']) * 1000).toBeGreaterThanOrEqual(leftMs);
      expect(await b.renew(lease, ttlMs)).toBe(true);
      await b.release(lease);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it("queue: a renewal keeps the lock beside a taker's cell while its own cell never lapsed (also past half the ttl), and gives it up after a longer gap", async () => {
    const backend = cassandraBackend({ url });
    try {
      const k = key();
      const lease = (await backend.acquire({
        ...MUTEX,
        key: k,
        owner: crypto.randomUUID(),
        ttlMs: 2000,
        wait: false,
        signal: new AbortController().signal,
      }))!;
      const taker = async () =>
        cql(`INSERT INTO deadbolt.lock_holders (lock_id, slot, owner) VALUES (?, ?, ?) USING TTL 3`, [idFor(k), 'someone/0', 'taker']);
      // A newcomer's first attempt has its main cell in for a moment: not a holder.
      await taker();
      expect(await backend.renew(lease, 2000)).toBe(true);
      // Past half the ttl but within the lease's estimate (the ttl less core's drift allowance):
      // our cell still stood when the rewrite landed, so the taker's cell is still no holder.
      await sleep(1100);
      await taker();
      expect(await backend.renew(lease, 2000)).toBe(true);
      // Past the estimate since our last write: our cell may have lapsed meanwhile, so a cell
      // beside it may be a holder's; the renewal gives the lock up and takes its cells out.
      await sleep(2100);
      await taker();
      expect(await backend.renew(lease, 2000)).toBe(false);
      const main = (await cql(`SELECT owner FROM deadbolt.lock_holders WHERE lock_id = ?`, [idFor(k)])).rows.map((r) => r['owner']);
      expect(main).toEqual(['taker']);
    } finally {
      await backend.close();
    }
  });

  it('tokens come from the token row and continue from it, for every algorithm on the same key', async () => {
    const k = key();
    let last = 0n;
    for (const algorithm of ['queue', 'lwt', 'shadow', 'queue'] as const) {
      const lock = await newLocker(algorithm).lock(k);
      expect(lock.token).toBeGreaterThan(last);
      const row = (await cql(`SELECT fencing_token FROM deadbolt.lock_token WHERE lock_id = ?`, [idFor(k)])).first();
      expect(BigInt(String(row!['fencing_token']))).toBe(lock.token);
      last = lock.token;
      await lock.release();
    }
  });

  it('lwt: the row is written with a TTL of ttl + 1 s and released only by its owner', async () => {
    const [a, b] = [newLocker('lwt'), newLocker('lwt')];
    const k = key();
    const lock = await a.lock(k, { ttlMs: 5000 });
    const ttl = (await cql(`SELECT TTL(owner) AS ttl FROM deadbolt.lock_lwt WHERE lock_id = ?`, [idFor(k)])).first()!['ttl'] as number;
    expect(ttl).toBeGreaterThan(4);
    expect(ttl).toBeLessThanOrEqual(6);
    expect(await b.tryLock(k)).toBeNull();
    await lock.release();
    expect(await harness.inspect(k)).toEqual([]);
  });

  it('a keyspace in the url and another in the keyspace option: InvalidArgumentError (neither wins silently); the same one twice is fine', async () => {
    const host = new URL(url).host;
    for (const make of [cassandraBackend, cassandraFence]) {
      expect(() => make({ url: `cassandra://${host}/one`, keyspace: 'other' })).toThrow(
        expect.objectContaining({
          code: 'INVALID_ARGUMENT',
          message: expect.stringMatching(/keyspace one .* \(keyspace\) option names other/),
        }),
      );
    }
    const [same, option] = [
      cassandraBackend({ url: `cassandra://${host}/one`, keyspace: 'one' }),
      cassandraBackend({ url: `cassandra://${host}`, keyspace: 'two' }),
    ];
    expect([same.keyspace, option.keyspace]).toEqual(['one', 'two']);
    await Promise.all([same.close(), option.close()]);
  });

  it('rejects a ttl that is not whole seconds, before any I/O', async () => {
    const locker = newLocker();
    await expect(locker.lock(key(), { ttlMs: 2500 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(locker.lock(key(), { ttlMs: 1000 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
  });

  it('a closed connection the driver left in its pool is dropped before the next request, not answered by the 8 s timeout', async () => {
    const backend = cassandraBackend({ url });
    const locker = track(createLocker(backend, { ttlMs: 3000 }));
    await (await locker.tryLock(key()))!.release();
    // The state the driver's two reconnections at once can leave behind (seen after a burst of
    // resets): a connection in the pool whose socket closed without the pool hearing of it.
    type Pooled = { connected: boolean; netClient: { destroy(): void } };
    const pooled = [...backend.client.hosts.values()].flatMap(
      (host) => (host as unknown as { pool: { connections: Pooled[] } }).pool.connections,
    );
    expect(pooled.length).toBeGreaterThan(0);
    for (const connection of pooled) {
      connection.connected = false; // its close then tells nobody, as in the driver's race
      connection.netClient.destroy();
    }
    await sleep(100);
    const started = performance.now();
    const lock = await locker.lock(key(), { timeoutMs: 20_000 });
    expect(performance.now() - started, 'ms to a grant on a new connection').toBeLessThan(4000);
    await lock.release();
  });

  it('time service: GlobalTime only moves forward, its value is its write timestamp, and now() is monotonic', async () => {
    await harness.inspect('warm-up');
    const service = new CassandraTimeService(admin.client, 'deadbolt', { intervalMs: 50 });
    await service.start();
    const read = async () =>
      (await cql(`SELECT micros, WRITETIME(micros) AS written FROM deadbolt.global_time WHERE id = 'GlobalTime'`)).first()!;
    const first = await read();
    expect(String(first['micros'])).toBe(String(first['written']));
    let previous = service.now();
    for (let i = 0; i < 100; i++) {
      const now = service.now();
      expect(now).toBeGreaterThan(previous);
      previous = now;
    }
    await new Promise((r) => setTimeout(r, 200));
    const second = await read();
    expect(BigInt(String(second['micros']))).toBeGreaterThanOrEqual(BigInt(String(first['micros'])));
    service.stop();
  });

  it('time service: a first read that failed is made again by the next start(), not kept', async () => {
    await harness.inspect('warm-up');
    const keyspace = `deadbolt_late_${Math.random().toString(36).slice(2, 8)}`;
    const service = new CassandraTimeService(admin.client, keyspace, { intervalMs: 60_000 });
    // Its table does not exist yet: the first read fails, as one cut by a reset would.
    await expect(service.start()).rejects.toThrow();
    await cql(`CREATE KEYSPACE ${keyspace} WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}`);
    await cql(`CREATE TABLE ${keyspace}.global_time (id text PRIMARY KEY, micros bigint)`);
    try {
      await service.start();
      const row = (await cql(`SELECT micros FROM ${keyspace}.global_time WHERE id = 'GlobalTime'`)).first();
      expect(row, 'the second start() read and wrote GlobalTime').not.toBeNull();
    } finally {
      service.stop();
      await dropSchema(admin.client, keyspace);
    }
  });

  it('time service: a GlobalTime far in the future moves our order by at most maxAheadMs', async () => {
    await harness.inspect('warm-up');
    const future = Math.floor((performance.timeOrigin + performance.now()) * 1000) + 3_600_000_000; // an hour ahead
    const service = new CassandraTimeService(admin.client, 'deadbolt_ahead', { maxAheadMs: 1000 });
    await cql(`CREATE KEYSPACE IF NOT EXISTS deadbolt_ahead WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}`);
    await cql(`CREATE TABLE IF NOT EXISTS deadbolt_ahead.global_time (id text PRIMARY KEY, micros bigint)`);
    await cql(`UPDATE deadbolt_ahead.global_time USING TIMESTAMP ? SET micros = ? WHERE id = 'GlobalTime'`, [
      String(future),
      String(future),
    ]);
    await service.tick();
    const wall = Math.floor((performance.timeOrigin + performance.now()) * 1000);
    const ahead = service.now() - wall;
    expect(ahead).toBeGreaterThan(500_000);
    expect(ahead).toBeLessThan(1_500_000);
    await dropSchema(admin.client, 'deadbolt_ahead');
  });
});

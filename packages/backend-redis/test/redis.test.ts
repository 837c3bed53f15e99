import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { backendOf, MUTEX } from '@deadbolt/core/testing';
import { createLocker } from '@deadbolt/core';
import {
  abortedWithin,
  closeLockersAfterEach,
  FaultProxy,
  matrixUrl,
  restartMatrixServer,
  storeAddress,
  viaUrl,
} from '@deadbolt/conformance';
import { clusterUrl } from '@deadbolt/conformance/cluster';
import { redisBackend, type RedisBackend } from '@deadbolt/redis';
import { keysFor, sharedKeysFor } from '@deadbolt/redis/testing';
import { Redis } from 'ioredis';
import { Redis as Valkey } from 'iovalkey';
import { afterAll, describe, expect, it } from 'vitest';

const url = matrixUrl('redis');
const admin = new Redis(url);
// Reconnect failures while the restart test has Redis down are expected; its commands still fail loudly.
admin.on('error', () => undefined);
const track = closeLockersAfterEach();
const newLocker = (fifo?: boolean, ttlMs = 1000) => track(createLocker(redisBackend({ url, fifo }), { ttlMs }));
const key = () => `redis-test/${Math.random().toString(36).slice(2)}`;

afterAll(() => admin.disconnect());

describe('redis backend', () => {
  it('refuses a server that may evict lock keys, unless the caller accepts it', async () => {
    const [, before] = (await admin.config('GET', 'maxmemory-policy')) as string[];
    const [, limit] = (await admin.config('GET', 'maxmemory')) as string[];
    try {
      await admin.config('SET', 'maxmemory', '1gb');
      await admin.config('SET', 'maxmemory-policy', 'allkeys-lru');
      const error = await newLocker()
        .tryLock(key())
        .catch((e: unknown) => e);
      expect(error).toMatchObject({
        code: 'BACKEND_ERROR',
        cause: { message: expect.stringMatching(/maxmemory-policy allkeys-lru.*noeviction/) },
      });
      const accepting = track(createLocker(redisBackend({ url, allowEviction: true }), { ttlMs: 1000 }));
      await (await accepting.lock(key())).release();
      await admin.config('SET', 'maxmemory-policy', 'noeviction');
      await (await newLocker().lock(key())).release();
    } finally {
      await admin.config('SET', 'maxmemory-policy', before!);
      await admin.config('SET', 'maxmemory', limit!);
    }
  });

  it('reloads its scripts after SCRIPT FLUSH (NOSCRIPT falls back to EVAL)', async () => {
    const locker = newLocker();
    const k = key();
    await (await locker.lock(k)).release();
    await admin.script('FLUSH');
    const lock = await locker.lock(k);
    await lock.extend();
    await admin.script('FLUSH');
    await lock.release();
    expect(await locker.tryLock(k)).not.toBeNull();
  });

  // On the first Redlock node: a plain Redis that test-matrix always starts itself (no data on
  // disk), so the test runs everywhere and never restarts a Redis the run did not start, such as
  // a machine's own on 6379 (see restartRefusal).
  it('server restart: tokens keep increasing when Redis restarts empty, and the holder notices the loss', async () => {
    const nodeUrl = matrixUrl('redis-redlock');
    const node = new Redis(nodeUrl);
    node.on('error', () => undefined);
    try {
      // A prefix of its own: tokens go on from the clock after an empty restart, which is above
      // every earlier token only where no migration lifted the prefix's token floor past the clock
      // (a restart forgets floors).
      const prefix = `deadbolt:restart-${randomUUID()}:`;
      const fresh = () => track(createLocker(redisBackend({ url: nodeUrl, prefix }), { ttlMs: 1000 }));
      const locker = fresh();
      const k = key();
      const before = await locker.lock(k);
      await restartMatrixServer('redis-redlock', () => node.ping());
      expect(await node.dbsize()).toBe(0);
      await abortedWithin(before, 10_000); // the restart may outlast the ttl: it may have aborted already
      expect(before.signal.reason).toMatchObject({ code: 'LOCK_LOST' });
      const after = await fresh().lock(k, { timeoutMs: 10_000 });
      expect(after.token).toBeGreaterThan(before.token);
      await after.release();
    } finally {
      node.disconnect();
    }
  }, 60_000);

  it('a waiter still converges when its release message is lost (subscriber killed)', async () => {
    const [a, b] = [newLocker(), newLocker()];
    const k = key();
    const held = await a.lock(k);
    const waiting = b.lock(k, { timeoutMs: 5000 });
    await new Promise((r) => setTimeout(r, 100));
    await admin.call('CLIENT', 'KILL', 'TYPE', 'pubsub');
    await held.release();
    const lock = await waiting;
    expect(lock.held).toBe(true);
    await lock.release();
  });

  it('wakes a waiter by message, not by its poll timer', async () => {
    const a = track(createLocker(redisBackend({ url, maxPollDelayMs: 5000 }), { ttlMs: 20_000 }));
    const b = track(createLocker(redisBackend({ url, maxPollDelayMs: 5000 }), { ttlMs: 20_000 }));
    const k = key();
    const held = await a.lock(k);
    const waiting = b.lock(k);
    await new Promise((r) => setTimeout(r, 300));
    const releasedAt = performance.now();
    await held.release();
    await (await waiting).release();
    // Polling alone would take seconds here; a generous bound still tells the two apart.
    expect(performance.now() - releasedAt).toBeLessThan(1000);
  });

  it('a semaphore waiter is woken by the release that lets it in, counted by its place, not by its poll timer', async () => {
    const slow = () => track(createLocker(redisBackend({ url, maxPollDelayMs: 5000 }), { ttlMs: 20_000 }));
    const [holders, waiters] = [slow(), slow()];
    const k = key();
    const held = [await holders.semaphore(k, { limit: 2 }).acquire(), await holders.semaphore(k, { limit: 2 }).acquire()];
    const first = waiters.semaphore(k, { limit: 2 }).acquire();
    await new Promise((r) => setTimeout(r, 100));
    const second = waiters.semaphore(k, { limit: 2 }).acquire();
    await new Promise((r) => setTimeout(r, 300));
    // Each release lets in the waiter at its head; the other sleeps through it (its place needs two).
    for (const waiting of [first, second]) {
      const releasedAt = performance.now();
      await held.shift()!.release();
      const permit = await waiting;
      // Polling alone would take 2.5 to 5 s here; a generous bound still tells the two apart.
      expect(performance.now() - releasedAt).toBeLessThan(1000);
      held.push(permit);
    }
    await Promise.all(held.map((p) => p.release()));
  });

  it("a read-write lock's waiters sleep through the releases that cannot let them in: a write through the reads ahead of it, a read through everything up to the write ahead of it", async () => {
    const holders = track(createLocker(redisBackend({ url }), { ttlMs: 20_000 }));
    const client = new Redis(url);
    try {
      // The waiters' own connection, so that what they send can be counted; their re-check is 5 s away.
      const backend = redisBackend({ client, maxPollDelayMs: 5000 });
      const waiters = track(createLocker(backend, { ttlMs: 20_000 }));
      const k = key();
      const claims = sharedKeysFor(backend, k).lock;
      const queued = async (n: number) => {
        while ((await admin.zcard(claims)) < n) await new Promise((r) => setTimeout(r, 5));
      };
      const reads = [];
      for (let i = 0; i < 3; i++) reads.push(await holders.readWriteLock(k).read());
      const write = waiters.readWriteLock(k).write();
      await queued(4);
      const read = waiters.readWriteLock(k).read();
      await queued(5);
      await new Promise((r) => setTimeout(r, 300));
      const sent: string[] = [];
      const send = client.sendCommand.bind(client);
      client.sendCommand = (command, stream) => (sent.push(command.name), send(command, stream));
      // Two of the three reads go: neither waiter can be let in, and neither sends anything.
      await reads.shift()!.release();
      await reads.shift()!.release();
      await new Promise((r) => setTimeout(r, 300));
      expect(sent).toEqual([]);
      // The last read goes: the write is let in (one attempt), the read behind it still sleeps.
      let releasedAt = performance.now();
      await reads.shift()!.release();
      const writeLock = await write;
      // Polling alone would take 2.5 to 5 s here; a generous bound still tells the two apart.
      expect(performance.now() - releasedAt).toBeLessThan(1000);
      await new Promise((r) => setTimeout(r, 300));
      expect(sent).toEqual(['evalsha']);
      // The write goes: the read is let in.
      releasedAt = performance.now();
      await writeLock.release();
      await (await read).release();
      expect(performance.now() - releasedAt).toBeLessThan(1000);
      expect(sent).toEqual(['evalsha', 'evalsha', 'evalsha', 'evalsha']);
    } finally {
      client.disconnect();
    }
  });

  it("a FIFO handoff message is the head's grant: it sends nothing to take it, and its lease ends no later than the store's", async () => {
    const holder = track(createLocker(redisBackend({ url }), { ttlMs: 20_000 }));
    const client = new Redis(url);
    try {
      const backend = redisBackend({ client, maxPollDelayMs: 5000 });
      const k = key();
      const keys = keysFor(backend, k);
      const held = await holder.lock(k);
      const ttlMs = 20_000;
      const waiting = backend.acquire({ ...MUTEX, key: k, owner: randomUUID(), ttlMs, wait: true, signal: new AbortController().signal });
      while ((await admin.zcard(keys.queue)) < 1) await new Promise((r) => setTimeout(r, 5));
      await new Promise((r) => setTimeout(r, 300));
      // What the waiter's connection sends from here on (its re-check is 5 s away).
      const sent: string[] = [];
      const send = client.sendCommand.bind(client);
      client.sendCommand = (command, stream) => (sent.push(command.name), send(command, stream));
      await held.release();
      const lease = (await waiting)!;
      expect(sent).toEqual([]);
      // The grant in the store is the one the message carried.
      const [owner, token, ends] = (await client.get(keys.lock))!.split('|');
      expect([owner, token]).toEqual([lease.owner, lease.token.toString()]);
      // The lease as the waiter counts it ends no later than the store's. The store's clock is read
      // first and ours after its answer, so the time between them can only make the local lease look
      // shorter, never longer (read the other way round, a slow round trip fails a correct lease).
      // 1 ms of slack for two clocks' rates.
      const [seconds, micros] = await admin.time();
      const localLeft = lease.acquiredAt + ttlMs - performance.now();
      const storeLeft = Number(ends) - (Number(seconds) * 1000 + Number(micros) / 1000);
      expect(localLeft).toBeLessThanOrEqual(storeLeft + 1);
      await backend.release(lease);
      expect(await admin.exists(keys.lock)).toBe(0);
      await backend.close();
    } finally {
      client.disconnect();
    }
  });

  it("a semaphore's release hands the permit to the next waiter: it sends nothing to take it, its lease ends no later than the store's, and the message goes to its process alone", async () => {
    const client = new Redis(url);
    // Every message on deadbolt's channels, by channel: the shared one that every process hears,
    // and each backend's own.
    const listener = new Redis(url);
    const heard: [channel: string, message: string][] = [];
    listener.on('pmessage', (_pattern: string, channel: string, message: string) => heard.push([channel, message]));
    await listener.psubscribe('deadbolt:*');
    try {
      const backend = redisBackend({ client, maxPollDelayMs: 5000 });
      const holder = redisBackend({ url });
      const k = key();
      const keys = sharedKeysFor(backend, k);
      const ttlMs = 20_000;
      const claim = (owner: string) => ({
        key: k,
        owner,
        ttlMs,
        wait: true,
        signal: new AbortController().signal,
        mode: 'shared' as const,
        limit: 2,
      });
      const held = await Promise.all([holder.acquire(claim(randomUUID())), holder.acquire(claim(randomUUID()))]);
      const [first, second] = [randomUUID(), randomUUID()];
      const waiting = backend.acquire(claim(first));
      while ((await admin.zcard(keys.lock)) < 3) await new Promise((r) => setTimeout(r, 5));
      const behind = backend.acquire(claim(second));
      while ((await admin.zcard(keys.lock)) < 4) await new Promise((r) => setTimeout(r, 5));
      await new Promise((r) => setTimeout(r, 300));
      // What the waiters' connection sends from here on (their re-checks are 5 s away).
      const sent: string[] = [];
      const send = client.sendCommand.bind(client);
      client.sendCommand = (command, stream) => (sent.push(command.name), send(command, stream));
      await holder.release(held[0]!);
      const lease = (await waiting)!;
      expect(lease.owner).toBe(first);
      expect(sent).toEqual([]);
      // The grant is the waiter's own claim, with the token it was queued with.
      expect(await admin.zscore(keys.lock, first)).toBe(lease.token.toString());
      expect(lease.token).toBeGreaterThan(held[1]!.token);
      // The lease as the waiter counts it ends no later than the store's (its clock read first, as above).
      const [seconds, micros] = await admin.time();
      const localLeft = lease.acquiredAt + ttlMs - performance.now();
      const storeLeft = Number(await admin.zscore(keys.queue, first)) - (Number(seconds) * 1000 + Number(micros) / 1000);
      expect(localLeft).toBeLessThanOrEqual(storeLeft + 1);
      // The waiter behind counted that release and sleeps on; the next one is its grant.
      const releasedAt = performance.now();
      await holder.release(held[1]!);
      const next = (await behind)!;
      expect(next.owner).toBe(second);
      expect(performance.now() - releasedAt).toBeLessThan(1000);
      expect(sent).toEqual([]);
      // Each handoff was one message, on the waiters' backend's own channel, which only it hears:
      // nobody else is let in, so no other process reads it.
      const handoffs = heard.filter(([, message]) => message.startsWith(`${keys.lock}\n`));
      expect(handoffs.map(([, message]) => message.split('\n')[1]!.split(' ')[0])).toEqual([first, second]);
      const [channel] = handoffs[0]!;
      expect(channel).toMatch(/^deadbolt:w:/);
      expect(handoffs.every(([c]) => c === channel)).toBe(true);
      expect(await admin.pubsub('NUMSUB', channel)).toEqual([channel, 1]);
      // Both are real claims: renewed, then given back, and the key is gone. A release with nobody
      // to hand a permit to names nobody, on the channel every process hears.
      expect(await backend.renew(lease, ttlMs)).toBe(true);
      await Promise.all([backend.release(lease), backend.release(next)]);
      expect(await admin.exists(keys.lock)).toBe(0);
      const unnamed = () => heard.filter(([, message]) => message === `${keys.lock}\n`);
      for (const until = performance.now() + 1000; unnamed().length < 2 && performance.now() < until;) {
        await new Promise((r) => setTimeout(r, 5));
      }
      expect(unnamed().map(([c]) => c)).toEqual(['deadbolt:released', 'deadbolt:released']);
      await Promise.all([backend.close(), holder.close()]);
    } finally {
      client.disconnect();
      listener.disconnect();
    }
  });

  it('a handoff skips a waiter that died at the head of the queue, and the lock key outlives the waiters left', async () => {
    const make = () => track(createLocker(redisBackend({ url, maxPollDelayMs: 5000 }), { ttlMs: 20_000 }));
    const [a, b, c] = [make(), make(), make()];
    const k = key();
    const keys = keysFor(backendOf(a) as RedisBackend, k);
    const held = await a.lock(k);
    const waiting = b.lock(k);
    // c must queue behind b. Calls made together can join in either order (each backend first
    // checks the server's eviction settings on its own connection), so c starts once b is queued.
    while ((await admin.zcard(keys.queue)) < 1) await new Promise((r) => setTimeout(r, 5));
    const behind = c.lock(k, { timeoutMs: 60_000 });
    await new Promise((r) => setTimeout(r, 300));
    // A waiter that died: first in arrival order, its deadline long past.
    const dead = 'dead-owner|dead-backend';
    await admin.zadd(keys.queue, 1, dead);
    await admin.zadd(keys.deadlines, 1, dead);
    const releasedAt = performance.now();
    await held.release();
    const lock = await waiting;
    // Handed over at the release and woken by its message, not by the 5 s re-check.
    expect(performance.now() - releasedAt).toBeLessThan(1000);
    expect(await admin.zscore(keys.queue, dead)).toBeNull();
    // The handoff kept the lock key's expiry, which must still cover the last waiter's deadline.
    // Read at one instant (a transaction): read one after the other, the second answer came up to
    // tens of ms later on a loaded machine, and the key's time left had shrunk by as much.
    const answers = (await admin.multi().zrange(keys.deadlines, '-1', '-1', 'WITHSCORES').time().pttl(keys.lock).exec())!;
    const [deadlines, time, pttl] = answers.map(([, value]) => value) as [string[], string[], number];
    const [, last] = deadlines;
    const [seconds, micros] = time;
    const nowMs = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
    expect(pttl).toBeGreaterThanOrEqual(Number(last) - nowMs - 5);
    await lock.release();
    await (await behind).release();
  });

  it('a connection that goes silent for good (never closed) is replaced within a command timeout, and the wait goes on on a new one', async () => {
    const proxy = await FaultProxy.start(storeAddress(url));
    try {
      const locker = track(createLocker(redisBackend({ url: viaUrl(url, proxy.address), commandTimeoutMs: 1000 }), { ttlMs: 5000 }));
      await (await locker.lock(key())).release(); // connected and checked first
      proxy.strand(); // the open connection answers nothing from now on; a new one works
      const started = performance.now();
      const lock = await locker.lock(key(), { timeoutMs: 20_000 });
      // One command timeout to give up on the dead connection, then a reconnect. Without ioredis's
      // socketTimeout every retry went out on the dead connection again until the locker's grace ran out.
      expect(performance.now() - started).toBeLessThan(3000);
      expect(lock.held).toBe(true);
      await lock.release();
    } finally {
      await proxy.close();
    }
  });

  it('a connection whose answers come late but keep coming is kept, though commands wait on it longer than a command timeout in all', async () => {
    const proxy = await FaultProxy.start(storeAddress(url));
    try {
      const locker = track(createLocker(redisBackend({ url: viaUrl(url, proxy.address), commandTimeoutMs: 1000 }), { ttlMs: 5000 }));
      await (await locker.lock(key())).release(); // connected and checked first
      proxy.delay(250); // each way: every answer 500 ms late
      // A try every 100 ms for 3 s: the connection always has commands waiting, and bytes come back every 100 ms.
      const tries: Promise<unknown>[] = [];
      for (let i = 0; i < 30; i++) {
        tries.push(locker.tryLock(key()).then((lock) => lock?.release()));
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      await Promise.all(tries);
      expect(proxy.accepted, 'the slow connection was replaced').toBe(1);
    } finally {
      await proxy.close();
    }
  });

  it("a lock cycle arms no Node timer of its own: the commands' deadlines share one check per connection", async () => {
    const { createHook } = await import('node:async_hooks');
    const locker = newLocker(true, 10_000);
    const k = key();
    for (let i = 0; i < 50; i++) await (await locker.lock(k)).release(); // the eviction check, warm timer lists
    let timers = 0;
    const hook = createHook({ init: (_id, type) => void (type === 'Timeout' && timers++) }).enable();
    try {
      for (let i = 0; i < 200; i++) await (await locker.lock(k)).release();
    } finally {
      hook.disable();
    }
    // Two commands a cycle: ioredis's commandTimeout and socketTimeout made 800 timers here.
    expect(timers).toBeLessThan(10);
  });

  it('a tryLock whose answer never came gives back what it may have been granted, instead of blocking the key for its ttl', async () => {
    const proxy = await FaultProxy.start(storeAddress(url));
    try {
      const k = key();
      const backend = redisBackend({ url: viaUrl(url, proxy.address), commandTimeoutMs: 500 });
      const trier = track(createLocker(backend, { ttlMs: 30_000 }));
      await (await trier.lock(key())).release(); // connected and checked first
      proxy.muteReplies();
      const error = await trier.tryLock(k).catch((e: unknown) => e);
      expect(error).toMatchObject({ code: 'BACKEND_UNAVAILABLE' });
      // The request was carried out (the grant wrote the key's token counter), only its answer was held.
      expect(await admin.exists(keysFor(backend, k).token)).toBe(1);
      // Still muted: the give-back reaches the store all the same, and the key is free long before its 30 s ttl.
      const started = performance.now();
      const lock = await newLocker().lock(k, { timeoutMs: 10_000 });
      expect(performance.now() - started, 'the key stayed blocked by the unanswered grant').toBeLessThan(5000);
      await lock.release();
    } finally {
      await proxy.close();
    }
  });

  it('puts every key of a lock in one cluster hash slot, whatever the user key contains', async () => {
    const backend = redisBackend({ url });
    for (const k of ['plain', 'with {braces}', '}{', '{', 'ключ 🔒', 'x'.repeat(1024)]) {
      const names = Object.values(keysFor(backend, k));
      const slots = await Promise.all(names.map((n) => admin.cluster('KEYSLOT', n).catch(() => slotOf(n))));
      expect(new Set(slots).size, k).toBe(1);
      expect(new Set(names).size).toBe(4);
    }
    expect(keysFor(backend, 'a').lock).not.toBe(keysFor(backend, 'a ').lock);
    await backend.close();
  });

  it('rejects a prefix that would change the hash slot, and options that cannot work together', () => {
    const refused = (options: object) =>
      expect(() => redisBackend(options as never), JSON.stringify(options)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    refused({ url, prefix: 'x{' });
    refused({ url: 'http://x' });
    // The guard's keys carry no hash tag: beside a lock's keys, every acquire would fail with CROSSSLOT.
    refused({ url, cluster: true, restartGuardMs: 1000 });
    refused({ url, cluster: true, syncReplicas: 1 });
    refused({ url, client: admin });
    refused({ url: 'redis://127.0.0.1:6379,127.0.0.1:6380' }); // several servers only with cluster: true
  });

  it('restart guard: a server without the birth mark (restarted empty, or new) grants nothing for restartGuardMs', async () => {
    // A prefix of its own: to the guard this is a server it has never seen, as after an empty restart.
    const prefix = `guard-${Math.random().toString(36).slice(2)}:`;
    const guardMs = 1500;
    const locker = track(createLocker(redisBackend({ url, prefix, restartGuardMs: guardMs }), { ttlMs: 1000 }));
    const k = key();
    const started = performance.now();
    expect(await locker.tryLock(k)).toBeNull();
    const lock = await locker.lock(k, { timeoutMs: 5000 });
    expect(performance.now() - started).toBeGreaterThanOrEqual(guardMs - 50);
    await lock.release();
    expect(await locker.tryLock(k)).not.toBeNull(); // marked now: no guard any more
    await admin.del(`${prefix}born`); // the mark gone, as on an empty restart
    expect(await locker.tryLock(`${k}/2`)).toBeNull();
    await admin.del(`${prefix}born`, `${prefix}restart-guard`);
    expect(() => redisBackend({ url, restartGuardMs: -1 })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
  });

  it('a client of yours keeps what its options do to commands: a keyPrefix prefixes every key of a lock, auto-pipelining still works', async () => {
    const prefixed = new Redis(url, { keyPrefix: 'pfx:' });
    const pipelining = new Redis(url, { enableAutoPipelining: true });
    try {
      const backend = redisBackend({ client: prefixed });
      const k = key();
      const lock = await track(createLocker(backend, { ttlMs: 5000 })).lock(k);
      expect(await admin.get(`pfx:${keysFor(backend, k).lock}`)).toBe(lock.owner);
      expect(await admin.exists(keysFor(backend, k).lock)).toBe(0);
      await lock.release();
      expect(await admin.exists(`pfx:${keysFor(backend, k).lock}`)).toBe(0);
      const other = track(createLocker(redisBackend({ client: pipelining }), { ttlMs: 5000 }));
      const [a, b] = await Promise.all([other.tryLock(k), other.tryLock(k)]);
      expect([a, b].filter(Boolean)).toHaveLength(1);
      await (a ?? b)!.release();
    } finally {
      prefixed.disconnect();
      pipelining.disconnect();
    }
  });

  it('does not close a client it was given', async () => {
    const client = new Redis(url);
    const locker = createLocker(redisBackend({ client }), { ttlMs: 1000 });
    await (await locker.lock(key())).release();
    await locker.close();
    expect(await client.ping()).toBe('PONG');
    client.disconnect();
  });

  it('takes an iovalkey client as an ioredis one, and refuses a closed client or a node-redis one before any I/O', async () => {
    const valkey = new Valkey(url);
    try {
      const backend = redisBackend({ client: valkey });
      const { host, port } = storeAddress(url);
      expect(backend.address, 'the servers the client was given, as its errors name them').toBe(`${host}:${port}`);
      const locker = track(createLocker(backend, { ttlMs: 5000 }));
      const lock = await locker.lock(key());
      expect(await admin.get(keysFor(backend, lock.key).lock)).toBe(lock.owner);
      await lock.release();
      await locker.close();
      expect(await valkey.ping(), 'left open').toBe('PONG');
    } finally {
      valkey.disconnect();
    }
    for (const client of [new Redis(url), new Valkey(url)]) {
      await client.quit();
      await once(client, 'end');
      expect(() => redisBackend({ client })).toThrow(/client was closed \(its status is 'end'\)/);
    }
    // node-redis's shape: connect/sendCommand/isOpen, no isCluster.
    const nodeRedis = { isOpen: true, isReady: true, connect() {}, sendCommand() {}, duplicate() {} };
    expect(() => redisBackend({ client: nodeRedis as never })).toThrow(/ioredis or iovalkey .*node-redis clients are not accepted/);
  });
});

/** The hash tag's slot as Redis Cluster computes it (CRC16 of the text between the first { and }). */
function slotOf(name: string): number {
  const open = name.indexOf('{');
  const close = open >= 0 ? name.indexOf('}', open + 1) : -1;
  const tagged = close > open + 1 ? name.slice(open + 1, close) : name;
  let crc = 0;
  for (const byte of Buffer.from(tagged)) {
    crc ^= byte << 8;
    for (let i = 0; i < 8; i++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc % 16384;
}

describe('redis with Sentinel: a client of ours stays connected', () => {
  it('a reconnection cut short while it asks the Sentinels (as a failover notice can) does not end the client for good', async () => {
    // ioredis ends such a client for good ("Connection is closed." to every command after it);
    // staged here by hand: a second disconnect while the first one's reconnection resolves.
    const backend = redisBackend({ url: clusterUrl('redis-sentinel'), sentinel: 'deadbolt' });
    const locker = createLocker(backend);
    try {
      await (await locker.lock(`sentinel/${randomUUID()}`)).release();
      const client = backend.client as Redis;
      client.disconnect(true);
      await once(client, 'connecting');
      client.disconnect(true);
      const lock = await locker.lock(`sentinel/${randomUUID()}`, { timeoutMs: 10_000 });
      expect(lock.held).toBe(true);
      await lock.release();
    } finally {
      await locker.close();
    }
  });
});

/**
 * Behaviours 29–35: what an outside audit found the suite could not see. Each class below broke a
 * backend (or all of them) while every earlier behaviour passed: a claim whose parts expire at
 * different times (29), a handshake slower than the connect timeout (30), keys that are not
 * well-formed Unicode or meet in one store namespace (31), nested family calls (32), waits
 * abandoned by close() (33), a password in a URL (34), and hostile option values (35). Long: one
 * group, one behaviour after another, each readable on its own.
 */
import { inspect as show } from 'node:util';
import { randomUUID } from 'node:crypto';
import {
  createLocker,
  DeadboltError,
  memoryBackend,
  migratingBackend,
  SelfDeadlockError,
  type Lock,
  type LockBackend,
  type Locker,
  type MultiLock,
} from '@deadbolt/core';
import { sleep, type Rule } from '@deadbolt/core/backend';
import { aliasesOf, optionRules } from '@deadbolt/core/testing';
import { countingBackend, withoutFloorRead } from './counting.js';
import type { SuiteContext } from './context.js';
import { FaultProxy, type Address } from './fault-proxy.js';
import { longestStallFromNow, stallsFromNow } from './helpers.js';
import { retryFor } from './test-matrix.js';

/** What a family's probe gives: a lock another client took, or null. */
type Probe = () => Promise<Lock | MultiLock | null>;

/** One family's long hold: the locks held, the one-shot probes that must fail, the wait that must not be granted. */
interface LongHold {
  readonly family: string;
  readonly held: (Lock | MultiLock)[];
  readonly probes: Probe[];
  readonly waiting: Promise<Lock>;
}

export function defineHardeningBehaviours(ctx: SuiteContext): void {
  const { describe, it, expect, afterEach } = ctx.runner;
  const { options, harness, capabilities, T, freshKey, makeLocker, makeFence, itWhen } = ctx;
  const proxies: FaultProxy[] = [];
  const startProxy = async (target: Address | readonly Address[] = options.network!.store) => {
    const proxy = await FaultProxy.start(target);
    proxies.push(proxy);
    return proxy;
  };
  const track = (locker: Locker) => (ctx.lockers.push(locker), locker);
  const firstStore = () => (Array.isArray(options.network!.store) ? options.network!.store[0]! : (options.network!.store as Address));

  describe('what an outside audit showed the suite could not see', () => {
    afterEach(async () => {
      await Promise.all(proxies.splice(0).map((p) => p.close()));
    });

    it('29. long holds in every family: a mutex, permits, write and read locks and lockAll stay exclusive across many renewals', async () => {
      // Six renewal periods and a second more: a claim whose parts the store expires at different
      // times (a cell the renewal does not rewrite, kept for its first ttl + 1 s) shows up here.
      const holdMs = 2 * T + 1000;
      // A process that does not run does not renew: a pause past a third of the ttl (a loaded
      // machine, a long garbage collection) may end a hold legitimately. Such a try starts over on
      // fresh keys, up to three times; a failure with no such pause fails at once.
      for (let attempt = 1; ; attempt++) {
        const pauses = longestStallFromNow();
        const holds: LongHold[] = [];
        try {
          await holdLong(holds, holdMs);
          return;
        } catch (error) {
          await sleep(20); // the loop's sampler records a pause only once it runs again
          const paused = pauses();
          await Promise.allSettled(holds.flatMap((h) => [...h.held.map((l) => l.release()), h.waiting.then((l) => l.release())]));
          if (paused < T / 3 || attempt === 3) throw error;
        }
      }
    }, 180_000);

    /** Behaviour 29's one try: takes every family's hold into `holds` (so a failed try can give them back), then checks them. */
    async function holdLong(holds: LongHold[], holdMs: number): Promise<void> {
      const [a, b, c] = [await makeLocker(), await makeLocker(), await makeLocker()];
      const waitFor = (take: () => Promise<Lock>) => take();
      {
        const key = freshKey('long-mutex');
        holds.push({
          family: 'mutex',
          held: [await a.lock(key)],
          probes: [() => b.tryLock(key)],
          waiting: waitFor(() => c.lock(key, { timeoutMs: holdMs * 3 })),
        });
      }
      {
        const [k1, k2] = [freshKey('long-all-1'), freshKey('long-all-2')];
        const all = await a.lockAll([k1, k2]);
        holds.push({
          family: 'lockAll',
          held: [all],
          probes: [() => b.tryLock(k1), () => b.tryLock(k2), () => b.tryLockAll([k1, k2])],
          waiting: waitFor(() => c.lock(k2, { timeoutMs: holdMs * 3 })),
        });
      }
      if (capabilities.semaphore) {
        const key = freshKey('long-permits');
        const held = [await a.semaphore(key, { limit: 2 }).acquire(), await b.semaphore(key, { limit: 2 }).acquire()];
        holds.push({
          family: 'semaphore',
          held,
          probes: [() => c.semaphore(key, { limit: 2 }).tryAcquire()],
          waiting: waitFor(() => c.semaphore(key, { limit: 2 }).acquire({ timeoutMs: holdMs * 3 })),
        });
      }
      if (capabilities.readWrite) {
        const key = freshKey('long-write');
        holds.push({
          family: 'write lock',
          held: [await a.readWriteLock(key).write()],
          probes: [() => b.readWriteLock(key).tryRead(), () => b.readWriteLock(key).tryWrite()],
          waiting: waitFor(() => c.readWriteLock(key).read({ timeoutMs: holdMs * 3 })),
        });
        const shared = freshKey('long-read');
        holds.push({
          family: 'read locks',
          held: [await a.readWriteLock(shared).read(), await b.readWriteLock(shared).read()],
          probes: [() => c.readWriteLock(shared).tryWrite()],
          waiting: waitFor(() => c.readWriteLock(shared).write({ timeoutMs: holdMs * 3 })),
        });
      }
      const granted = holds.map((h) => ({
        family: h.family,
        at: h.waiting.then(
          () => performance.now(),
          () => Infinity,
        ),
      }));
      const until = performance.now() + holdMs;
      while (performance.now() < until) {
        for (const h of holds) {
          for (const probe of h.probes) {
            const got = await probe();
            await got?.release();
            expect(got, `${h.family}: another client got in while the holders still held`).toBeNull();
          }
          for (const lock of h.held) expect(lock.held, `${h.family}: a live holder lost its lock`).toBe(true);
        }
        await sleep(Math.min(250, T / 4));
      }
      const releasedAt = performance.now();
      for (const h of holds) await Promise.all(h.held.map((l) => l.release()));
      for (const g of granted)
        expect(await g.at, `${g.family}: the waiter was granted while the holders held`).toBeGreaterThanOrEqual(releasedAt);
      for (const h of holds) await (await h.waiting).release();
    }

    itWhen(
      () => (options.network ? undefined : 'no network between client and store'),
      '30. a slow handshake: a store that accepts at once and answers past the connect timeout gives a typed error, never an uncaught one, and the next call works',
      async () => {
        const troubles = watchProcess();
        try {
          const proxy = await startProxy();
          proxy.slowHandshake(1500);
          const backend = await options.network!.createBackend(proxy.address, proxy.addresses, { connectTimeoutMs: 500 });
          const locker = track(createLocker(backend, { ttlMs: T, operationTimeoutMs: 1000 }));
          const key = freshKey('slow-handshake');
          const started = performance.now();
          const stalls = stallsFromNow();
          const first = await locker.tryLock(key).then(
            (lock) => ({ lock, error: undefined }),
            (error: unknown) => ({ lock: undefined, error: error as DeadboltError }),
          );
          expect(first.lock, 'a lock granted through a handshake that had not finished').toBeUndefined();
          expect(first.error?.code, String(first.error)).toBe('BACKEND_UNAVAILABLE');
          // One operation timeout, and what a loaded machine kept this process from running.
          expect(performance.now() - started).toBeLessThanOrEqual(1000 + 250 + stalls());
          // The late answers arrive meanwhile (to clients that gave up on them), then the delay ends.
          await sleep(2000);
          proxy.heal();
          // A grant that landed late (after the caller gave up) is handed back meanwhile.
          const lock = await retryFor(10_000, async () => {
            const got = await locker.tryLock(key);
            if (!got) throw new Error('still held: the late grant has not been handed back yet');
            return got;
          });
          expect(lock.held).toBe(true);
          expect(await (await makeLocker()).tryLock(key)).toBeNull();
          await lock.release();
          await sleep(200);
          expect(troubles.seen(), 'uncaught exceptions or unhandled rejections').toEqual([]);
        } finally {
          troubles.stop();
        }
      },
      60_000,
    );

    it('31a. keys as the store sees them: a key that is not well-formed Unicode is refused before any I/O', async () => {
      const { backend, calls } = countingBackend(await options.createBackend());
      const locker = track(createLocker(backend, { ttlMs: T }));
      const base = freshKey('surrogates');
      // Every store sees a key as UTF-8, where each of these is the same as `${base}\uFFFD`.
      for (const key of [`${base}\uD800`, `${base}\uDC00`, `${base}\uDC00\uD800`, '\uD83D']) {
        await expect(locker.lock(key), JSON.stringify(key)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
        await expect(locker.tryLock(key)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
        await expect(locker.lockAll([`${base}/ok`, key])).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
        if (capabilities.semaphore)
          expect(() => locker.semaphore(key, { limit: 2 })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
        if (capabilities.readWrite) expect(() => locker.readWriteLock(key)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
      }
      expect(calls).toEqual([]);
      // A well-formed pair (a real surrogate pair, and U+FFFD itself) is two locks, as the store sees them.
      const [x, y] = [await locker.lock(`${base}\uD83D\uDD12`), await locker.tryLock(`${base}\uFFFD`)];
      expect(y, 'two well-formed keys shared one lock').not.toBeNull();
      await Promise.all([x.release(), y!.release()]);
    });

    itWhen(
      () => (options.createBackendInOtherNamespace ? undefined : 'the suite names no second namespace'),
      '31b. keys as the store sees them: lockers with different namespaces (table, prefix, keyspace, root) on one store never share a lock, and a dual migration between them does not wait for itself',
      async () => {
        const key = freshKey('namespaces');
        const here = await makeLocker();
        const there = track(createLocker(await options.createBackendInOtherNamespace!(), { ttlMs: T }));
        // The other namespace may not exist yet: its first use can create it (Cassandra's keyspace and
        // tables take seconds on a loaded machine), longer than one tryLock may take. A wait rides that out.
        await (await there.lock(freshKey('namespaces-warm'), { timeoutMs: 25_000 })).release();
        const a = await here.lock(key);
        const b = await there.tryLock(key);
        expect(b, "a lock in another namespace was refused: the two share the store's lock").not.toBeNull();
        await Promise.all([a.release(), b!.release()]);
        // The runbook's migration between two namespaces of one store, where a migration can take
        // the store (it needs a token floor, which a minimal backend such as the guide's example lacks).
        if (!ctx.probeFloor()) return;
        const dual = track(
          createLocker(
            migratingBackend({ from: await options.createBackend(), to: await options.createBackendInOtherNamespace!(), phase: 'dual' }),
            { ttlMs: T },
          ),
        );
        const both = await dual.lock(key, { timeoutMs: 5000 });
        expect(await here.tryLock(key), 'a holder in both namespaces did not exclude the old one').toBeNull();
        expect(await there.tryLock(key), 'a holder in both namespaces did not exclude the new one').toBeNull();
        await both.release();
      },
      60_000,
    );

    it('32. nested family calls: a write or read in a write, a read in a read (with a writer queued between), a permit in a permit at the limit are typed errors at once, or nested holds when reentrant', async () => {
      const plain = await makeLocker();
      const reentrant = await makeLocker({ reentrant: true });
      const other = await makeLocker();
      const refused = async (what: string, take: () => Promise<unknown>) => {
        const started = performance.now();
        const error = await take().then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(error, `${what} inside its own hold`).toBeInstanceOf(SelfDeadlockError);
        expect(performance.now() - started, `${what}: refused at once`).toBeLessThan(1000);
      };
      if (capabilities.readWrite) {
        const key = freshKey('nested-rw');
        const rw = plain.readWriteLock(key);
        await rw.withWrite(async (outer) => {
          await refused('a write', () => rw.write({ timeoutMs: 10_000 }));
          await refused('a read', () => rw.read({ timeoutMs: 10_000 }));
          await refused('withWrite', () => rw.withWrite(() => undefined));
          expect(await rw.tryWrite()).toBeNull();
          expect(await rw.tryRead()).toBeNull();
          expect(outer.held).toBe(true);
        });
        await rw.withRead(async () => {
          // Another process's writer queues behind our read; a second read of ours would queue behind it.
          const writer = other.readWriteLock(key).write({ timeoutMs: 10_000 });
          await sleep(200);
          await refused('a read with a writer queued between', () => rw.read({ timeoutMs: 10_000 }));
          await refused('withRead', () => rw.withRead(() => undefined));
          void writer.then(
            (w) => w.release(),
            () => undefined,
          );
        });
        await sleep(100);
        const rrw = reentrant.readWriteLock(key);
        await rrw.withWrite(async (outer) => {
          const write = await rrw.write({ timeoutMs: 5000 });
          const read = await rrw.read({ timeoutMs: 5000 });
          expect([write.token, read.token]).toEqual([outer.token, outer.token]);
          await Promise.all([write.release(), read.release()]);
          expect(outer.held).toBe(true);
        });
        await rrw.withRead(async (outer) => {
          const read = await rrw.withRead((inner) => inner.token);
          expect(read).toBe(outer.token);
          await expect(rrw.write({ timeoutMs: 5000 })).rejects.toMatchObject({ code: 'LOCK_UPGRADE' });
        });
      }
      if (capabilities.semaphore) {
        const key = freshKey('nested-permit');
        const semaphore = plain.semaphore(key, { limit: 1 });
        await semaphore.withPermit(async () => {
          await refused('a permit at the limit', () => semaphore.acquire({ timeoutMs: 10_000 }));
          await refused('withPermit', () => semaphore.withPermit(() => undefined));
          expect(await semaphore.tryAcquire()).toBeNull();
        });
        const again = reentrant.semaphore(key, { limit: 1 });
        await again.withPermit(async (outer) => {
          const inner = await again.acquire({ timeoutMs: 5000 });
          expect(inner.token).toBe(outer.token);
          await inner.release();
          expect(outer.held).toBe(true);
        });
      }
      // The mutex, as before: refused without reentrancy.
      const key = freshKey('nested-lock');
      await plain.withLock(key, () => refused('a lock', () => plain.lock(key, { timeoutMs: 10_000 })));
    }, 60_000);

    it("33. abandoned waits leave nothing: after close() of a locker with many pending waits and the holder's release, another client is granted at once", async () => {
      const [holder, next] = [await makeLocker(), await makeLocker()];
      // The waiter's store answers 30 ms late (where there is a network to slow): cleaning up after
      // an abort then takes longer than core waits for it, and close() must not cut it short.
      let waiter: Locker;
      if (options.network) {
        const proxy = await startProxy();
        proxy.delay(15);
        waiter = track(createLocker(await options.network.createBackend(proxy.address, proxy.addresses), { ttlMs: T }));
      } else {
        waiter = await makeLocker();
      }
      const key = freshKey('abandoned');
      const held = await holder.lock(key);
      const waits = Array.from({ length: 30 }, () => waiter.lock(key).catch((e: unknown) => e));
      let shared: { key: string; held: Lock; waits: Promise<unknown>[] } | undefined;
      if (capabilities.readWrite) {
        const sharedKey = freshKey('abandoned-rw');
        shared = {
          key: sharedKey,
          held: await holder.readWriteLock(sharedKey).read(),
          waits: Array.from({ length: 5 }, () =>
            waiter
              .readWriteLock(sharedKey)
              .write()
              .catch((e: unknown) => e),
          ),
        };
      }
      await sleep(1000); // every wait has queued in the store
      await waiter.close();
      for (const outcome of await Promise.all([...waits, ...(shared?.waits ?? [])]))
        expect(outcome).toMatchObject({ code: 'LOCKER_CLOSED' });
      await held.release();
      const got = await next.tryLock(key);
      expect(got, "a closed locker's waits still blocked the key").not.toBeNull();
      expect(await harness.inspect(key)).toEqual([got!.owner]);
      await got!.release();
      if (shared) {
        await shared.held.release();
        const write = await next.readWriteLock(shared.key).tryWrite();
        expect(write, "a closed locker's waiting writers still blocked the key").not.toBeNull();
        await write!.release();
      }
    }, 60_000);

    it('33b. a closed backend: new acquisitions on it (lock, tryLock, a permit, a read) reject at once with LockerClosedError, never waited out as a store out of reach', async () => {
      const backend = await options.createBackend();
      const locker = track(createLocker(backend, { ttlMs: T }));
      const key = freshKey('closed-backend');
      await (await locker.lock(key)).release(); // connected, tables and sessions made
      await backend.close();
      const started = performance.now();
      const attempts: Promise<unknown>[] = [locker.tryLock(key), locker.lock(key, { timeoutMs: 10_000 })];
      if (capabilities.semaphore) attempts.push(locker.semaphore(freshKey('closed-sem'), { limit: 2 }).acquire({ timeoutMs: 10_000 }));
      if (capabilities.readWrite) attempts.push(locker.readWriteLock(freshKey('closed-rw')).read({ timeoutMs: 10_000 }));
      for (const outcome of await Promise.all(
        attempts.map((a) =>
          a.then(
            (got) => got,
            (e: unknown) => e,
          ),
        ),
      ))
        expect(outcome, 'an acquisition on a closed backend').toMatchObject({ code: 'LOCKER_CLOSED' });
      // A store out of reach is ridden out for the unavailable grace (5 s): a closed backend is not one.
      expect(performance.now() - started).toBeLessThan(1000);
      await backend.close(); // again: nothing to do
    });

    itWhen(
      () => (options.createBackendWithCredentials ? undefined : 'the backend takes no credentials'),
      '34. no secret in an error: a password in the URL appears in no message, stack, cause, property or console output',
      async () => {
        const secret = `s3cret${Math.random().toString(36).slice(2, 10)}`;
        const troubles = watchProcess(secret);
        try {
          const failures: unknown[] = [];
          for (const address of [firstStore(), { host: '127.0.0.1', port: 1 }]) {
            let backend: LockBackend;
            try {
              backend = await options.createBackendWithCredentials!('deadbolt-user', secret, address);
            } catch (error) {
              failures.push(error);
              continue;
            }
            const locker = createLocker(backend, { ttlMs: T, operationTimeoutMs: 2000, unavailableGraceMs: 500 });
            for (const call of [() => locker.tryLock(freshKey('secret')), () => locker.lock(freshKey('secret'), { timeoutMs: 2000 })]) {
              await call().then(
                (lock) => lock?.release(),
                (error: unknown) => failures.push(error),
              );
            }
            await locker.close().catch((error: unknown) => failures.push(error));
          }
          await sleep(500); // whatever a driver logs or throws from a timer afterwards
          for (const failure of failures) expect(everything(failure), 'an error carried the password').not.toContain(secret);
          expect(troubles.printed(), 'the console showed the password').not.toContain(secret);
          expect(troubles.seen(), 'uncaught exceptions or unhandled rejections').toEqual([]);
        } finally {
          troubles.stop();
        }
      },
      60_000,
    );

    it('35. hostile options: every entry point and the backend factory refuse null, wrong types, NaN, ±Infinity, timer overflows, negatives with InvalidArgumentError and no store call; inherited values are ignored', async () => {
      const { backend, calls } = countingBackend(await options.createBackend());
      const refuses = (what: string, run: () => unknown): Promise<void> => {
        let outcome: unknown;
        try {
          outcome = run();
        } catch (error) {
          outcome = Promise.reject(error);
        }
        return Promise.resolve(outcome).then(
          () => expect.fail(`${what} was accepted`),
          (error: unknown) => expect(error, `${what}: ${String(error)}`).toMatchObject({ code: 'INVALID_ARGUMENT' }),
        );
      };
      const key = freshKey('hostile');
      await refuses('createLocker(backend, null)', () => createLocker(backend, null as never));
      for (const [name, rule] of Object.entries(optionRules.createLocker)) {
        for (const value of rule.hostile)
          await refuses(`createLocker ${name}: ${show(value)}`, () => createLocker(backend, { ttlMs: T, [name]: value }));
        // An inherited value is not an option: a polluted prototype changes nothing.
        createLocker(backend, Object.assign(Object.create({ [name]: rule.hostile[0] }), { ttlMs: T }) as never);
      }
      // No renewals: every store call below is one the test makes on purpose.
      const locker = track(createLocker(backend, { ttlMs: T, autoRenew: false }));
      const semaphore = capabilities.semaphore ? locker.semaphore(key, { limit: 2 }) : undefined;
      const rw = capabilities.readWrite ? locker.readWriteLock(key) : undefined;
      const fn = () => undefined;
      type Entry = [string, (o: unknown) => unknown];
      const waiting: Entry[] = [
        ['lock', (o) => locker.lock(key, o as never)],
        ['withLock', (o) => locker.withLock(key, fn, o as never)],
        ['lockAll', (o) => locker.lockAll([key], o as never)],
        ['withLockAll', (o) => locker.withLockAll([key], fn, o as never)],
      ];
      const oneShot: Entry[] = [
        ['tryLock', (o) => locker.tryLock(key, o as never)],
        ['tryLockAll', (o) => locker.tryLockAll([key], o as never)],
      ];
      if (semaphore) {
        waiting.push(['acquire', (o) => semaphore.acquire(o as never)], ['withPermit', (o) => semaphore.withPermit(fn, o as never)]);
        oneShot.push(['tryAcquire', (o) => semaphore.tryAcquire(o as never)]);
      }
      if (rw) {
        waiting.push(
          ['read', (o) => rw.read(o as never)],
          ['write', (o) => rw.write(o as never)],
          ['withRead', (o) => rw.withRead(fn, o as never)],
          ['withWrite', (o) => rw.withWrite(fn, o as never)],
        );
        oneShot.push(['tryRead', (o) => rw.tryRead(o as never)], ['tryWrite', (o) => rw.tryWrite(o as never)]);
      }
      for (const [entries, rules] of [
        [waiting, optionRules.lock],
        [oneShot, optionRules.tryLock],
      ] as const) {
        for (const [call, run] of entries) {
          for (const bad of [null, 5, 'x', []]) await refuses(`${call}(…, ${show(bad)})`, () => run(bad));
          for (const [name, rule] of Object.entries(rules as Record<string, Rule<unknown>>)) {
            for (const value of rule.hostile) await refuses(`${call} ${name}: ${show(value)}`, () => run({ [name]: value }));
          }
        }
      }
      for (const value of [null, 'x', ...optionRules.semaphore.limit.hostile])
        await refuses(`semaphore limit ${show(value)}`, () => locker.semaphore(key, { limit: value as number }));
      await refuses('semaphore(key, null)', () => locker.semaphore(key, null as never));
      const held = await locker.lock(key);
      for (const value of [0, -1, NaN, Infinity, '5', null, 1.5])
        await refuses(`extend(${show(value)})`, () => held.extend(value as number));
      await held.release();
      await refuses('migratingBackend(null)', () => migratingBackend(null as never));
      await refuses('memoryBackend(null)', () => memoryBackend(null as never));
      // Inherited call options are ignored: the call behaves as one without options.
      for (const [name, rule] of Object.entries(optionRules.lock)) {
        const lock = await locker.lock(key, Object.create({ [name]: rule.hostile[0] }));
        await lock.release();
      }
      expect(withoutFloorRead(calls), "store calls besides the test's own locks").toEqual(
        Array.from({ length: 1 + Object.keys(optionRules.lock).length }, () => ['acquire', 'release']).flat(),
      );

      if (!options.factory) return;
      const { create, rules, valid } = options.factory;
      // The factory points at a proxy that counts connections: a refused option must open none.
      const proxy = await startProxy(firstStore());
      await refuses('the backend factory with null', () => create(null));
      for (const [name, rule] of Object.entries(rules)) {
        for (const value of rule.hostile)
          await refuses(`backend option ${name}: ${show(value)}`, () => create({ ...valid(proxy.address), [name]: value }));
      }
      expect(proxy.accepted, 'connections opened by factories given bad options').toBe(0);
      for (const [name, rule] of Object.entries(rules)) {
        const made = create(Object.assign(Object.create({ [name]: rule.hostile[0] }), valid(proxy.address)));
        await made.close();
      }
    }, 120_000);

    it('35b. a polluted Object.prototype: values inherited by every object (timeoutMs 0, client, …) are never read as options', async () => {
      const key = freshKey('polluted');
      const holder = await (await makeLocker()).lock(key);
      const proto = Object.prototype as Record<string, unknown>;
      /** Runs `fn` with `names` on Object.prototype (non-enumerable, as a careless library would add them). */
      const polluted = async <R>(names: Record<string, unknown>, fn: () => R | Promise<R>): Promise<R> => {
        expect(
          Object.keys(names).filter((name) => name in proto),
          'names already on Object.prototype',
        ).toEqual([]);
        try {
          for (const [name, value] of Object.entries(names))
            Object.defineProperty(proto, name, { value, configurable: true, writable: true, enumerable: false });
          return await fn();
        } finally {
          for (const name of Object.keys(names)) delete proto[name];
        }
      };
      let locker: Locker | undefined;
      try {
        // A backend made beside a polluted client and namespace options: it uses the url it was
        // given, in its own namespace. (Only while it is made, and no `keyspace`: the store drivers
        // read their own settings from plain objects too, which no library over them can change.)
        const backend = await polluted({ client: { polluted: true }, prefix: 'polluted:', table: 'polluted', root: '/polluted' }, () =>
          options.createBackend(),
        );
        // Each value would show if read: a wait that gives up at once, a lease too short for any
        // store, no renewal, a grace of nothing, a lock-delay past every maximum.
        const core = {
          timeoutMs: 0,
          ttlMs: 1,
          autoRenew: false,
          renewIntervalMs: 1,
          operationTimeoutMs: 1,
          unavailableGraceMs: 0,
          lockDelayMs: 10 ** 12,
          reentrant: true,
          limit: 10 ** 9,
        };
        await polluted(core, async () => {
          locker = createLocker(backend, { ttlMs: T });
          // Held elsewhere: a wait with no timeout of its own must wait, not give up at once.
          const waiting = locker.lock(key);
          const early = await Promise.race([
            waiting.then(
              () => 'granted',
              (e: unknown) => e,
            ),
            sleep(300).then(() => 'waiting'),
          ]);
          expect(early, 'lock() of a held key with no timeout of its own').toBe('waiting');
          await holder.release();
          const lock = await waiting;
          // Renewed: the lease outlives its ttl, in the store the backend was pointed at.
          await sleep(T + T / 2);
          expect(lock.signal.aborted, 'the lease was not renewed').toBe(false);
          expect(await harness.inspect(key)).toEqual([lock.owner]);
          await lock.release();
          const again = await locker.tryLock(key);
          expect(again, 'tryLock of the free key').not.toBeNull();
          await again!.release();
        });
      } finally {
        await holder.release().catch(() => undefined);
        await locker?.close().catch(() => undefined);
      }
    }, 60_000);

    it('35c. unknown options: a misspelt option of the locker, a call, a semaphore, forceRelease, a fence write, a migration and the backend factory is InvalidArgumentError naming it and the option it probably meant, with no store call', async () => {
      const { backend, calls } = countingBackend(await options.createBackend());
      /** `run` refuses the option `name`, naming it, and `meant` as the one it probably meant. */
      const refuses = async (what: string, run: () => unknown, name: string, meant: string) => {
        let error: unknown;
        try {
          await run();
        } catch (e) {
          error = e;
        }
        expect(error, `${what} took the unknown option ${name}`).toMatchObject({ code: 'INVALID_ARGUMENT' });
        expect((error as Error).message, what).toContain(`unknown option \`${name}\`; did you mean \`${meant}\`?`);
      };
      const key = freshKey('unknown');
      await refuses('createLocker', () => createLocker(backend, { ttl: 5000 } as never), 'ttl', 'ttlMs');
      const locker = track(createLocker(backend, { ttlMs: T, autoRenew: false }));
      await refuses('lock', () => locker.lock(key, { timeout: 100 } as never), 'timeout', 'timeoutMs');
      await refuses('tryLock', () => locker.tryLock(key, { sigal: new AbortController().signal } as never), 'sigal', 'signal');
      await refuses('lockAll', () => locker.lockAll([key], { timeoutMS: 100 } as never), 'timeoutMS', 'timeoutMs');
      if (capabilities.semaphore) await refuses('semaphore', () => locker.semaphore(key, { limt: 2 } as never), 'limt', 'limit');
      if (capabilities.readWrite) await refuses('read', () => locker.readWriteLock(key).read({ ttl: T } as never), 'ttl', 'ttlMs');
      await refuses('migratingBackend', () => migratingBackend({ from: backend, to: backend, phse: 'dual' } as never), 'phse', 'phase');
      await refuses('forceRelease', () => locker.forceRelease(key, randomUUID(), { Shared: true } as never), 'Shared', 'shared');
      if (options.fence) {
        const fence = await makeFence();
        await refuses('fence write', () => fence.write(key, 1n, 'v', { timeout: 100 } as never), 'timeout', 'timeoutMs');
        expect(await fence.read(key), 'written all the same').toBeNull();
      }
      expect(withoutFloorRead(calls), 'store calls for calls with unknown options').toEqual([]);

      if (!options.factory) return;
      const { create, rules, valid } = options.factory;
      // A factory pointed at a proxy that counts connections: a misspelt option opens none.
      const proxy = await startProxy(firstStore());
      for (const name of Object.keys(rules))
        await refuses(`backend option ${name}s`, () => create({ ...valid(proxy.address), [`${name}s`]: 1 }), `${name}s`, name);
      expect(proxy.accepted, 'connections opened by factories given an unknown option').toBe(0);
    }, 60_000);

    itWhen(
      () => (options.factory && options.network ? undefined : 'the suite names no factory of a store behind a network'),
      "35d. one name per idea: the factory takes `namespace`; the store's own word for it (and any other alias) is the same option, and both at once is InvalidArgumentError naming both, before any connection",
      async () => {
        const { create, rules, valid } = options.factory!;
        expect(Object.keys(rules), 'the option every store backend names its namespace by').toContain('namespace');
        const proxy = await startProxy(firstStore());
        for (const [alias, of] of aliasesOf(rules)) {
          const error = await Promise.resolve()
            .then(() => create({ ...valid(proxy.address), [alias]: 'x', [of]: 'x' }))
            .then(
              (made) => (void made.close(), undefined),
              (e: unknown) => e as Error,
            );
          expect(error, `${alias} and ${of} taken together`).toMatchObject({ code: 'INVALID_ARGUMENT' });
          expect(error?.message).toContain(`\`${alias}\` is another name for \`${of}\``);
        }
        expect(proxy.accepted, 'connections opened by factories given both names').toBe(0);
      },
    );
  });
}

/**
 * Watches the process for what must never happen: uncaught exceptions and unhandled rejections
 * (which end a user's process), and, with `secret`, console and stdout/stderr output.
 */
function watchProcess(secret?: string) {
  const troubles: string[] = [];
  const onError = (error: unknown) => troubles.push(String(error));
  process.on('uncaughtException', onError);
  process.on('unhandledRejection', onError);
  let printed = '';
  const restore: (() => void)[] = [];
  if (secret) {
    for (const method of ['log', 'info', 'warn', 'error', 'debug', 'trace'] as const) {
      const original = console[method];
      console[method] = (...args: unknown[]) => {
        printed += args.map((a) => show(a)).join(' ') + '\n';
      };
      restore.push(() => (console[method] = original));
    }
    for (const stream of [process.stdout, process.stderr]) {
      const original = stream.write;
      stream.write = ((chunk: unknown, ...rest: unknown[]) => {
        printed += String(chunk);
        return (original as (...args: unknown[]) => boolean).call(stream, chunk, ...rest);
      }) as typeof stream.write;
      restore.push(() => (stream.write = original));
    }
  }
  return {
    seen: () => [...troubles],
    printed: () => printed,
    stop() {
      process.off('uncaughtException', onError);
      process.off('unhandledRejection', onError);
      for (const undo of restore) undo();
    },
  };
}

/** Every string an error carries: message, stack, own properties, causes and aggregated errors, all the way down. */
function everything(error: unknown, seen = new Set<unknown>()): string {
  if (error === null || typeof error !== 'object' || seen.has(error)) return String(error);
  seen.add(error);
  const e = error as Error & { cause?: unknown; errors?: unknown[] };
  return [
    show(error, { depth: 10, showHidden: true, getters: true }),
    e.stack ?? '',
    e.message ?? '',
    ...(e.cause === undefined ? [] : [everything(e.cause, seen)]),
    ...(Array.isArray(e.errors) ? e.errors.map((x) => everything(x, seen)) : []),
  ].join('\n');
}

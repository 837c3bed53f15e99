/**
 * A migration, for every ordered pair of store kinds. Tokens: the sequences in which a key's
 * holders move between the phases of a rollout, each holder's token checked above every earlier
 * one's. Introspection: what a `dual` process's inspect and force release see and free while a
 * `to` process holds a key and a `dual` one waits for it. Each pair's processes are lockers over migrating backends of their phase; a process of a
 * phase that enters the rollout is a new one (a one-store phase lifts its store's floor once, when
 * it starts: see `MigratingBackend.tokenFloor`). The stores are scratch namespaces of this file's
 * own, since those floors are store-wide. About five minutes for the 42 pairs under the test
 * command's load.
 */
import { createLocker, migratingBackend, type Locker, type MigrationPhase } from '@deadbolt/core';
import { sleep } from '@deadbolt/core/backend';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { scratchNamespace, STORE_KINDS, type Namespace, type StoreKind } from './namespaces.js';

/** A ttl every store takes: whole seconds, above ZooKeeper's shortest session. */
const TTL_MS = 6000;

const namespaces = new Map<StoreKind, Namespace>(STORE_KINDS.map((kind) => [kind, scratchNamespace(kind)]));
const lockers: Locker[] = [];

beforeAll(async () => {
  // Each store reached once before the pairs start, so a store that is down fails here, once, and
  // no pair's first lock makes a namespace's tables.
  for (const ns of namespaces.values()) await ns.ready();
}, 180_000);

// Each test's processes end with it (the SQL stores' connections are counted).
afterEach(async () => {
  await Promise.allSettled(lockers.splice(0).map((l) => l.close()));
});

afterAll(async () => {
  await Promise.all([...namespaces.values()].map((ns) => ns.purge()));
}, 120_000);

/** A deterministic stream of numbers in [0, 1) (mulberry32), so a failing alternation repeats. */
function random(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

for (const from of STORE_KINDS) {
  for (const to of STORE_KINDS) {
    if (from === to) continue;
    describe(`migration ${from} -> ${to}`, () => {
      /** A new process in `phase`: a locker over a migrating backend of new backends. */
      const start = async (phase: MigrationPhase): Promise<Locker> => {
        const backend = migratingBackend({ from: await namespaces.get(from)!.backend(), to: await namespaces.get(to)!.backend(), phase });
        const locker = createLocker(backend, { ttlMs: TTL_MS });
        lockers.push(locker);
        return locker;
      };
      /** A key's holders, one after another: each token must be above every earlier one's. */
      const holds = (key: string) => {
        const seen: { phase: string; token: bigint }[] = [];
        return {
          seen,
          async take(locker: Locker, phase: string, times = 1) {
            for (let i = 0; i < times; i++) {
              const lock = await locker.lock(key, { timeoutMs: 20_000 }).catch((error: unknown) => {
                throw new Error(`hold ${seen.length + 1} (${phase}) failed`, { cause: error });
              });
              const last = seen.at(-1);
              seen.push({ phase, token: lock.token });
              await lock.release();
              if (last && lock.token <= last.token)
                expect.fail(
                  `hold ${seen.length} (${phase}) got ${lock.token}, not above hold ${seen.length - 1}'s ${last.token} (${last.phase})`,
                );
            }
          },
        };
      };
      const key = (label: string) => `migration-tokens/${from}-${to}/${label}/${Date.now()}`;

      // A hundred back-to-back grants in `from` (three hundred until the test command's time ran
      // short), each checked above the one before and `to`'s first above them all.
      it('a key held once in dual, 100 times in from beside it, then in to: each token above the last', async () => {
        const [dual, fromOnly] = [await start('dual'), await start('from')];
        const h = holds(key('after-dual'));
        await h.take(dual, 'dual');
        await h.take(fromOnly, 'from', 100);
        await h.take(await start('to'), 'to');
      }, 120_000);

      it('a key never held in dual: from, then to', async () => {
        const [fromOnly] = [await start('from'), await start('dual')];
        const h = holds(key('never-dual'));
        await h.take(fromOnly, 'from', 20);
        await h.take(await start('to'), 'to', 2);
      }, 120_000);

      it('a rollback: to after dual, then from again', async () => {
        const [dual, toOnly] = [await start('dual'), await start('to')];
        const h = holds(key('rollback'));
        await h.take(dual, 'dual');
        await h.take(toOnly, 'to', 20);
        await h.take(await start('from'), 'from', 2);
      }, 120_000);

      it("a to holder and a dual waiter (holding from, waiting in to): dual's inspect lists the one as holder and the other as waiter; force release frees the holder, never the waiter", async () => {
        const [toOnly, dual, inspector] = [await start('to'), await start('dual'), await start('dual')];
        const fromView = await start('from'); // reads only: a process that inspects, never locks
        const k = key('inspect');
        const held = await toOnly.lock(k);
        const waiting = dual.lock(k, { timeoutMs: 30_000 });
        // In place once `from` shows the dual waiter's first part, and `to` its place in line where
        // `to` lists waiters.
        const toSees = async () => (await toOnly.inspect(k)).waiters;
        for (let i = 0; ; i++) {
          const [inFrom, inTo] = [(await fromView.inspect(k)).holders.length, await toSees()];
          if (inFrom === 1 && (inTo === null || inTo.length === 1)) break;
          if (i > 200) expect.fail('the dual waiter never took its place');
          await sleep(25);
        }
        const seen = await inspector.inspect(k);
        expect(
          seen.holders.map((h) => h.owner),
          'holders',
        ).toEqual([held.owner]);
        const waiter = (await fromView.inspect(k)).holders[0]!.owner!;
        if (seen.waiters !== null) expect(seen.waiters.map((w) => w.owner)).toEqual([waiter]);
        expect(await inspector.forceRelease(k, waiter), "the waiter's owner freed something").toBe(false);
        expect(
          (await fromView.inspect(k)).holders.map((h) => h.owner),
          "the waiter's part in from",
        ).toEqual([waiter]);
        expect(await inspector.forceRelease(k, held.owner)).toBe(true);
        const granted = await waiting;
        expect(granted.owner, 'granted after the holder was freed').toBe(waiter);
        expect((await inspector.inspect(k)).holders.map((h) => h.owner)).toEqual([waiter]);
        await granted.release();
      }, 120_000);

      it('a rolling deploy forth, back and forth again: holders of two adjacent phases alternate at random', async () => {
        const next = random(STORE_KINDS.indexOf(from) * 16 + STORE_KINDS.indexOf(to));
        const h = holds(key('rollout'));
        // Each window is a stretch of the rollout in which two adjacent phases run; a phase that
        // enters is a new process, and one that leaves is gone for good.
        const windows: [MigrationPhase, MigrationPhase][] = [
          ['from', 'dual'],
          ['dual', 'to'],
          ['dual', 'from'],
          ['dual', 'to'],
        ];
        let running = new Map<MigrationPhase, Locker>();
        for (const window of windows) {
          const now = new Map<MigrationPhase, Locker>();
          for (const phase of window) now.set(phase, running.get(phase) ?? (await start(phase)));
          running = now;
          for (let step = 0; step < 12; step++) {
            const phase = window[next() < 0.5 ? 0 : 1];
            await h.take(running.get(phase)!, phase, 1 + Math.floor(next() * 3));
          }
        }
      }, 120_000);
    });
  }
}

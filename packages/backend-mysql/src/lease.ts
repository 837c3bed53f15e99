// Lease mode: a row per key whose lease ends by the server's clock, and a queue of shared claims
// (semaphore permits, read and write locks) judged by core's rule. Waiters poll on core's cadence
// and are woken at once by releases in this process.
import { LimitMismatchError } from '@deadbolt/core';
import {
  grantable,
  pollForLease,
  QueuePlace,
  ReleaseNotifier,
  waiterCadence,
  keySpace,
  type AcquireRequest,
  type KeySpace,
  type InFlight,
  type Lease,
} from '@deadbolt/core/backend';
import { grantableBehind } from '@deadbolt/core/sql';
import type { ResultSetHeader, RowDataPacket } from 'mysql2/promise';
import { MysqlStore, rolledBack } from './store.js';

/** A waiting shared claim after an attempt: its token (its place in the queue) and how many live claims are ahead of it. */
interface Waiting {
  readonly token: bigint;
  readonly ahead: number;
}

/** A lease-mode claim: a mutex's row, or a claim on a shared key (its key space says which). */
export interface MysqlRowLease extends Lease {
  readonly space: KeySpace;
  readonly hash: Buffer;
}

/** What a held claim of one key space runs (queries.ts). */
interface HeldStatements {
  /** Runs one of them: a shared key's touch several rows, so two can deadlock, and are tried again when rolled back. */
  run(operation: string, statement: string, params: unknown[]): Promise<ResultSetHeader>;
  readonly renew: string;
  readonly release: string;
  /** The name this process's waiters on the key listen under. */
  listensAs(key: string): string;
  raiseFloor(lease: MysqlRowLease, floor: string): Promise<boolean>;
}

export class MysqlLeases {
  readonly #store: MysqlStore;
  readonly #acquiring: InFlight;
  readonly #maxPollDelayMs: number;
  readonly #notifier = new ReleaseNotifier();
  /** Each key space's statements on a held claim. */
  readonly #held: Record<KeySpace, HeldStatements>;

  constructor(store: MysqlStore, acquiring: InFlight, maxPollDelayMs: number) {
    this.#store = store;
    this.#acquiring = acquiring;
    this.#maxPollDelayMs = maxPollDelayMs;
    const { sql } = store;
    this.#held = {
      mutex: {
        run: (operation, statement, params) => store.run(operation, statement, params),
        renew: sql.renew,
        release: sql.release,
        listensAs: (key) => key,
        raiseFloor: async ({ hash, owner }, floor) =>
          (await store.run('raise token floor', sql.raiseFloor, [floor, hash, owner])).affectedRows === 1,
      },
      shared: {
        run: (operation, statement, params) => store.runRetried(operation, statement, params),
        renew: sql.sharedRenew,
        release: sql.sharedRelease,
        listensAs: (key) => `shared:${key}`,
        raiseFloor: ({ hash, owner }, floor) =>
          store.keyTransaction('raise token floor', hash, async (connection) => {
            const result = await store.on<ResultSetHeader>(connection, sql.sharedRaiseFloor, [floor, hash, hash, owner]);
            return { commit: true, value: result.affectedRows === 1 };
          }),
      },
    };
  }

  /** `LockBackend.acquire`: a mutex's row, or a claim in a shared key's queue. */
  acquire(req: AcquireRequest): Promise<MysqlRowLease | null> {
    return keySpace(req) === 'mutex' ? this.#acquireRow(req) : this.#acquireShared(req);
  }

  async #acquireRow(req: AcquireRequest): Promise<MysqlRowLease | null> {
    const hash = MysqlStore.hash(req.key);
    if (!req.wait) return this.#attempt(req, hash);
    return pollForLease(
      this.#held.mutex.listensAs(req.key),
      req.signal,
      () => this.#attempt(req, hash),
      (lease) => this.release(lease),
      { notifier: this.#notifier, maxDelayMs: waiterCadence(req.ttlMs, this.#maxPollDelayMs).pollMs },
    );
  }

  async #attempt(req: AcquireRequest, hash: Buffer): Promise<MysqlRowLease | null> {
    await this.#store.tables.run(); // in each attempt, so a wait rides out a failed first try like any other
    const acquiredAt = performance.now();
    const keyBytes = Buffer.from(req.key, 'utf8');
    const least = (req.minToken ?? 0n).toString();
    const result = await this.#store.run('acquire', this.#store.sql.acquire, [hash, keyBytes, req.owner, req.ttlMs * 1000, least, least]);
    // Insert id 0: the row is held (see queries.ts).
    if (!result.insertId) return null;
    return { space: 'mutex', key: req.key, owner: req.owner, token: BigInt(result.insertId), acquiredAt, hash };
  }

  async #acquireShared(req: AcquireRequest): Promise<MysqlRowLease | null> {
    const hash = MysqlStore.hash(req.key);
    if (!req.wait) return this.#granted(await this.#sharedAttempt(req, hash));
    const { pollMs } = waiterCadence(req.ttlMs, this.#maxPollDelayMs);
    const place = new QueuePlace();
    let token: bigint | undefined;
    let placedAt = 0;
    return this.#acquiring.waitInLine(
      () =>
        pollForLease(
          this.#held.shared.listensAs(req.key),
          req.signal,
          async () => {
            // Between attempts (each a transaction under the key's row lock, so a key's attempts run
            // one at a time) a waiter only reads what is ahead of it, without the lock: waiters no
            // longer queue behind each other's attempts, and the attempt comes once the read says the
            // rule grants ours (or our place is due a refresh: the cadence rule's pollMs).
            if (token !== undefined && performance.now() - placedAt < pollMs) {
              const ahead = await this.#ahead(req, hash, token);
              if (!ahead.grantable) return place.look(ahead.count);
            }
            placedAt = performance.now();
            const result = await this.#sharedAttempt(req, hash);
            if (result === null || 'acquiredAt' in result) return result;
            token = result.token;
            return place.look(result.ahead);
          },
          (lease) => this.release(lease),
          { notifier: this.#notifier, maxDelayMs: pollMs },
        ),
      () => this.#store.run('release', this.#store.sql.sharedRelease, [hash, req.owner]),
      req.ttlMs,
    );
  }

  /** The claims ahead of a waiting claim with `token`, and whether the rule grants it past them. */
  async #ahead(req: AcquireRequest, hash: Buffer, token: bigint): Promise<{ count: number; grantable: boolean }> {
    const [row] = await this.#store.run<RowDataPacket[]>('acquire', this.#store.sql.sharedAhead, [hash, token.toString()]);
    const count = Number(row?.['ahead'] ?? 0);
    return { count, grantable: grantableBehind(req.mode, count, Number(row?.['exclusive_ahead'] ?? 0), req.limit) };
  }

  #granted(result: MysqlRowLease | Waiting | null): MysqlRowLease | null {
    return result && 'acquiredAt' in result ? result : null;
  }

  /**
   * One attempt at a shared claim: join the queue (or refresh our place) and judge it by the rule,
   * in one transaction under the key's row lock. A one-shot attempt that is not granted rolls back,
   * leaving nothing. A deadlock or lock wait timeout (the transaction rolled back whole) counts as
   * "not yet" for a waiter and is tried again at once, a few times, for a one-shot attempt.
   */
  async #sharedAttempt(req: AcquireRequest, hash: Buffer, tries = 1): Promise<MysqlRowLease | Waiting | null> {
    await this.#store.tables.run(); // in each attempt, so a wait rides out a failed first try like any other
    const store = this.#store;
    const q = store.sql;
    await store.run('acquire', q.sharedKeyRow, [hash, req.limit]);
    try {
      return await store.keyTransaction('acquire', hash, async (connection, stored) => {
        const acquiredAt = performance.now();
        const rows = await store.on<RowDataPacket[]>(connection, q.sharedQueue, [hash]);
        // Claims that ran out are deleted only when there are some (a round trip under the key's
        // lock saved on most attempts). One that runs out after this read is still counted ahead
        // of us: that can only make us wait one more look.
        if (rows.some((r) => r['expired'])) await store.on(connection, q.sharedPurge, [hash]);
        const queue = rows
          .filter((r) => !r['expired'])
          .map((r) => ({
            owner: r['owner'] as string,
            token: BigInt(r['token'] as string | number),
            mode: r['exclusive'] ? ('exclusive' as const) : ('shared' as const),
          }));
        let index = queue.findIndex((c) => c.owner === req.owner);
        const joining = index < 0;
        if (joining) {
          if (queue.length > 0 && stored !== req.limit) throw new LimitMismatchError(req.key, stored, req.limit);
          index = queue.push({ owner: req.owner, token: 0n, mode: req.mode }) - 1; // its token comes next
        }
        const ok = grantable(queue, index, req.limit);
        if (!ok && !req.wait) return { commit: false, value: null };
        // A waiter's place lasts about a ttl past each attempt (core's waiterCadence).
        const us = (ok ? req.ttlMs : waiterCadence(req.ttlMs, this.#maxPollDelayMs).placeMs) * 1000;
        let token = queue[index]!.token;
        if (joining) {
          const next = await store.on<ResultSetHeader>(connection, q.sharedNextToken, [(req.minToken ?? 0n).toString(), req.limit, hash]);
          token = BigInt(next.insertId);
          await store.on(connection, q.sharedInsert, [hash, req.owner, token.toString(), req.mode === 'exclusive', us]);
        } else if ((await store.on<ResultSetHeader>(connection, q.sharedRenew, [us, hash, req.owner])).affectedRows !== 1) {
          // Our place ran out during this attempt (a stalled waiter): the next attempt joins again.
          return { commit: false, value: null };
        }
        const lease = { space: 'shared' as const, key: req.key, owner: req.owner, token, acquiredAt, hash };
        return { commit: true, value: ok ? lease : { token, ahead: index } };
      });
    } catch (error) {
      if (rolledBack(error)) {
        // Rolled back whole: a waiter simply looks again later; a one-shot attempt tries again now.
        if (req.wait) return null;
        if (tries < 5) return this.#sharedAttempt(req, hash, tries + 1);
      }
      throw error;
    }
  }

  async renew(lease: MysqlRowLease, ttlMs: number): Promise<boolean> {
    const held = this.#held[lease.space];
    return (await held.run('renew', held.renew, [ttlMs * 1000, lease.hash, lease.owner])).affectedRows === 1;
  }

  async release(lease: MysqlRowLease): Promise<void> {
    await this.releaseOwner(lease.key, lease.hash, lease.owner, lease.space);
  }

  /** The release statement for `owner`; whether `owner` had the claim (this process's waiters are woken). Also `LockBackend.forceRelease`. */
  async releaseOwner(key: string, hash: Buffer, owner: string, space: KeySpace, operation = 'release'): Promise<boolean> {
    const held = this.#held[space];
    const result = await held.run(operation, held.release, [hash, owner]);
    if (result.affectedRows === 1) this.#notifier.notify(held.listensAs(key));
    return result.affectedRows === 1;
  }

  raiseTokenFloor(lease: MysqlRowLease, floor: bigint): Promise<boolean> {
    return this.#held[lease.space].raiseFloor(lease, floor.toString());
  }
}

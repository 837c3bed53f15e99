// Lease mode: a row per key whose lease ends by the server's clock, and a queue of shared claims
// (semaphore permits, read and write locks) judged by core's rule. Waiters poll on core's cadence
// and are woken at once by releases in this process.
import { LimitMismatchError } from '@deadbolt/core';
import {
  grantable,
  pollForLease,
  ReleaseNotifier,
  waiterCadence,
  type AcquireRequest,
  type InFlight,
  type Lease,
  type SharedRequest,
} from '@deadbolt/core/backend';
import type { ResultSetHeader, RowDataPacket } from 'mysql2/promise';
import { MysqlStore, rolledBack } from './store.js';

/** A lease-mode mutex (`row`) or shared claim (`shared`). */
export interface MysqlRowLease extends Lease {
  readonly kind: 'row' | 'shared';
  readonly hash: Buffer;
}

export class MysqlLeases {
  readonly #store: MysqlStore;
  readonly #acquiring: InFlight;
  readonly #maxPollDelayMs: number;
  readonly #notifier = new ReleaseNotifier();

  constructor(store: MysqlStore, acquiring: InFlight, maxPollDelayMs: number) {
    this.#store = store;
    this.#acquiring = acquiring;
    this.#maxPollDelayMs = maxPollDelayMs;
  }

  async acquire(req: AcquireRequest): Promise<MysqlRowLease | null> {
    const hash = MysqlStore.hash(req.key);
    if (!req.wait) return this.#attempt(req, hash);
    return pollForLease(
      req.key,
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
    return { kind: 'row', key: req.key, owner: req.owner, token: BigInt(result.insertId), acquiredAt, hash };
  }

  async acquireShared(req: SharedRequest): Promise<MysqlRowLease | null> {
    const hash = MysqlStore.hash(req.key);
    if (!req.wait) return this.#sharedAttempt(req, hash);
    try {
      return await pollForLease(
        `shared:${req.key}`,
        req.signal,
        () => this.#sharedAttempt(req, hash),
        (lease) => this.release(lease),
        { notifier: this.#notifier, maxDelayMs: waiterCadence(req.ttlMs, this.#maxPollDelayMs).pollMs },
      );
    } catch (error) {
      // Leave the queue before reporting the abort or failure: nothing of this waiter stays behind
      // (again later if the store is out of reach: `InFlight.leave`).
      await this.#acquiring.leave(() => this.#store.run('release', this.#store.sql.sharedRelease, [hash, req.owner]), req.ttlMs);
      throw error;
    }
  }

  /**
   * One attempt at a shared claim: join the queue (or refresh our place) and judge it by the rule,
   * in one transaction under the key's row lock. A one-shot attempt that is not granted rolls back,
   * leaving nothing. A deadlock or lock wait timeout (the transaction rolled back whole) counts as
   * "not yet" for a waiter and is tried again at once, a few times, for a one-shot attempt.
   */
  async #sharedAttempt(req: SharedRequest, hash: Buffer, tries = 1): Promise<MysqlRowLease | null> {
    await this.#store.tables.run(); // in each attempt, so a wait rides out a failed first try like any other
    const store = this.#store;
    const q = store.sql;
    await store.run('acquire', q.sharedKeyRow, [hash, req.limit]);
    try {
      return await store.keyTransaction('acquire', hash, async (connection, stored) => {
        const acquiredAt = performance.now();
        await store.on(connection, q.sharedPurge, [hash]);
        let queue = (await store.on<RowDataPacket[]>(connection, q.sharedQueue, [hash])).map((r) => ({
          owner: r['owner'] as string,
          token: BigInt(r['token'] as string | number),
          mode: r['exclusive'] ? ('exclusive' as const) : ('shared' as const),
        }));
        let mine = queue.find((c) => c.owner === req.owner);
        if (!mine) {
          if (queue.length > 0 && stored !== req.limit) throw new LimitMismatchError(req.key, stored, req.limit);
          const next = await store.on<ResultSetHeader>(connection, q.sharedNextToken, [(req.minToken ?? 0n).toString(), req.limit, hash]);
          mine = { owner: req.owner, token: BigInt(next.insertId), mode: req.mode };
          await store.on(connection, q.sharedInsert, [hash, req.owner, mine.token.toString(), req.mode === 'exclusive', req.ttlMs * 1000]);
          queue = [...queue, mine];
        }
        const ok = grantable(queue, queue.indexOf(mine), req.limit);
        if (!ok && !req.wait) return { commit: false, value: null };
        // A waiter's place lasts about a ttl past each attempt (core's waiterCadence).
        const ttlMs = ok ? req.ttlMs : waiterCadence(req.ttlMs, this.#maxPollDelayMs).placeMs;
        await store.on(connection, q.sharedRenew, [ttlMs * 1000, hash, req.owner]);
        const lease = { kind: 'shared' as const, key: req.key, owner: req.owner, token: mine.token, acquiredAt, hash };
        return { commit: true, value: ok ? lease : null };
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
    const params = [ttlMs * 1000, lease.hash, lease.owner];
    if (lease.kind === 'shared') return (await this.#store.runRetried('renew', this.#store.sql.sharedRenew, params)).affectedRows === 1;
    return (await this.#store.run('renew', this.#store.sql.renew, params)).affectedRows === 1;
  }

  async release(lease: MysqlRowLease): Promise<void> {
    await this.releaseOwner(lease.key, lease.hash, lease.owner, lease.kind === 'shared');
  }

  /** The release statement for `owner`; whether `owner` had the claim (this process's waiters are woken). Also `LockBackend.forceRelease`. */
  async releaseOwner(key: string, hash: Buffer, owner: string, shared: boolean, operation = 'release'): Promise<boolean> {
    const result = shared
      ? await this.#store.runRetried(operation, this.#store.sql.sharedRelease, [hash, owner])
      : await this.#store.run(operation, this.#store.sql.release, [hash, owner]);
    if (result.affectedRows === 1) this.#notifier.notify(shared ? `shared:${key}` : key);
    return result.affectedRows === 1;
  }

  async raiseTokenFloor(lease: MysqlRowLease, floor: bigint): Promise<boolean> {
    const { hash, owner } = lease;
    if (lease.kind === 'row')
      return (await this.#store.run('raise token floor', this.#store.sql.raiseFloor, [floor.toString(), hash, owner])).affectedRows === 1;
    return this.#store.keyTransaction('raise token floor', hash, async (connection) => {
      const result = await this.#store.on<ResultSetHeader>(connection, this.#store.sql.sharedRaiseFloor, [
        floor.toString(),
        hash,
        hash,
        owner,
      ]);
      return { commit: true, value: result.affectedRows === 1 };
    });
  }
}

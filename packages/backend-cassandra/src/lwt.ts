// The lightweight-transaction algorithm: one row per key, written only if absent (a Paxos round),
// renewed and deleted only by its owner. No queue: waiters poll.
import type { AcquireRequest, StoreView } from '@deadbolt/core/backend';
import type { types } from 'cassandra-driver';
import { ttlSeconds, type CassandraStore, type LwtLease, type MutexAlgorithm } from './store.js';

export class LwtLock implements MutexAlgorithm<LwtLease> {
  readonly holderTable = 'lock_lwt' as const;
  readonly #store: CassandraStore;

  constructor(store: CassandraStore) {
    this.#store = store;
  }

  acquire(req: AcquireRequest, id: Buffer): Promise<LwtLease | null> {
    if (!req.wait) return this.#attempt(req, id);
    // An attempt whose answer did not come may have applied; its take-back (owner-checked) may
    // land later still. So a wait never tries again under the same owner after a failure: it ends
    // (no grace), and core tries again under a new owner id, which no take-back can touch.
    return this.#store.pollLease(
      req,
      () => this.#attempt(req, id),
      (lease) => this.release(lease),
      { unavailableGraceMs: 0 },
    );
  }

  /** The row's owner; no queue (waiters poll): `null` waiters. */
  async inspect(id: Buffer): Promise<StoreView> {
    return { holders: await this.#store.holderIn(this.holderTable, id), waiters: null };
  }

  async renew(lease: LwtLease, ttlMs: number): Promise<boolean> {
    const store = this.#store;
    const result = await store.run(
      'renew',
      `UPDATE ${store.keyspace}.lock_lwt USING TTL ? SET owner = ? WHERE lock_id = ? IF owner = ?`,
      [ttlSeconds(ttlMs), lease.owner, lease.id, lease.owner],
      { lwt: true },
    );
    return result.wasApplied();
  }

  raiseFloor(lease: LwtLease, floor: bigint): Promise<boolean> {
    return this.#store.raiseFloor(lease, this.holderTable, floor);
  }

  async free(id: Buffer, key: string, owner: string): Promise<boolean> {
    const freed = (await this.#delete('force release', id, owner)).wasApplied();
    if (freed) this.#store.notifier.notify(key);
    return freed;
  }

  async release(lease: LwtLease): Promise<void> {
    await this.#delete('release', lease.id, lease.owner);
    this.#store.notifier.notify(lease.key);
  }

  async #attempt(req: AcquireRequest, id: Buffer): Promise<LwtLease | null> {
    const store = this.#store;
    const acquiredAt = performance.now();
    let result: types.ResultSet;
    try {
      result = await store.run(
        'acquire',
        `INSERT INTO ${store.keyspace}.lock_lwt (lock_id, owner) VALUES (?, ?) IF NOT EXISTS USING TTL ?`,
        [id, req.owner, ttlSeconds(req.ttlMs)],
        { lwt: true },
      );
    } catch (error) {
      // A Paxos round that timed out may still have applied: take back whatever is ours, again
      // later if the store is out of reach (owner-checked: safe whenever it lands).
      await store.inFlight.leave(() => this.#delete('acquire', id, req.owner), ttlSeconds(req.ttlMs) * 1000);
      throw error;
    }
    if (!result.wasApplied()) return null;
    const lease: LwtLease = { key: req.key, owner: req.owner, id, acquiredAt, token: 0n };
    return store.fence(lease, this.holderTable, req, (l) => this.release(l));
  }

  #delete(operation: string, id: Buffer, owner: string) {
    const store = this.#store;
    return store.run(operation, `DELETE FROM ${store.keyspace}.lock_lwt WHERE lock_id = ? IF owner = ?`, [id, owner], { lwt: true });
  }
}

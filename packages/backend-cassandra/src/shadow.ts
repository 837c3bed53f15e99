// The shadow algorithm (the thesis' "old" one, kept as a benchmark baseline): a taker writes a claim
// in the shadow partition and becomes the holder if its claim is alone there and the main partition
// is empty. Unfair under contention: waiters retry after randomized waits.
import { pollForLease, type AcquireRequest, type StoreView } from '@deadbolt/core/backend';
import { ttlSeconds, type CassandraStore, type MutexAlgorithm, type ShadowLease, type Slot } from './store.js';

export interface ShadowBackoff {
  /** The most a waiter sleeps when another owner holds the lock. */
  readonly ownerWaitMs: number;
  /** After a concurrent attempt, a waiter sleeps up to this × its attempt number. */
  readonly concurrentStepMs: number;
}

export class ShadowLock implements MutexAlgorithm<ShadowLease> {
  readonly holderTable = 'shadow_holders' as const;
  readonly #store: CassandraStore;
  readonly #backoff: ShadowBackoff;

  constructor(store: CassandraStore, backoff: ShadowBackoff) {
    this.#store = store;
    this.#backoff = backoff;
  }

  /** The main partition's holder; no queue (waiters retry after random waits): `null` waiters. */
  async inspect(id: Buffer): Promise<StoreView> {
    return { holders: await this.#store.holderIn(this.holderTable, id), waiters: null };
  }

  /**
   * GetLock: TryLock in core's polling loop, each pause the thesis' randomized wait (core jitters
   * it further): up to `ownerWaitMs` while another owner holds the lock, up to `concurrentStepMs`
   * × the attempt's number after a concurrent attempt (or one the store failed, which the loop
   * forgives for its grace). TryGetLock: one TryLock.
   */
  async acquire(req: AcquireRequest, id: Buffer): Promise<ShadowLease | null> {
    const slot = this.#store.takeSlot(id);
    try {
      if (!req.wait) {
        const result = await this.#attempt(req, id, slot);
        if (typeof result !== 'object') {
          this.#store.freeSlot(id, slot);
          return null;
        }
        if (req.signal.aborted) {
          await this.release(result);
          req.signal.throwIfAborted();
        }
        return result;
      }
      let attempts = 0;
      let last: 'owner' | 'concurrent' = 'concurrent';
      const { ownerWaitMs, concurrentStepMs } = this.#backoff;
      return await pollForLease(
        req.key,
        req.signal,
        async () => {
          attempts++;
          last = 'concurrent';
          const result = await this.#attempt(req, id, slot);
          if (typeof result === 'object') return result;
          last = result;
          return null;
        },
        (lease) => this.release(lease),
        {
          notifier: this.#store.notifier,
          nextDelayMs: () => Math.random() * (last === 'owner' ? ownerWaitMs : concurrentStepMs * attempts),
        },
      );
    } catch (error) {
      await this.#leave(id, slot).catch(() => undefined);
      throw error;
    }
  }

  renew(lease: ShadowLease, ttlMs: number): Promise<boolean> {
    return this.#store.renewSlot(lease, this.holderTable, ttlMs, () => this.release(lease));
  }

  raiseFloor(lease: ShadowLease, floor: bigint): Promise<boolean> {
    return this.#store.raiseFloor(lease, this.holderTable, floor);
  }

  async free(id: Buffer, key: string, owner: string): Promise<boolean> {
    const freed = await this.#store.freeOwner(id, owner, this.holderTable);
    if (freed) this.#store.notifier.notify(key);
    return freed;
  }

  async release(lease: ShadowLease): Promise<void> {
    await this.#leave(lease.id, lease.slot);
    this.#store.notifier.notify(lease.key);
  }

  /** TryLock: Success (a lease) / AnotherThreadIsOwner / ConcurrentAttempt. */
  async #attempt(req: AcquireRequest, id: Buffer, slot: Slot): Promise<ShadowLease | 'owner' | 'concurrent'> {
    const store = this.#store;
    const ttl = ttlSeconds(req.ttlMs);
    if ((await store.owners('acquire', this.holderTable, id)).length > 0) return 'owner';
    store.writing(slot, ttl);
    await store.run(
      'acquire',
      `INSERT INTO ${store.keyspace}.shadow_claims (lock_id, slot, owner) VALUES (?, ?, ?) USING TTL ? AND TIMESTAMP ?`,
      [id, slot.name, req.owner, ttl, store.timestamp()],
    );
    let won = false;
    let acquiredAt = 0;
    try {
      const shadow = await store.owners('acquire', 'shadow_claims', id);
      const main = await store.owners('acquire', this.holderTable, id);
      if (shadow.length === 1 && main.length === 0) {
        acquiredAt = performance.now();
        await store.run(
          'acquire',
          `INSERT INTO ${store.keyspace}.shadow_holders (lock_id, slot, owner) VALUES (?, ?, ?) USING TTL ? AND TIMESTAMP ?`,
          [id, slot.name, req.owner, ttl, store.timestamp()],
        );
        // What a renewal counts from to know our cell never lapsed (as the queue's grant records it).
        slot.written = { at: acquiredAt, ttlMs: req.ttlMs };
        won = true;
      }
    } finally {
      // Our claim goes whatever happened; sent again later if the store is out of reach (a claim
      // left behind makes every other taker's attempt concurrent until its ttl).
      const drop = {
        query: `DELETE FROM ${store.keyspace}.shadow_claims USING TIMESTAMP ? WHERE lock_id = ? AND slot = ?`,
        params: [store.timestamp(), id, slot.name],
      };
      await store.inFlight.cleanUp(() => store.batch('acquire', [drop]), slot.lastsUntil);
    }
    if (!won) return 'concurrent';
    const lease: ShadowLease = { key: req.key, owner: req.owner, id, slot, acquiredAt, token: 0n };
    return store.fence(lease, this.holderTable, req, (l) => this.release(l));
  }

  /** Removes our main cell, once per slot. */
  #leave(id: Buffer, slot: Slot): Promise<void> {
    const keyspace = this.#store.keyspace;
    return this.#store.leaveSlot('release', id, slot, (timestamp) => [
      {
        query: `DELETE FROM ${keyspace}.shadow_holders USING TIMESTAMP ? WHERE lock_id = ? AND slot = ?`,
        params: [timestamp, id, slot.name],
      },
    ]);
  }
}

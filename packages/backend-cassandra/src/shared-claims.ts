// Semaphores and read-write locks. One partition per key in `shared_claims`: a row per claim,
// clustered by its token, which is also its place in the queue (core's `Claim` rule). A
// claim joins by one conditional batch that moves the static counter from the value just read (so
// no claim can have joined since that read) and inserts its row; it is judged by the rows of that
// same read. Every later write to a claim is a lightweight transaction on its owner, so writes to
// the partition are all ordered by Paxos (no client clock decides between them).
import { BackendUnavailableError, LimitMismatchError } from '@deadbolt/core';
import { grantable, QueuePlace, sharedView, stillStands, waiterCadence, type AcquireRequest, type StoreView } from '@deadbolt/core/backend';
import { maxOf, secondsLeft, toBigInt, tokenParam, ttlSeconds, type CassandraStore, type ClaimModule, type SharedLease } from './store.js';

export class SharedClaims implements ClaimModule<SharedLease> {
  readonly #store: CassandraStore;

  constructor(store: CassandraStore) {
    this.#store = store;
  }

  async acquire(req: AcquireRequest, id: Buffer): Promise<SharedLease | null> {
    const store = this.#store;
    // A waiter's row lasts about a ttl past each refresh (core's waiterCadence); ttls here are whole seconds.
    const waiterTtl = ttlSeconds(waiterCadence(req.ttlMs, store.poll.maxDelayMs).placeMs);
    /** Our row once joined: its token, and when it was last written (its ttl counts from there). */
    let claim: { token: bigint; acquiredAt: number } | undefined;
    const place = new QueuePlace();
    /** A waiting row is rewritten (a Paxos round) only every third of its ttl, not on every look. */
    const rewriteDue = (row: { acquiredAt: number }, now: number) => now - row.acquiredAt >= (waiterTtl * 1000) / 3;
    const read = async (serialRead: boolean) => {
      const rows = (
        await store.run(
          'acquire',
          `SELECT seq, owner, exclusive, claim_counter, claim_limit FROM ${store.keyspace}.shared_claims WHERE lock_id = ?`,
          [id],
          { serialRead },
        )
      ).rows;
      // A claim whose mode cell is missing counts as exclusive: the reading that can never let two in.
      const queue = rows
        .filter((r) => r['seq'] !== null)
        .map((r) => ({
          token: toBigInt(r['seq']),
          owner: r['owner'] as string,
          mode: r['exclusive'] === false ? ('shared' as const) : ('exclusive' as const),
        }));
      return { rows, queue };
    };
    const attempt = async (): Promise<SharedLease | null | 'rejoin' | 'soon'> => {
      const acquiredAt = performance.now();
      if (claim && req.wait && !rewriteDue(claim, acquiredAt)) {
        // Between attempts a waiter looks at the partition with a plain read: a serial read is a
        // Paxos round on the key's partition, and every waiter's look contending with the grants
        // and releases there slowed them all. The serial attempt comes once this look says the rule
        // grants our claim (or cannot find it), or when our row is due its rewrite.
        const mine = claim;
        const { queue } = await read(false);
        const index = queue.findIndex((c) => c.token === mine.token && c.owner === req.owner);
        if (index >= 0 && !grantable(queue, index, req.limit)) return place.look(index);
      }
      const { rows, queue } = await read(true);
      if (!claim) {
        const statics = rows[0];
        const counter =
          statics?.['claim_counter'] === null || statics?.['claim_counter'] === undefined ? undefined : toBigInt(statics['claim_counter']);
        const stored = statics?.['claim_limit'] ?? null;
        if (queue.length > 0 && stored !== null && stored !== req.limit) throw new LimitMismatchError(req.key, stored as number, req.limit);
        const token = maxOf((counter ?? 0n) + 1n, req.minToken ?? 0n);
        const ok = grantable([...queue, { mode: req.mode }], queue.length, req.limit);
        if (!ok && !req.wait) return null; // judged by a read no claim can have joined since: leave no trace
        const joined = await store.run(
          'acquire',
          `BEGIN BATCH
          UPDATE ${store.keyspace}.shared_claims SET claim_counter = ?, claim_limit = ? WHERE lock_id = ? IF claim_counter = ?
          INSERT INTO ${store.keyspace}.shared_claims (lock_id, seq, owner, exclusive) VALUES (?, ?, ?, ?) USING TTL ?
          APPLY BATCH`,
          [
            tokenParam(token),
            req.limit,
            id,
            counter === undefined ? null : String(counter),
            id,
            String(token),
            req.owner,
            req.mode === 'exclusive',
            ok ? ttlSeconds(req.ttlMs) : waiterTtl,
          ],
          { lwt: true },
        );
        if (!joined.wasApplied()) return 'rejoin'; // another claim joined first: read the partition again at once
        claim = { token, acquiredAt };
        return ok ? this.#lease(req, id, claim) : null;
      }
      const mine = claim;
      const index = queue.findIndex((c) => c.token === mine.token && c.owner === req.owner);
      if (index < 0)
        throw new BackendUnavailableError(store.name, 'acquire', { cause: new Error("the claim's row expired while it waited") });
      const ok = grantable(queue, index, req.limit);
      const sentAt = performance.now();
      // Granted by this serial read. Our row's ttl (a waiter's, at least the lease's) counts from
      // no earlier than the send of our last write to it, so the row outlives a lease counted from
      // that send: with at least half of that lease still ahead, the grant needs no write of its
      // own (a Paxos round fewer on the key's partition for every grant). Otherwise the rewrite
      // gives the lease the lease's ttl, counted from this write.
      if (ok && stillStands({ at: mine.acquiredAt, ttlMs: req.ttlMs })) return this.#lease(req, id, mine);
      if (!ok && !rewriteDue(mine, sentAt)) return place.look(index);
      if (!(await this.#rewrite({ id, token: mine.token, owner: req.owner, mode: req.mode }, ok ? ttlSeconds(req.ttlMs) : waiterTtl))) {
        throw new BackendUnavailableError(store.name, 'acquire', { cause: new Error("the claim's row expired while it waited") });
      }
      mine.acquiredAt = sentAt;
      return ok ? this.#lease(req, id, mine) : place.look(index);
    };
    // A cancelled, timed-out or failed waiter removes its row before reporting, again later if
    // the store is out of reach (owner-checked: safe whenever it lands).
    const leave = async () => {
      if (!claim) return;
      try {
        await this.#delete(id, claim.token, req.owner);
      } finally {
        store.notifier.notify(`shared:${req.key}`); // a claim ahead of others may have left
      }
    };
    return store.inFlight.waitInLine(
      async () => {
        for (;;) {
          if (!req.wait) {
            const lease = await attempt();
            if (lease !== 'rejoin' && lease !== 'soon') return lease; // (a one-shot attempt never waits: 'soon' cannot come)
            continue;
          }
          // Releases in this process are announced under `shared:<key>` (see `release`).
          return await store.pollLease(
            { ...req, key: `shared:${req.key}` },
            async () => {
              const lease = await attempt();
              return lease === 'rejoin' ? 'soon' : lease;
            },
            (lease) => this.release(lease),
          );
        }
      },
      leave,
      ttlSeconds(req.ttlMs) * 1000,
    );
  }

  /** The key's live claims in token order (tokens are taken at arrival), read at SERIAL as the claims judge them. */
  async inspect(id: Buffer): Promise<StoreView> {
    const store = this.#store;
    const rows = (
      await store.run(
        'inspect',
        `SELECT seq, owner, exclusive, TTL(owner) AS ttl, claim_limit FROM ${store.keyspace}.shared_claims WHERE lock_id = ?`,
        [id],
        { serialRead: true },
      )
    ).rows.filter((r) => r['seq'] !== null && r['owner'] !== null);
    const claims = rows.map((r) => ({
      owner: r['owner'] as string,
      token: toBigInt(r['seq']),
      ttlLeftMs: secondsLeft(r['ttl']),
      mode: r['exclusive'] === false ? ('shared' as const) : ('exclusive' as const),
    }));
    const limit = rows[0]?.['claim_limit'];
    return sharedView(claims, limit === null || limit === undefined ? undefined : Number(limit), true);
  }

  renew(lease: SharedLease, ttlMs: number): Promise<boolean> {
    return this.#rewrite(lease, ttlSeconds(ttlMs));
  }

  /** `LockBackend.forceRelease` of a shared key: `owner`'s claim found at SERIAL, then the release's compare-and-set delete. */
  async free(id: Buffer, key: string, owner: string): Promise<boolean> {
    const store = this.#store;
    const query = `SELECT seq, owner FROM ${store.keyspace}.shared_claims WHERE lock_id = ?`;
    const claims = (await store.run('force release', query, [id], { serialRead: true })).rows.filter((r) => r['owner'] === owner);
    let freed = false;
    for (const claim of claims) if ((await this.#delete(id, toBigInt(claim['seq']), owner)).wasApplied()) freed = true;
    if (freed) store.notifier.notify(`shared:${key}`);
    return freed;
  }

  async release(lease: SharedLease): Promise<void> {
    await this.#delete(lease.id, lease.token, lease.owner);
    this.#store.notifier.notify(`shared:${lease.key}`);
  }

  /** The key's static counter lifted by compare-and-set while our claim's row lives. */
  async raiseFloor(lease: SharedLease, floor: bigint): Promise<boolean> {
    const store = this.#store;
    for (;;) {
      const row = (
        await store.run(
          'raise token floor',
          `SELECT claim_counter, owner FROM ${store.keyspace}.shared_claims WHERE lock_id = ? AND seq = ?`,
          [lease.id, String(lease.token)],
          { serialRead: true },
        )
      ).first();
      if (row?.['owner'] !== lease.owner) return false;
      const counter = toBigInt(row['claim_counter']);
      if (counter >= floor) return true;
      const result = await store.run(
        'raise token floor',
        `UPDATE ${store.keyspace}.shared_claims SET claim_counter = ? WHERE lock_id = ? IF claim_counter = ?`,
        [tokenParam(floor), lease.id, String(counter)],
        { lwt: true },
      );
      if (result.wasApplied()) return true;
    }
  }

  #lease(req: AcquireRequest, id: Buffer, claim: { token: bigint; acquiredAt: number }): SharedLease {
    return { key: req.key, owner: req.owner, id, token: claim.token, acquiredAt: claim.acquiredAt, mode: req.mode };
  }

  /**
   * Rewrites a claim's row with a new TTL, if it is still ours. Every cell of the row is written
   * again: a TTL belongs to a cell, and a cell left out keeps its old one (the mode cell once did,
   * and a held write lock turned into a read lock when it expired).
   */
  async #rewrite(claim: Pick<SharedLease, 'id' | 'token' | 'owner' | 'mode'>, ttl: number): Promise<boolean> {
    const store = this.#store;
    const result = await store.run(
      'renew',
      `UPDATE ${store.keyspace}.shared_claims USING TTL ? SET owner = ?, exclusive = ? WHERE lock_id = ? AND seq = ? IF owner = ?`,
      [ttl, claim.owner, claim.mode === 'exclusive', claim.id, String(claim.token), claim.owner],
      { lwt: true },
    );
    return result.wasApplied();
  }

  #delete(id: Buffer, token: bigint, owner: string) {
    const store = this.#store;
    return store.run(
      'release',
      `DELETE FROM ${store.keyspace}.shared_claims WHERE lock_id = ? AND seq = ? IF owner = ?`,
      [id, String(token), owner],
      {
        lwt: true,
      },
    );
  }
}

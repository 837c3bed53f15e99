// Shared claims (semaphore permits, read and write locks): one script per attempt judges the claim
// by core's rule against the key's claims (see `shared` in scripts.ts); a release publishes on the
// shared channel, which wakes this process's waiters of that key.
import { LimitMismatchError } from '@deadbolt/core';
import { pollForLease, sharedView, waiterCadence, type AcquireRequest, type InFlight, type StoreView } from '@deadbolt/core/backend';
import type { RedisLease } from './mutex.js';
import { COUNTER_TTL_MS } from './scripts.js';
import { MAX_EXACT_TOKEN, scripts, type Placed, type RedisKeys, type RedisStore } from './store.js';

export class RedisSharedClaims {
  readonly #store: RedisStore;
  readonly #acquiring: InFlight;
  readonly #maxPollDelayMs: number;
  /** A semaphore claim's mode as kept in meta: its release's handoff message comes to this backend's channel. */
  readonly #semaphoreMode: string;

  constructor(store: RedisStore, acquiring: InFlight, maxPollDelayMs: number) {
    this.#store = store;
    this.#semaphoreMode = `S|${store.id}`;
    this.#acquiring = acquiring;
    this.#maxPollDelayMs = maxPollDelayMs;
  }

  async acquire(req: AcquireRequest): Promise<RedisLease | null> {
    const store = this.#store;
    if (!store.evictionChecked.done) await store.evictionChecked.run();
    const keys = store.sharedKeysFor(req.key);
    if (!req.wait) return this.#attempt(req, keys);
    await store.subscribed.run();
    const { pollMs: poll } = waiterCadence(req.ttlMs, this.#maxPollDelayMs);
    // A waiter that the next release cannot let in (a semaphore's with `limit` or more claims
    // ahead of it, a write's behind any claim, a read's behind a write) sleeps through releases
    // until as many have gone by as it needs (the attempt's answer says how many; each release
    // publishes one message), so a release wakes the waiters it may let in rather than every
    // waiter of the key in this process, each with a script to run. A release that this count
    // misses (a claim that expired) is found by the re-check every `poll` ms, so a waiter that
    // knows its count does not re-check sooner (as the mutex's waiters). While an attempt is out
    // the count is unknown (`Infinity`: nothing wakes the waiter) and releases are counted from its
    // send: a message can arrive before the answer of an attempt that ran before its release (they
    // come on two connections). Once the answer is in, releases enough make the next attempt come
    // at once; counting one the answer already shows costs one early attempt, while dropping one
    // would leave the waiter asleep until the re-check. (Releases of claims behind it count too:
    // they only bring an attempt early.)
    //
    // The release that lets a semaphore's waiter in names it in its message, with the deadline its
    // claim got from the attempt that last left it queued (`placed`): the waiter takes that grant
    // without an attempt (the store's `takeHanded`, as a mutex's handoff), and the message wakes
    // it whatever its count says. That message goes to the named claim's process alone: the
    // release let in that claim and no other, so the waiters behind it need not hear of it (those
    // in its process count it, and it wakes none of them). Only a message naming nobody (from a
    // release that had no claim to hand the permit to, a read-write lock's release, a waiter
    // leaving, or a process of an earlier version) goes to every process and wakes by the count;
    // a waiter whose count misses handoffs only looks later than it could, never too early, and is
    // named itself when its turn comes.
    let needed = Number.POSITIVE_INFINITY;
    let releases = 0;
    let placed: Placed | undefined;
    const due = () => releases >= needed;
    try {
      return await this.#acquiring.waitInLine(
        async () => {
          return pollForLease(
            keys.lock,
            req.signal,
            async () => {
              const handed = store.takeHanded(keys.lock, req.owner, placed, req.ttlMs);
              if (handed) return { kind: 'shared', key: req.key, owner: req.owner, keys, ...handed } satisfies RedisLease;
              const before = releases;
              needed = Number.POSITIVE_INFINITY;
              return this.#attempt(req, keys, (count, at) => {
                needed = count;
                placed = at;
                releases -= before;
              });
            },
            (lease) => this.release(lease).then(() => undefined),
            {
              notifier: store.notifier,
              owner: req.owner,
              minDelayMs: poll,
              maxDelayMs: poll,
              wakes: (target) => (releases++, !target && due()),
              nextDelayMs: () => (due() ? 0 : undefined),
            },
          );
        },
        () => this.#leave(keys, req.owner),
        req.ttlMs,
      );
    } finally {
      store.dropHanded(keys.lock, req.owner);
    }
  }

  /**
   * One attempt; a waiter that stays queued tells `onPlace` how many claims ahead of it must go
   * before it may be granted, the attempt's send time and its claim's new deadline.
   */
  async #attempt(req: AcquireRequest, keys: RedisKeys, onPlace?: (needed: number, at: Placed) => void): Promise<RedisLease | null> {
    const acquiredAt = performance.now();
    const waiterTtl = waiterCadence(req.ttlMs, this.#maxPollDelayMs).placeMs;
    const reply = (await this.#store.run('acquire', scripts.sharedAcquire, keys, [
      req.owner,
      String(req.ttlMs),
      req.wait ? '1' : '0',
      req.mode === 'exclusive' ? 'X' : req.limit > 0 ? this.#semaphoreMode : 'S',
      String(req.limit),
      String(Math.max(COUNTER_TTL_MS, req.ttlMs * 2)),
      String(waiterTtl),
      req.minToken !== undefined && req.minToken <= MAX_EXACT_TOKEN ? req.minToken.toString() : '0',
    ])) as [number, (string | number)?, number?];
    if (reply[0] === 2) {
      // Another limit: leave no claim of ours behind (a waiter may have queued on an earlier call).
      if (req.wait) await this.#leave(keys, req.owner);
      throw new LimitMismatchError(req.key, Number(reply[1]), req.limit);
    }
    if (reply[0] !== 1) {
      if (reply[2] !== undefined) onPlace?.(Number(reply[1]), { sentAt: acquiredAt, deadline: reply[2] });
      return null;
    }
    const lease: RedisLease = { kind: 'shared', key: req.key, owner: req.owner, token: BigInt(reply[1]!), acquiredAt, keys };
    if (this.#store.syncReplicas > 0) await this.#store.synced('acquire', () => this.release(lease));
    return lease;
  }

  /** `LockBackend.forceRelease` for a shared key: the release script run for `owner`. */
  async free(key: string, owner: string): Promise<boolean> {
    return (await this.#leave(this.#store.sharedKeysFor(key), owner)) === 1;
  }

  /** Drops `owner`'s claim (held or queued) and wakes the key's waiters. */
  #leave(keys: RedisKeys, owner: string): Promise<unknown> {
    return this.#store.run('release', scripts.sharedRelease, keys, [owner, this.#store.channel, keys.lock]);
  }

  /** `LockBackend.inspect` for a shared key: one read-only script, the grant rule applied here. */
  async inspect(key: string): Promise<StoreView> {
    const [limit, now, ...rows] = (await this.#store.run('inspect', scripts.sharedInspect, this.#store.sharedKeysFor(key), [])) as string[];
    const nowMs = Number(now);
    const claims = [];
    for (let i = 0; i < rows.length; i += 4) {
      const expires = Number(rows[i + 2]);
      if (expires <= nowMs) continue;
      claims.push({
        owner: rows[i]!,
        token: BigInt(rows[i + 1]!),
        ttlLeftMs: expires - nowMs,
        mode: rows[i + 3] === 'X' ? ('exclusive' as const) : ('shared' as const),
      });
    }
    return sharedView(claims, limit ? Number(limit) : undefined, true);
  }

  async renew(lease: RedisLease, ttlMs: number): Promise<boolean> {
    return (await this.#store.run('renew', scripts.sharedRenew, lease.keys, [lease.owner, String(ttlMs)])) === 1;
  }

  release(lease: RedisLease): Promise<unknown> {
    return this.#leave(lease.keys, lease.owner);
  }

  async raiseTokenFloor(lease: RedisLease, floor: bigint): Promise<boolean> {
    const args = [lease.owner, floor.toString(), String(COUNTER_TTL_MS)];
    return (await this.#store.run('raise token floor', scripts.sharedRaiseFloor, lease.keys, args)) === 1;
  }
}

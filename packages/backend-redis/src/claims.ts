// Every claim, a mutex's and a shared key's (semaphore permits, read and write locks), by one
// engine: one EVALSHA per attempt; a waiter in a queue kept in the store, woken by the release
// messages of the one subscriber connection (store.ts) and re-checking on core's cadence; a
// release that hands the key on to a named waiter in the same script (the waiter takes that grant
// without an attempt); a waiter that leaves the line before it reports. What differs between the
// two key spaces is a strategy, `ClaimRule`: the scripts, the keys, a first step (the mutex's
// `SET NX PX`), and when a waiter wakes. The lease names its key space, whose rule serves it.
import { BackendUnavailableError, LimitMismatchError } from '@deadbolt/core';
import {
  keySpace,
  pollForLease,
  sharedView,
  waiterCadence,
  type AcquireRequest,
  type InFlight,
  type KeySpace,
  type Lease,
  type PollOptions,
  type StoreView,
} from '@deadbolt/core/backend';
import { COUNTER_TTL_MS } from './scripts.js';
import { MAX_EXACT_TOKEN, scripts, type Placed, type RedisKeys, type RedisStore } from './store.js';

/** A claim's lease: its key space (`keys` are that space's keys of the lease's key). */
export interface RedisLease extends Lease {
  readonly space: KeySpace;
  readonly keys: RedisKeys;
}

/** One claim's attempts, as its rule makes them, and how its wait wakes. */
interface Line {
  /** The attempt that last left the claim queued: its send time and the deadline it set. */
  readonly placed: Placed | undefined;
  /** One attempt; `queued`: the claim already has a place in the queue. */
  attempt(queued: boolean): Promise<RedisLease | null>;
  /** The wait's cadence and wake-ups (read once the claim waits). */
  cadence(): Pick<PollOptions, 'minDelayMs' | 'maxDelayMs' | 'nextDelayMs' | 'wakes'>;
}

/** What one key space's claims do differently (see the top of this file). */
interface ClaimRule {
  /**
   * A waiter makes its first attempt before any wait bookkeeping (uncontended, it is the whole
   * acquisition); otherwise a waiter's attempts all come from inside its wait.
   */
  readonly firstStep: boolean;
  keysFor(key: string): RedisKeys;
  line(req: AcquireRequest, keys: RedisKeys): Line;
  /** Drops `owner`'s claim, held or queued, and hands the key on; 1 when there was a claim. */
  leave(keys: RedisKeys, owner: string): Promise<unknown>;
  renew(lease: RedisLease, ttlMs: number): Promise<boolean>;
  raiseFloor(lease: RedisLease, floor: bigint): Promise<boolean>;
  inspect(key: string): Promise<StoreView>;
}

export interface RedisClaimsOptions {
  readonly fifo: boolean;
  readonly maxPollDelayMs: number;
  readonly restartGuardMs: number;
}

/** The engine: `LockBackend`'s claim calls, each by the rule of its key space. */
export class RedisClaims {
  readonly #store: RedisStore;
  readonly #acquiring: InFlight;
  readonly #rules: Record<KeySpace, ClaimRule>;

  constructor(store: RedisStore, acquiring: InFlight, options: RedisClaimsOptions) {
    this.#store = store;
    this.#acquiring = acquiring;
    this.#rules = { mutex: new MutexRule(store, options), shared: new SharedRule(store, options.maxPollDelayMs) };
  }

  async acquire(req: AcquireRequest): Promise<RedisLease | null> {
    const store = this.#store;
    if (!store.evictionChecked.done) await store.evictionChecked.run();
    const space = keySpace(req);
    const rule = this.#rules[space];
    const keys = rule.keysFor(req.key);
    const line = rule.line(req, keys);
    let first: RedisLease | null = null;
    if (!req.wait || rule.firstStep) {
      try {
        first = await line.attempt(false);
      } catch (error) {
        if (!(error instanceof BackendUnavailableError)) throw error;
        // A one-shot attempt with no answer may still have been granted: give it back in the
        // background (owner-checked), so a late grant does not block the key for its whole ttl.
        if (!req.wait) {
          void rule.leave(keys, req.owner).catch(() => undefined);
          throw error;
        }
        // A waiter rides out a reset in the wait below, as it would at any later attempt.
      }
      if (first || !req.wait) return first;
    }
    // Queued now (after a first step). When the subscription was not in place yet, a handoff may
    // have come before it: the wait's first look, at once, finds it. When it was, the wait starts
    // by waiting, unless a handoff reached us before the first step's answer did (the store keeps
    // it: the first look takes it). An unnamed wake-up that came that early is lost; the claim's
    // next re-check, within its cadence, makes up for it.
    let already = rule.firstStep && store.listening;
    try {
      return await this.#acquiring.waitInLine(
        async () => {
          await store.subscribed.run();
          return pollForLease(
            keys.lock,
            req.signal,
            async () => {
              const handed = store.takeHanded(keys.lock, req.owner, line.placed, req.ttlMs);
              if (handed) return { space, key: req.key, owner: req.owner, keys, ...handed } satisfies RedisLease;
              if (already) return ((already = false), null);
              return line.attempt(rule.firstStep);
            },
            (lease) => this.release(lease).then(() => undefined),
            { notifier: store.notifier, owner: req.owner, ...line.cadence() },
          );
        },
        () => rule.leave(keys, req.owner),
        req.ttlMs,
      );
    } finally {
      store.dropHanded(keys.lock, req.owner);
    }
  }

  renew(lease: RedisLease, ttlMs: number): Promise<boolean> {
    return this.#rules[lease.space].renew(lease, ttlMs);
  }

  release(lease: RedisLease): Promise<unknown> {
    return this.#rules[lease.space].leave(lease.keys, lease.owner);
  }

  raiseTokenFloor(lease: RedisLease, floor: bigint): Promise<boolean> {
    return this.#rules[lease.space].raiseFloor(lease, floor);
  }

  inspect(key: string, space: KeySpace): Promise<StoreView> {
    return this.#rules[space].inspect(key);
  }

  /** `LockBackend.forceRelease`: the release script run for `owner`, which hands the key on. */
  async free(key: string, owner: string, space: KeySpace): Promise<boolean> {
    const rule = this.#rules[space];
    return (await rule.leave(rule.keysFor(key), owner)) === 1;
  }
}

/** The acquire script's arguments for one ttl (see `MutexRule.#commonTerms`). */
interface CommonTerms {
  readonly ttlMs: number;
  readonly ttl: string;
  readonly options: readonly string[];
  readonly beforeLeast: readonly string[];
}

/**
 * The mutex: `SET NX PX` plus the fencing token when the key is free and nobody waits (the first
 * step), otherwise the queue step; a FIFO queue of waiters (or, with `fifo: false`, none: the
 * order is a flag of the same scripts, see `mutex` in scripts.ts); a release hands the key to the
 * queue's head. Only the head can be handed the key, so a waiter behind it only keeps its place
 * alive (a third of its place's ttl) and is woken early by a release message alone.
 */
class MutexRule implements ClaimRule {
  readonly firstStep = true;
  readonly #store: RedisStore;
  readonly #options: RedisClaimsOptions;
  /** The release script's options (see `mutex` in scripts.ts): the same for every release. */
  readonly #releaseOptions: string;
  /** The acquire script's arguments for the ttl last asked for, by mode (`#commonTerms`). */
  #common: CommonTerms | undefined;
  /** The restart guard's keys and its length as the guarded acquire takes them (none without a guard). */
  readonly #guard: { readonly keys: string[]; readonly ms: string } | undefined;

  constructor(store: RedisStore, options: RedisClaimsOptions) {
    this.#store = store;
    this.#options = options;
    this.#releaseOptions = `-0${options.fifo ? '1' : '0'}|${store.id}|0|0`;
    if (options.restartGuardMs > 0)
      this.#guard = { keys: [`${store.prefix}born`, `${store.prefix}restart-guard`], ms: String(options.restartGuardMs) };
  }

  keysFor(key: string): RedisKeys {
    return this.#store.keysFor(key);
  }

  line(req: AcquireRequest, keys: RedisKeys): Line {
    /** Our place in the queue as the last attempt saw it (0: the head). */
    let place = 0;
    let placed: Placed | undefined;
    const onPlace = (p: number, at: Placed) => void ((place = p), (placed = at));
    return {
      get placed() {
        return placed;
      },
      attempt: (queued) => this.#attempt(req, keys, queued, onPlace),
      cadence: () => {
        // The head re-checks every `poll` as the safety net for a lost message and a holder that died.
        const { pollMs: poll, behindMs: behind } = waiterCadence(req.ttlMs, this.#options.maxPollDelayMs);
        return { minDelayMs: poll, maxDelayMs: poll, nextDelayMs: () => (place > 0 ? behind : poll) };
      },
    };
  }

  /** One attempt; a queued waiter's place (0: the head), send time and new deadline go to `onPlace`. */
  async #attempt(
    req: AcquireRequest,
    keys: RedisKeys,
    queued: boolean,
    onPlace: (place: number, at: Placed) => void,
  ): Promise<RedisLease | null> {
    const acquiredAt = performance.now();
    const guard = this.#guard;
    // A hint past what a Lua number holds exactly is dropped (it only ever saves a write).
    const least = req.minToken !== undefined && req.minToken <= MAX_EXACT_TOKEN ? req.minToken.toString() : '0';
    const mode = !req.wait ? 0 : queued ? 2 : 1;
    const common = this.#commonTerms(req.ttlMs);
    // Redlock asks every node for a least token on every attempt: only that number is new each time.
    const options = least === '0' ? common.options[mode]! : common.beforeLeast[mode]! + least;
    const token = await this.#store.run(
      'acquire',
      guard ? scripts.guardedAcquire : scripts.acquire,
      keys,
      guard ? [req.owner, common.ttl, options, guard.ms] : [req.owner, common.ttl, options],
      guard?.keys,
    );
    if (token === null) return null;
    if (Array.isArray(token)) {
      onPlace(token[0] as number, { sentAt: acquiredAt, deadline: token[1] as number });
      return null;
    }
    const lease: RedisLease = { space: 'mutex', key: req.key, owner: req.owner, token: BigInt(token as string), acquiredAt, keys };
    if (this.#store.syncReplicas > 0) await this.#store.synced('acquire', () => this.leave(keys, req.owner));
    return lease;
  }

  /**
   * The acquire script's ttl and options arguments (see `mutex` in scripts.ts) for `ttlMs`, made
   * once per ttl rather than per attempt (most callers use one), by mode (0 one-shot, 1 a waiter's
   * first, 2 a queued waiter's): the options without a least token, and those before a least token
   * (which comes last). The common case (SET NX PX) may be tried unless we are queued (our turn
   * comes through the queue); `*` tells it a least token follows.
   */
  #commonTerms(ttlMs: number): CommonTerms {
    if (this.#common?.ttlMs === ttlMs) return this.#common;
    const placeMs = waiterCadence(ttlMs, this.#options.maxPollDelayMs).placeMs;
    const rest = (mode: number) => `${mode}${this.#options.fifo ? '1' : '0'}|${this.#store.id}|${placeMs}|`;
    const modes = [0, 1, 2];
    this.#common = {
      ttlMs,
      ttl: String(ttlMs),
      options: modes.map((mode) => `${mode === 2 ? '-' : '+'}${rest(mode)}0`),
      beforeLeast: modes.map((mode) => `${mode === 2 ? '-' : '*'}${rest(mode)}`),
    };
    return this.#common;
  }

  /**
   * The release script for `owner` (see `mutex` in scripts.ts): gives back the lock if `owner`
   * holds it and drops its queue entry, so it also serves a waiter that leaves and an attempt whose
   * answer never came.
   */
  leave(keys: RedisKeys, owner: string): Promise<unknown> {
    return this.#store.run('release', scripts.release, keys, [owner, '0', this.#releaseOptions]);
  }

  /**
   * `LockBackend.inspect`, one read-only script. A key nobody waited for holds its owner alone (the
   * plain form) and its token is the counter's, which is the holder's unless a migration raised
   * the floor since (`null` once the counter has expired, after a day without a grant).
   */
  async inspect(key: string): Promise<StoreView> {
    const keys = this.#store.keysFor(key);
    const [value, pttl, counter, now, ...queue] = (await this.#store.run('inspect', scripts.inspect, keys, [])) as [
      string,
      number,
      string,
      string,
      ...string[],
    ];
    const nowMs = Number(now);
    const [owner, token, ends] = value.split('|');
    const leftMs = ends === undefined ? pttl : Number(ends) - nowMs;
    const holders =
      owner && leftMs > 0 ? [{ owner, token: token ? BigInt(token) : counter ? BigInt(counter) : null, ttlLeftMs: leftMs }] : [];
    if (!this.#options.fifo) return { holders, waiters: null };
    const waiters = [];
    for (let i = 0; i < queue.length; i += 2) {
      const [member, deadline] = [queue[i]!, Number(queue[i + 1])];
      if (deadline > nowMs) waiters.push({ owner: member.slice(0, member.lastIndexOf('|')), token: null, ttlLeftMs: deadline - nowMs });
    }
    return { holders, waiters };
  }

  async renew(lease: RedisLease, ttlMs: number): Promise<boolean> {
    return (await this.#store.run('renew', scripts.renew, lease.keys, [lease.owner, String(ttlMs)])) === 1;
  }

  async raiseFloor(lease: RedisLease, floor: bigint): Promise<boolean> {
    return (await this.#store.run('raise token floor', scripts.raiseFloor, lease.keys, [lease.owner, floor.toString()])) === 1;
  }
}

/**
 * A shared key: one script per attempt judges the claim by core's rule against the key's claims
 * (see `shared` in scripts.ts); a release publishes on the shared channel, which wakes this
 * process's waiters of that key.
 *
 * A waiter that the next release cannot let in (a semaphore's with `limit` or more claims ahead of
 * it, a write's behind any claim, a read's behind a write) sleeps through releases until as many
 * have gone by as it needs (the attempt's answer says how many; each release publishes one
 * message), so a release wakes the waiters it may let in rather than every waiter of the key in
 * this process, each with a script to run. A release that this count misses (a claim that expired)
 * is found by the re-check every `poll` ms, so a waiter that knows its count does not re-check
 * sooner (as the mutex's waiters). While an attempt is out the count is unknown (`Infinity`:
 * nothing wakes the waiter) and releases are counted from its send: a message can arrive before
 * the answer of an attempt that ran before its release (they come on two connections). Once the
 * answer is in, releases enough make the next attempt come at once; counting one the answer
 * already shows costs one early attempt, while dropping one would leave the waiter asleep until the
 * re-check. (Releases of claims behind it count too: they only bring an attempt early.)
 *
 * The release that lets a semaphore's waiter in names it in its message, with the deadline its
 * claim got from the attempt that last left it queued (`placed`): the waiter takes that grant
 * without an attempt (the store's `takeHanded`, as a mutex's handoff), and the message wakes it
 * whatever its count says. That message goes to the named claim's process alone: the release let
 * in that claim and no other, so the waiters behind it need not hear of it (those in its process
 * count it, and it wakes none of them). Only a message naming nobody (from a release that had no
 * claim to hand the permit to, a read-write lock's release, a waiter leaving, or a process of an
 * earlier version) goes to every process and wakes by the count; a waiter whose count misses
 * handoffs only looks later than it could, never too early, and is named itself when its turn
 * comes.
 */
class SharedRule implements ClaimRule {
  readonly firstStep = false;
  readonly #store: RedisStore;
  readonly #maxPollDelayMs: number;
  /** A semaphore claim's mode as kept in meta: its release's handoff message comes to this backend's channel. */
  readonly #semaphoreMode: string;

  constructor(store: RedisStore, maxPollDelayMs: number) {
    this.#store = store;
    this.#maxPollDelayMs = maxPollDelayMs;
    this.#semaphoreMode = `S|${store.id}`;
  }

  keysFor(key: string): RedisKeys {
    return this.#store.sharedKeysFor(key);
  }

  line(req: AcquireRequest, keys: RedisKeys): Line {
    let needed = Number.POSITIVE_INFINITY;
    let releases = 0;
    let placed: Placed | undefined;
    const due = () => releases >= needed;
    return {
      get placed() {
        return placed;
      },
      attempt: () => {
        const before = releases;
        needed = Number.POSITIVE_INFINITY;
        return this.#attempt(req, keys, (count, at) => {
          needed = count;
          placed = at;
          releases -= before;
        });
      },
      cadence: () => {
        const { pollMs: poll } = waiterCadence(req.ttlMs, this.#maxPollDelayMs);
        return {
          minDelayMs: poll,
          maxDelayMs: poll,
          wakes: (target) => (releases++, !target && due()),
          nextDelayMs: () => (due() ? 0 : undefined),
        };
      },
    };
  }

  /**
   * One attempt; a waiter that stays queued tells `onPlace` how many claims ahead of it must go
   * before it may be granted, the attempt's send time and its claim's new deadline.
   */
  async #attempt(req: AcquireRequest, keys: RedisKeys, onPlace: (needed: number, at: Placed) => void): Promise<RedisLease | null> {
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
      if (req.wait) await this.leave(keys, req.owner);
      throw new LimitMismatchError(req.key, Number(reply[1]), req.limit);
    }
    if (reply[0] !== 1) {
      if (reply[2] !== undefined) onPlace(Number(reply[1]), { sentAt: acquiredAt, deadline: reply[2] });
      return null;
    }
    const lease: RedisLease = { space: 'shared', key: req.key, owner: req.owner, token: BigInt(reply[1]!), acquiredAt, keys };
    if (this.#store.syncReplicas > 0) await this.#store.synced('acquire', () => this.leave(keys, req.owner));
    return lease;
  }

  leave(keys: RedisKeys, owner: string): Promise<unknown> {
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

  async raiseFloor(lease: RedisLease, floor: bigint): Promise<boolean> {
    const args = [lease.owner, floor.toString(), String(COUNTER_TTL_MS)];
    return (await this.#store.run('raise token floor', scripts.sharedRaiseFloor, lease.keys, args)) === 1;
  }
}

// The mutex: one EVALSHA per attempt (`SET NX PX` plus the fencing token when the key is free and
// nobody waits; otherwise the queue step), a FIFO queue of waiters (or, with `fifo: false`, none:
// the order is a flag of the same scripts, see `mutex` in scripts.ts), and a release that hands
// the key to the queue's head in the same script and messages its process.
import { BackendUnavailableError } from '@deadbolt/core';
import { pollForLease, waiterCadence, type AcquireRequest, type InFlight, type Lease, type StoreView } from '@deadbolt/core/backend';
import { MAX_EXACT_TOKEN, scripts, type Placed, type RedisKeys, type RedisStore } from './store.js';

/** A mutex lease (`mutex`) or a shared claim (`shared`: `keys` are then the shared-claim keys). */
export interface RedisLease extends Lease {
  readonly kind: 'mutex' | 'shared';
  readonly keys: RedisKeys;
}

export interface RedisMutexOptions {
  readonly fifo: boolean;
  readonly maxPollDelayMs: number;
  readonly restartGuardMs: number;
}

/** The acquire script's arguments for one ttl (see `RedisMutex.#commonTerms`). */
interface CommonTerms {
  readonly ttlMs: number;
  readonly ttl: string;
  readonly options: readonly string[];
  readonly beforeLeast: readonly string[];
}

export class RedisMutex {
  readonly #store: RedisStore;
  readonly #acquiring: InFlight;
  readonly #options: RedisMutexOptions;
  /** The release script's options (see `mutex` in scripts.ts): the same for every release. */
  readonly #releaseOptions: string;
  /** The acquire script's arguments for the ttl last asked for, by mode (`#commonTerms`). */
  #common: CommonTerms | undefined;
  /** The restart guard's keys and its length as the guarded acquire takes them (none without a guard). */
  readonly #guard: { readonly keys: string[]; readonly ms: string } | undefined;

  constructor(store: RedisStore, acquiring: InFlight, options: RedisMutexOptions) {
    this.#store = store;
    this.#acquiring = acquiring;
    this.#options = options;
    this.#releaseOptions = `-0${options.fifo ? '1' : '0'}|${store.id}|0|0`;
    if (options.restartGuardMs > 0)
      this.#guard = { keys: [`${store.prefix}born`, `${store.prefix}restart-guard`], ms: String(options.restartGuardMs) };
  }

  async acquire(req: AcquireRequest): Promise<RedisLease | null> {
    if (!this.#store.evictionChecked.done) await this.#store.evictionChecked.run();
    const keys = this.#store.keysFor(req.key);
    /** Our place in the queue as the last attempt saw it (0: the head). */
    let place = 0;
    /** The last attempt that left us queued: when it was sent, and the deadline it set us. */
    let placed: Placed | undefined;
    const onPlace = (p: number, at: Placed) => void ((place = p), (placed = at));
    // The first attempt before any wait bookkeeping: uncontended, it is the whole acquisition.
    let first: RedisLease | null = null;
    try {
      first = await this.#attempt(req, keys, false, onPlace);
    } catch (error) {
      if (!(error instanceof BackendUnavailableError)) throw error;
      // A one-shot attempt with no answer may still have been granted: give it back in the
      // background (owner-checked), so a late grant does not block the key for its whole ttl.
      if (!req.wait) {
        void this.releaseOwner(keys, req.owner).catch(() => undefined);
        throw error;
      }
      // A waiter rides out a reset in the wait loop below, as it would at any later attempt.
    }
    if (first || !req.wait) return first;
    // Queued now. When the subscription was not in place yet, a handoff may have come before it:
    // the loop's first attempt, at once, finds it. When it was, the loop starts by waiting, unless a
    // FIFO handoff reached us before our first attempt's answer did (the store keeps it: the loop's
    // first call takes it). An unordered wake-up that came that early is lost; the head's next
    // re-check, within `poll`, makes up for it.
    let already = this.#store.listening;
    try {
      return await this.#acquiring.waitInLine(
        async () => {
          await this.#store.subscribed.run();
          // Only a release message wakes a waiter early. The head re-checks every `poll` as the safety
          // net for a lost message and for a holder that died; a waiter behind it can be handed nothing,
          // so it only keeps its place alive (a third of its place's ttl).
          const { placeMs, pollMs: poll } = waiterCadence(req.ttlMs, this.#options.maxPollDelayMs);
          const behind = Math.max(poll, Math.floor(placeMs / 3));
          return pollForLease(
            keys.lock,
            req.signal,
            async () => {
              const handed = this.#store.takeHanded(keys.lock, req.owner, placed, req.ttlMs);
              if (handed) return { kind: 'mutex', key: req.key, owner: req.owner, keys, ...handed } satisfies RedisLease;
              if (already) return ((already = false), null);
              return this.#attempt(req, keys, true, onPlace);
            },
            (lease) => this.release(lease).then(() => undefined),
            {
              notifier: this.#store.notifier,
              owner: req.owner,
              minDelayMs: poll,
              maxDelayMs: poll,
              nextDelayMs: () => (place > 0 ? behind : poll),
            },
          );
        },
        () => this.releaseOwner(keys, req.owner),
        req.ttlMs,
      );
    } finally {
      this.#store.dropHanded(keys.lock, req.owner);
    }
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
    const lease: RedisLease = { kind: 'mutex', key: req.key, owner: req.owner, token: BigInt(token as string), acquiredAt, keys };
    if (this.#store.syncReplicas > 0) await this.#store.synced('acquire', () => this.release(lease));
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
  releaseOwner(keys: RedisKeys, owner: string): Promise<unknown> {
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

  release(lease: RedisLease): Promise<unknown> {
    return this.releaseOwner(lease.keys, lease.owner);
  }

  async raiseTokenFloor(lease: RedisLease, floor: bigint): Promise<boolean> {
    return (await this.#store.run('raise token floor', scripts.raiseFloor, lease.keys, [lease.owner, floor.toString()])) === 1;
  }
}

// migratingBackend: one backend over two stores during a move from one to the other (phases `from`,
// `dual`, `to`), with no window of two holders. Long: each contract method is written
// once for all three phases, and the dual phase's acquire, token floors and partial give-backs only
// make sense read together.
import { randomUUID } from 'node:crypto';
import {
  fullCapabilities,
  type AcquireRequest,
  type Capabilities,
  type KeySpace,
  type Lease,
  type LockBackend,
  type StoreView,
} from '../kit/backend.js';
import type { ClaimInfo } from '../api/types.js';
import { BackendUnavailableError, InvalidArgumentError } from '../api/errors.js';
import { instance, oneOf, readOptions, rules, type Rules } from '../kit/options.js';
import { LeaseKeeper } from '../lease/lease-keeper.js';
import { Once } from '../kit/once.js';
import { raceSignal } from '../kit/time.js';

/**
 * Where a process stands in a migration from one store to another:
 * - `from`: locks live in the old store only (as before the migration);
 * - `dual`: a lock is held only while held in both stores, taken in `from` first, then in `to`;
 * - `to`: locks live in the new store only (as after it).
 * A rollout moves every process one phase at a time, so at most two adjacent phases run at once.
 */
export type MigrationPhase = 'from' | 'dual' | 'to';

/** Options of `migratingBackend`: the two stores and this process's phase of the rollout. Unknown names, and stores that cannot migrate, are `InvalidArgumentError`. */
export interface MigratingBackendOptions {
  /** The store the deployment is leaving. */
  from: LockBackend;
  /** The store it is moving to. */
  to: LockBackend;
  phase: MigrationPhase;
}

const isBackendRule = rules.required(instance(isBackend, 'a LockBackend'));
const MIGRATING_RULES = {
  from: isBackendRule,
  to: isBackendRule,
  phase: rules.required(oneOf(['from', 'dual', 'to'])),
} satisfies Rules<MigratingBackendOptions>;

/**
 * How far above the other store's token a raise may lift a floor, to spare later raises (see
 * `#fence`): 2^40, about 12.7 days of Redis's microsecond clock. Tokens may jump by this much.
 */
const HEADROOM = 2n ** 40n;

/** A lease held in both stores. Its token is the larger of the two, which both stores' floors now exceed. */
interface DualLease extends Lease {
  readonly first: Lease;
  readonly second: Lease;
  /** The release of both parts under way or done: only a failed one is tried again. */
  released?: Promise<void>;
  /** Stops listening to the parts' loss signals (once, on release). */
  readonly unlisten: () => void;
}

/** The leases a `dual` acquisition made (a store's own lease type may have fields of any name). */
const dualLeases = new WeakSet<Lease>();

/**
 * A backend that moves a live deployment from one store to another with no window of two holders
 * and fencing tokens that never go backwards (see the runbook in docs/migration.md).
 *
 * Exclusion: processes in adjacent phases share a store: `from` and `dual` processes both lock in
 * `from`; `dual` and `to` processes both lock in `to`.
 *
 * Tokens: every holder's token must be above every earlier holder's, whichever of the two adjacent
 * phases either runs. A `dual` holder is granted token `a` by `from` and `b` by `to`; it reports
 * T = max(a, b) and, before reporting, raises the token floor of the store that gave the smaller
 * one to T (`raiseTokenFloor`, checked against any grant since its own). So, by induction over the
 * holders of a key in the order they held it:
 * - T is above every earlier `from` holder's token (below a), every earlier `to` holder's (below b)
 *   and every earlier `dual` holder's (each raised both floors to its own token);
 * - every later holder is granted by a store whose floor is already at least T, so it gets more.
 *
 * Cost: `to` is asked for a token of at least `a` (`minToken`); a store that can grant it in the
 * same step (counters, Redis) then usually gives exactly `a`, and nothing needs raising. A store
 * whose tokens are revisions (etcd, ZooKeeper) cannot, so each `dual` grant with it costs one raise,
 * which the headroom (see `#fence`) puts on the store that is not the revision store.
 *
 * Capabilities are those both stores offer in every phase, so options valid in one phase are valid
 * in the next. @throws InvalidArgumentError (from the constructor) for a bad phase, `from === to`,
 * something that is not a LockBackend, a backend without `raiseTokenFloor`, or stores whose ttl
 * limits leave no ttl both accept. Store failures reject as each store's own typed errors.
 */
export class MigratingBackend implements LockBackend {
  readonly name: string;
  /** The store(s) this phase takes locks in (`LockBackend.address`): in `dual`, `from`'s then `to`'s, as `a -> b`. */
  readonly address: string | undefined;
  readonly capabilities: Capabilities;
  readonly from: LockBackend;
  readonly to: LockBackend;
  readonly phase: MigrationPhase;

  constructor(options: MigratingBackendOptions) {
    const read = readOptions(options, MIGRATING_RULES, 'migratingBackend');
    const { from, to, phase } = read;
    for (const [side, backend] of [
      ['from', from],
      ['to', to],
    ] as const) {
      const missing = (['raiseTokenFloor', 'tokenFloor', 'tokenCeiling'] as const).filter((m) => typeof backend[m] !== 'function');
      if (missing.length > 0) {
        throw new InvalidArgumentError(
          `${side} (${backend.name}) has no ${missing.join(', ')}, so tokens could go backwards across the migration`,
        );
      }
    }
    if (from === to) throw new InvalidArgumentError('from and to must be different backends');
    this.from = from;
    this.to = to;
    this.phase = phase;
    this.name = `${from.name}->${to.name}`;
    const addresses = (phase === 'to' ? [to] : phase === 'from' ? [from] : [from, to]).map((b) => b.address ?? '?');
    this.address = addresses.every((a) => a === '?') ? undefined : addresses.join(' -> ');
    this.capabilities = combine(from, to);
  }

  /** Both stores, so that an error one of them makes names that store's address (see `located`). */
  get stores(): readonly LockBackend[] {
    return [this.from, this.to];
  }

  /** Which phase this process is in, for a health or status endpoint during a rollout. */
  status(): { phase: MigrationPhase; from: string; to: string } {
    return { phase: this.phase, from: this.from.name, to: this.to.name };
  }

  /**
   * Semaphores and read-write locks too, when both stores have them (the capabilities say so): in
   * `dual`, a claim is held in both stores, taken and fenced exactly as a lock is. The token
   * argument above carries over with one difference: other claims of a shared key may be granted
   * beside ours, so a grant between ours and our raise can carry a smaller token than ours; it is
   * a holder at the same time as us, never one after us, which is what fencing has to order.
   */
  acquire(req: AcquireRequest): Promise<Lease | null> {
    if (this.phase === 'from') return this.from.acquire(req);
    if (this.phase === 'to') return this.to.acquire(req);
    return this.#acquireBoth(req);
  }

  async renew(lease: Lease, ttlMs: number): Promise<boolean> {
    if (!isDual(lease)) return this.#single.renew(lease, ttlMs);
    const [first, second] = await Promise.allSettled([this.from.renew(lease.first, ttlMs), this.to.renew(lease.second, ttlMs)]);
    if (isFalse(first) || isFalse(second)) {
      // Lost in one store: give the other part back now (a session lease would otherwise live on).
      await this.#releaseDual(lease).catch(() => undefined);
      return false;
    }
    if (first.status === 'rejected') throw first.reason;
    if (second.status === 'rejected') throw second.reason;
    return true;
  }

  async release(lease: Lease): Promise<void> {
    if (!isDual(lease)) return this.#single.release(lease);
    await this.#releaseDual(lease);
  }

  /**
   * `LockBackend.tokenFloor`, by phase. In `from` and `to`, the first call lifts the phase's store's
   * floor above every token the other store has given (`tokenCeiling`), once per process: a
   * process in a one-store phase starts only when no process of the phase beyond the other side
   * runs (the runbook's rule: never `from` and `to` at once), so from then on the other store's
   * tokens grow only through `dual` holders, which raise this store's floor for their key
   * themselves. That is what keeps tokens rising for a key last held in `from` and next in `to`
   * (and back, in a rollback), which no `dual` holder ever saw. In `dual`, both stores' floors
   * (raised alike when asked), the larger. @throws either store's error (the next call tries again).
   */
  async tokenFloor(raise?: bigint): Promise<bigint> {
    if (this.phase === 'dual') {
      const [a, b] = await Promise.all([this.from.tokenFloor!(raise), this.to.tokenFloor!(raise)]);
      return a > b ? a : b;
    }
    await this.#lifted.run();
    return this.#single.tokenFloor!(raise);
  }

  /** `LockBackend.tokenCeiling`: the larger of the two stores', whatever the phase. */
  async tokenCeiling(): Promise<bigint> {
    const [a, b] = await Promise.all([this.from.tokenCeiling!(), this.to.tokenCeiling!()]);
    return a > b ? a : b;
  }

  /** The one-store phases' lift of their store's floor above the other store's tokens (see `tokenFloor`). */
  readonly #lifted = new Once(async () => {
    const [own, other] = this.phase === 'to' ? [this.to, this.from] : [this.from, this.to];
    await own.tokenFloor!(await other.tokenCeiling!());
  });

  async raiseTokenFloor(lease: Lease, floor: bigint): Promise<boolean> {
    if (!isDual(lease)) return this.#single.raiseTokenFloor!(lease, floor);
    const [first, second] = await Promise.all([
      this.from.raiseTokenFloor!(lease.first, floor),
      this.to.raiseTokenFloor!(lease.second, floor),
    ]);
    return first && second;
  }

  /**
   * `LockBackend.forceRelease` in the store(s) this phase takes locks in: in `dual`, both (a `dual`
   * holder is in both); true when either held it. @throws InvalidArgumentError when a store cannot.
   */
  async forceRelease(key: string, owner: string, space: KeySpace): Promise<boolean> {
    const stores = this.phase === 'dual' ? [this.from, this.to] : [this.#single];
    // Both refused or neither: nothing is freed in one store when the other cannot.
    for (const backend of stores)
      if (!backend.forceRelease) throw new InvalidArgumentError(`the ${backend.name} backend cannot free another client's lock`);
    const freed = await Promise.all(stores.map((backend) => backend.forceRelease!(key, owner, space)));
    return freed.includes(true);
  }

  /**
   * The store(s) this phase takes locks in. In `dual`, the claims as a user means them, whichever of
   * the two adjacent phases their processes run: a holder holds the key in `to` (a `dual` or a `to`
   * process), or in `from` alone while `to` has no place for it (a `from` process, or a `dual` one
   * between its two steps); an owner that holds `from` and waits in `to` (a `dual` process waiting
   * for a `to` holder) is a waiter, the first in line: `to`'s waiters come first, then `from`'s.
   * A mutex's claim in `from` alone is a waiter whenever another owner holds `to`, listed by `to` or
   * not (a store that lists no waiters, or a wait between two places in `to`'s line): `from` and
   * `to` processes never run together, and a `dual` holder holds `from` first, so `to`'s holder is
   * the one holder.
   * A claim held in both shows the shorter time left, unknown if either part is a session; its
   * token is not shown (`null`): it is the larger of its two grants, and the store that granted the
   * smaller had its floor lifted, which some stores show in place of their grant. Waiters are known
   * only when both stores list theirs. @throws as `LockBackend.inspect`, or InvalidArgumentError
   * when a store cannot inspect.
   */
  async inspect(key: string, space: KeySpace): Promise<StoreView> {
    const read = (backend: LockBackend) => {
      if (!backend.inspect) throw new InvalidArgumentError(`the ${backend.name} backend cannot inspect keys`);
      return backend.inspect(key, space);
    };
    if (this.phase !== 'dual') return read(this.#single);
    const [a, b] = await Promise.all([read(this.from), read(this.to)]);
    const inTo = new Map(b.holders.map((h) => [h.owner, h]));
    const waitingInTo = new Set((b.waiters ?? []).map((w) => w.owner));
    const holders = b.holders.map((h) => ({ ...h, token: null }));
    const firstInLine: ClaimInfo[] = [];
    for (const claim of a.holders) {
      const there = claim.owner === null ? undefined : inTo.get(claim.owner);
      if (there) {
        // Held in both: one holder, with the shorter time left.
        const i = holders.findIndex((h) => h.owner === claim.owner);
        const left = there.ttlLeftMs === null || claim.ttlLeftMs === null ? null : Math.min(there.ttlLeftMs, claim.ttlLeftMs);
        holders[i] = { ...holders[i]!, ttlLeftMs: left };
      } else if (waitingInTo.has(claim.owner) || (space === 'mutex' && b.holders.length > 0)) {
        firstInLine.push({ ...claim, token: null });
      } else {
        holders.push({ ...claim, token: null });
      }
    }
    const held = new Set(holders.map((h) => h.owner));
    let waiters: ClaimInfo[] | null = null;
    if (a.waiters && b.waiters) {
      const seen = new Set<string>();
      waiters = [];
      for (const w of [...b.waiters, ...firstInLine, ...a.waiters]) {
        if (w.owner !== null && (held.has(w.owner) || seen.has(w.owner))) continue;
        if (w.owner !== null) seen.add(w.owner);
        waiters.push({ ...w, token: null });
      }
    }
    const limit = a.limit ?? b.limit;
    return { holders, waiters, ...(limit === undefined ? {} : { limit }) };
  }

  async close(): Promise<void> {
    const results = await Promise.allSettled([this.from.close(), this.to.close()]);
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
  }

  get #single(): LockBackend {
    return this.phase === 'to' ? this.to : this.from;
  }

  /**
   * `from`, then `to`; then the token floors. Anything that stops it half-way (a timeout, an
   * abort, a busy `to` for a one-shot attempt, an error) gives back what it took before it
   * settles. If the first lease is lost while `to` keeps us waiting, the wait starts over (at the
   * back of `from`'s queue).
   */
  async #acquireBoth(req: AcquireRequest): Promise<Lease | null> {
    for (let attempt = 0; ; attempt++) {
      // Every acquisition has an owner id of its own, also a second try after a loss.
      if (attempt > 0) req = { ...req, owner: randomUUID() };
      const first = await this.from.acquire(req);
      if (!first) return null;
      const taken = await this.#takeSecond(req, first);
      if (taken === 'lost') continue;
      if (!taken) return null;
      const lease = await this.#fence(req, first, taken.second, taken.firstSince);
      if (lease) return lease;
      if (!req.wait) {
        throw new BackendUnavailableError(this.name, 'acquire', {
          cause: new Error('the lease was lost while its token floor was raised'),
        });
      }
    }
  }

  /**
   * Takes `to` for the holder of `first`: resolves the second lease and when the first lease's ttl
   * now counts from; null (first given back) when `to` is busy for a one-shot attempt; 'lost' (first
   * given back) when the first lease was lost meanwhile and the caller should queue again.
   * Rejects (first given back) on abort, timeout or error. Every `to` call is raced against the
   * signal, so a `to` that stops answering cannot pin the first lease: a late grant goes back.
   */
  async #takeSecond(req: AcquireRequest, first: Lease): Promise<{ second: Lease; firstSince: number } | null | 'lost'> {
    const ask = (wait: boolean, signal: AbortSignal) =>
      raceSignal(
        this.to.acquire({ ...req, wait, signal, ...(this.to.capabilities.minToken ? { minToken: first.token } : {}) }),
        signal,
        (late) => {
          if (late) this.to.release(late).catch(() => undefined);
        },
      );
    let second: Lease | null;
    try {
      // `to` is mostly free (only holders of `from` and, late in a rollout, `to` processes take
      // it): one attempt first, which needs no keep-alive of the first lease.
      second = await ask(false, req.signal);
    } catch (error) {
      // The error (or the abort) is what the caller must hear; a failed clean-up expires on its own.
      await this.from.release(first).catch(() => undefined);
      throw error;
    }
    if (second) return { second, firstSince: first.acquiredAt };
    if (!req.wait) {
      await this.from.release(first);
      return null;
    }
    // Core renews only what it was handed: the first lease is kept alive here while `to` is awaited,
    // and a first lease lost meanwhile aborts that wait, so the acquisition can start over.
    const guard = new LeaseKeeper(() => this.from.renew(first, req.ttlMs), req.ttlMs, first.acquiredAt, req.signal, first.lost);
    try {
      second = await ask(true, guard.signal);
    } catch (error) {
      await guard.stop();
      await this.from.release(first).catch(() => undefined);
      if (guard.lost && !req.signal.aborted) return 'lost';
      throw error;
    }
    await guard.stop();
    if (!second) {
      await this.#releaseParts({ first, second: undefined });
      throw new BackendUnavailableError(this.name, 'acquire', {
        cause: new Error(`${this.to.name} returned no lease from a waiting acquire`),
      });
    }
    if (guard.lost) {
      // `to` answered just as the first lease was found lost: never report half a lock.
      await this.#releaseParts({ first, second }).catch(() => undefined);
      if (!req.signal.aborted) return 'lost';
      throw req.signal.reason;
    }
    return { second, firstSince: guard.since };
  }

  /**
   * Raises the lower store's floor to the larger token; null (both parts given back) if a part was
   * lost meanwhile. A raise leaves headroom where that saves later writes: when `to` honours
   * `minToken`, `from` is lifted HEADROOM above `to`'s token, so the next grants of `from` stay
   * ahead of `to`'s own count (a clock, for Redis) and `to` simply matches them, with no raise;
   * when `to` cannot (a revision store) and counted lower, `to` is lifted HEADROOM above, so the
   * raise each later grant needs falls on `from` (a counter write) rather than on `to` again.
   */
  async #fence(req: AcquireRequest, first: Lease, second: Lease, firstSince: number): Promise<DualLease | null> {
    const [a, b] = [first.token, second.token];
    let kept = true;
    try {
      if (a < b) kept = await this.from.raiseTokenFloor!(first, this.to.capabilities.minToken ? b + HEADROOM : b);
      else if (b < a) kept = await this.to.raiseTokenFloor!(second, a + HEADROOM);
    } catch (error) {
      await this.#releaseParts({ first, second }).catch(() => undefined);
      throw error;
    }
    if (!kept) {
      await this.#releaseParts({ first, second });
      return null;
    }
    const lease: DualLease = {
      key: req.key,
      owner: req.owner,
      token: a > b ? a : b,
      acquiredAt: Math.min(firstSince, second.acquiredAt),
      first,
      second,
      ...eitherLost(first.lost, second.lost),
    };
    dualLeases.add(lease);
    return lease;
  }

  /** `to`'s part first, then `from`'s, even when the first release fails; rejects with the first error. */
  /** A held dual lease's parts, given back once (a part lost on renewal gives the other back before core's release). */
  #releaseDual(lease: DualLease): Promise<void> {
    lease.released ??= this.#releaseParts(lease).catch((error: unknown) => {
      lease.released = undefined;
      throw error;
    });
    return lease.released;
  }

  async #releaseParts(lease: { first: Lease; second: Lease | undefined; unlisten?: () => void }): Promise<void> {
    lease.unlisten?.();
    let failure: { error: unknown } | undefined;
    try {
      if (lease.second) await this.to.release(lease.second);
    } catch (error) {
      failure = { error };
    }
    try {
      await this.from.release(lease.first);
    } catch (error) {
      failure ??= { error };
    }
    if (failure) throw failure.error;
  }
}

/**
 * A backend that moves locks from one store to another; see `MigratingBackend`.
 * @throws InvalidArgumentError for a bad phase, `from === to`, or a non-backend (before any I/O).
 */
export function migratingBackend(options: MigratingBackendOptions): MigratingBackend {
  return new MigratingBackend(options);
}

/** What two stores both offer; the one place a migrating backend's capabilities come from. */
function combine(from: LockBackend, to: LockBackend): Capabilities {
  const [a, b] = [fullCapabilities(from.capabilities), fullCapabilities(to.capabilities)];
  const granularity = lcm(a.ttlGranularityMs, b.ttlGranularityMs);
  const minTtlMs = Math.ceil(Math.max(a.minTtlMs, b.minTtlMs) / granularity) * granularity;
  const maxTtlMs = Math.min(a.maxTtlMs, b.maxTtlMs);
  if (minTtlMs > maxTtlMs)
    throw new InvalidArgumentError(`the two stores accept no common ttl (at least ${minTtlMs} ms, at most ${maxTtlMs} ms)`);
  return {
    fairness: a.fairness === 'fifo' && b.fairness === 'fifo' ? 'fifo' : 'none',
    lease: a.lease === 'ttl' && b.lease === 'ttl' ? 'ttl' : 'session',
    wake: a.wake === 'push' && b.wake === 'push' ? 'push' : 'poll',
    minTtlMs,
    ttlGranularityMs: granularity,
    maxTtlMs,
    crossProcess: a.crossProcess && b.crossProcess,
    semaphore: a.semaphore && b.semaphore,
    readWrite: a.readWrite && b.readWrite,
  };
}

function lcm(x: number, y: number): number {
  const gcd = (p: number, q: number): number => (q === 0 ? p : gcd(q, p % q));
  return (x / gcd(x, y)) * y;
}

function isBackend(value: unknown): value is LockBackend {
  const b = value as LockBackend | undefined;
  return (
    !!b &&
    typeof b === 'object' &&
    typeof b.acquire === 'function' &&
    typeof b.renew === 'function' &&
    typeof b.release === 'function' &&
    typeof b.close === 'function' &&
    !!b.capabilities &&
    typeof b.name === 'string'
  );
}

/** One loss signal for a lease of two parts (none when neither part has one), and how to stop listening. */
function eitherLost(...signals: (AbortSignal | undefined)[]): { lost?: AbortSignal; unlisten: () => void } {
  const sources = signals.filter((s): s is AbortSignal => s !== undefined);
  if (sources.length === 0) return { unlisten: () => undefined };
  const lost = new AbortController();
  const listeners = sources.map((source) => [source, () => lost.abort(source.reason)] as const);
  for (const [source, listener] of listeners) {
    if (source.aborted) listener();
    else source.addEventListener('abort', listener, { once: true });
  }
  return { lost: lost.signal, unlisten: () => listeners.forEach(([source, listener]) => source.removeEventListener('abort', listener)) };
}

function isDual(lease: Lease): lease is DualLease {
  return dualLeases.has(lease);
}

const isFalse = (r: PromiseSettledResult<boolean>) => r.status === 'fulfilled' && !r.value;

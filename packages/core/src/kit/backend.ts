import type { Inspection } from '../api/types.js';

/**
 * The backend contract: everything a store has to implement. Core owns validation, owner ids,
 * deadlines, AbortSignal plumbing, background renewal, loss detection and errors; a backend owns
 * the storage protocol and nothing else.
 *
 * Failure rules for every method: a store that cannot be reached rejects with
 * `BackendUnavailableError`; any other store error rejects with `BackendError` (driver error as
 * `cause`). A backend never turns an error into "busy" (`null`) or "lost" (`false`).
 *
 * Deadlines: core races every call against the caller's deadline (and its own operation timeout),
 * and sends at most one `renew`/`release` per lease at a time. A backend still bounds its own
 * calls (command timeouts, keep-alives), so a store that stops answering without closing the
 * socket cannot pin its connections forever.
 */
export interface LockBackend<L extends Lease = Lease> {
  /** Short name used in errors and reports, e.g. `redis`. */
  readonly name: string;
  /**
   * Optional: where the store is, for events and traces: `host:port`, several joined by `,`,
   * never credentials (a parsed URL's `address`). Absent when the backend was handed a client.
   */
  readonly address?: string;
  readonly capabilities: Capabilities;

  /**
   * Try to take `req.key` for `req.owner` with a lease of `req.ttlMs`, for the claim `req` makes
   * (`Claim`: a mutex, or one claim on a shared key by the grant rule there).
   * - `wait: false`: exactly one attempt; resolves `null` when the claim cannot be granted now.
   * - `wait: true`: resolves only when granted. When `req.signal` aborts, rejects with
   *   `req.signal.reason` after removing every trace of this waiter from the store.
   * The returned lease's `token` is strictly greater than every token issued before for the key.
   * A backend without shared claims (`capabilities.semaphore` and `readWrite` false) is only ever
   * asked for `MUTEX`.
   * @throws LimitMismatchError (before waiting) when live claims on a shared key were made with
   * another limit.
   */
  acquire(req: AcquireRequest): Promise<L | null>;

  /**
   * Extend a held lease to `ttlMs` from now (store clock). Resolves `false` when the lease is
   * already lost (expired, deleted, or another owner holds the key); never re-creates a lost claim.
   */
  renew(lease: L, ttlMs: number): Promise<boolean>;

  /** Give the lease up. Owner-checked (never frees another holder) and idempotent. */
  release(lease: L): Promise<void>;

  /**
   * Optional, for a store in this process (it answers without I/O, so it can answer at once):
   * `acquire`'s answer on the spot, when it has one; core asks it for `MUTEX` claims only. A lease, or `null` for a one-shot attempt
   * (`wait: false`) on a busy key; `undefined` when a waiting request has to wait, and core then
   * calls `acquire` with the same owner. `req.signal` is not listened to (nothing waits here).
   * The lease's `acquiredAt` is read in this call (core counts its renewal timer from it). Core
   * then arms no deadline and races nothing: an in-process lock pays for no promise but the one
   * the caller awaits. Throws only what `acquire` would reject with.
   */
  acquireNow?(req: AcquireRequest): L | null | undefined;

  /**
   * Optional, with `acquireNow`: `release` done on the spot. Core calls it only for a lease that
   * has made no store call since its grant (the common hold: grant, then release); a renewed or
   * extended lease is given back through `release`, behind its last call. Throws only what
   * `release` would reject with.
   */
  releaseNow?(lease: L): void;

  /**
   * Optional; `migratingBackend` needs it (see migrating-backend.ts). Make every later grant of
   * `lease.key` in this store carry a token above `floor` (which is above `lease.token`), checked
   * against the store having granted the key to anybody since `lease` (or `lease` being released).
   * Resolves false when it has (the floor may or may not have moved: a higher floor is always
   * safe). Floors only ever go up, and survive whatever the store's tokens survive (restarts, the
   * key being idle).
   */
  raiseTokenFloor?(lease: L, floor: bigint): Promise<boolean>;

  /**
   * Optional; `migratingBackend` needs it (with `tokenCeiling` and `raiseTokenFloor`). The token
   * floor of the whole store, every key of both key spaces: with `raise`, first lifted to at least
   * `raise` (floors only go up, and survive whatever the store's tokens survive). Resolves the
   * floor as it stands, `0n` when it was never raised. Core reads it once per locker, before that
   * locker's first acquisition, and reports every grant above it: it asks for `floor + 1` as the
   * grant's `minToken`, and a grant that still comes at or below it is lifted (`raiseTokenFloor` on
   * it to the floor plus one, then reported with that token). So a backend only keeps the number.
   */
  tokenFloor?(raise?: bigint): Promise<bigint>;

  /**
   * Optional, with `tokenFloor`. A number at least as large as every token the store has granted for
   * any key of either key space, and as every floor it was raised to. Reads only; may scan the
   * whole store (a migration calls it once per process). Fails as every method does.
   */
  tokenCeiling?(): Promise<bigint>;

  /**
   * Optional (`Locker.inspect`; every backend in this repository has it): what the store holds for
   * `key` in `space` now: the mutex's claims, or the shared key's (semaphores, read-write locks).
   * Reads only: never takes, extends or frees anything. Reports live claims only (one past its ttl
   * on the store's clock is nobody's), times left on the store's clock, and `null` for what the
   * store cannot know. Fails as every method does.
   */
  inspect?(key: string, space: KeySpace): Promise<StoreView>;

  /**
   * Optional (`Locker.forceRelease`; needs `inspect`): frees `owner`'s claim on `key` in `space`,
   * whoever made it: an operator's way out of a lock whose holder is
   * stuck. Core calls it only for an owner `inspect` just showed holding (an owner id is never used
   * again once its claim ends, so it cannot be waiting by now). Checked against `owner` in the
   * store's own step, so a claim someone else took since is never freed; hands the key on to
   * whoever waits, as a release does. Resolves whether a claim of `owner`'s was there to free. A
   * backend whose claims belong to server sessions (no other client can free them) rejects with
   * InvalidArgumentError saying so.
   */
  forceRelease?(key: string, owner: string, space: KeySpace): Promise<boolean>;

  /**
   * Close connections the backend opened itself (not clients the user passed in). Idempotent.
   * Core aborts every acquisition before calling it; a backend lets those finish removing what
   * they wrote first (`InFlight` in wait.ts).
   */
  close(): Promise<void>;
}

/**
 * The contract's calls on one claim's lease, as one engine answers them: a backend whose claims
 * live in one of several forms (rows or server sessions, chosen by an option) picks its engine
 * once and forwards to it, rather than asking each lease which form it has.
 */
export type LeaseEngine<L extends Lease> = Pick<LockBackend<L>, 'acquire' | 'renew' | 'release'> &
  Required<Pick<LockBackend<L>, 'raiseTokenFloor'>>;

/**
 * What a backend promises; the conformance suite tests every claim. A backend states what differs
 * from the defaults (`fullCapabilities` fills in the rest): the optional fields say their default.
 */
export interface Capabilities {
  /**
   * Tokens are strictly increasing per key across all holders, takeovers and restarts: the one
   * value every backend must have, so optional (default `'strict'`).
   */
  readonly fencing?: 'strict';
  /** `fifo`: waiters are granted in arrival order. `none`: any waiter may win. */
  readonly fairness: 'fifo' | 'none';
  /** `ttl`: the store expires the lease on its clock. `session`: it lives as long as the client's session. */
  readonly lease: 'ttl' | 'session';
  /** `push`: a waiter is told when the key frees up. `poll`: it re-checks on a backoff. */
  readonly wake: 'push' | 'poll';
  /** Smallest accepted `ttlMs`. Optional: default 1. */
  readonly minTtlMs?: number;
  /** `ttlMs` must be a whole multiple of this (1000 for a store that counts in seconds). Optional: default 1. */
  readonly ttlGranularityMs?: number;
  /** Largest accepted `ttlMs`. Optional: default `DEFAULT_MAX_TTL_MS`. */
  readonly maxTtlMs?: number;
  /** Holders in other processes are excluded. Optional: default true (false only for the in-process memory backend). */
  readonly crossProcess?: boolean;
  /**
   * Grants honour `AcquireRequest.minToken` (counter and clock stores can, in the same step;
   * revision stores cannot). Optional: default false.
   */
  readonly minToken?: boolean;
  /** `acquire` serves semaphores (shared claims with a limit). Optional: default false. */
  readonly semaphore?: boolean;
  /** `acquire` serves read-write locks (shared and exclusive claims, no limit). Optional: default false. */
  readonly readWrite?: boolean;
}

/** The default of every optional capability, in one place. */
export const DEFAULT_MAX_TTL_MS = 365 * 24 * 60 * 60 * 1000;
const OPTIONAL_CAPABILITIES = {
  fencing: 'strict',
  minTtlMs: 1,
  ttlGranularityMs: 1,
  crossProcess: true,
  maxTtlMs: DEFAULT_MAX_TTL_MS,
  minToken: false,
  semaphore: false,
  readWrite: false,
} as const;

/** `capabilities` with every optional field filled in from its default. */
export function fullCapabilities(capabilities: Capabilities): Required<Capabilities> {
  return { ...OPTIONAL_CAPABILITIES, ...stripUndefined(capabilities) };
}

function stripUndefined<T extends object>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as T;
}

/** Most permits a semaphore may have (a documented bound, so a typo cannot ask for 2^53). */
export const MAX_SEMAPHORE_LIMIT = 100_000;

/** One acquisition attempt, already validated by core: the claim it makes, and its terms. */
export interface AcquireRequest extends Claim {
  readonly key: string;
  /** A fresh `crypto.randomUUID()` for every acquisition. */
  readonly owner: string;
  readonly ttlMs: number;
  readonly wait: boolean;
  /**
   * Aborts on timeout, on the caller's signal, or when the locker closes. Core stops waiting for
   * `acquire` the moment it aborts (and releases a lease that still arrives later), but the backend
   * should stop too and remove what it wrote, so an abandoned wait costs nothing in the store.
   */
  readonly signal: AbortSignal;
  /**
   * Optional hint (a migration's `dual` phase): grant a token of at least this, if the store can in
   * the same step (`capabilities.minToken`). Correctness never depends on it; it saves a write.
   */
  readonly minToken?: bigint;
  /**
   * Set when the holder asked for lock-delay (core's `LockOptions.lockDelayMs`); `ttlMs` already
   * includes it, so a ttl store needs nothing more. A store whose lease can end before its ttl
   * without a release (a session bound to one connection, which the server frees the moment the
   * connection closes) must keep this key from being granted until `ttlMs` (as last renewed) has
   * passed since the holder's last store call, unless it released: every later acquirer waits,
   * whatever its own setting. Optional: absent means no lock-delay.
   */
  readonly lockDelayMs?: number;
}

/**
 * What an acquisition claims. A mutex is `MUTEX`: an exclusive claim with limit 1, which no other
 * family makes (a write lock's limit is 0, a permit is `shared`). Mutex keys are a key space of
 * their own (`keySpace`): a mutex `key` never meets the shared key of the same name.
 *
 * Every other claim is on a shared key. The claims of a shared key form one queue in arrival
 * order, and every store grants by the same rule (`grantable`), so both families are FIFO and no
 * writer starves:
 * - an `exclusive` claim (a write lock) is granted when no live claim is ahead of it;
 * - a `shared` claim (a permit, a read lock) is granted when no exclusive claim is ahead of it and,
 *   if `limit` > 0, fewer than `limit` claims are.
 * A claim's store expiry counts while it waits too (the backend refreshes it), so a crashed waiter
 * blocks nobody for longer than its ttl. Grants happen in arrival order, so a token taken from a
 * per-key counter at arrival (or a revision) is strictly increasing in grant order.
 */
export interface Claim {
  readonly mode: 'shared' | 'exclusive';
  /**
   * Semaphores: the number of permits (1..MAX_SEMAPHORE_LIMIT). Read-write locks: 0 (readers
   * unlimited). The mutex: 1. Stored with a shared key while it has live claims; a request with
   * another limit then rejects with `LimitMismatchError`, so two clients configured differently
   * never over-admit.
   */
  readonly limit: number;
}

/** The mutex's claim. */
export const MUTEX: Claim = Object.freeze({ mode: 'exclusive', limit: 1 });

/** The two key spaces of a store: the mutex's keys, and the shared keys (semaphores, read-write locks). */
export type KeySpace = 'mutex' | 'shared';

/** The key space `claim` is made in. Throws nothing. */
export function keySpace(claim: Claim): KeySpace {
  return claim.mode === 'exclusive' && claim.limit === 1 ? 'mutex' : 'shared';
}

/** What `inspect` answers: `Inspection` (types.ts) without the key, which core adds. */
export type StoreView = Omit<Inspection, 'key'>;

/** A granted lease. Backends may extend it with their own fields (e.g. a queue entry id). */
export interface Lease {
  readonly key: string;
  readonly owner: string;
  /** Fencing token: strictly increasing per key. */
  readonly token: bigint;
  /**
   * `performance.now()` no later than when the store started this lease's ttl: the send time of the
   * request that created (or last refreshed) it. Core's lease estimate counts from here, so a
   * waiter granted long after it asked still gets its full ttl, and never more.
   */
  readonly acquiredAt: number;
  /**
   * Optional push notice of loss (ZooKeeper session expiry, etcd lease revocation). Core aborts
   * `lock.signal` when it aborts; without it, loss is found by renewal.
   */
  readonly lost?: AbortSignal;
}

// What a locker publishes on node:diagnostics_channel, for tracing and metrics (an OpenTelemetry
// bridge, a log line per lost lease) without a dependency: the shape the Node ecosystem settled on
// (mysql2, ioredis, node-redis), a TracingChannel per operation whose context a subscriber maps
// onto span attributes, and plain channels for what happens to a lease between the operations.
// Nothing is built or published while nobody subscribes: each site asks `hasSubscribers` first.
import { createHash } from 'node:crypto';
import { channel, tracingChannel, type Channel, type TracingChannel } from 'node:diagnostics_channel';

/**
 * An acquisition (`lock`, `tryLock`, a permit, a read or write lock, each key of `lockAll`), as
 * `tracing:deadbolt:acquire:{start,end,asyncStart,asyncEnd,error}` carry it. The channel fills in
 * `result` (the lock, or null for a one-shot call that found the key taken) or `error` (a typed
 * error: a timeout, an abort, the store's failure) before `asyncEnd`; deadbolt fills in `waitedMs`,
 * and `token` on a grant. `asyncEnd` comes exactly once per acquisition, after `error` if it failed.
 * A nested take inside a held scope (reentrancy) asks no store and publishes nothing.
 */
export interface AcquireEvent {
  /** The key, or `sha256:` and the first 16 hex digits of its hash with `LockerOptions.redactKeys`. */
  readonly key: string;
  /** The backend's name (`redis`, `postgres`, …). */
  readonly backend: string;
  /** The store's servers (`LockBackend.address`: `host:port,…`), when the backend knows them. */
  readonly address?: string;
  readonly family: 'mutex' | 'semaphore' | 'read' | 'write';
  /** A semaphore's limit. */
  readonly limit?: number;
  readonly ttlMs: number;
  /** How long the call may wait: 0 for one attempt (`tryLock`), Infinity for no deadline. */
  readonly timeoutMs: number;
  /** Set on a grant: the lease's fencing token. */
  token?: bigint;
  /** Set when the call settles: from its start to its answer, on the monotonic clock. */
  waitedMs?: number;
  /**
   * Set when the call settles: how many requests deadbolt sent the store's backend for this
   * acquisition. 1 when its first request settled it (a grant, a refusal, or a wait the store
   * answered with a grant later); more when the wait rode out an unreachable store
   * (`LockerOptions.unavailableGraceMs`). Polls a backend makes inside one request (the SQL stores,
   * Cassandra, Redlock re-check a busy key on a backoff) are not counted.
   */
  attempts?: number;
  /**
   * Set by the channel: the lock, or null (a one-shot call that found the key taken). The lock's
   * own `key` is the key as given, `redactKeys` or not.
   */
  result?: unknown;
  /** Set by the channel when the call rejects. */
  error?: unknown;
}

/** A release (`tracing:deadbolt:release:…`) or an extend (`tracing:deadbolt:extend:…`) of a held lock. */
export interface LeaseEvent {
  readonly key: string;
  readonly backend: string;
  /** As `AcquireEvent.address`. */
  readonly address?: string;
  readonly token: bigint;
  /** Release: how long the lock was held until the call. Extend: the ttl asked for. */
  readonly heldMs?: number;
  readonly ttlMs?: number;
  /** Set by the channel when the call rejects. */
  error?: unknown;
}

/** `deadbolt:renewal-failed`: a background renewal failed; it is tried again while the lease may still be held. */
export interface RenewalFailedEvent {
  readonly key: string;
  readonly backend: string;
  /** As `AcquireEvent.address`. */
  readonly address?: string;
  readonly token: bigint;
  readonly error: unknown;
  /** How long this process still counts on the lease (its local estimate); when it runs out, the lease is lost. */
  readonly leftMs: number;
}

/** `deadbolt:lease-lost`: a held lock was lost (not released): `lock.signal` aborts with `reason`. */
export interface LeaseLostEvent {
  readonly key: string;
  readonly backend: string;
  /** As `AcquireEvent.address`. */
  readonly address?: string;
  readonly token: bigint;
  /** The LockLostError the lock's signal aborts with. */
  readonly reason: unknown;
  readonly heldMs: number;
}

/** `deadbolt:wait-abandoned`: a wait ended without a grant: its deadline, the caller's signal, or close(). */
export interface WaitAbandonedEvent {
  readonly key: string;
  readonly backend: string;
  /** As `AcquireEvent.address`. */
  readonly address?: string;
  readonly family: AcquireEvent['family'];
  /** LockTimeoutError, the caller's abort reason, or LockerClosedError. */
  readonly reason: unknown;
  readonly waitedMs: number;
}

/** `deadbolt:store-unavailable`: a store call failed with BackendUnavailableError (a wait may still ride it out). */
export interface StoreUnavailableEvent {
  readonly backend: string;
  /** The operation: `acquire`, `renew`, `release`, … */
  readonly operation: string;
  readonly error: unknown;
}

/**
 * The channels, by what they carry. Subscribe by name with node:diagnostics_channel
 * (`tracingChannel('deadbolt:acquire').subscribe({ start, asyncEnd, error })`,
 * `subscribe('deadbolt:lease-lost', fn)`) or through these objects. A subscriber that throws
 * does not fail the lock call, but Node rethrows its error on `process.nextTick`, where it is an
 * uncaught exception: a subscriber must not throw.
 */
export const diagnostics: {
  readonly acquire: TracingChannel<AcquireEvent>;
  readonly release: TracingChannel<LeaseEvent>;
  readonly extend: TracingChannel<LeaseEvent>;
  readonly renewalFailed: Channel;
  readonly leaseLost: Channel;
  readonly waitAbandoned: Channel;
  readonly storeUnavailable: Channel;
} = {
  acquire: tracingChannel('deadbolt:acquire'),
  release: tracingChannel('deadbolt:release'),
  extend: tracingChannel('deadbolt:extend'),
  renewalFailed: channel('deadbolt:renewal-failed'),
  leaseLost: channel('deadbolt:lease-lost'),
  waitAbandoned: channel('deadbolt:wait-abandoned'),
  storeUnavailable: channel('deadbolt:store-unavailable'),
};

/** Which store an event is about: the backend's name, and its servers where it knows them. */
export function eventSource(backend: { readonly name: string; readonly address?: string | undefined }): {
  backend: string;
  address?: string;
} {
  return backend.address === undefined ? { backend: backend.name } : { backend: backend.name, address: backend.address };
}

/** How a key appears in events: as it is, or (`redactKeys`) a prefix of its SHA-256. */
export function eventKey(key: string, redact: boolean): string {
  return redact ? `sha256:${createHash('sha256').update(key).digest('hex').slice(0, 16)}` : key;
}

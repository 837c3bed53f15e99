import { diagnostics } from './diagnostics.js';

/**
 * Every error deadbolt throws is a `DeadboltError` with a stable `code`; match on `code` (or
 * `instanceof`) rather than on messages.
 */
export type DeadboltErrorCode =
  | 'INVALID_ARGUMENT'
  | 'LOCK_TIMEOUT'
  | 'LOCK_LOST'
  | 'NOT_OWNER'
  | 'LOCKER_CLOSED'
  | 'BACKEND_UNAVAILABLE'
  | 'BACKEND_ERROR'
  | 'LIMIT_MISMATCH'
  | 'LOCK_UPGRADE'
  | 'SELF_DEADLOCK'
  | 'STALE_TOKEN';

/** Base class of every deadbolt error. */
export abstract class DeadboltError extends Error {
  abstract readonly code: DeadboltErrorCode;
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** A caller passed a bad key, ttl, timeout or option. Thrown before anything reaches the store. */
export class InvalidArgumentError extends DeadboltError {
  readonly code = 'INVALID_ARGUMENT' as const;
}

/** `lock()` waited `timeoutMs` without being granted. Nothing of the wait is left in the store. */
export class LockTimeoutError extends DeadboltError {
  readonly code = 'LOCK_TIMEOUT' as const;
  constructor(
    readonly key: string,
    readonly timeoutMs: number,
  ) {
    super(`timed out after ${timeoutMs} ms waiting for lock ${JSON.stringify(key)}`);
  }
}

/**
 * The lease is gone (expired, taken over, deleted, or the store lost it) or could not be renewed
 * before it could have expired. Used as the `reason` of `lock.signal`.
 */
export class LockLostError extends DeadboltError {
  readonly code = 'LOCK_LOST' as const;
  constructor(
    readonly key: string,
    message = `lock ${JSON.stringify(key)} was lost`,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/**
 * A semaphore was asked for with a limit other than the one its live permits and waiters were
 * taken with (two clients configured differently). Nothing was taken; both numbers are named.
 */
export class LimitMismatchError extends DeadboltError {
  readonly code = 'LIMIT_MISMATCH' as const;
  constructor(
    readonly key: string,
    readonly storedLimit: number,
    readonly requestedLimit: number,
  ) {
    super(
      `semaphore ${JSON.stringify(key)} is in use with ${storedLimit === 0 ? 'no limit (a read-write lock)' : `limit ${storedLimit}`}; ` +
        `asked for with ${requestedLimit === 0 ? 'no limit (a read-write lock)' : `limit ${requestedLimit}`}`,
    );
  }
}

/**
 * A write lock was asked for by a caller that holds a read lock of the same key (an upgrade). It
 * would wait for its own read lock forever, so it is refused at once; release the read lock first.
 */
export class LockUpgradeError extends DeadboltError {
  readonly code = 'LOCK_UPGRADE' as const;
  constructor(readonly key: string) {
    super(
      `a write lock on ${JSON.stringify(key)} was asked for while this caller holds a read lock on it (upgrades deadlock); release the read lock first`,
    );
  }
}

/**
 * A non-reentrant locker was asked, inside `withLock` (or `withLockAll`, `withWrite`, `withRead`,
 * `withPermit`) of a key, for that same key through the same locker in a way that would wait for
 * itself: a lock inside its lock, a write or read inside its write, a read inside its read (a
 * writer queued between them waits for the outer read, and the inner read waits for the writer),
 * a permit inside its permit (at the limit, none frees). Refused at once; pass `reentrant: true`
 * (on the locker or the call) to nest instead: the nested hold shares the outer one's lease.
 */
export class SelfDeadlockError extends DeadboltError {
  readonly code = 'SELF_DEADLOCK' as const;
  constructor(readonly key: string) {
    super(
      `${JSON.stringify(key)} is already held by this caller (inside a with… helper of it) through this locker; waiting would deadlock (pass reentrant: true to nest)`,
    );
  }
}

/**
 * A fenced write (`Fence`) carried a token lower than one the resource has already accepted: a
 * newer holder of the lock has written since, so this writer's lock is gone, whatever it believes.
 * Nothing was written. `highest` is the token the resource holds, where the store said.
 */
export class StaleTokenError extends DeadboltError {
  readonly code = 'STALE_TOKEN' as const;
  constructor(
    readonly resource: string,
    readonly token: bigint,
    readonly highest?: bigint,
  ) {
    super(
      `fenced write to ${JSON.stringify(resource)} refused: token ${token} is below ` +
        (highest === undefined ? 'the highest one it has accepted' : `${highest}, the highest one it has accepted`),
    );
  }
}

/** The handle was already released by its owner, so it cannot be extended. */
export class NotOwnerError extends DeadboltError {
  readonly code = 'NOT_OWNER' as const;
}

/** The locker was closed: pending waits reject with this, new calls too. */
export class LockerClosedError extends DeadboltError {
  readonly code = 'LOCKER_CLOSED' as const;
  constructor(message = 'the locker is closed') {
    super(message);
  }
}

/** A backend as a store error names it: its `name` and, when it knows them, its servers (`LockBackend.address`). */
export interface StorePlace {
  readonly name: string;
  readonly address?: string | undefined;
  /** The backends this one runs over, whose errors it passes on as they are (`MigratingBackend`). */
  readonly stores?: readonly StorePlace[];
}

/** A store error's options: the driver error as `cause`, the servers as `address` (never credentials). */
export interface StoreErrorOptions extends ErrorOptions {
  address?: string | undefined;
}

const where = (backend: string, address: string | undefined) => (address ? `${backend} at ${address}` : backend);

/**
 * The store could not be reached (refused, timed out, connection lost). `cause` is the driver error,
 * with every password of a store URL this process was given blanked out of it (see `keepSecret`);
 * `address` and the message name the store's servers when the backend knows them.
 */
export class BackendUnavailableError extends DeadboltError {
  readonly code = 'BACKEND_UNAVAILABLE' as const;
  /** The store's servers (`host:port,…`), when the backend knows them (not for a client you passed in). */
  readonly address: string | undefined;
  constructor(
    readonly backend: string,
    readonly operation: string,
    options?: StoreErrorOptions,
  ) {
    super(`${where(backend, options?.address)} is unavailable during ${operation}: ${describeCause(scrub(options?.cause))}`, options);
    this.address = options?.address;
    // Every conclusion that a store cannot be reached is made here, in whichever layer: the one
    // place to tell a subscriber (see diagnostics.ts).
    if (diagnostics.storeUnavailable.hasSubscribers) diagnostics.storeUnavailable.publish({ backend, operation, error: this });
  }
}

/**
 * The store answered with an error. `cause` is the driver error (passwords blanked out, as for
 * `BackendUnavailableError`); `backend`, `address` and `operation` say where.
 */
export class BackendError extends DeadboltError {
  readonly code = 'BACKEND_ERROR' as const;
  /** As `BackendUnavailableError.address`. */
  readonly address: string | undefined;
  constructor(
    readonly backend: string,
    readonly operation: string,
    options?: StoreErrorOptions,
  ) {
    super(`${where(backend, options?.address)} failed during ${operation}: ${describeCause(scrub(options?.cause))}`, options);
    this.address = options?.address;
  }
}

/**
 * `error` as core hands it to a caller of `backend`'s: a store error the backend made without
 * naming its servers gets `backend.address`, in `address` and in the message (so no backend has
 * to pass it at each place it makes one). Any other error is returned as it is.
 */
export function located(error: DeadboltError, backend: StorePlace): DeadboltError {
  const store = error instanceof BackendUnavailableError || error instanceof BackendError ? error : undefined;
  // A backend over other backends (a migration) names them in `stores`: their errors pass through it.
  const place = [backend, ...(backend.stores ?? [])].find((p) => p.name === store?.backend);
  if (!store || store.address !== undefined || !place?.address) return error;
  const before = store.message;
  (store as { address: string | undefined }).address = place.address;
  store.message = `${where(store.backend, place.address)}${before.slice(store.backend.length)}`;
  if (store.stack?.includes(before)) store.stack = store.stack.replace(before, store.message);
  return store;
}

/** Any error of a store call for `backend` as a DeadboltError (`BackendError` with it as `cause` if it is none), located. */
export function asDeadboltError(error: unknown, backend: StorePlace, operation: string): DeadboltError {
  return located(error instanceof DeadboltError ? error : new BackendError(backend.name, operation, { cause: error }), backend);
}

/** Passwords this process was given in store URLs (`keepSecret`). */
const secrets = new Set<string>();

/**
 * Marks `secret` (a store URL's password) as never to be shown: every store error deadbolt wraps
 * has it blanked out of its cause, all the way down (drivers put it in places of their own: ioredis
 * keeps a failed AUTH's arguments on the error). Core's URL rule calls it for every URL it reads.
 */
export function keepSecret(secret: string | undefined): void {
  if (secret) secrets.add(secret);
}

/** `value` with every kept secret replaced by `***` in every string it holds (own properties, causes, arrays), in place. */
function scrub<T>(value: T, seen = new Set<unknown>(), depth = 0): T {
  if (secrets.size === 0 || value === null || typeof value !== 'object' || seen.has(value) || depth > 8) return value;
  seen.add(value);
  for (const key of Reflect.ownKeys(value)) {
    const property = Object.getOwnPropertyDescriptor(value, key);
    if (!property || !('value' in property)) continue; // getters are left alone
    const inner: unknown = property.value;
    if (typeof inner === 'string') {
      let clean = inner;
      for (const secret of secrets) clean = clean.replaceAll(secret, '***');
      if (clean !== inner && property.writable) (value as Record<PropertyKey, unknown>)[key] = clean;
      else if (clean !== inner && property.configurable) Object.defineProperty(value, key, { ...property, value: clean });
    } else {
      scrub(inner, seen, depth + 1);
    }
  }
  return value;
}

function describeCause(cause: unknown): string {
  if (cause instanceof Error) return cause.message || cause.name;
  return String(cause);
}

/** The error for a store call that got no answer within `ms`: the store is unavailable to us. */
export function noAnswer(backend: string | StorePlace, operation: string, ms: number): BackendUnavailableError {
  const { name, address } = typeof backend === 'string' ? { name: backend, address: undefined } : backend;
  return new BackendUnavailableError(name, operation, { cause: new Error(`no answer within ${ms} ms`), address });
}

/**
 * The typed error for a failed store call: a DeadboltError passes through unchanged; otherwise
 * `BackendUnavailableError` when `unavailable(error)` says the store could not be reached or answer
 * in time, else `BackendError`. The driver error is the `cause` either way.
 */
export function backendFailure(
  backend: string,
  operation: string,
  error: unknown,
  unavailable: (error: unknown) => boolean,
): DeadboltError {
  if (error instanceof DeadboltError) return error;
  return unavailable(error)
    ? new BackendUnavailableError(backend, operation, { cause: error })
    : new BackendError(backend, operation, { cause: error });
}

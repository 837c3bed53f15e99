import { randomUUID } from 'node:crypto';
import type { Lease, LockBackend } from './backend.js';
import {
  BackendError,
  DeadboltError,
  InvalidArgumentError,
  LockerClosedError,
  LockLostError,
  LockTimeoutError,
  NotOwnerError,
} from './errors.js';
import { validateKey, validateSignal, validateTimeout, validateTtl } from './validate.js';

/** Defaults for every lock a locker takes. */
export interface LockerOptions {
  /** Lease length. Default 15 000 ms. */
  ttlMs?: number;
  /** How often a held lease is renewed. Default ttl / 3 (of the lock's current ttl). */
  renewIntervalMs?: number;
  /** Renew held leases in the background. Default true; false gives fixed leases that just expire. */
  autoRenew?: boolean;
  /** Default wait limit for `lock()`. Default Infinity. */
  timeoutMs?: number;
}

export interface LockOptions {
  ttlMs?: number;
  /** Give up after this long with `LockTimeoutError`. 0 means one attempt. */
  timeoutMs?: number;
  /** Abort the wait; `lock()` then rejects with `signal.reason`. */
  signal?: AbortSignal;
}

export interface TryLockOptions {
  ttlMs?: number;
  signal?: AbortSignal;
}

/** A held lock. Dispose it (`await using`) or call `release()`. */
export interface Lock extends AsyncDisposable {
  readonly key: string;
  /** This acquisition's owner id (`crypto.randomUUID()`). */
  readonly owner: string;
  /** Fencing token: strictly greater than every earlier holder's token for this key. */
  readonly token: bigint;
  /**
   * Aborted with a `LockLostError` the moment the lease is lost or could have expired. Reading it
   * also checks the local lease estimate, so a holder resumed from a long pause sees it aborted
   * before its next write even if no timer has run yet.
   */
  readonly signal: AbortSignal;
  /** True while the lease is held and has not outlived its local estimate. */
  readonly held: boolean;
  /**
   * Extend the lease to `ttlMs` (default: the current ttl) from now; later renewals use it.
   * @throws LockLostError if the lease is lost; NotOwnerError after release; InvalidArgumentError
   * for a bad ttl; BackendError / BackendUnavailableError when the store fails (lease kept until its
   * estimate runs out).
   */
  extend(ttlMs?: number): Promise<void>;
  /**
   * Give the lock up. Idempotent; owner-checked in the store, so a stale handle never frees a new
   * holder. @throws BackendError / BackendUnavailableError when the store fails (the lease then
   * expires on its own).
   */
  release(): Promise<void>;
}

export interface Locker extends AsyncDisposable {
  readonly backend: LockBackend;
  /**
   * Wait until `key` is granted.
   * @throws InvalidArgumentError (before any I/O), LockTimeoutError, the signal's reason on abort,
   * LockerClosedError, BackendUnavailableError, BackendError.
   */
  lock(key: string, options?: LockOptions): Promise<Lock>;
  /**
   * One attempt, never waits: a Lock, or null when someone else holds `key`.
   * @throws InvalidArgumentError, LockerClosedError, BackendUnavailableError, BackendError — never
   * null for a store failure.
   */
  tryLock(key: string, options?: TryLockOptions): Promise<Lock | null>;
  /**
   * `lock()`, run `fn`, release in `finally`. If `fn` throws, that error wins over a release error.
   * @throws whatever `lock()` or `fn` throws.
   */
  withLock<T>(key: string, fn: (lock: Lock) => Promise<T> | T, options?: LockOptions): Promise<T>;
  /**
   * Reject pending waits with LockerClosedError, release held locks, close the backend.
   * Idempotent. @throws the first release or close error, after everything was attempted.
   */
  close(): Promise<void>;
}

const DEFAULT_TTL_MS = 15_000;

/**
 * A Locker over `backend`. The locker owns the backend: `close()` closes it.
 * @throws InvalidArgumentError for bad options.
 */
export function createLocker(backend: LockBackend, options: LockerOptions = {}): Locker {
  return new DefaultLocker(backend, options);
}

class DefaultLocker implements Locker {
  readonly backend: LockBackend;
  readonly #ttlMs: number;
  readonly #renewIntervalMs: number | undefined;
  readonly #autoRenew: boolean;
  readonly #timeoutMs: number;
  readonly #closing = new AbortController();
  readonly #held = new Set<LockHandle>();
  readonly #pending = new Set<Promise<unknown>>();
  /** Controllers of acquisitions that have their own deadline or caller signal. */
  readonly #waits = new Set<AbortController>();
  #closed: Promise<void> | undefined;

  constructor(backend: LockBackend, options: LockerOptions) {
    if (!backend || typeof backend.acquire !== 'function') {
      throw new InvalidArgumentError('backend must implement LockBackend');
    }
    this.backend = backend;
    this.#ttlMs = validateTtl(orDefault(options.ttlMs, DEFAULT_TTL_MS), backend.capabilities);
    if (options.renewIntervalMs !== undefined) {
      const r = options.renewIntervalMs;
      if (typeof r !== 'number' || !Number.isFinite(r) || r <= 0 || r >= this.#ttlMs) {
        throw new InvalidArgumentError(`renewIntervalMs must be a positive number below ttlMs, got ${String(r)}`);
      }
    }
    this.#renewIntervalMs = options.renewIntervalMs;
    this.#autoRenew = options.autoRenew ?? true;
    this.#timeoutMs = validateTimeout(orDefault(options.timeoutMs, Infinity));
  }

  async lock(key: string, options: LockOptions = {}): Promise<Lock> {
    validateKey(key);
    const ttlMs = validateTtl(orDefault(options.ttlMs, this.#ttlMs), this.backend.capabilities);
    const timeoutMs = validateTimeout(orDefault(options.timeoutMs, this.#timeoutMs));
    const signal = validateSignal(options.signal);
    signal?.throwIfAborted();
    const lock = await this.#track(this.#acquire(key, ttlMs, timeoutMs, signal));
    if (!lock) throw new LockTimeoutError(key, timeoutMs);
    return lock;
  }

  async tryLock(key: string, options: TryLockOptions = {}): Promise<Lock | null> {
    validateKey(key);
    const ttlMs = validateTtl(orDefault(options.ttlMs, this.#ttlMs), this.backend.capabilities);
    const signal = validateSignal(options.signal);
    signal?.throwIfAborted();
    return this.#track(this.#acquire(key, ttlMs, 0, signal));
  }

  async withLock<T>(key: string, fn: (lock: Lock) => Promise<T> | T, options?: LockOptions): Promise<T> {
    if (typeof fn !== 'function') throw new InvalidArgumentError('withLock needs a function');
    const lock = await this.lock(key, options);
    let result: T;
    try {
      result = await fn(lock);
    } catch (error) {
      // The body's error is what the caller must see; a failed release only means the lease
      // runs out on its own.
      await lock.release().catch(() => undefined);
      throw error;
    }
    await lock.release();
    return result;
  }

  close(): Promise<void> {
    this.#closed ??= this.#close();
    return this.#closed;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /** Called by a handle when it stops being held. */
  forget(handle: LockHandle): void {
    this.#held.delete(handle);
  }

  async #close(): Promise<void> {
    const closed = new LockerClosedError('the locker was closed while waiting');
    this.#closing.abort(closed);
    for (const controller of this.#waits) controller.abort(closed);
    await Promise.allSettled([...this.#pending]);
    const results = await Promise.allSettled([...this.#held].map((h) => h.release()));
    results.push(...(await Promise.allSettled([this.backend.close()])));
    const failure = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failure) throw failure.reason;
  }

  #track<T>(promise: Promise<T>): Promise<T> {
    this.#pending.add(promise);
    const untrack = () => this.#pending.delete(promise);
    promise.then(untrack, untrack);
    return promise;
  }

  /** One acquisition; `timeoutMs` 0 means a single attempt that resolves null when busy. */
  async #acquire(key: string, ttlMs: number, timeoutMs: number, userSignal?: AbortSignal): Promise<LockHandle | null> {
    if (this.#closed) throw new LockerClosedError();
    const wait = timeoutMs > 0;
    const timed = wait && Number.isFinite(timeoutMs);
    // The common case (no deadline, no caller signal) shares the locker's close signal; otherwise one
    // controller that the deadline, the caller's signal and close() abort. (AbortSignal.any is far
    // slower and, on a long-lived signal, accumulates dependents.)
    let controller: AbortController | undefined;
    let timer: NodeJS.Timeout | undefined;
    let onCallerAbort: (() => void) | undefined;
    if (timed || userSignal) {
      const own = (controller = new AbortController());
      this.#waits.add(own);
      if (timed) timer = setTimeout(() => own.abort(new LockTimeoutError(key, timeoutMs)), timeoutMs);
      if (userSignal) {
        onCallerAbort = () => own.abort(userSignal.reason);
        userSignal.addEventListener('abort', onCallerAbort, { once: true });
      }
    }
    const signal = controller?.signal ?? this.#closing.signal;
    try {
      let lease: Lease | null;
      try {
        lease = await this.backend.acquire({ key, owner: randomUUID(), ttlMs, wait, signal });
      } catch (error) {
        if (signal.aborted) throw signal.reason;
        throw asDeadboltError(error, this.backend.name, 'acquire');
      }
      if (!lease) {
        if (wait) throw new BackendError(this.backend.name, 'acquire', { cause: 'a waiting acquire returned no lease' });
        return null;
      }
      if (signal.aborted) {
        // Granted just as the wait ended: hand it back. If that fails the lease expires on its own;
        // the caller asked for the abort reason.
        await this.backend.release(lease).catch(() => undefined);
        throw signal.reason;
      }
      const handle = new LockHandle(this, lease, ttlMs, this.#renewIntervalMs, this.#autoRenew);
      this.#held.add(handle);
      return handle;
    } finally {
      if (controller) this.#waits.delete(controller);
      clearTimeout(timer);
      if (onCallerAbort) userSignal?.removeEventListener('abort', onCallerAbort);
    }
  }
}

/** Drift allowance subtracted from every local lease estimate (as Redlock does: 1 % + 2 ms). */
function safeLifetime(ttlMs: number): number {
  return ttlMs - Math.max(2, ttlMs * 0.01);
}

class LockHandle implements Lock {
  readonly key: string;
  readonly owner: string;
  readonly token: bigint;
  readonly #locker: DefaultLocker;
  readonly #lease: Lease;
  readonly #controller = new AbortController();
  readonly #fixedRenewIntervalMs: number | undefined;
  readonly #autoRenew: boolean;
  #ttlMs: number;
  #validUntil: number;
  #state: 'held' | 'lost' | 'released' = 'held';
  #renewTimer: NodeJS.Timeout | undefined;
  #expiryTimer: NodeJS.Timeout | undefined;
  #lastRenewError: unknown;
  #released: Promise<void> | undefined;
  /** Our listener on `lease.lost` (a backend may share that signal between many leases). */
  #onStoreLoss: (() => void) | undefined;

  constructor(
    locker: DefaultLocker,
    lease: Lease,
    ttlMs: number,
    renewIntervalMs: number | undefined,
    autoRenew: boolean,
  ) {
    this.#locker = locker;
    this.#lease = lease;
    this.key = lease.key;
    this.owner = lease.owner;
    this.token = lease.token;
    this.#ttlMs = ttlMs;
    this.#fixedRenewIntervalMs = renewIntervalMs;
    this.#autoRenew = autoRenew;
    this.#validUntil = lease.acquiredAt + safeLifetime(ttlMs);
    if (lease.lost?.aborted) {
      this.#lose(new LockLostError(this.key, 'the store reported the lease lost', { cause: lease.lost.reason }));
      return;
    }
    if (lease.lost) {
      const lost = lease.lost;
      this.#onStoreLoss = () =>
        this.#lose(new LockLostError(this.key, `the store reported lock ${JSON.stringify(this.key)} lost`, { cause: lost.reason }));
      lost.addEventListener('abort', this.#onStoreLoss, { once: true });
    }
    this.#schedule();
  }

  get signal(): AbortSignal {
    this.#checkExpiry();
    return this.#controller.signal;
  }

  get held(): boolean {
    this.#checkExpiry();
    return this.#state === 'held';
  }

  async extend(ttlMs: number = this.#ttlMs): Promise<void> {
    const backend = this.#locker.backend;
    validateTtl(ttlMs, backend.capabilities);
    this.#checkExpiry();
    if (this.#state === 'released') throw new NotOwnerError(`lock ${JSON.stringify(this.key)} was already released`);
    if (this.#state === 'lost') throw this.#controller.signal.reason as LockLostError;
    const startedAt = performance.now();
    let ok: boolean;
    try {
      ok = await backend.renew(this.#lease, ttlMs);
    } catch (error) {
      throw asDeadboltError(error, backend.name, 'renew');
    }
    if (this.#state !== 'held') {
      if (this.#state === 'lost') throw this.#controller.signal.reason as LockLostError;
      throw new NotOwnerError(`lock ${JSON.stringify(this.key)} was released during extend`);
    }
    if (!ok) {
      this.#lose(new LockLostError(this.key, `lock ${JSON.stringify(this.key)} is no longer held by this owner`));
      throw this.#controller.signal.reason as LockLostError;
    }
    this.#ttlMs = ttlMs;
    this.#validUntil = startedAt + safeLifetime(ttlMs);
    this.#schedule();
  }

  release(): Promise<void> {
    this.#released ??= this.#release();
    return this.#released;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }

  async #release(): Promise<void> {
    if (this.#state === 'held') this.#state = 'released';
    this.#stopTimers();
    this.#locker.forget(this);
    const backend = this.#locker.backend;
    try {
      // Also after a loss: the release is owner-checked and clears anything we may still own.
      await backend.release(this.#lease);
    } catch (error) {
      throw asDeadboltError(error, backend.name, 'release');
    }
  }

  /**
   * One timer at a time: with auto-renew, the next renewal (the expiry timer is armed only while a
   * renewal is in flight); without it, the expiry of the local estimate.
   */
  #schedule(): void {
    this.#stopTimers();
    if (!this.#autoRenew) return this.#armExpiry();
    const interval = this.#fixedRenewIntervalMs ?? this.#ttlMs / 3;
    this.#scheduleRenew(Math.min(interval, Math.max(0, this.#validUntil - performance.now() - 1)));
  }

  #armExpiry(): void {
    clearTimeout(this.#expiryTimer);
    this.#expiryTimer = setTimeout(() => {
      this.#checkExpiry();
      // Timers count whole event-loop milliseconds and can fire a fraction of one before
      // performance.now() reaches the deadline; a lock must not be forgotten then, so look again.
      if (this.#state === 'held' && performance.now() < this.#validUntil) this.#armExpiry();
    }, Math.max(0, this.#validUntil - performance.now()) + 1);
    this.#expiryTimer.unref();
  }

  #scheduleRenew(delayMs: number): void {
    clearTimeout(this.#renewTimer);
    this.#renewTimer = setTimeout(() => void this.#renew(), delayMs);
    this.#renewTimer.unref();
  }

  async #renew(): Promise<void> {
    this.#checkExpiry();
    if (this.#state !== 'held') return;
    this.#armExpiry();
    const startedAt = performance.now();
    let ok: boolean;
    try {
      ok = await this.#locker.backend.renew(this.#lease, this.#ttlMs);
    } catch (error) {
      if (this.#state !== 'held') return;
      // Keep trying while the lease may still be ours; the armed expiry timer declares it lost.
      this.#lastRenewError = error;
      const left = this.#validUntil - performance.now();
      this.#scheduleRenew(Math.max(5, Math.min(this.#ttlMs / 6, left / 2)));
      return;
    }
    if (this.#state !== 'held') return;
    if (!ok) {
      this.#lose(new LockLostError(this.key, `lock ${JSON.stringify(this.key)} was lost: the store no longer holds it for this owner`));
      return;
    }
    this.#lastRenewError = undefined;
    this.#validUntil = startedAt + safeLifetime(this.#ttlMs);
    this.#schedule();
  }

  #checkExpiry(): void {
    if (this.#state !== 'held' || performance.now() < this.#validUntil) return;
    const cause = this.#lastRenewError;
    this.#lose(
      new LockLostError(
        this.key,
        `lock ${JSON.stringify(this.key)} may have expired: its lease was not renewed in time`,
        cause === undefined ? undefined : { cause },
      ),
    );
    // A store whose lease is a session (ZooKeeper) keeps the claim as long as the client lives, so
    // hand it back now that we no longer count on it. Owner-checked, so harmless on ttl stores; a
    // failure changes nothing for the caller, who has already been told the lock is lost.
    this.#locker.backend.release(this.#lease).catch(() => undefined);
  }

  #lose(error: LockLostError): void {
    if (this.#state !== 'held') return;
    this.#state = 'lost';
    this.#stopTimers();
    this.#controller.abort(error);
  }

  #stopTimers(): void {
    if (this.#state !== 'held' && this.#onStoreLoss) {
      this.#lease.lost?.removeEventListener('abort', this.#onStoreLoss);
      this.#onStoreLoss = undefined;
    }
    clearTimeout(this.#renewTimer);
    clearTimeout(this.#expiryTimer);
    this.#renewTimer = this.#expiryTimer = undefined;
  }
}

/** Only `undefined` means "not given": an explicit null is bad input, not a request for the default. */
function orDefault<T>(value: T | undefined, fallback: T): T {
  return value === undefined ? fallback : value;
}

function asDeadboltError(error: unknown, backend: string, operation: string): DeadboltError {
  return error instanceof DeadboltError ? error : new BackendError(backend, operation, { cause: error });
}

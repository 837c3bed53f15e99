import { randomUUID } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { fullCapabilities, MAX_SEMAPHORE_LIMIT, type AcquireRequest, type Lease, type LockBackend, type SharedRequest } from './backend.js';
import {
  BackendError,
  BackendUnavailableError,
  DeadboltError,
  InvalidArgumentError,
  LockerClosedError,
  LockLostError,
  LockTimeoutError,
  LockUpgradeError,
  noAnswer,
  NotOwnerError,
  SelfDeadlockError,
} from './errors.js';
import { heldInScope, ReentrantLock, runHolding, type HeldKind } from './held-scope.js';
import { MultiLockHandle, releaseAll } from './multi-lock.js';
import type { Lock, Locker, LockerOptions, LockOptions, MultiLock, ReadWriteLock, Semaphore, TryLockOptions } from './types.js';
import { after, race, raceSignal, withTimeout, type Timer } from './time.js';
import { DONE, waitOnConnections } from './wait.js';
import { count, flag, ms, readOptions, signal as signalRule, wait as waitRule, type Rules } from './options.js';
import { validateKey, validateKeys, validateTtl } from './validate.js';

/** How each option of `createLocker` is checked (see options.ts); `ttlMs` then against the backend. */
const LOCKER_RULES = {
  ttlMs: count(1),
  renewIntervalMs: ms(),
  autoRenew: flag,
  timeoutMs: waitRule,
  operationTimeoutMs: ms(),
  unavailableGraceMs: waitRule,
  reentrant: flag,
  lockDelayMs: count(0),
} satisfies Rules<LockerOptions>;

/** How a waiting call's options are checked (`lock`, `lockAll`, `acquire`, `read`, `write`, the `with…` helpers). */
const LOCK_RULES = { ttlMs: count(1), timeoutMs: waitRule, signal: signalRule, reentrant: flag, lockDelayMs: count(0) } satisfies Rules<LockOptions>;
/** How a one-shot call's options are checked (`tryLock`, `tryLockAll`, `tryAcquire`, `tryRead`, `tryWrite`). */
const TRY_RULES = { ttlMs: count(1), signal: signalRule, reentrant: flag, lockDelayMs: count(0) } satisfies Rules<TryLockOptions>;
const SEMAPHORE_RULES = { limit: count(1, MAX_SEMAPHORE_LIMIT) } satisfies Rules<{ limit: number }>;

/**
 * Core's option rules by entry point: `createLocker`; `lock` (every waiting call: `lockAll`,
 * `acquire`, `read`, `write`, the `with…` helpers); `tryLock` (every one-shot call); `semaphore`.
 * The conformance suite feeds each its rules' hostile values.
 */
export const optionRules = { createLocker: LOCKER_RULES, lock: LOCK_RULES, tryLock: TRY_RULES, semaphore: SEMAPHORE_RULES } as const;

/** A call without options: the common case reads nothing. */
const NO_OPTIONS: LockOptions = Object.freeze({});

/** A call's options, checked by `rules` (see options.ts). @throws InvalidArgumentError. */
function readCall(options: unknown, rules: typeof LOCK_RULES | typeof TRY_RULES, where: string): LockOptions {
  return options === undefined ? NO_OPTIONS : readOptions(options, rules, where);
}

const DEFAULT_TTL_MS = 15_000;
const DEFAULT_OPERATION_TIMEOUT_MS = 4_000;
const DEFAULT_UNAVAILABLE_GRACE_MS = 5_000;
/** How long an aborted acquisition waits for the backend's cleanup before rejecting. */
const ABORT_CLEANUP_MS = 50;

/**
 * A Locker over `backend`. The locker owns the backend: `close()` closes it.
 * @throws InvalidArgumentError for bad options.
 */
export function createLocker(backend: LockBackend, options?: LockerOptions): Locker {
  return new DefaultLocker(backend, options);
}

/** What every handle of one locker shares. */
interface HandleSettings {
  readonly renewIntervalMs: number | undefined;
  readonly autoRenew: boolean;
  readonly operationTimeoutMs: number;
}

class DefaultLocker implements Locker {
  readonly backend: LockBackend;
  readonly #ttlMs: number;
  readonly #timeoutMs: number;
  readonly #reentrant: boolean;
  readonly #lockDelayMs: number;
  readonly #unavailableGraceMs: number;
  /** The terms of a call that sets neither `ttlMs` nor `lockDelayMs`, validated once. */
  readonly #defaultTerms: LeaseTerms;
  readonly #settings: HandleSettings;
  readonly #closing = new AbortController();
  readonly #held = new HeldHandles();
  /** Acquisitions under way, and how close() hears that the last one has settled. */
  #acquiring = 0;
  #onIdle: (() => void) | undefined;
  /** Controllers of acquisitions that have their own deadline or caller signal. */
  readonly #waits = new Set<AbortController>();
  /**
   * How close() fails the acquisitions that have no controller of their own (they pass the closing
   * signal to the backend): a set entry costs far less than a listener on that shared signal.
   */
  readonly #onClose = new Set<(reason: unknown) => void>();
  readonly #failOnClose = (fail: (reason: unknown) => void) => {
    this.#onClose.add(fail);
    return () => this.#onClose.delete(fail);
  };
  /** A grant that arrived after its acquisition stopped waiting goes back; if that fails it expires on its own. */
  readonly #giveBack = (late: Lease | null) => void (late && this.backend.release(late).catch(noop));
  #closed: Promise<void> | undefined;

  constructor(backend: LockBackend, raw: LockerOptions | undefined) {
    if (!backend || typeof backend !== 'object' || typeof backend.acquire !== 'function') {
      throw new InvalidArgumentError('backend must implement LockBackend');
    }
    const options = readOptions(raw, LOCKER_RULES, 'createLocker');
    this.backend = backend;
    this.#ttlMs = validateTtl(options.ttlMs ?? DEFAULT_TTL_MS, backend.capabilities);
    if (options.renewIntervalMs !== undefined && options.renewIntervalMs >= this.#ttlMs) {
      throw new InvalidArgumentError(`renewIntervalMs must be below ttlMs (${this.#ttlMs}), got ${options.renewIntervalMs}`);
    }
    const operationTimeoutMs = options.operationTimeoutMs ?? DEFAULT_OPERATION_TIMEOUT_MS;
    this.#settings = { renewIntervalMs: options.renewIntervalMs, autoRenew: options.autoRenew ?? true, operationTimeoutMs };
    this.#timeoutMs = options.timeoutMs ?? Infinity;
    this.#unavailableGraceMs = options.unavailableGraceMs ?? DEFAULT_UNAVAILABLE_GRACE_MS;
    this.#reentrant = options.reentrant ?? false;
    this.#lockDelayMs = options.lockDelayMs ?? 0;
    this.#defaultTerms = this.#leaseOf(NO_OPTIONS);
    // Every waiter without a deadline of its own listens to this one signal; that is not a leak
    // (each listener goes when its wait ends), so lift Node's warning threshold of 10.
    setMaxListeners(0, this.#closing.signal);
  }

  lock(key: string, options?: LockOptions): Promise<Lock> {
    // Not an async function: one promise fewer per lock, which an in-process store notices.
    try {
      validateKey(key);
      const call = readCall(options, LOCK_RULES, 'lock');
      const nested = this.#nested(key, 'lock', call);
      return nested ? Promise.resolve(nested) : this.wait(key, call);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  async tryLock(key: string, options?: TryLockOptions): Promise<Lock | null> {
    validateKey(key);
    const call = readCall(options, TRY_RULES, 'tryLock');
    const nested = this.#nested(key, 'lock', call, true);
    return nested !== undefined ? nested : this.attempt(key, call);
  }

  async withLock<T>(key: string, fn: (lock: Lock) => Promise<T> | T, options?: LockOptions): Promise<T> {
    return this.withHeld(key, 'lock', fn, options, 'withLock');
  }

  async lockAll(keys: readonly string[], options?: LockOptions): Promise<MultiLock> {
    const list = validateKeys(keys);
    const call = readCall(options, LOCK_RULES, 'lockAll');
    const timeoutMs = call.timeoutMs ?? this.#timeoutMs;
    this.#leaseOf(call);
    call.signal?.throwIfAborted();
    const started = performance.now();
    const taken: Lock[] = [];
    try {
      for (const key of list) {
        const nested = this.#nested(key, 'lock', call);
        if (nested) {
          taken.push(nested);
          continue;
        }
        // One deadline for the whole call: each key gets what is left of it (0 stays one attempt).
        const left = timeoutMs === 0 || timeoutMs === Infinity ? timeoutMs : timeoutMs - (performance.now() - started);
        if (left <= 0 && timeoutMs > 0) throw new LockTimeoutError(key, timeoutMs);
        taken.push(await this.wait(key, { ...call, timeoutMs: left }));
      }
    } catch (error) {
      // Nothing taken may outlive the call; a release that fails expires on its own.
      await releaseAll(taken).catch(noop);
      if (error instanceof LockTimeoutError) throw new LockTimeoutError(list.join(', '), timeoutMs);
      throw error;
    }
    return new MultiLockHandle(list, taken);
  }

  async tryLockAll(keys: readonly string[], options?: TryLockOptions): Promise<MultiLock | null> {
    const list = validateKeys(keys);
    const call = readCall(options, TRY_RULES, 'tryLockAll');
    this.#leaseOf(call);
    call.signal?.throwIfAborted();
    const taken: Lock[] = [];
    try {
      for (const key of list) {
        const nested = this.#nested(key, 'lock', call, true);
        const lock = nested !== undefined ? nested : await this.attempt(key, call);
        if (!lock) {
          await releaseAll(taken);
          return null;
        }
        taken.push(lock);
      }
    } catch (error) {
      await releaseAll(taken).catch(noop);
      throw error;
    }
    return new MultiLockHandle(list, taken);
  }

  async withLockAll<T>(keys: readonly string[], fn: (lock: MultiLock) => Promise<T> | T, options?: LockOptions): Promise<T> {
    if (typeof fn !== 'function') throw new InvalidArgumentError('withLockAll needs a function');
    return this.holding(this.lockAll(keys, options), (all) =>
      runHolding(
        all.locks.filter((lock) => !(lock instanceof ReentrantLock)).map((lock) => ({ locker: this, key: lock.key, kind: 'lock' as const, lock })),
        () => fn(all),
      ),
    );
  }

  /**
   * What a take of `key` as `want` does when this caller already holds the key through this
   * locker (inside `withLock`, `withRead`, `withWrite` or `withPermit` of it): a write where a read
   * is held is an upgrade (LockUpgradeError, reentrant or not); otherwise a nested hold of the same
   * lease if reentrant; else the caller would wait for itself (a write behind its own write, a read
   * behind a writer queued behind its own read, a permit behind its own at the limit), so a wait
   * throws SelfDeadlockError and a one-shot attempt (`trying`) gives null. Undefined when the key
   * is not held.
   */
  #nested(key: string, want: HeldKind, call: LockOptions, trying = false): Lock | null | undefined {
    const held = heldInScope(this, key, want);
    if (!held) return undefined;
    if (want === 'write' && held.kind === 'read') throw new LockUpgradeError(key);
    this.#leaseOf(call);
    if (call.reentrant ?? this.#reentrant) return new ReentrantLock(held.lock);
    if (trying) return null;
    throw new SelfDeadlockError(key);
  }

  /** The body of `withLock`, `withRead`, `withWrite` and `withPermit`: a scope that holds `key` as `want`. */
  async withHeld<T>(key: string, want: HeldKind, fn: (lock: Lock) => Promise<T> | T, options: LockOptions | undefined, where: string, claim?: Claim): Promise<T> {
    if (typeof fn !== 'function') throw new InvalidArgumentError(`${where} needs a function`);
    validateKey(key);
    const call = readCall(options, LOCK_RULES, where);
    const nested = this.#nested(key, want, call);
    if (nested) return this.holding(Promise.resolve(nested), fn);
    return this.holding(this.wait(key, call, claim), (lock) => runHolding([{ locker: this, key, kind: want, lock }], () => fn(lock)));
  }

  /** A family take (`read`, `write`, a permit) of a validated key: as `lock()` (`trying` false) or `tryLock()`. */
  takeShared(key: string, want: HeldKind, claim: Claim, options: LockOptions | TryLockOptions | undefined, where: string, trying: boolean): Promise<Lock | null> {
    try {
      const call = readCall(options, trying ? TRY_RULES : LOCK_RULES, where);
      const nested = this.#nested(key, want, call, trying);
      if (nested !== undefined) return Promise.resolve(nested);
      return trying ? this.attempt(key, call, claim) : this.wait(key, call, claim);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  semaphore(key: string, options: { limit: number }): Semaphore {
    validateKey(key);
    const { limit } = readOptions(options, SEMAPHORE_RULES, 'semaphore');
    if (limit === undefined) throw new InvalidArgumentError(`limit must be a whole number from 1 to ${MAX_SEMAPHORE_LIMIT}, got undefined`);
    this.#need('semaphore');
    return new LockerSemaphore(this, key, limit);
  }

  readWriteLock(key: string): ReadWriteLock {
    validateKey(key);
    this.#need('readWrite');
    return new LockerReadWriteLock(this, key);
  }

  /** `lock()` for a validated key and options, or for a shared claim. Bad input rejects; nothing throws. */
  wait(key: string, call: LockOptions, claim?: Claim): Promise<Lock> {
    let lease: LeaseTerms;
    try {
      lease = this.#leaseOf(call);
      call.signal?.throwIfAborted();
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#acquire(key, lease, call.timeoutMs ?? this.#timeoutMs, call.signal, claim, true);
  }

  /** `tryLock()` for a validated key and options, or for a shared claim. */
  async attempt(key: string, call: TryLockOptions, claim?: Claim): Promise<Lock | null> {
    const lease = this.#leaseOf(call);
    call.signal?.throwIfAborted();
    return this.#acquire(key, lease, 0, call.signal, claim, false);
  }

  /**
   * The lease a call asks for: its ttl and lock-delay, validated (the store keeps ttl + delay, so
   * that sum must be a ttl the backend accepts). @throws InvalidArgumentError.
   */
  #leaseOf(call: TryLockOptions): LeaseTerms {
    // Unset during the constructor's own call, which validates the defaults.
    if (call.ttlMs === undefined && call.lockDelayMs === undefined && this.#defaultTerms) return this.#defaultTerms;
    const ttlMs = validateTtl(call.ttlMs ?? this.#ttlMs, this.backend.capabilities);
    const delayMs = call.lockDelayMs ?? this.#lockDelayMs;
    if (delayMs > 0) validateTtl(ttlMs + delayMs, this.backend.capabilities, 'ttlMs + lockDelayMs');
    return { ttlMs, delayMs };
  }

  /** The body of every `with…` helper: run `fn` while `taken` is held, release in `finally`. */
  async holding<T, L extends Lock | MultiLock = Lock>(taken: Promise<L>, fn: (lock: L) => Promise<T> | T): Promise<T> {
    const lock = await taken;
    let result: T;
    try {
      result = await fn(lock);
    } catch (error) {
      // The body's error is what the caller must see; a failed release only means the lease
      // runs out on its own.
      await lock.release().catch(() => undefined);
      throw error;
    }
    // Work finished after the lease was lost was done without the lock: never report it as done.
    // (Reading the signal also checks the local lease estimate.)
    if (lock.signal.aborted) {
      await lock.release().catch(() => undefined);
      throw lock.signal.reason;
    }
    await lock.release();
    return result;
  }

  #need(capability: 'semaphore' | 'readWrite'): void {
    if (!fullCapabilities(this.backend.capabilities)[capability] || typeof this.backend.acquireShared !== 'function') {
      const family = capability === 'semaphore' ? 'semaphores' : 'read-write locks';
      throw new InvalidArgumentError(`the ${this.backend.name} backend has no ${family} (capabilities.${capability} is false)`);
    }
  }

  close(): Promise<void> {
    this.#closed ??= this.#close();
    return this.#closed;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /** Called by a handle when it stops being held (released or lost). */
  forget(handle: LockHandle): void {
    this.#held.delete(handle);
  }

  /**
   * Waits end at once (every acquisition races the closing signal); releases and the backend's own
   * close each get one operation timeout, so close() finishes within two of them even when the
   * store has gone silent.
   */
  async #close(): Promise<void> {
    const closed = new LockerClosedError('the locker was closed while waiting');
    this.#closing.abort(closed);
    for (const controller of this.#waits) controller.abort(closed);
    for (const fail of this.#onClose) fail(closed);
    if (this.#acquiring > 0) await new Promise<void>((resolve) => (this.#onIdle = resolve));
    const { operationTimeoutMs } = this.#settings;
    const timeout = (operation: string) => () => noAnswer(this.backend.name, operation, operationTimeoutMs);
    const releases = Promise.allSettled([...this.#held].map((h) => h.release()));
    const results = [
      await withTimeout(releases, operationTimeoutMs, timeout('close (release)')).then(
        (settled) => settled,
        (error: unknown): PromiseSettledResult<void>[] => [{ status: 'rejected', reason: error }],
      ),
      await Promise.allSettled([withTimeout(this.backend.close(), operationTimeoutMs, timeout('close'))]),
    ].flat();
    const failure = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failure) throw failure.reason;
  }

  /**
   * One acquisition; `timeoutMs` 0 means a single attempt that resolves null when busy and is
   * bounded by the operation timeout. `required`: a busy single attempt rejects with
   * LockTimeoutError (`lock()` with timeout 0) instead of resolving null. A store in this process
   * answers first on the spot (`acquireNow`): a grant there needs no deadline, no race and no
   * promise but the caller's; only a request that has to wait goes on to `#wait`.
   */
  #acquire(key: string, terms: LeaseTerms, timeoutMs: number, userSignal: AbortSignal | undefined, claim: Claim | undefined, required: true): Promise<LockHandle>;
  #acquire(key: string, terms: LeaseTerms, timeoutMs: number, userSignal: AbortSignal | undefined, claim: Claim | undefined, required: false): Promise<LockHandle | null>;
  #acquire(key: string, terms: LeaseTerms, timeoutMs: number, userSignal: AbortSignal | undefined, claim: Claim | undefined, required: boolean): Promise<LockHandle | null> {
    if (this.#closed) return Promise.reject(new LockerClosedError());
    const owner = randomUUID();
    if (this.backend.acquireNow && !claim) {
      let lease: Lease | null | undefined;
      try {
        lease = this.backend.acquireNow(this.#request(key, owner, terms, timeoutMs > 0, userSignal ?? this.#closing.signal));
      } catch (error) {
        return Promise.reject(asDeadboltError(error, this.backend.name, 'acquire'));
      }
      // The store read the clock for this grant a moment ago, in this same call.
      if (lease) return Promise.resolve(this.#hold(lease, terms, lease.acquiredAt));
      if (lease === null) return this.#notGranted(key, timeoutMs, required);
    }
    return this.#wait(key, owner, terms, timeoutMs, userSignal, claim, required);
  }

  /**
   * Renews a grant once; resolves the renewal's send time (the lease's ttl counts from there).
   * Rejects with BackendUnavailableError when the store no longer holds it (it ran out before its
   * answer came; the wait may try again), or with the renewal's error (the grant is given back).
   */
  async #renewGrant(lease: Lease, terms: LeaseTerms): Promise<number> {
    const sentAt = performance.now();
    let renewed: boolean;
    try {
      renewed = await this.backend.renew(lease, terms.ttlMs + terms.delayMs);
    } catch (error) {
      this.#giveBack(lease);
      throw error;
    }
    if (!renewed) throw new BackendUnavailableError(this.backend.name, 'acquire', { cause: new Error('the grant ran out before its answer came') });
    return sentAt;
  }

  /** What `acquire` sends the store: the store keeps the lease for ttl + lock-delay; this process counts on ttl (LockOptions.lockDelayMs). */
  #request(key: string, owner: string, terms: LeaseTerms, wait: boolean, signal: AbortSignal): AcquireRequest {
    const { ttlMs, delayMs } = terms;
    return delayMs > 0 ? { key, owner, ttlMs: ttlMs + delayMs, wait, signal, lockDelayMs: delayMs } : { key, owner, ttlMs, wait, signal };
  }

  /**
   * A granted lease becomes a handle this locker tracks (close() releases it). `now`: the caller's
   * `performance.now()`, if it just read it.
   */
  #hold(lease: Lease, terms: LeaseTerms, now?: number, since?: number): LockHandle {
    const handle = new LockHandle(this, lease, terms, this.#settings, now, since);
    this.#held.add(handle);
    return handle;
  }

  /** The answer to a store that said "busy" (`null`): a wait must never hear it; a single attempt resolves null, or rejects when `required`. */
  #notGranted(key: string, timeoutMs: number, required: boolean): Promise<null> {
    if (timeoutMs > 0) return Promise.reject(new BackendError(this.backend.name, 'acquire', { cause: 'a waiting acquire returned no lease' }));
    return required ? Promise.reject(new LockTimeoutError(key, timeoutMs)) : Promise.resolve(null);
  }

  /**
   * `#acquire` through the store's `acquire`: the call is raced against the deadline, the caller's
   * signal and close(), so a silent store can delay none of them; a grant that arrives after the
   * race was lost is handed back.
   */
  async #wait(key: string, owner: string, terms: LeaseTerms, timeoutMs: number, userSignal: AbortSignal | undefined, claim: Claim | undefined, required: boolean): Promise<LockHandle | null> {
    const wait = timeoutMs > 0;
    const limitMs = wait ? timeoutMs : this.#settings.operationTimeoutMs;
    // The common case (a wait with no deadline, no caller signal) shares the locker's close signal;
    // otherwise one controller that the deadline, the caller's signal and close() abort.
    // (AbortSignal.any is far slower and, on a long-lived signal, accumulates dependents.)
    let controller: AbortController | undefined;
    let timer: Timer | undefined;
    let onCallerAbort: (() => void) | undefined;
    if (limitMs !== Infinity || userSignal) {
      const own = (controller = new AbortController());
      setMaxListeners(0, own.signal);
      this.#waits.add(own);
      const expired = wait ? () => new LockTimeoutError(key, timeoutMs) : () => noAnswer(this.backend.name, 'acquire', limitMs);
      timer = after(limitMs, () => own.abort(expired()));
      if (userSignal) {
        onCallerAbort = () => own.abort(userSignal.reason);
        userSignal.addEventListener('abort', onCallerAbort, { once: true });
      }
    }
    const signal = controller?.signal ?? this.#closing.signal;
    let attempt: Promise<Lease | null> | undefined;
    // close() waits for this count to reach 0 (the handle is then in #held, or there is none).
    this.#acquiring++;
    try {
      let lease: Lease | null;
      let since: number | undefined;
      let who: string | undefined;
      try {
        // A wait rides out a store it cannot reach for a while (LockerOptions.unavailableGraceMs).
        lease = await waitOnConnections(wait, signal, this.#unavailableGraceMs, async () => {
          // Each attempt has an owner id of its own: a failed attempt may still have a call of its
          // own under way in the store (a cleanup, a request held in a driver's queue), and with a
          // new id nothing of it can touch a later attempt's grant. At worst a trace of it stays
          // until its ttl.
          who = who === undefined ? owner : randomUUID();
          since = undefined;
          const request = this.#request(key, who, terms, wait, signal);
          attempt = claim ? this.backend.acquireShared!({ ...request, ...claim }) : this.backend.acquire(request);
          const grant = await (controller ? raceSignal(attempt, signal, this.#giveBack) : race(attempt, this.#failOnClose, this.#giveBack));
          if (grant && grant.acquiredAt + safeLifetime(terms.ttlMs) - performance.now() < terms.ttlMs / 3) {
            // The grant came so late (a store that held its answer) that this process could count
            // on less than a renewal period of it: renew it before reporting it, or give it up.
            const renewal = this.#renewGrant(grant, terms);
            attempt = renewal.then(() => grant, () => null); // for the abort path's wait; never rejects
            since = await (controller ? raceSignal(renewal, signal, () => this.#giveBack(grant)) : race(renewal, this.#failOnClose, () => this.#giveBack(grant)));
          }
          return grant;
        });
      } catch (error) {
        if (signal.aborted) {
          // Let the backend finish removing this waiter from the store (it usually takes a round
          // trip), so the caller who hears "aborted" finds nothing left; a silent store gets no more.
          await withTimeout((attempt ?? Promise.resolve()).then(noop, noop), ABORT_CLEANUP_MS, () => new Error('cleanup')).catch(noop);
          throw signal.reason;
        }
        throw asDeadboltError(error, this.backend.name, 'acquire');
      }
      return lease ? this.#hold(lease, terms, undefined, since) : await this.#notGranted(key, timeoutMs, required);
    } finally {
      if (--this.#acquiring === 0) this.#onIdle?.();
      if (controller) this.#waits.delete(controller);
      timer?.cancel();
      if (onCallerAbort) userSignal?.removeEventListener('abort', onCallerAbort);
    }
  }
}

/** A hold's ttl (what this process counts on) and lock-delay (what the store keeps on top of it). */
interface LeaseTerms {
  readonly ttlMs: number;
  readonly delayMs: number;
}

/** What a semaphore or read-write lock asks the backend for. */
type Claim = Pick<SharedRequest, 'mode' | 'limit'>;

class LockerSemaphore implements Semaphore {
  readonly #claim: Claim;
  constructor(
    private readonly locker: DefaultLocker,
    readonly key: string,
    readonly limit: number,
  ) {
    this.#claim = { mode: 'shared', limit };
  }

  acquire(options?: LockOptions): Promise<Lock> {
    return this.locker.takeShared(this.key, 'permit', this.#claim, options, 'acquire', false) as Promise<Lock>;
  }

  tryAcquire(options?: TryLockOptions): Promise<Lock | null> {
    return this.locker.takeShared(this.key, 'permit', this.#claim, options, 'tryAcquire', true);
  }

  withPermit<T>(fn: (permit: Lock) => Promise<T> | T, options?: LockOptions): Promise<T> {
    return this.locker.withHeld(this.key, 'permit', fn, options, 'withPermit', this.#claim);
  }
}

const READ: Claim = { mode: 'shared', limit: 0 };
const WRITE: Claim = { mode: 'exclusive', limit: 0 };

class LockerReadWriteLock implements ReadWriteLock {
  constructor(
    private readonly locker: DefaultLocker,
    readonly key: string,
  ) {}

  read(options?: LockOptions): Promise<Lock> {
    return this.locker.takeShared(this.key, 'read', READ, options, 'read', false) as Promise<Lock>;
  }

  write(options?: LockOptions): Promise<Lock> {
    return this.locker.takeShared(this.key, 'write', WRITE, options, 'write', false) as Promise<Lock>;
  }

  tryRead(options?: TryLockOptions): Promise<Lock | null> {
    return this.locker.takeShared(this.key, 'read', READ, options, 'tryRead', true);
  }

  tryWrite(options?: TryLockOptions): Promise<Lock | null> {
    return this.locker.takeShared(this.key, 'write', WRITE, options, 'tryWrite', true);
  }

  withRead<T>(fn: (lock: Lock) => Promise<T> | T, options?: LockOptions): Promise<T> {
    return this.locker.withHeld(this.key, 'read', fn, options, 'withRead', READ);
  }

  withWrite<T>(fn: (lock: Lock) => Promise<T> | T, options?: LockOptions): Promise<T> {
    return this.locker.withHeld(this.key, 'write', fn, options, 'withWrite', WRITE);
  }
}

/** Drift allowance subtracted from every local lease estimate (as Redlock does: 1 % + 2 ms). */
function safeLifetime(ttlMs: number): number {
  return ttlMs - Math.max(2, ttlMs * 0.01);
}

/**
 * The handles a locker holds (close() releases them), linked through the handles themselves:
 * adding and removing one is a few field writes, where a Set first hashes each new handle, a tenth
 * of an in-process lock cycle.
 */
class HeldHandles {
  #head: LockHandle | undefined;

  add(handle: LockHandle): void {
    handle.heldNext = this.#head;
    if (this.#head) this.#head.heldPrev = handle;
    this.#head = handle;
  }

  /** Idempotent: a handle not in the list is left alone. */
  delete(handle: LockHandle): void {
    const { heldPrev: prev, heldNext: next } = handle;
    if (prev) prev.heldNext = next;
    else if (this.#head === handle) this.#head = next;
    else return;
    if (next) next.heldPrev = prev;
    handle.heldPrev = handle.heldNext = undefined;
  }

  *[Symbol.iterator](): Iterator<LockHandle> {
    // The next link is read before yielding: a caller may remove the handle it was given.
    for (let h = this.#head; h; ) {
      const next: LockHandle | undefined = h.heldNext;
      yield h;
      h = next;
    }
  }
}

class LockHandle implements Lock {
  readonly key: string;
  readonly owner: string;
  readonly token: bigint;
  readonly #locker: DefaultLocker;
  readonly #lease: Lease;
  /**
   * Made when `signal` is first read (most holds never read it, and a controller costs more than
   * the rest of an in-process lock cycle); aborted with `#lostReason` then or on loss.
   */
  #controller: AbortController | undefined;
  #lostReason: LockLostError | undefined;
  readonly #settings: HandleSettings;
  #ttlMs: number;
  /** Lock-delay: every store call asks for the ttl plus this; the estimate counts on the ttl only. */
  readonly #delayMs: number;
  /** When the lease was found lost, and the store release that waits out the lock-delay after it. */
  #lostAt = 0;
  #delayedRelease: Timer | undefined;
  /**
   * The shortest ttl of any store call that failed or was abandoned: it may still land after a
   * later call, so no estimate may count on more than this from that later call's send.
   */
  #uncertainTtlMs = Infinity;
  #validUntil: number;
  /** Where the confirmed lease counts from (the grant's or the last confirmed renewal's send time). */
  #since: number;
  #state: 'held' | 'lost' | 'released' = 'held';
  #renewTimer: Timer | undefined;
  #expiryTimer: Timer | undefined;
  #lastRenewError: unknown;
  #released: Promise<void> | undefined;
  /** The store release under way or done (see `#releaseInStore`). */
  #storeReleased: Promise<void> | undefined;
  /**
   * The last of this lease's store calls (settled or not): each waits for the one before, so a
   * renewal and an extend or release never cross. Undefined before the first.
   */
  #busy: Promise<unknown> | undefined;
  /** Our listener on `lease.lost` (a backend may share that signal between many leases). */
  #onStoreLoss: (() => void) | undefined;

  /** Links in the locker's list of held handles (`HeldHandles`); not part of the `Lock` API. */
  heldPrev: LockHandle | undefined;
  heldNext: LockHandle | undefined;

  /** `since`: when the lease's ttl last started, if after `lease.acquiredAt` (a renewal before the grant was reported). */
  constructor(locker: DefaultLocker, lease: Lease, terms: LeaseTerms, settings: HandleSettings, now?: number, since = lease.acquiredAt) {
    const { ttlMs } = terms;
    this.#locker = locker;
    this.#lease = lease;
    this.key = lease.key;
    this.owner = lease.owner;
    this.token = lease.token;
    this.#ttlMs = ttlMs;
    this.#delayMs = terms.delayMs;
    this.#settings = settings;
    this.#validUntil = since + safeLifetime(ttlMs);
    this.#since = since;
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
    this.#schedule(now);
  }

  get signal(): AbortSignal {
    this.#checkExpiry();
    if (!this.#controller) {
      this.#controller = new AbortController();
      if (this.#lostReason) this.#controller.abort(this.#lostReason);
    }
    return this.#controller.signal;
  }

  get held(): boolean {
    this.#checkExpiry();
    return this.#state === 'held';
  }

  async extend(ttlMs: number = this.#ttlMs): Promise<void> {
    validateTtl(ttlMs, this.#locker.backend.capabilities);
    if (this.#delayMs > 0) validateTtl(ttlMs + this.#delayMs, this.#locker.backend.capabilities, 'ttlMs + lockDelayMs');
    this.#checkExpiry();
    this.#throwUnlessHeld('');
    const ok = await this.#refresh(ttlMs, 'renew');
    this.#throwUnlessHeld(' during extend');
    if (!ok) {
      this.#lose(new LockLostError(this.key, `lock ${JSON.stringify(this.key)} is no longer held by this owner`));
      throw this.#lostReason;
    }
    this.#schedule();
  }

  release(): Promise<void> {
    this.#released ??= this.#release();
    return this.#released;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }

  #throwUnlessHeld(when: string): void {
    if (this.#state === 'lost') throw this.#lostReason;
    if (this.#state === 'released') throw new NotOwnerError(`lock ${JSON.stringify(this.key)} was released${when || ' already'}`);
  }

  #release(): Promise<void> {
    if (this.#state === 'held') this.#state = 'released';
    this.#stopTimers();
    this.#locker.forget(this);
    // After a loss with lock-delay, writes may still be in flight: the key is not freed early.
    if (this.#state === 'lost' && this.#delayMs > 0) {
      this.#releaseAfterDelay();
      return Promise.resolve();
    }
    // Also after a loss: the release is owner-checked and clears anything we may still own. It
    // waits for a renewal in flight, so that renewal cannot land after it and revive the claim.
    return this.#releaseInStore();
  }

  /**
   * A lost lease with lock-delay is given back only once the delay since the loss has passed (a
   * ttl store expires it then by itself; a session store needs the release). Not awaited by
   * anyone: if the process ends first, the store's own expiry does it.
   */
  #releaseAfterDelay(): void {
    if (this.#delayedRelease) return;
    this.#delayedRelease = after(Math.max(0, this.#lostAt + this.#delayMs - performance.now()), () => void this.#releaseInStore().catch(noop), true);
  }

  /**
   * Gives the lease back in the store once; only a failed attempt is tried again by a later call.
   * A store in this process does it on the spot for a lease that has made no store call yet;
   * otherwise it goes behind the last call (`#busy`), so two never cross.
   */
  #releaseInStore(): Promise<void> {
    if (this.#storeReleased) return this.#storeReleased;
    const backend = this.#locker.backend;
    if (backend.releaseNow && !this.#busy) {
      try {
        backend.releaseNow(this.#lease);
      } catch (error) {
        return Promise.reject(asDeadboltError(error, backend.name, 'release'));
      }
      return (this.#storeReleased = DONE);
    }
    this.#storeReleased = this.#storeCall('release', () => backend.release(this.#lease), () => (this.#storeReleased = undefined));
    return this.#storeReleased;
  }

  /**
   * Runs one store call for this lease after the previous one settled, bounded by the operation
   * timeout; failures come back as typed errors, after `onFailure` ran.
   */
  #storeCall<T>(operation: string, call: () => Promise<T>, onFailure?: () => void): Promise<T> {
    const backend = this.#locker.backend;
    const ms = this.#settings.operationTimeoutMs;
    const go = () => {
      let sent: Promise<T>;
      try {
        sent = call();
      } catch (error) {
        sent = Promise.reject(error);
      }
      return withTimeout(sent, ms, () => noAnswer(backend.name, operation, ms)).catch((error: unknown) => {
        onFailure?.();
        throw asDeadboltError(error, backend.name, operation);
      });
    };
    // The first call goes out at once (the common hold: grant, then release).
    const run = this.#busy ? this.#busy.then(go, go) : go();
    this.#busy = run;
    return run;
  }

  /**
   * Renews the lease (after any call in flight) to `ttlMs`, or to the lease's ttl as it is when the
   * call is sent. When the store confirms, and before the next call may start, the estimate counts
   * from this call's send time with the ttl that reached the store, which later renewals then use.
   * A failed call may still have landed with its ttl: remember it.
   */
  async #refresh(ttlMs: number | undefined, operation: string): Promise<boolean> {
    let sentAt = 0;
    let sent = 0;
    try {
      return await this.#storeCall(operation, async () => {
        sentAt = performance.now();
        sent = ttlMs ?? this.#ttlMs;
        const ok = await this.#locker.backend.renew(this.#lease, sent + this.#delayMs);
        if (ok && this.#state === 'held') {
          this.#validUntil = sentAt + safeLifetime(Math.min(sent, this.#uncertainTtlMs));
          this.#since = sentAt;
          this.#ttlMs = sent;
        }
        return ok;
      });
    } catch (error) {
      if (sent && this.#state === 'held') {
        this.#uncertainTtlMs = Math.min(this.#uncertainTtlMs, sent);
        const validUntil = sentAt + safeLifetime(sent);
        // The estimate may only shrink here; the timer that declares it run out must follow.
        if (validUntil < this.#validUntil) {
          this.#validUntil = validUntil;
          this.#armExpiry();
        }
      }
      throw error;
    }
  }

  /**
   * One timer at a time: with auto-renew, the next renewal (the expiry timer is armed only while a
   * renewal is in flight); without it, the expiry of the local estimate.
   */
  #schedule(now?: number): void {
    this.#stopTimers();
    if (!this.#settings.autoRenew) return this.#armExpiry();
    const interval = Math.min(this.#settings.renewIntervalMs ?? Infinity, this.#ttlMs / 3);
    // An interval after the lease's start, not after now: a grant that arrives late (a slow store,
    // a second store in a migration) may already be a third through its ttl, and is renewed at once.
    now ??= performance.now();
    this.#scheduleRenew(Math.max(0, Math.min(this.#since + interval, this.#validUntil - 1) - now), now);
  }

  #armExpiry(): void {
    this.#expiryTimer?.cancel();
    // after() never fires before its deadline on the monotonic clock, so the estimate has run out.
    this.#expiryTimer = after(Math.max(0, this.#validUntil - performance.now()), () => this.#checkExpiry(), true);
  }

  #scheduleRenew(delayMs: number, now?: number): void {
    this.#renewTimer?.cancel();
    this.#renewTimer = after(delayMs, () => void this.#renew(), true, now);
  }

  async #renew(): Promise<void> {
    this.#checkExpiry();
    if (this.#state !== 'held') return;
    this.#armExpiry();
    let ok: boolean;
    try {
      ok = await this.#refresh(undefined, 'renew');
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
    // hand it back now that we no longer count on it (after the lock-delay, if there is one).
    // Owner-checked, so harmless on ttl stores; a failure changes nothing for the caller, who has
    // already been told the lock is lost.
    if (this.#delayMs > 0) this.#releaseAfterDelay();
    else this.#releaseInStore().catch(noop);
  }

  #lose(error: LockLostError): void {
    if (this.#state !== 'held') return;
    this.#state = 'lost';
    this.#lostAt = performance.now();
    this.#stopTimers();
    this.#locker.forget(this);
    this.#lostReason = error;
    this.#controller?.abort(error);
  }

  #stopTimers(): void {
    if (this.#state !== 'held' && this.#onStoreLoss) {
      this.#lease.lost?.removeEventListener('abort', this.#onStoreLoss);
      this.#onStoreLoss = undefined;
    }
    this.#renewTimer?.cancel();
    this.#expiryTimer?.cancel();
    this.#renewTimer = this.#expiryTimer = undefined;
  }
}

const noop = () => undefined;

function asDeadboltError(error: unknown, backend: string, operation: string): DeadboltError {
  return error instanceof DeadboltError ? error : new BackendError(backend, operation, { cause: error });
}

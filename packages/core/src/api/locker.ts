// The locker: createLocker's options, and every way a key is taken (lock, tryLock, the with-
// helpers, lockAll, the families' claims) down to one path to the backend (#acquire, #wait), with
// the deadline, the caller's signal and close() raced against the store; nested calls in a held
// scope; and close(). Long: the acquisition path is one piece, read top to bottom. The
// handle a grant becomes is lock-handle.ts; the semaphore and read-write classes are families.ts;
// the public types are types.ts.
import { randomUUID } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import {
  fullCapabilities,
  MAX_SEMAPHORE_LIMIT,
  MUTEX,
  type AcquireRequest,
  type Capabilities,
  type Claim,
  type KeySpace,
  type Lease,
  type LockBackend,
} from '../kit/backend.js';
import {
  asDeadboltError,
  BackendError,
  BackendUnavailableError,
  InvalidArgumentError,
  LockerClosedError,
  LockTimeoutError,
  LockUpgradeError,
  noAnswer,
  SelfDeadlockError,
} from './errors.js';
import { diagnostics, eventKey, eventSource, type AcquireEvent } from './diagnostics.js';
import { heldInScope, ReentrantLock, runHolding, type HeldKind } from './held-scope.js';
import { LockerReadWriteLock, LockerSemaphore, type AcquireCall } from './families.js';
import { renewalDueMs, safeLifetime } from '../lease/lease-keeper.js';
import { type HandleSettings, HeldHandles, type LeaseTerms, LockHandle } from '../lease/lock-handle.js';
import { MultiLockHandle, releaseAll } from './multi-lock.js';
import type { Inspection, Lock, Locker, LockerOptions, LockOptions, MultiLock, ReadWriteLock, Semaphore, TryLockOptions } from './types.js';
import { clockStandsIn, now, answerDeadline, answerWithin, race, raceSignal, noop, settleWithin, type Timer } from '../kit/time.js';
import { StoreFloor } from './token-floor.js';
import { waitOnConnections } from '../kit/wait.js';
import { count, flag, instance, ms, noPrototype, readOptions, signal as signalRule, wait as waitRule, type Rules } from '../kit/options.js';
import type { Fence } from '../kit/fence.js';
import { elect, leader, observe, runOnce, type ElectionHost } from './election.js';
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
  redactKeys: flag,
  fence: instance(
    (v): v is Fence =>
      typeof v === 'object' && v !== null && typeof (v as Fence).write === 'function' && typeof (v as Fence).read === 'function',
    'a Fence (with write and read)',
  ),
} satisfies Rules<LockerOptions>;

/** How a waiting call's options are checked (`lock`, `lockAll`, `acquire`, `read`, `write`, the `with…` helpers). */
const LOCK_RULES = {
  ttlMs: count(1),
  timeoutMs: waitRule,
  signal: signalRule,
  reentrant: flag,
  lockDelayMs: count(0),
} satisfies Rules<LockOptions>;
/** How a one-shot call's options are checked (`tryLock`, `tryLockAll`, `tryAcquire`, `tryRead`, `tryWrite`). */
const TRY_RULES = { ttlMs: count(1), signal: signalRule, reentrant: flag, lockDelayMs: count(0) } satisfies Rules<TryLockOptions>;
const SEMAPHORE_RULES = { limit: count(1, MAX_SEMAPHORE_LIMIT) } satisfies Rules<{ limit: number }>;

/**
 * Core's option rules by entry point: `createLocker`; `lock` (every waiting call: `lockAll`,
 * `acquire`, `read`, `write`, the `with…` helpers); `tryLock` (every one-shot call); `semaphore`.
 * The conformance suite feeds each its rules' hostile values.
 */
export const optionRules = { createLocker: LOCKER_RULES, lock: LOCK_RULES, tryLock: TRY_RULES, semaphore: SEMAPHORE_RULES } as const;

/** `forceRelease`'s options. */
const FORCE_RULES = { shared: flag } as const satisfies Rules<{ shared?: boolean }>;

/** What a claim takes, as events name it. */
function familyOf(claim: Claim | undefined): AcquireEvent['family'] {
  return !claim ? 'mutex' : claim.limit > 0 ? 'semaphore' : claim.mode === 'exclusive' ? 'write' : 'read';
}

/** A call without options: the common case reads nothing. */
const NO_OPTIONS: LockOptions = Object.freeze(noPrototype<LockOptions>());

/** A call's options, checked by `rules` (see options.ts). @throws InvalidArgumentError. */
function readCall(options: unknown, rules: typeof LOCK_RULES | typeof TRY_RULES, where: string): LockOptions {
  return options === undefined ? NO_OPTIONS : readOptions(options, rules, where);
}

const DEFAULT_TTL_MS = 15_000;
const DEFAULT_OPERATION_TIMEOUT_MS = 4_000;
const DEFAULT_UNAVAILABLE_GRACE_MS = 5_000;
/** How long an aborted acquisition waits for the backend's cleanup before rejecting. */
const ABORT_CLEANUP_MS = 50;

/** One acquisition, as `wait` and `attempt` ask for it. */
interface Ask {
  readonly key: string;
  readonly terms: LeaseTerms;
  /** 0: a single attempt, which resolves null when busy and is bounded by the operation timeout. */
  readonly timeoutMs: number;
  /** The caller's. */
  readonly signal: AbortSignal | undefined;
  /** A semaphore's or read-write lock's claim; none for a mutex. */
  readonly claim: Claim | undefined;
  /** A busy single attempt rejects with LockTimeoutError (`lock()` with timeout 0) instead of resolving null. */
  readonly required: boolean;
  /** Set only while `deadbolt:acquire` has subscribers: counts the requests sent to the backend. */
  readonly tally?: { attempts: number };
}

/**
 * A Locker over `backend`. The locker owns the backend: `close()` closes it.
 * @throws InvalidArgumentError for bad options.
 */
export function createLocker(backend: LockBackend, options?: LockerOptions): Locker {
  return new DefaultLocker(backend, options);
}

/**
 * The backend a locker made by `createLocker` runs on (for `@deadbolt/core/testing`: a test or fault
 * drill reaches the store through it). @throws InvalidArgumentError for any other object.
 */
export function backendOf(locker: Locker): LockBackend {
  if (!(locker instanceof DefaultLocker)) throw new InvalidArgumentError('locker must come from createLocker');
  return locker.backend;
}

class DefaultLocker implements Locker, ElectionHost {
  readonly backend: LockBackend;
  readonly #ttlMs: number;
  /** The backend's capabilities with their defaults, read once (a backend sets them when it is made). */
  readonly #capabilities: Required<Capabilities>;
  readonly #timeoutMs: number;
  readonly #reentrant: boolean;
  readonly #lockDelayMs: number;
  readonly #unavailableGraceMs: number;
  /** The terms of a call that sets neither `ttlMs` nor `lockDelayMs`, validated once. */
  readonly #defaultTerms: LeaseTerms;
  readonly #settings: HandleSettings;
  readonly #closing = new AbortController();
  readonly #held = new HeldHandles();
  /** The store's token floor, which every grant this locker reports is above (token-floor.ts). */
  readonly #floor: StoreFloor;
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
  /** Elections and jobs (election.ts): the fence the leader's value is published in, and this locker's campaigns. */
  readonly fence: Fence | undefined;
  readonly campaigns = new Map<string, () => boolean>();

  constructor(backend: LockBackend, raw: LockerOptions | undefined) {
    if (!backend || typeof backend !== 'object' || typeof backend.acquire !== 'function') {
      throw new InvalidArgumentError('backend must implement LockBackend');
    }
    const options = readOptions(raw, LOCKER_RULES, 'createLocker');
    // A store's lease times are on the real clock; while a test clock stands in for it, this
    // locker's estimates of them would be on the test's.
    if (clockStandsIn() && fullCapabilities(backend.capabilities).crossProcess) {
      throw new InvalidArgumentError(
        'a test locker is open in this process (createTestLocker): close it before making a locker over a real store',
      );
    }
    this.backend = backend;
    this.#floor = new StoreFloor(backend);
    this.#capabilities = fullCapabilities(backend.capabilities);
    this.#ttlMs = validateTtl(options.ttlMs ?? DEFAULT_TTL_MS, this.#capabilities);
    if (options.renewIntervalMs !== undefined && options.renewIntervalMs >= this.#ttlMs) {
      throw new InvalidArgumentError(`renewIntervalMs must be below ttlMs (${this.#ttlMs}), got ${options.renewIntervalMs}`);
    }
    const operationTimeoutMs = options.operationTimeoutMs ?? DEFAULT_OPERATION_TIMEOUT_MS;
    this.#settings = {
      renewIntervalMs: options.renewIntervalMs,
      autoRenew: options.autoRenew ?? true,
      operationTimeoutMs,
      redactKeys: options.redactKeys ?? false,
      capabilities: this.#capabilities,
    };
    this.#timeoutMs = options.timeoutMs ?? Infinity;
    this.#unavailableGraceMs = options.unavailableGraceMs ?? DEFAULT_UNAVAILABLE_GRACE_MS;
    this.#reentrant = options.reentrant ?? false;
    this.#lockDelayMs = options.lockDelayMs ?? 0;
    this.fence = options.fence;
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
    return this.withHeld({ key, as: 'lock', where: 'withLock' }, fn, options);
  }

  async lockAll(keys: readonly string[], options?: LockOptions): Promise<MultiLock> {
    const list = validateKeys(keys);
    const call = readCall(options, LOCK_RULES, 'lockAll');
    const timeoutMs = call.timeoutMs ?? this.#timeoutMs;
    this.#leaseOf(call);
    call.signal?.throwIfAborted();
    const started = now();
    const taken: Lock[] = [];
    try {
      for (const key of list) {
        const nested = this.#nested(key, 'lock', call);
        if (nested) {
          taken.push(nested);
          continue;
        }
        // One deadline for the whole call: each key gets what is left of it (0 stays one attempt).
        const left = timeoutMs === 0 || timeoutMs === Infinity ? timeoutMs : timeoutMs - (now() - started);
        if (left <= 0 && timeoutMs > 0) throw new LockTimeoutError(key, timeoutMs);
        taken.push(await this.wait(key, Object.assign(noPrototype<LockOptions>(), call, { timeoutMs: left })));
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
        all.locks
          .filter((lock) => !(lock instanceof ReentrantLock))
          .map((lock) => ({ locker: this, key: lock.key, kind: 'lock' as const, lock })),
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

  /** The body of `withLock`, `withRead`, `withWrite` and `withPermit`: a scope that holds the call's key as it says. */
  async withHeld<T>(
    { key, as, claim, where }: AcquireCall,
    fn: (lock: Lock) => Promise<T> | T,
    options: LockOptions | undefined,
  ): Promise<T> {
    if (typeof fn !== 'function') throw new InvalidArgumentError(`${where} needs a function`);
    validateKey(key);
    const call = readCall(options, LOCK_RULES, where);
    const nested = this.#nested(key, as, call);
    if (nested) return this.holding(Promise.resolve(nested), fn);
    return this.holding(this.wait(key, call, claim), (lock) => runHolding([{ locker: this, key, kind: as, lock }], () => fn(lock)));
  }

  /** A family take (`read`, `write`, a permit) of a validated key, as `lock()`. */
  take({ key, as, claim, where }: AcquireCall, options: LockOptions | undefined): Promise<Lock> {
    try {
      const call = readCall(options, LOCK_RULES, where);
      const nested = this.#nested(key, as, call);
      return nested ? Promise.resolve(nested) : this.wait(key, call, claim);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** A family take of a validated key, as `tryLock()`. */
  async tryTake({ key, as, claim, where }: AcquireCall, options: TryLockOptions | undefined): Promise<Lock | null> {
    const call = readCall(options, TRY_RULES, where);
    const nested = this.#nested(key, as, call, true);
    return nested !== undefined ? nested : this.attempt(key, call, claim);
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

  inspect(key: string): Promise<Inspection> {
    try {
      validateKey(key);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.inspectKey(key, 'mutex');
  }

  /** `inspect()` for a validated key in `space`: the mutex's claims, or a semaphore's or read-write lock's. */
  async inspectKey(key: string, space: KeySpace): Promise<Inspection> {
    const { backend } = this;
    const view = await this.#operatorCall('inspect', backend.inspect && (() => backend.inspect!(key, space)), 'cannot inspect keys');
    return { key, ...view };
  }

  forceRelease(key: string, owner: string, options?: { shared?: boolean }): Promise<boolean> {
    let space: KeySpace = 'mutex';
    try {
      validateKey(key);
      validateKey(owner, 'owner');
      if (readOptions(options, FORCE_RULES, 'forceRelease').shared) space = 'shared';
    } catch (error) {
      return Promise.reject(error);
    }
    const { backend } = this;
    const free = async () => {
      // Holders only: an owner waiting in line is left there (and a backend's release-by-owner,
      // which most stores' forceRelease is, would take it out of line).
      const seen = await backend.inspect!(key, space);
      return seen.holders.some((h) => h.owner === owner) && backend.forceRelease!(key, owner, space);
    };
    return this.#operatorCall('force release', backend.forceRelease && backend.inspect && free, "cannot free another client's lock");
  }

  // Elections and jobs (election.ts), on this locker's own lock, tryLock and inspect.
  readonly elect: Locker['elect'] = (name, options) => elect(this, name, options, false) as ReturnType<Locker['elect']>;
  readonly tryElect: Locker['tryElect'] = (name, options) => elect(this, name, options, true);
  readonly leader: Locker['leader'] = (name) => leader(this, name);
  readonly observe: Locker['observe'] = (name, options) => observe(this, name, options);
  readonly runOnce: Locker['runOnce'] = (name, job, options) => runOnce(this, name, job, options);

  get capabilities(): Required<Capabilities> {
    return this.#capabilities;
  }

  get timeoutMs(): number {
    return this.#timeoutMs;
  }

  get operationTimeoutMs(): number {
    return this.#settings.operationTimeoutMs;
  }

  /**
   * A call an operator makes on the store (inspect, force release): refused when the locker is closed
   * or the backend lacks it (`cannot` says so), bounded by the operation timeout, its errors typed.
   */
  async #operatorCall<T>(operation: string, call: (() => Promise<T>) | undefined, cannot: string): Promise<T> {
    if (this.#closed) throw new LockerClosedError();
    const { backend } = this;
    if (!call) throw new InvalidArgumentError(`the ${backend.name} backend ${cannot}`);
    const { operationTimeoutMs } = this.#settings;
    try {
      return await answerWithin(call(), operationTimeoutMs, backend, operation);
    } catch (error) {
      throw asDeadboltError(error, backend, operation);
    }
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
    return this.#acquire({ key, terms: lease, timeoutMs: call.timeoutMs ?? this.#timeoutMs, signal: call.signal, claim, required: true });
  }

  /** `tryLock()` for a validated key and options, or for a shared claim. */
  async attempt(key: string, call: TryLockOptions, claim?: Claim): Promise<Lock | null> {
    const lease = this.#leaseOf(call);
    call.signal?.throwIfAborted();
    return this.#acquire({ key, terms: lease, timeoutMs: 0, signal: call.signal, claim, required: false });
  }

  /**
   * The lease a call asks for: its ttl and lock-delay, validated (the store keeps ttl + delay, so
   * that sum must be a ttl the backend accepts). @throws InvalidArgumentError.
   */
  #leaseOf(call: TryLockOptions): LeaseTerms {
    // Unset during the constructor's own call, which validates the defaults.
    if (call.ttlMs === undefined && call.lockDelayMs === undefined && this.#defaultTerms) return this.#defaultTerms;
    const ttlMs = validateTtl(call.ttlMs ?? this.#ttlMs, this.#capabilities);
    const delayMs = call.lockDelayMs ?? this.#lockDelayMs;
    if (delayMs > 0) validateTtl(ttlMs + delayMs, this.#capabilities, 'ttlMs + lockDelayMs');
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
    if (!this.#capabilities[capability]) {
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
    const releases = Promise.allSettled([...this.#held].map((h) => h.release()));
    const results = [
      await answerWithin(releases, operationTimeoutMs, this.backend, 'close (release)').then(
        (settled) => settled,
        (error: unknown): PromiseSettledResult<void>[] => [{ status: 'rejected', reason: error }],
      ),
      await Promise.allSettled([answerWithin(this.backend.close(), operationTimeoutMs, this.backend, 'close')]),
    ].flat();
    const failure = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failure) throw failure.reason;
  }

  /**
   * One acquisition (see `Ask`). A store in this process answers first on the spot
   * (`acquireNow`): a grant there needs no deadline, no race and no promise but the caller's; only
   * a request that has to wait goes on to `#wait`.
   */
  #acquire(ask: Ask & { readonly required: true }): Promise<LockHandle>;
  #acquire(ask: Ask): Promise<LockHandle | null>;
  #acquire(ask: Ask): Promise<LockHandle | null> {
    return diagnostics.acquire.hasSubscribers ? this.#traced(ask) : this.#acquireUntraced(ask);
  }

  /** `#acquire` as the `deadbolt:acquire` tracing channel's subscribers see it (diagnostics.ts). */
  #traced(ask: Ask): Promise<LockHandle | null> {
    const { claim } = ask;
    const event: AcquireEvent = {
      key: eventKey(ask.key, this.#settings.redactKeys),
      ...eventSource(this.backend),
      family: familyOf(claim),
      ...(claim && claim.limit > 0 ? { limit: claim.limit } : {}),
      ttlMs: ask.terms.ttlMs,
      timeoutMs: ask.timeoutMs,
    };
    const started = now();
    const tally = { attempts: 0 };
    return diagnostics.acquire.tracePromise(
      () =>
        this.#acquireUntraced({ ...ask, tally }).then(
          (handle) => {
            event.waitedMs = now() - started;
            event.attempts = tally.attempts;
            if (handle) event.token = handle.token;
            return handle;
          },
          (error: unknown) => {
            event.waitedMs = now() - started;
            event.attempts = tally.attempts;
            throw error;
          },
        ),
      event,
    );
  }

  #acquireUntraced(ask: Ask): Promise<LockHandle | null> {
    if (this.#closed) return Promise.reject(new LockerClosedError());
    const owner = randomUUID();
    // The store's floor is read before the first acquisition, which therefore takes `#wait`.
    if (this.backend.acquireNow && !ask.claim && this.#floor.known) {
      let lease: Lease | null | undefined;
      try {
        lease = this.backend.acquireNow(this.#request(ask.key, owner, ask.terms, ask.timeoutMs > 0, ask.signal ?? this.#closing.signal));
      } catch (error) {
        if (ask.tally) ask.tally.attempts++;
        return Promise.reject(asDeadboltError(error, this.backend, 'acquire'));
      }
      // A request, unless it said "wait": the request `#wait` sends then answers, and counts.
      if (ask.tally && lease !== undefined) ask.tally.attempts++;
      // The store read the clock for this grant a moment ago, in this same call.
      if (lease && !this.#floor.below(lease)) return Promise.resolve(this.#hold(lease, ask.terms, lease.acquiredAt));
      if (lease) return this.#lifted(lease, ask);
      if (lease === null) return this.#notGranted(ask);
    }
    return this.#wait(ask, owner);
  }

  /**
   * Renews a grant once; resolves the renewal's send time (the lease's ttl counts from there).
   * Rejects with BackendUnavailableError when the store no longer holds it (it ran out before its
   * answer came; the wait may try again), or with the renewal's error (the grant is given back).
   */
  async #renewGrant(lease: Lease, terms: LeaseTerms): Promise<number> {
    const sentAt = now();
    let renewed: boolean;
    try {
      renewed = await this.backend.renew(lease, terms.ttlMs + terms.delayMs);
    } catch (error) {
      this.#giveBack(lease);
      throw error;
    }
    if (!renewed)
      throw new BackendUnavailableError(this.backend.name, 'acquire', { cause: new Error('the grant ran out before its answer came') });
    return sentAt;
  }

  /**
   * What `acquire` sends the store: the store keeps the lease for ttl + lock-delay; this process
   * counts on ttl (LockOptions.lockDelayMs); a store with a token floor is asked for a token above it.
   */
  #request(key: string, owner: string, terms: LeaseTerms, wait: boolean, signal: AbortSignal, claim = MUTEX): AcquireRequest {
    const { ttlMs, delayMs } = terms;
    const { mode, limit } = claim;
    const request: AcquireRequest =
      delayMs > 0
        ? { key, mode, limit, owner, ttlMs: ttlMs + delayMs, wait, signal, lockDelayMs: delayMs }
        : { key, mode, limit, owner, ttlMs, wait, signal };
    const minToken = this.#floor.minToken;
    return minToken === undefined ? request : { ...request, minToken };
  }

  /** An on-the-spot grant at or below the store's token floor, lifted (`StoreFloor.lift`) before it is held; a one-shot attempt's answer when the key was taken meanwhile. */
  async #lifted(lease: Lease, ask: Ask): Promise<LockHandle | null> {
    let token: bigint | null;
    try {
      token = await this.#floor.lift(lease);
    } catch (error) {
      throw asDeadboltError(error, this.backend, 'acquire');
    }
    if (token !== null) return this.#hold(lease, ask.terms, undefined, undefined, token);
    return ask.timeoutMs > 0 ? this.#wait(ask, randomUUID()) : this.#notGranted(ask);
  }

  /**
   * A granted lease becomes a handle this locker tracks (close() releases it). `now`: the caller's
   * `performance.now()`, if it just read it.
   */
  #hold(lease: Lease, terms: LeaseTerms, now?: number, since?: number, token?: bigint): LockHandle {
    const handle = new LockHandle(this, lease, terms, this.#settings, now, since, token);
    this.#held.add(handle);
    return handle;
  }

  /** The answer to a store that said "busy" (`null`): a wait must never hear it; a single attempt resolves null, or rejects when `required`. */
  #notGranted({ key, timeoutMs, required }: Ask): Promise<null> {
    if (timeoutMs > 0)
      return Promise.reject(new BackendError(this.backend.name, 'acquire', { cause: 'a waiting acquire returned no lease' }));
    return required ? Promise.reject(new LockTimeoutError(key, timeoutMs)) : Promise.resolve(null);
  }

  /**
   * `#acquire` through the store's `acquire`: the call is raced against the deadline, the caller's
   * signal and close(), so a silent store can delay none of them; a grant that arrives after the
   * race was lost is handed back.
   */
  async #wait(ask: Ask, owner: string): Promise<LockHandle | null> {
    const { key, terms, timeoutMs, signal: userSignal, claim, tally } = ask;
    // Read only for a subscriber to wait-abandoned (one who joins mid-wait hears of later waits).
    const started = diagnostics.waitAbandoned.hasSubscribers ? now() : undefined;
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
      const expired = wait ? () => new LockTimeoutError(key, timeoutMs) : () => noAnswer(this.backend, 'acquire', limitMs);
      // A grant that reached the socket while this process was stalled still counts (answerDeadline).
      timer = answerDeadline(limitMs, () => own.abort(expired()));
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
      let token: bigint | undefined;
      let who: string | undefined;
      try {
        // A wait rides out a store it cannot reach for a while (LockerOptions.unavailableGraceMs).
        lease = await waitOnConnections(wait, signal, this.#unavailableGraceMs, async () => {
          // Each attempt has an owner id of its own: a failed attempt may still have a call of its
          // own under way in the store (a cleanup, a request held in a driver's queue), and with a
          // new id nothing of it can touch a later attempt's grant. At worst a trace of it stays
          // until its ttl.
          who = who === undefined ? owner : randomUUID();
          since = token = undefined;
          if (!this.#floor.known)
            await (controller ? raceSignal(this.#floor.ready(), signal) : race(this.#floor.ready(), this.#failOnClose));
          if (tally) tally.attempts++;
          attempt = this.backend.acquire(this.#request(key, who, terms, wait, signal, claim));
          const grant = await (controller ? raceSignal(attempt, signal, this.#giveBack) : race(attempt, this.#failOnClose, this.#giveBack));
          if (grant && grant.acquiredAt + safeLifetime(terms.ttlMs) - now() < renewalDueMs(terms.ttlMs)) {
            // The grant came so late (a store that held its answer) that this process could count
            // on less than a renewal period of it: renew it before reporting it, or give it up.
            const renewal = this.#renewGrant(grant, terms);
            attempt = renewal.then(
              () => grant,
              () => null,
            ); // for the abort path's wait; never rejects
            since = await (controller
              ? raceSignal(renewal, signal, () => this.#giveBack(grant))
              : race(renewal, this.#failOnClose, () => this.#giveBack(grant)));
          }
          if (grant && this.#floor.below(grant)) {
            // Below the store's token floor: lifted above it, or given back if the key went meanwhile.
            const lifting = this.#floor.lift(grant);
            const lifted = await (controller
              ? raceSignal(lifting, signal, (late) => void (late !== null && this.#giveBack(grant)))
              : race(lifting, this.#failOnClose, (late) => void (late !== null && this.#giveBack(grant))));
            if (lifted === null) return wait ? 'again' : null;
            token = lifted;
          }
          return grant;
        });
      } catch (error) {
        if (signal.aborted) {
          // Let the backend finish removing this waiter from the store (it usually takes a round
          // trip), so the caller who hears "aborted" finds nothing left; a silent store gets no more.
          await settleWithin(attempt ?? Promise.resolve(), ABORT_CLEANUP_MS);
          if (wait && started !== undefined && diagnostics.waitAbandoned.hasSubscribers)
            diagnostics.waitAbandoned.publish({
              key: eventKey(key, this.#settings.redactKeys),
              ...eventSource(this.backend),
              family: familyOf(claim),
              reason: signal.reason,
              waitedMs: now() - started,
            });
          throw signal.reason;
        }
        throw asDeadboltError(error, this.backend, 'acquire');
      }
      return lease ? this.#hold(lease, terms, undefined, since, token) : await this.#notGranted(ask);
    } finally {
      if (--this.#acquiring === 0) this.#onIdle?.();
      if (controller) this.#waits.delete(controller);
      timer?.cancel();
      if (onCallerAbort) userSignal?.removeEventListener('abort', onCallerAbort);
    }
  }
}

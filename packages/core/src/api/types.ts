// The user API's types: what a locker, a lock, the families, fences, elections and once-per-fleet
// jobs promise. A leaf module (it imports nothing), so every part of core can name them without a
// cycle.

/** Defaults for every lock a locker takes. */
export interface LockerOptions {
  /** Lease length. Default 15 000 ms. */
  ttlMs?: number;
  /**
   * The longest gap between renewals of a held lease. A lock is renewed every
   * min(renewIntervalMs, its ttl / 3), so a lock with a short ttl of its own is never left to
   * expire between renewals. Default: ttl / 3.
   */
  renewIntervalMs?: number;
  /** Renew held leases in the background. Default true; false gives fixed leases that just expire. */
  autoRenew?: boolean;
  /** Default wait limit for `lock()`. Default Infinity (any length works; see time.ts). */
  timeoutMs?: number;
  /**
   * The longest one store call may take when the caller gave no deadline: `tryLock()`, `extend()`,
   * `release()`, and each step of `close()`. A store that does not answer in time (a silent
   * partition) fails the call with `BackendUnavailableError`. Default 4 000 ms.
   */
  operationTimeoutMs?: number;
  /**
   * How long a wait (`lock()` with a timeout above 0, a semaphore's or read-write lock's
   * `acquire()`) rides out a store it cannot reach. An attempt that fails with
   * `BackendUnavailableError` (a connect that timed out, a store that went silent while the
   * backend set up or waited) is made again, with a new owner id, after a pause of 20 ms doubling
   * up to 1 s, until an attempt begun this long or longer after the first of a row of such
   * failures fails too (so one attempt slow to fail, a request a driver lost and ended only at its
   * timeout, does not use the grace up); then the wait rejects with the last error. The caller's deadline and signal still end the wait
   * at any time. 0 fails the wait at the first such error. One-shot calls (`tryLock()`) are never
   * retried. Default 5 000 ms.
   */
  unavailableGraceMs?: number;
  /**
   * Let a caller take again a key it holds (see `LockOptions.reentrant`). Default false: such a
   * take rejects with `SelfDeadlockError` instead of waiting for itself (a one-shot `try…` gives
   * null).
   */
  reentrant?: boolean;
  /**
   * Lock-delay (Chubby's): when a holder's lease ends without a release (its process killed, a
   * partition, a pause), the key stays unavailable for this much longer, so writes it still had in
   * flight drain before the next holder starts; a release frees the key at once. Default 0 (off).
   * It is the holder's setting: every later acquirer waits for it, whatever its own. See `LockOptions`.
   */
  lockDelayMs?: number;
  /**
   * In the events this locker publishes on node:diagnostics_channel (`diagnostics`), give each key
   * as `sha256:` and the first 16 hex digits of its hash instead of the key itself: for keys that
   * carry what traces must not (user ids, emails). Default false.
   */
  redactKeys?: boolean;
  /**
   * Where `elect` publishes the leader's value and `leader` / `observe` read it: a `Fence` on a
   * store every candidate and observer reaches (usually the lock store's own, `redisFence({ url })`
   * beside `redisBackend({ url })`). The value is written with the term's fencing token, so a
   * leader whose term has ended cannot overwrite its successor's. The locker does not close it.
   * Without it those three reject with InvalidArgumentError; locks and `runOnce` do not need it.
   */
  fence?: Fence;
}

/** Options of one acquisition (`lock`, `withLock`, a semaphore's or read-write lock's waits); unknown names are `InvalidArgumentError`. */
export interface LockOptions {
  /** The lease for this acquisition; default the locker's `ttlMs`. Bad values are `InvalidArgumentError` before any I/O. */
  ttlMs?: number;
  /** Give up after this long with `LockTimeoutError`. 0 means one attempt. */
  timeoutMs?: number;
  /** Abort the wait; `lock()` then rejects with `signal.reason`. */
  signal?: AbortSignal;
  /**
   * Inside `withLock(key, fn)` (or `withLockAll`) of this locker, taking `key` again succeeds at
   * once with the same lease and token; the lease is given up when the outermost `withLock` ends.
   * The same inside `withWrite` (a write or a read of the key), `withRead` (a read) and `withPermit`
   * (a permit of the same semaphore). A write inside `withRead` is refused either way
   * (`LockUpgradeError`). Overrides the locker's `reentrant`. Bare handles (`lock()`, `read()`…)
   * open no scope (see held-scope.ts).
   */
  reentrant?: boolean;
  /**
   * Lock-delay for this hold (overrides the locker's). How: the lease the store keeps is
   * `ttlMs + lockDelayMs`, renewed as such, while this process counts on `ttlMs` only (its signal
   * aborts when that runs out); so a holder that stops renewing is lost to itself `lockDelayMs`
   * before the store frees the key. A store whose lease can end early (a connection-bound session,
   * freed when the connection closes) keeps the key from the next holder for the rest of it itself.
   * `ttlMs + lockDelayMs` must be a ttl the backend accepts.
   */
  lockDelayMs?: number;
}

/** Options of one attempt (`tryLock` and the `try…` methods); unknown names are `InvalidArgumentError`. */
export interface TryLockOptions {
  /** As `LockOptions.ttlMs`. */
  ttlMs?: number;
  /** Abort the attempt; it then rejects with `signal.reason`. */
  signal?: AbortSignal;
  /** As `LockOptions.lockDelayMs`. */
  lockDelayMs?: number;
  /** As `LockOptions.reentrant`; without it, a key this caller holds gives null. */
  reentrant?: boolean;
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
   * Extend the lease to `ttlMs` (default: the current ttl) from now; later renewals use it. Runs
   * after any renewal in flight, never beside it, so the store ends with the ttl the client counts on.
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

/**
 * A counting semaphore: at most `limit` permits of `key` are held at once, across processes. Each
 * permit is a `Lock` of its own (own lease, renewal, token and loss signal). Permits are granted in
 * arrival order. The limit is stored with the semaphore while it has permits or waiters; asking with
 * another limit then rejects with `LimitMismatchError`.
 */
export interface Semaphore {
  readonly key: string;
  readonly limit: number;
  /**
   * Wait for a permit; as `Locker.lock()`.
   * @throws InvalidArgumentError, LimitMismatchError, LockTimeoutError, the signal's reason,
   * LockerClosedError, BackendUnavailableError, BackendError; SelfDeadlockError inside `withPermit`
   * of this semaphore (not reentrant: at the limit, the caller would wait for its own permit).
   */
  acquire(options?: LockOptions): Promise<Lock>;
  /** One attempt; null when all permits are taken (or others wait ahead). As `Locker.tryLock()`; throws as `acquire`. */
  tryAcquire(options?: TryLockOptions): Promise<Lock | null>;
  /** `acquire()`, run `fn`, release; as `Locker.withLock()`. */
  withPermit<T>(fn: (permit: Lock) => Promise<T> | T, options?: LockOptions): Promise<T>;
  /** The permits held and the claims waiting, with the stored limit, as `Locker.inspect()`. @throws as `Locker.inspect()`. */
  inspect(): Promise<Inspection>;
}

/**
 * A read-write lock: any number of readers or one writer, granted in arrival order, so a waiting
 * writer is never overtaken by readers that came after it.
 * Upgrades are refused: a write asked for inside `withRead(fn)` of the same key and locker rejects
 * with `LockUpgradeError` (it would wait for its own read lock forever). Without reentrancy, a write
 * or read inside `withWrite` and a read inside `withRead` reject with `SelfDeadlockError` (each could
 * wait for itself: a read behind a writer queued behind the caller's own read); with it, they share
 * the outer lease. A caller holding a bare `read()` handle is not tracked (Node has no notion of
 * "the same caller" without a callback scope): release it before asking to write.
 */
/**
 * One claim on a key as the store holds it (`Locker.inspect`). A field the store cannot know is
 * `null` (each backend's README says which): never a guess.
 */
export interface ClaimInfo {
  /** The claim's owner id (`Lock.owner`). */
  readonly owner: string | null;
  /** Its fencing token; `null` for a waiter the store has not given one yet. */
  readonly token: bigint | null;
  /** How long the store will keep the claim without a renewal, on the store's clock (ms); `null` for a session lease, which lives as long as its session. */
  readonly ttlLeftMs: number | null;
  /** Semaphores and read-write locks: `shared` (a permit, a read) or `exclusive` (a write). */
  readonly mode?: 'shared' | 'exclusive';
}

/**
 * What the store holds for a key now (`Locker.inspect`, `Semaphore.inspect`,
 * `ReadWriteLock.inspect`): a snapshot, stale as soon as it is read, for operators and debugging;
 * never a reason to skip taking the lock.
 */
export interface Inspection {
  readonly key: string;
  /** The live holders: none when the key is free; one for a mutex; up to the limit for a semaphore. */
  readonly holders: readonly ClaimInfo[];
  /**
   * The waiters in queue order; `null` where the store keeps no queue (its waiters poll and are
   * invisible to it until they win).
   */
  readonly waiters: readonly ClaimInfo[] | null;
  /** A semaphore's or read-write lock's stored limit (0 for a read-write lock) while it has claims. */
  readonly limit?: number;
}

/** The read-write lock of one key (`Locker.readWriteLock`): many readers or one writer at a time. Its methods fail as `Locker.lock()` does. */
export interface ReadWriteLock {
  readonly key: string;
  /** Wait for a read lock. @throws as `Locker.lock()`, and SelfDeadlockError inside `withRead` or `withWrite` of this key (not reentrant). */
  read(options?: LockOptions): Promise<Lock>;
  /**
   * Wait for the write lock. @throws as `Locker.lock()`, LockUpgradeError inside `withRead` of this
   * key, and SelfDeadlockError inside `withWrite` of it (not reentrant).
   */
  write(options?: LockOptions): Promise<Lock>;
  /** One attempt at a read lock; null when a writer holds or waits ahead (or this caller holds the key, not reentrant). */
  tryRead(options?: TryLockOptions): Promise<Lock | null>;
  /** One attempt at the write lock; null when anyone holds or waits ahead. @throws LockUpgradeError as `write`. */
  tryWrite(options?: TryLockOptions): Promise<Lock | null>;
  /** `read()`, run `fn`, release; as `Locker.withLock()`. Inside `fn`, a write of this key is refused. */
  withRead<T>(fn: (lock: Lock) => Promise<T> | T, options?: LockOptions): Promise<T>;
  /** `write()`, run `fn`, release; as `Locker.withLock()`. */
  withWrite<T>(fn: (lock: Lock) => Promise<T> | T, options?: LockOptions): Promise<T>;
  /** The key's readers and writer, and who waits, as `Locker.inspect()` (each claim with its `mode`). @throws as `Locker.inspect()`. */
  inspect(): Promise<Inspection>;
}

/** The locks, semaphores and read-write locks of one backend (`createLocker`). Every method fails with typed errors, as each one says; none reports a key held when it is not. */
export interface Locker extends AsyncDisposable {
  /**
   * Wait until `key` is granted. Settles by `timeoutMs` however the store behaves; a grant that
   * arrives later is handed back.
   * @throws InvalidArgumentError (before any I/O), LockTimeoutError, the signal's reason on abort,
   * LockerClosedError, BackendUnavailableError, BackendError.
   */
  lock(key: string, options?: LockOptions): Promise<Lock>;
  /**
   * One attempt, never waits: a Lock, or null when someone else holds `key`. Settles within the
   * operation timeout (default 4 s).
   * @throws InvalidArgumentError, LockerClosedError, BackendUnavailableError (also when the store
   * does not answer in time), BackendError — never null for a store failure.
   */
  tryLock(key: string, options?: TryLockOptions): Promise<Lock | null>;
  /**
   * `lock()`, run `fn`, release in `finally`. If `fn` throws, that error wins over a release error.
   * If the lock was lost while `fn` ran (its signal aborted, or its lease estimate ran out), the
   * result is not returned: work done without the lock must not look done.
   * @throws whatever `lock()` or `fn` throws; LockLostError when the lock was lost before `fn` settled.
   */
  withLock<T>(key: string, fn: (lock: Lock) => Promise<T> | T, options?: LockOptions): Promise<T>;
  /**
   * All of `keys` or none: de-duplicated and taken in one canonical order, so callers passing the
   * same keys in any order never deadlock. `timeoutMs` bounds the whole call; on a timeout, an abort,
   * close() or an error, every key taken so far is released before it rejects. Keys held by this
   * caller (inside `withLock`) count as taken when reentrant, else reject with `SelfDeadlockError`.
   * @throws InvalidArgumentError (before any I/O: not an array, empty, more than MAX_LOCK_ALL_KEYS,
   * a bad key), LockTimeoutError (naming all the keys), the signal's reason, SelfDeadlockError,
   * LockerClosedError, BackendUnavailableError, BackendError.
   */
  lockAll(keys: readonly string[], options?: LockOptions): Promise<MultiLock>;
  /** One attempt per key, never waits: a MultiLock, or null (nothing kept) when any key is held. Throws as `lockAll`. */
  tryLockAll(keys: readonly string[], options?: TryLockOptions): Promise<MultiLock | null>;
  /** `lockAll()`, run `fn` (a scope holding every key), release; as `withLock()`. */
  withLockAll<T>(keys: readonly string[], fn: (lock: MultiLock) => Promise<T> | T, options?: LockOptions): Promise<T>;
  /**
   * A semaphore of `limit` permits over `key` (a namespace apart from `lock()` keys).
   * @throws InvalidArgumentError (before any I/O) for a bad key, a `limit` that is not an integer
   * in 1..MAX_SEMAPHORE_LIMIT, or a backend without `capabilities.semaphore`.
   */
  semaphore(key: string, options: { limit: number }): Semaphore;
  /**
   * A read-write lock over `key` (the same namespace as semaphores: a key used as one is refused as
   * the other with `LimitMismatchError` while in use).
   * @throws InvalidArgumentError (before any I/O) for a bad key or a backend without `capabilities.readWrite`.
   */
  readWriteLock(key: string): ReadWriteLock;
  /**
   * Who holds `key` (owner, token, time left on the store's clock) and who waits for it, read from
   * the store without taking, extending or freeing anything. Settles within the operation timeout.
   * @throws InvalidArgumentError (before any I/O) for a bad key or a backend that cannot inspect;
   * LockerClosedError; BackendUnavailableError (also when the store does not answer in time);
   * BackendError.
   */
  inspect(key: string): Promise<Inspection>;
  /**
   * Frees the lock `owner` holds on `key` (with `shared`, its permit or read or write lock on the
   * semaphore or read-write lock `key`), though this process did not take it: for an operator whose
   * holder is stuck (`inspect` gives the owner). Checked against `owner` by the store itself: if
   * someone else holds the key by now, nothing is freed. The holder learns at its next renewal
   * (its `signal` aborts with `LockLostError`) and may still be running until then: only fencing
   * tokens protect what it writes. Resolves whether `owner` held a claim that is now gone; a
   * waiting claim is left alone. Settles within the operation timeout.
   * @throws InvalidArgumentError (before any I/O) for a bad key, owner or option (an unknown one
   * too), or a backend that cannot free another client's claim (a lock held by a server session:
   * MySQL's and PostgreSQL's session modes); LockerClosedError; BackendUnavailableError; BackendError.
   */
  forceRelease(key: string, owner: string, options?: { shared?: boolean }): Promise<boolean>;
  /**
   * Campaigns in election `name` until elected: candidates wait in line (FIFO where the store's
   * locks are), one term at a time. The term is the lock `name` (its token is the term's); the
   * value is published in the locker's `fence` under resource `name + '#deadbolt-leader'`.
   * @throws InvalidArgumentError (before any I/O: a bad name or value, bad options, no `fence` on
   * the locker); SelfDeadlockError when this locker already campaigns or leads in `name`;
   * LockTimeoutError; the signal's reason; LockerClosedError; StaleTokenError,
   * BackendUnavailableError, BackendError (nothing is held then).
   */
  elect(name: string, options: ElectOptions): Promise<Leadership>;
  /** One attempt at `elect`: a Leadership, or null when someone leads. Throws as `elect`. */
  tryElect(name: string, options: Omit<ElectOptions, 'timeoutMs'>): Promise<Leadership | null>;
  /**
   * Who leads election `name` now, or null when nobody does: the lock's holder read from the store
   * and the value it published (a snapshot, stale as soon as it is read).
   * @throws InvalidArgumentError (before any I/O) for a bad name, no `fence`, or a backend that
   * cannot inspect; LockerClosedError; BackendUnavailableError; BackendError.
   */
  leader(name: string): Promise<Leader | null>;
  /**
   * Every change of election `name`'s leader, in order, read every `intervalMs` until `signal`
   * aborts: the first item is the leader now. A term too short to be seen between two reads is
   * counted in the next change's `missedTerms`, never silently skipped.
   * @throws (from the iteration) what `leader` throws; a store failure ends the iteration.
   */
  observe(name: string, options?: ObserveOptions): AsyncIterableIterator<LeaderChange>;
  /**
   * Runs `job` at most once across every process that calls this for `name` in the same window
   * (ShedLock's rule): the claim is the lock `name`, kept while the job runs; a call that finds it
   * taken skips with `busy`, or `ran-recently` for `lockAtLeastForMs` after a run started (marked
   * by the lock `name + '#deadbolt-ran'`, which the store expires). A job that throws is marked
   * the same way and its error rethrown.
   * @throws InvalidArgumentError (before any I/O: a bad name, a job that is not a function, bad
   * options, `lockAtLeastForMs` above `lockAtMostForMs`); LockerClosedError; BackendUnavailableError,
   * BackendError (the job did not run); what the job throws; LockLostError when the claim was lost
   * before the job settled (its result is not reported as done).
   */
  runOnce<T>(name: string, job: (context: JobContext) => Promise<T> | T, options: RunOnceOptions): Promise<RunOnceResult<T>>;
  /**
   * Reject pending waits with LockerClosedError, release held locks, close the backend. Finishes
   * within two operation timeouts even when the store has gone silent.
   * Idempotent. @throws the first release or close error, after everything was attempted.
   */
  close(): Promise<void>;
}

/**
 * The result of `lockAll` / `tryLockAll`: every key held, each by a `Lock` of its own (own lease,
 * renewal and token). Not a `Lock` itself: a set of keys has no one fencing token, so it offers
 * none to misuse; fence each resource with the token of the key that guards it (`tokens`).
 */
export interface MultiLock extends AsyncDisposable {
  /** The keys, de-duplicated, in the canonical order they were taken in. */
  readonly keys: readonly string[];
  /** One lock per key, in `keys` order. */
  readonly locks: readonly Lock[];
  /** Each key's fencing token. */
  readonly tokens: ReadonlyMap<string, bigint>;
  /** Aborted (with that member's `LockLostError`) as soon as any member is lost; reading it checks every member's estimate. */
  readonly signal: AbortSignal;
  /** True while every member is held. */
  readonly held: boolean;
  /**
   * Extend every member to `ttlMs` (default: each one's current ttl).
   * @throws the first member's failure (as `Lock.extend`), after every member was asked.
   */
  extend(ttlMs?: number): Promise<void>;
  /**
   * Release every member, last taken first. Idempotent.
   * @throws the first member's failure, after every member was tried (the others are released).
   */
  release(): Promise<void>;
}

/** Options of `Locker.elect`; unknown names are `InvalidArgumentError`. */
export interface ElectOptions {
  /** What this candidate publishes while it leads (its id, its address): any string up to 64 KiB of UTF-8. */
  value: string;
  /** The term's lease: how long a leader that stopped (killed, partitioned) keeps the term. Default the locker's `ttlMs`. */
  ttlMs?: number;
  /** Give up campaigning after this long with `LockTimeoutError`. Default the locker's `timeoutMs`. */
  timeoutMs?: number;
  /** Stop campaigning: `elect` rejects with the signal's reason. */
  signal?: AbortSignal;
}

/**
 * A term of leadership (`Locker.elect`): held until `resign()`, or until the term's lease is lost,
 * when `signal` aborts. Dispose it (`await using`) to resign.
 */
export interface Leadership extends AsyncDisposable {
  /** The election's name. */
  readonly name: string;
  /** The term's fencing token: strictly above every earlier term's. Pass it to the fences of what the leader writes. */
  readonly token: bigint;
  /** The term's number: one more than the term before it that published a value (1 for the first). */
  readonly term: number;
  /** The value this leader published last (`proclaim`). */
  readonly value: string;
  /** Aborted with `LockLostError` the moment the term is lost (as `Lock.signal`); not on `resign()`. */
  readonly signal: AbortSignal;
  /** True while the term is held (not resigned, not lost). */
  readonly held: boolean;
  /**
   * Publishes `value` in place of the last one, in the same term (with its token, so it is refused
   * once a later term has published).
   * @throws InvalidArgumentError for a bad value (before any I/O); NotOwnerError after `resign()`;
   * LockLostError when the term is lost; StaleTokenError when a later term has published;
   * BackendUnavailableError / BackendError when the fence's store fails.
   */
  proclaim(value: string): Promise<void>;
  /**
   * Ends the term: the next candidate in line is elected at once, not after a ttl. Idempotent.
   * @throws BackendError / BackendUnavailableError when the store fails (the term then ends when its lease runs out).
   */
  resign(): Promise<void>;
}

/** Who leads an election now (`Locker.leader`). */
export interface Leader {
  /** The leader's published value; `null` in the moment between its election and its first publication (or a store that does not report holders' tokens). */
  readonly value: string | null;
  /** The term's fencing token; `null` only with `value` on a store that shows no holder's token (a migration's dual phase). */
  readonly token: bigint | null;
  /** The term's number (`Leadership.term`); `null` with `value`. */
  readonly term: number | null;
  /**
   * How long this term has lasted, by the leader's wall clock at its election and this process's
   * now: a skew between the two shows here (never used for any decision). `null` with `value`.
   */
  readonly sinceMs: number | null;
}

/** One change seen by `Locker.observe`: a new term, a new value in the same term, or no leader. */
export interface LeaderChange {
  /** The leader now; `null` when nobody leads. */
  readonly leader: Leader | null;
  /**
   * Terms that began and ended between this change and the one before it, unseen (observe reads
   * every `intervalMs`; a shorter term can pass between two reads). Counted from the terms'
   * numbers, so never guessed; 0 when none was missed or it cannot be known (the first change).
   */
  readonly missedTerms: number;
}

/** Options of `Locker.observe`; unknown names are `InvalidArgumentError`. */
export interface ObserveOptions {
  /** Ends the iteration (it then returns, without an error). */
  signal?: AbortSignal;
  /** How often the store is read. Default 1 000 ms. */
  intervalMs?: number;
}

/** Options of `Locker.runOnce`; unknown names are `InvalidArgumentError`. */
export interface RunOnceOptions {
  /**
   * The job's claim lasts at most this long after its runner stopped renewing it (killed, paused,
   * partitioned): the claim's lease. A ttl the backend accepts.
   */
  lockAtMostForMs: number;
  /**
   * After a run started, later calls skip (`ran-recently`) for at least this long, even when the
   * job finished sooner: a runner whose clock or scheduler fires a little late does not run the
   * window's job again. At most `lockAtMostForMs`. Default 0.
   */
  lockAtLeastForMs?: number;
  /** Abort the attempt to claim the job (not the job itself: it gets the claim's `signal`). */
  signal?: AbortSignal;
}

/** What a job run by `Locker.runOnce` is given. */
export interface JobContext {
  /** The claim's fencing token: pass it to the fences of what the job writes. */
  readonly token: bigint;
  /** Aborted with `LockLostError` when the job's claim is lost mid-run. */
  readonly signal: AbortSignal;
}

/** What `Locker.runOnce` did: ran the job (and what it returned), or skipped it, and why. */
export type RunOnceResult<T> =
  { readonly ran: true; readonly result: T; readonly token: bigint } | { readonly ran: false; readonly reason: 'busy' | 'ran-recently' };

/** What a fenced resource holds: the last accepted value and the token it was written with. */
export interface FencedValue {
  readonly value: string;
  readonly token: bigint;
}

/**
 * Values in a store guarded by fencing tokens: a write is accepted when its token is at least the
 * highest one the resource has accepted (the current holder may write as often as it likes, with
 * its one token), and refused with `StaleTokenError` when it is lower. The check and the write are
 * one atomic step in the store, so a stale write can never land between them.
 *
 * Pass a lock's `token` (`lock.token`): tokens rise with every grant of a key, so once a newer
 * holder has written, every write of an older one is refused. Use one resource per lock key (or a
 * resource guarded by exactly one key): tokens of different keys are not comparable.
 */
export interface Fence {
  /**
   * Writes `value` to `resource` with `token`.
   * @throws InvalidArgumentError for a bad resource (the lock key rules), a token that is not a
   *   bigint in [0, FENCE_TOKEN_LIMIT), a value no store can keep (see `checkFencedWrite`) or bad
   *   options, before any I/O; StaleTokenError when the resource has accepted a higher token
   *   (nothing written); BackendUnavailableError / BackendError when the store fails, and
   *   BackendUnavailableError when the write did not finish within `options.timeoutMs`, or the
   *   signal's reason when it aborts (the write may or may not have landed: read it back, or
   *   write again with the same token, which is safe). Contention never fails a write: a store
   *   whose check-and-write is optimistic tries again until the deadline.
   */
  write(resource: string, token: bigint, value: string, options?: FenceWriteOptions): Promise<void>;
  /**
   * The last value written to `resource` and its token; null if it was never written.
   * @throws InvalidArgumentError for a bad resource; BackendUnavailableError / BackendError.
   */
  read(resource: string): Promise<FencedValue | null>;
  /** Closes what the fence opened (a client it was given stays open). Never throws. */
  close(): Promise<void>;
}

/** The options of one fenced write (`Fence.write`). */
export interface FenceWriteOptions {
  /**
   * How long the write may take, every retry included; after it the write rejects with
   * `BackendUnavailableError`. Default `DEFAULT_FENCE_TIMEOUT_MS`.
   */
  timeoutMs?: number;
  /** Aborts the write: it rejects with the signal's reason. */
  signal?: AbortSignal;
}

// A locker an application's own tests control: a memory store on a test clock, with the faults a
// real store has (a lease that lapses, a renewal that fails, an outage) made on demand. The clock
// stands in for the monotonic clock and the timers of all of core (kit/time.ts), so the renewals,
// deadlines and lock-delays of the lockers on it run when the test moves it, in the order they are
// due, and a test of "what does my worker do when its lock expires" takes milliseconds.
import { BackendUnavailableError, InvalidArgumentError } from '../api/errors.js';
import { createLocker } from '../api/locker.js';
import type { Inspection, Locker, LockerOptions } from '../api/types.js';
import type { AcquireRequest, LockBackend } from '../kit/backend.js';
import { MemoryFence } from '../kit/fence.js';
import { clockStandsIn, setClockStandIn, type ClockStandIn, type Timer } from '../kit/time.js';
import { wrapBackend } from './wrap.js';
import { MemoryBackend, MemoryLockStore, type MemoryLease } from './memory-backend.js';

/** The clock of a test locker (`createTestLocker`). */
export interface TestClock {
  /** The clock's time in milliseconds: 0 when the test locker was made, moved only by `advance`. */
  now(): number;
  /**
   * Moves the clock `ms` ahead. Every timer of core due on the way fires at its own time, in order
   * (a renewal, a lease's end in the store, an acquisition's timeout, a lock-delay), and the work
   * each one starts settles before the next fires. Resolves once the clock is `ms` ahead and that
   * work has settled. @throws InvalidArgumentError for an `ms` that is not a finite number ≥ 0,
   * during another `advance`, or after the test locker closed.
   */
  advance(ms: number): Promise<void>;
}

/** What `createTestLocker` returns: the locker, its clock and the faults it can stage. Dispose it (`await using`) or call `close()`. */
export interface TestLocker extends AsyncDisposable {
  /** A locker on the test store; its fence (for `elect`, `leader`, `observe`) is `fence`. */
  readonly locker: Locker;
  readonly clock: TestClock;
  /** An in-memory fence the lockers share: pass it the tokens the code under test writes with. */
  readonly fence: MemoryFence;
  /**
   * Another locker on the same store, clock and fence: a second process of the application (a
   * rival worker, the next leader). Closed with the test locker. @throws InvalidArgumentError for
   * bad options.
   */
  newLocker(options?: LockerOptions): Locker;
  /**
   * Makes every held claim on `key` lapse now, as if its lease ran out unrenewed: the store frees
   * it (the next waiter in line is granted) and each holder is told at once (its `signal` aborts
   * with LockLostError, `lock.held` is false). Returns how many claims lapsed (0: none was held).
   * @throws InvalidArgumentError for a key that is not a string.
   */
  expire(key: string): number;
  /**
   * The next renewal of a lease on `key` rejects with `error` (default a BackendUnavailableError);
   * each call adds one failure. A lease whose renewals keep failing is lost when its ttl runs out
   * on the clock. @throws InvalidArgumentError for a key that is not a string.
   */
  failNextRenewal(key: string, error?: Error): void;
  /**
   * The store is out of reach for `forMs` on the clock: every call rejects with
   * BackendUnavailableError, while the leases it holds keep running out as they would on a real
   * store. A later call replaces the end of the outage. @throws InvalidArgumentError for a `forMs`
   * that is not a number ≥ 0.
   */
  outage(options: { forMs: number }): void;
  /** What the store holds for `key`: `locker.inspect(key)`. Rejects as that does. */
  inspect(key: string): Promise<Inspection>;
  /** Closes every locker of the test and puts the real clock back. Never throws. */
  close(): Promise<void>;
}

/**
 * A locker for an application's tests: a memory store on a test clock, with lapsed leases, failing
 * renewals and outages on demand (see `TestLocker`). `options` are the locker's (`fence` defaults
 * to the test's `fence`).
 *
 * While it is open, its clock stands in for the real one in all of core in this process: timers
 * armed by lockers made before wait for the test clock, and a locker over a real store cannot be
 * made (InvalidArgumentError). Close it at the end of each test. One test locker at a time per
 * process (test runners give each test file a process or worker of its own); more lockers on it
 * come from `newLocker`.
 * @throws InvalidArgumentError for bad options, or while another test locker is open.
 */
export function createTestLocker(options?: LockerOptions): TestLocker {
  if (clockStandsIn())
    throw new InvalidArgumentError('another test locker is open in this process: close it first, or use its newLocker()');
  const clock = new ManualClock();
  setClockStandIn(clock);
  try {
    return new TestStore(clock, options);
  } catch (error) {
    setClockStandIn(undefined);
    throw error;
  }
}

/**
 * A clock whose time moves only by `advance`, with timers kept in the order they are due: one
 * sorted array (arming and cancelling are linear in the timers pending, which a test's few hundred
 * locks keep small).
 */
class ManualClock implements ClockStandIn, TestClock {
  #now = 0;
  #seq = 0;
  /** Pending timers by deadline, then by the order they were armed. */
  readonly #timers: { readonly deadline: number; readonly seq: number; readonly fn: () => void }[] = [];
  #advancing = false;
  closed = false;

  now(): number {
    return this.#now;
  }

  after(ms: number, fn: () => void): Timer {
    const timer = { deadline: this.#now + ms, seq: this.#seq++, fn };
    // Binary search for the first timer due after this one (ties keep the order they were armed).
    let lo = 0;
    let hi = this.#timers.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.#timers[mid]!.deadline <= timer.deadline) lo = mid + 1;
      else hi = mid;
    }
    this.#timers.splice(lo, 0, timer);
    return {
      cancel: () => {
        const i = this.#timers.indexOf(timer);
        if (i >= 0) this.#timers.splice(i, 1);
      },
    };
  }

  async advance(ms: number): Promise<void> {
    if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0)
      throw new InvalidArgumentError(`advance: ms must be a finite number ≥ 0, got ${String(ms)}`);
    if (this.closed) throw new InvalidArgumentError('advance: the test locker is closed');
    if (this.#advancing) throw new InvalidArgumentError('advance: the clock is already advancing (await the call before)');
    this.#advancing = true;
    try {
      const target = this.#now + ms;
      await settle();
      // A bound on the timers one advance fires, so that a timer re-arming itself at no delay
      // fails the test instead of hanging it.
      for (let fired = 0; this.#timers.length > 0 && this.#timers[0]!.deadline <= target; fired++) {
        if (fired > 1_000_000) throw new Error('advance: more than a million timers fired: something re-arms itself without delay');
        const timer = this.#timers.shift()!;
        this.#now = Math.max(this.#now, timer.deadline);
        try {
          timer.fn();
        } finally {
          await settle();
        }
      }
      this.#now = target;
      await settle();
    } finally {
      this.#advancing = false;
    }
  }
}

/**
 * Lets what a fired timer started run to its end: the memory store answers within the same turn,
 * and core's deadlines give an answer one `setImmediate` (kit/time.ts `answerDeadline`), so a few
 * turns of the event loop drain it.
 */
async function settle(): Promise<void> {
  for (let i = 0; i < 4; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

/** The test's store and the faults staged on it; each locker reaches it through a backend of its own. */
class TestStore implements TestLocker {
  readonly store = new MemoryLockStore();
  readonly fence = new MemoryFence();
  readonly locker: Locker;
  readonly #lockers: Locker[] = [];
  /** Told when a held lease is made to lapse (`expire`), by key, then owner. */
  readonly #losses = new Map<string, Map<string, AbortController>>();
  readonly #renewalFailures = new Map<string, Error[]>();
  #outageUntil = -Infinity;
  #closed = false;

  constructor(
    readonly clock: ManualClock,
    options?: LockerOptions,
  ) {
    this.locker = this.newLocker(options);
  }

  newLocker(options?: LockerOptions): Locker {
    if (this.#closed) throw new InvalidArgumentError('newLocker: the test locker is closed');
    const locker = createLocker(this.#backend(), { fence: this.fence, ...options });
    this.#lockers.push(locker);
    return locker;
  }

  expire(key: string): number {
    if (typeof key !== 'string') throw new InvalidArgumentError('expire: key must be a string');
    let lapsed = 0;
    for (const space of ['mutex', 'shared'] as const) {
      for (const { owner } of this.store.view(key, space).holders) {
        if (owner === null || !this.store.free(key, owner, space)) continue;
        lapsed++;
        this.#losses
          .get(key)
          ?.get(owner)
          ?.abort(new Error(`the test expired the lease on ${JSON.stringify(key)}`));
      }
    }
    return lapsed;
  }

  failNextRenewal(key: string, error?: Error): void {
    if (typeof key !== 'string') throw new InvalidArgumentError('failNextRenewal: key must be a string');
    const failures = this.#renewalFailures.get(key) ?? [];
    failures.push(error ?? new BackendUnavailableError('memory', 'renew', { cause: new Error('a renewal failure staged by the test') }));
    this.#renewalFailures.set(key, failures);
  }

  outage({ forMs }: { forMs: number }): void {
    if (typeof forMs !== 'number' || Number.isNaN(forMs) || forMs < 0) throw new InvalidArgumentError('outage: forMs must be a number ≥ 0');
    this.#outageUntil = this.clock.now() + forMs;
  }

  inspect(key: string): Promise<Inspection> {
    return this.locker.inspect(key);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#outageUntil = -Infinity;
    await Promise.allSettled(this.#lockers.map((locker) => locker.close()));
    this.clock.closed = true;
    setClockStandIn(undefined);
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /** A memory backend on the test's store, with every call passing the staged faults first. */
  #backend(): LockBackend<MemoryLease> {
    const inner = new MemoryBackend({ store: this.store });
    const reachable = (operation: string) => {
      if (this.clock.now() < this.#outageUntil)
        throw new BackendUnavailableError('memory', operation, { cause: new Error('an outage staged by the test') });
    };
    // The store's answers go through a promise, as a real store's do.
    const call =
      <A extends unknown[], R>(operation: string, fn: (...args: A) => Promise<R>) =>
      async (...args: A): Promise<R> => {
        reachable(operation);
        return fn(...args);
      };
    return wrapBackend(inner, {
      acquire: call('acquire', async (req: AcquireRequest) => {
        const lease = await inner.acquire(req);
        if (!lease) return lease;
        // A lease the test can make lapse tells its holder through `lost` (LockBackend's push notice of loss).
        const told = new AbortController();
        const owners = this.#losses.get(req.key) ?? new Map<string, AbortController>();
        owners.set(req.owner, told);
        this.#losses.set(req.key, owners);
        return { ...lease, lost: told.signal };
      }),
      renew: call('renew', async (lease: MemoryLease, ttlMs: number) => {
        const failure = this.#renewalFailures.get(lease.key)?.shift();
        if (failure) throw failure;
        return inner.renew(lease, ttlMs);
      }),
      release: call('release', async (lease: MemoryLease) => {
        const owners = this.#losses.get(lease.key);
        owners?.delete(lease.owner);
        if (owners?.size === 0) this.#losses.delete(lease.key);
        return inner.release(lease);
      }),
      inspect: call('inspect', inner.inspect.bind(inner)),
      forceRelease: call('force release', inner.forceRelease.bind(inner)),
      raiseTokenFloor: call('raise token floor', inner.raiseTokenFloor.bind(inner)),
      tokenFloor: call('token floor', inner.tokenFloor.bind(inner)),
      tokenCeiling: call('token ceiling', inner.tokenCeiling.bind(inner)),
    });
  }
}

// What a backend gives the suite (ConformanceOptions, ConformanceHarness) and what the suite gives
// each group of behaviours (SuiteContext). A leaf module: the groups and the suite import it, it
// imports none of them.
import type { Capabilities, LockBackend, Locker, LockerOptions } from '@deadbolt/core';
import type { Rule } from '@deadbolt/core/backend';
import type { ChildBackendConfig, ChildHolder } from './children.js';
import type { Address } from './fault-proxy.js';
import type { FencedRegister } from './register.js';
import type { Fence } from '@deadbolt/core';
import type { Expect } from './expect.js';

/** Fault injection and inspection a backend offers the suite. */
export interface ConformanceHarness {
  /**
   * The owner ids that have any claim on `key` in the store (holder, queued waiters), read directly
   * from the store. `[]` means nothing is left (documented metadata such as token counters excluded).
   */
  inspect(key: string): Promise<string[]>;
  /**
   * Make the store forget the claim on `key` (delete the key, row or node; expire the session).
   * Optional only for a run on someone's live store (`deadbolt check`): its behaviours are then n/a.
   */
  loseClaim?(key: string): Promise<void>;
  /**
   * Kill this backend's connection(s) server-side, or whatever the store has instead (etcd: revoke
   * the leases of `key`'s claims). Only this backend's: suites of other backends may run beside it.
   */
  dropConnection?(backend: LockBackend, key: string): Promise<void>;
  /** Restart the server (via test-matrix) and resolve when it answers again. */
  restartServer?(): Promise<void>;
  /**
   * What `backend` keeps for keys and ttls it no longer uses (open sessions, cache entries), once
   * idle: behaviour 24 checks that it does not grow. Optional: absent means it keeps nothing.
   */
  retained?(backend: LockBackend): number | Promise<number>;
  /**
   * How many cells, rows or tombstones the store scans to read `key`'s lock state: behaviour 24
   * checks that many cycles on one key do not make it grow. Optional: absent where the store's
   * read cost cannot grow with use.
   */
  scanCost?(key: string): Promise<number>;
  /**
   * The owner ids of every live claim (granted or waiting) on the shared key `key` (semaphores and
   * read-write locks), read directly from the store. Required when the backend has shared claims.
   */
  inspectShared?(key: string): Promise<string[]>;
  /** Make the store forget `owner`'s claim on the shared key `key`. Optional as `loseClaim`. */
  loseSharedClaim?(key: string, owner: string): Promise<void>;
}

/** What `defineConformanceSuite` needs of a backend: how to make it (here and in a child process), a harness that reads the store, and the variants some behaviours use. A behaviour whose variant is missing is listed `n/a` with the reason. */
export interface ConformanceOptions {
  /** Shown in the describe block, e.g. `redis`. */
  name: string;
  /** A new backend with its own connection(s) on every call. */
  createBackend: () => LockBackend | Promise<LockBackend>;
  harness: ConformanceHarness;
  /** How child processes build the same backend. Required when the backend claims `crossProcess`. */
  child?: ChildBackendConfig;
  /**
   * How to build the store's `Fence` (its package's fenced writes) in this process and in a child:
   * the same `{ module, export, options }` as `child`, for the fence's factory. Behaviour 36.
   */
  fence?: ChildBackendConfig;
  /**
   * A backend pointed at a closed port (behaviour 15). `null` only where no store can be down (a
   * store in this process): the three options that end in `null` must be stated, so a suite cannot
   * leave out the behaviours that need them by forgetting one; those it states `null` are n/a.
   */
  createUnreachableBackend: (() => LockBackend | Promise<LockBackend>) | null;
  /**
   * The real store's address and a factory for a backend that connects to another address: the
   * fault behaviours (18–20, 30, 35) put the suite's `FaultProxy` there. `null` where there is no
   * network between client and store, or a run cannot put a proxy there (`deadbolt check`).
   */
  network: {
    /** The store's address; several for a store of several nodes (one proxy listener each). */
    store: Address | readonly Address[];
    /**
     * `via` is the proxy for the (first) store address; `all` has one proxy address per store
     * address; `extra` holds options to add to the backend's own (`{ connectTimeoutMs }`, 30).
     */
    createBackend: (via: Address, all: readonly Address[], extra?: { connectTimeoutMs?: number }) => LockBackend | Promise<LockBackend>;
  } | null;
  /**
   * The backend's factory, the option rules it reads with (its package exports them) and a set of
   * options that work, pointed at `address` (a fault proxy in front of the store): behaviour 35
   * feeds every option each of its rule's hostile values. `null` where the run has none to feed (a
   * migration's pair, a store in this process, `deadbolt check`): 35 then checks core's entry points only.
   */
  factory: {
    /** The backend factory; throws `InvalidArgumentError` for bad options. */
    create: (options: unknown) => LockBackend;
    rules: Readonly<Record<string, Rule<unknown>>>;
    /** Options that work, pointed at `address`. */
    valid: (address: Address) => Record<string, unknown>;
  } | null;
  /** A backend on the same store in another namespace (table, prefix, keyspace, root, lock table): 31b. */
  createBackendInOtherNamespace?: () => LockBackend | Promise<LockBackend>;
  /** A backend whose store URL carries `user` and `password`, pointed at `address`: 34. */
  createBackendWithCredentials?: (user: string, password: string, address: Address) => LockBackend | Promise<LockBackend>;
  /**
   * How a child process builds a backend whose waiters wait up to `ms` between re-checks (9b and
   * 26f: a killed waiter must block nobody for much longer than its ttl, whatever its poll delay).
   * Absent for backends that do not poll.
   */
  slowPollChild?: (ms: number) => ChildBackendConfig;
  /**
   * A backend whose store sessions run in time zone `zone` (e.g. `'+05:00'`), for stores whose time
   * functions depend on the session (MySQL/MariaDB, PostgreSQL). Behaviour 21.
   */
  createBackendInTimeZone?: (zone: string) => LockBackend | Promise<LockBackend>;
  /** The first part of every key the suite uses (default `conformance`): its run's keys follow it. */
  keyPrefix?: string;
  /** Lease length for the lease, crash and pause tests. Default: 1 s, raised to the backend's minimum. */
  ttlMs?: number;
  /** Acquire+release cycles for the no-garbage check (behaviour 17). Default 10 000. */
  garbageCycles?: number;
  /** Acquisitions per client in the exclusion test. Default 30. */
  exclusionRounds?: number;
}

export type TestFn = (name: string, fn: () => Promise<void>, timeout?: number) => void;

/**
 * What the suite registers its tests with and asserts through: vitest's `describe`, `it`, `expect`,
 * `beforeEach` and `afterEach` as they are, or another runner's of the same shape. Without one,
 * the suite takes vitest's, or its own runner's while that runs it (`deadbolt check`).
 */
export interface TestRunner {
  /** A body of tests, which may be async: tests registered after an await belong to it. */
  describe(name: string, fn: () => void | Promise<void>): void;
  /** A test with an optional timeout in ms; `it.skip` lists a test as skipped (a behaviour that does not apply). */
  readonly it: {
    (name: string, fn: () => unknown, timeout?: number): void;
    /** Lists the test as skipped without running it. */
    skip(name: string, fn: () => unknown): void;
  };
  /** The assertions: `expect(actual, message?)` with `toBe`, `toEqual` and the rest of `Matchers`, `expect.poll`, `expect.fail`. */
  readonly expect: Expect;
  /** Runs before each test of the describe it is called in. */
  beforeEach(fn: () => unknown, timeout?: number): void;
  /** Runs after each test of the describe it is called in, even after a failure. */
  afterEach(fn: () => unknown, timeout?: number): void;
}

/** What the suite shares with each group of behaviours. */
export interface SuiteContext {
  /** What the group registers its tests with and asserts through. */
  readonly runner: TestRunner;
  readonly options: ConformanceOptions;
  readonly harness: ConformanceHarness;
  /** The backend's, every optional field filled in from its default. */
  readonly capabilities: Required<Capabilities>;
  /** The suite's lease length, and its default renewal period (T / 3). */
  readonly T: number;
  readonly renewMs: number;
  /** `ms` rounded up to a whole number of the backend's ttl steps (`ttlGranularityMs`): a ttl or lock-delay it accepts. */
  roundTtl(ms: number): number;
  readonly lockers: Locker[];
  /** A key no other test uses (`label` shows in it). */
  freshKey(label?: string): string;
  /** A locker on a new backend, closed after the test. */
  makeLocker(options?: LockerOptions): Promise<Locker>;
  /** `makeLocker()` after `first` ran once on it (what it got is released): its connection is made before a test's clock starts. */
  warmLocker(first: (locker: Locker) => Promise<{ release(): Promise<unknown> } | null>): Promise<Locker>;
  /** A child process holding a locker of its own (`ChildHolder`), killed after the test. @throws when no child config was given. */
  spawnChild(options?: LockerOptions, env?: Record<string, string>, config?: ChildBackendConfig): Promise<ChildHolder>;
  /** A test listed `n/a` with `skipReason()`'s answer when it gives one. */
  itWhen(skipReason: () => string | undefined, name: string, fn: () => Promise<void>, timeout?: number): void;
  crossProcessIt: TestFn;
  /** A test for backends with semaphores (listed n/a otherwise). */
  semIt: TestFn;
  /** A test for backends with read-write locks (listed n/a otherwise). */
  rwIt: TestFn;
  /** A test that needs `hook` of the harness (listed `n/a` without it). */
  hookIt(hook: keyof ConformanceHarness, name: string, fn: () => Promise<void>, timeout?: number): void;
  /** Whether the backend is a migration in its `dual` phase (one lock over two stores). */
  readonly dualMigration: boolean;
  /** Whether the backend has `raiseTokenFloor`. */
  probeFloor(): boolean;
  /** The number the suite's child processes read and write (behaviour 1's lost-update check); reset before each test. */
  readonly counter: { value: number };
  /** This test's fenced register, which children write through with their tokens; new for each test. */
  register(): FencedRegister<string>;
  /** The store's `Fence` from `options.fence`, closed after the test. */
  makeFence(): Promise<Fence>;
}

/** @module @deadbolt/core/testing */
// @deadbolt/core/testing: what the conformance suite and the benchmark need that no application
// should: how core checks each option (the suite feeds every rule its hostile values), the backend
// under a locker (a test reaches the store through it), wrappers that watch or change what reaches a
// store, and the hooks through which a backend shows its tests what is not its API. And what an
// application's own tests use: a locker on a test clock with a store's faults on demand.
export { backendOf, optionRules } from './api/locker.js';
export { fullCapabilities, MUTEX } from './kit/backend.js';
export { aliasesOf } from './kit/options.js';
export { TestingHooks } from './kit/testing-hooks.js';
export { observeBackend, wrapBackend, type BackendMethod } from './stores/wrap.js';
export { createTestLocker, type TestClock, type TestLocker } from './stores/test-locker.js';

/**
 * A store's claims on one key, read and broken directly through a backend's own connection: what
 * each backend package's `/testing` entry gives as `claimsOf(backend)`, for the conformance suite's
 * harness and the benchmark's loss scenario, so that each store's layout is read in one place. Each
 * method rejects with what the store's driver rejected with.
 */
export interface StoreClaims {
  /** Owner ids with a claim on `key`'s mutex that the store still counts: the holder first, then the waiters in line. */
  inspect(key: string): Promise<string[]>;
  /** Makes the store forget `key`'s mutex claim (and its line), as an operator deleting it, a failover losing it or an expired session would. */
  loseClaim(key: string): Promise<void>;
  /** Owner ids of the live claims on the shared key `key` (semaphores, read-write locks). Absent where the store has no shared claims. */
  inspectShared?(key: string): Promise<string[]>;
  /** Makes the store forget `owner`'s claim on the shared key `key`. Absent as `inspectShared`. */
  loseSharedClaim?(key: string, owner: string): Promise<void>;
}

export {
  DEFAULT_MAX_TTL_MS,
  fullCapabilities,
  MAX_SEMAPHORE_LIMIT,
  type AcquireRequest,
  type Capabilities,
  type Lease,
  type LockBackend,
  type SharedRequest,
} from './backend.js';
export {
  BackendError,
  BackendUnavailableError,
  backendFailure,
  noAnswer,
  DeadboltError,
  InvalidArgumentError,
  keepSecret,
  LimitMismatchError,
  LockerClosedError,
  LockUpgradeError,
  LockLostError,
  LockTimeoutError,
  NotOwnerError,
  SelfDeadlockError,
  type DeadboltErrorCode,
} from './errors.js';
export { createLocker, optionRules } from './locker.js';
export type { Lock, Locker, LockerOptions, LockOptions, MultiLock, ReadWriteLock, Semaphore, TryLockOptions } from './types.js';
export { grantable } from './shared.js';
export { MemoryBackend, MemoryLockStore, memoryBackend, type MemoryBackendOptions } from './memory-backend.js';
export { MAX_KEY_BYTES, MAX_LOCK_ALL_KEYS, validateKey, validateKeys, validateTtl } from './validate.js';
export { count, describe, flag, instance, ms, nested, oneOf, own, parseStoreUrl, readOptions, required, settings, share, signal, text, url, wait, type ReadOptions, type Rule, type Rules, type StoreUrl } from './options.js';
export { StrandedConnections } from './stranded.js';
export { after, MAX_TIMER_MS, raceSignal, withTimeout, type Timer } from './time.js';
export { AGAIN, cancelOnAbort, InFlight, MIN_WAITER_PLACE_MS, POLL_SOON, waiterCadence, pollForLease, ReleaseNotifier, sleep, UnavailableGrace, waitOnConnections, watchBlocked, type PollOptions } from './wait.js';
export { MigratingBackend, migratingBackend, type MigratingBackendOptions, type MigrationPhase } from './migrating-backend.js';

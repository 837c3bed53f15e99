/** @module @deadbolt/core */
// @deadbolt/core: the API an application uses. What a backend package needs besides it (the
// contract's request and lease types, option rules, waiting and timer helpers) is in
// `@deadbolt/core/backend`; what tests need is in `@deadbolt/core/testing`.
export { createLocker } from './api/locker.js';
export {
  diagnostics,
  type AcquireEvent,
  type LeaseEvent,
  type LeaseLostEvent,
  type RenewalFailedEvent,
  type StoreUnavailableEvent,
  type WaitAbandonedEvent,
} from './api/diagnostics.js';
export type {
  ClaimInfo,
  ElectOptions,
  Inspection,
  JobContext,
  Leader,
  LeaderChange,
  Leadership,
  Lock,
  Locker,
  LockerOptions,
  LockOptions,
  MultiLock,
  ObserveOptions,
  ReadWriteLock,
  RunOnceOptions,
  RunOnceResult,
  Semaphore,
  TryLockOptions,
} from './api/types.js';
export { DEFAULT_MAX_TTL_MS, MAX_SEMAPHORE_LIMIT, type Capabilities, type LockBackend } from './kit/backend.js';
export { MAX_KEY_BYTES, MAX_LOCK_ALL_KEYS } from './api/validate.js';
export {
  BackendError,
  BackendUnavailableError,
  DeadboltError,
  InvalidArgumentError,
  LimitMismatchError,
  LockerClosedError,
  LockUpgradeError,
  LockLostError,
  LockTimeoutError,
  NotOwnerError,
  SelfDeadlockError,
  StaleTokenError,
  type DeadboltErrorCode,
} from './api/errors.js';
export {
  DEFAULT_FENCE_TIMEOUT_MS,
  FENCE_TOKEN_LIMIT,
  MemoryFence,
  memoryFence,
  type Fence,
  type FencedValue,
  type FenceWriteOptions,
} from './kit/fence.js';
export { MemoryBackend, MemoryLockStore, memoryBackend, type MemoryBackendOptions } from './stores/memory-backend.js';
export { MigratingBackend, migratingBackend, type MigratingBackendOptions, type MigrationPhase } from './stores/migrating-backend.js';

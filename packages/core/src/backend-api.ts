/** @module @deadbolt/core/backend */
// @deadbolt/core/backend: the toolkit for writing a backend package, beside the user API of
// `@deadbolt/core` (which a backend also imports: `LockBackend`, the errors). The contract itself
// is backend.ts; the rest is written once here so that no backend writes it again: option rules,
// error helpers, key checks, waiting, polling, timers.
export {
  fullCapabilities,
  keySpace,
  MUTEX,
  type AcquireRequest,
  type Claim,
  type KeySpace,
  type Lease,
  type LeaseEngine,
  type StoreView,
} from './backend.js';
export { backendFailure } from './errors.js';
export { StoreFence } from './fence.js';
export { StoreBackend, type StoreBackendParts } from './store-backend.js';
export { grantable, sharedView } from './shared.js';
export {
  describe,
  readOptions,
  rules,
  unknownOption,
  storeClient,
  type StoreClient,
  type ReadOptions,
  type Rule,
  type Rules,
  type StoreUrl,
} from './options.js';
export { LeaseKeeper, safeLifetime } from './lease-keeper.js';
export { Once } from './once.js';
export { after, answerDeadline, answerWithin, raceSignal, stillStands, wallMicros, type Timer } from './time.js';
export {
  connectionRefused,
  InFlight,
  QueuePlace,
  waiterCadence,
  pollForLease,
  ReleaseNotifier,
  sleep,
  UnavailableGrace,
  type PollOptions,
} from './wait.js';

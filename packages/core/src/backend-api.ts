/** @module @deadbolt/core/backend */
// @deadbolt/core/backend: the toolkit for writing a backend package, beside the user API of
// `@deadbolt/core` (which a backend also imports: `LockBackend`, the errors). The contract itself
// is backend.ts; the rest is written once here so that no backend writes it again: option rules,
// error helpers, key checks, waiting, polling, timers.
export { keySpace, type AcquireRequest, type Claim, type KeySpace, type Lease, type LeaseEngine, type StoreView } from './kit/backend.js';
export { backendFailure } from './api/errors.js';
export { StoreFence } from './kit/fence.js';
export { StoreBackend, type StoreBackendParts } from './kit/store-backend.js';
export { grantable, sharedView } from './kit/shared.js';
export {
  readOptions,
  rules,
  storeClient,
  type StoreClient,
  type ReadOptions,
  type Rule,
  type Rules,
  type StoreUrl,
} from './kit/options.js';
export { LeaseKeeper } from './lease/lease-keeper.js';
export { Once } from './kit/once.js';
export { after, answerDeadline, answerWithin, raceSignal, stillStands, wallMicros, type Timer } from './kit/time.js';
export {
  connectionRefused,
  InFlight,
  QueuePlace,
  waiterCadence,
  pollForLease,
  ReleaseNotifier,
  sleep,
  type PollOptions,
} from './kit/wait.js';

/** @module @deadbolt/core/sql */
// @deadbolt/core/sql: the kit the SQL stores' backends share (MySQL's and PostgreSQL's), beside the
// backend toolkit of `@deadbolt/core/backend`: locks that live on a connection (`SessionLocks`),
// pooled connections gone silent (`StrandedConnections`), shared-claim rows as `inspect` shows
// them and the grant rule judged from counted rows (`grantableBehind`), and the fenced write's
// transaction.
export { checkFenceToken, fencedTransaction, type SqlConnections } from './kit/fence.js';
export { SessionLocks, type BlockedWait, type SessionDialect, type SessionLease } from './sql/session-locks.js';
export { claimOfRow, grantableBehind, sharedViewOfRows } from './kit/shared.js';
export { StrandedConnections } from './sql/stranded.js';
export { SqlBackend, type SqlBackendParts, type SqlPool, type SqlStore } from './sql/sql-backend.js';

/** @module @deadbolt/cassandra/testing */
// @deadbolt/cassandra/testing: what tests, the benchmark and fault drills read of the store that is
// not the backend's API: where a lock's rows live, to read or delete them directly.
export { CLAIM_TABLES, idFor } from './schema.js';

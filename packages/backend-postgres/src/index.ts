/** @module @deadbolt/postgres */
export { PostgresBackend, postgresBackend, type PostgresBackendOptions, postgresOptionRules } from './postgres-backend.js';
export { PostgresFence, postgresFence, postgresFenceOptionRules, type PostgresFenceOptions } from './fence.js';

export { PostgresBackend, postgresBackend, type PostgresBackendOptions } from './postgres-backend.js';

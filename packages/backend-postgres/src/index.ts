export { PostgresBackend, postgresBackend, type PostgresBackendOptions, postgresOptionRules } from './postgres-backend.js';

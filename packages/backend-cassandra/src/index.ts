/** @module @deadbolt/cassandra */
export {
  CassandraBackend,
  cassandraBackend,
  type CassandraAlgorithm,
  type CassandraBackendOptions,
  cassandraOptionRules,
} from './cassandra-backend.js';
export { dropSchema, schemaStatements } from './schema.js';
export { CassandraTimeService, type TimeServiceOptions } from './time-service.js';
export { CassandraFence, cassandraFence, cassandraFenceOptionRules, type CassandraFenceOptions } from './fence.js';

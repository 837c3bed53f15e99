/** @module @deadbolt/mysql */
export { MysqlBackend, mysqlBackend, type MysqlBackendOptions, mysqlOptionRules } from './mysql-backend.js';
export { MysqlFence, mysqlFence, mysqlFenceOptionRules, type MysqlFenceOptions } from './fence.js';

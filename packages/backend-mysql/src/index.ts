export { MysqlBackend, mysqlBackend, type MysqlBackendOptions, mysqlOptionRules } from './mysql-backend.js';

export { MysqlBackend, mysqlBackend, type MysqlBackendOptions } from './mysql-backend.js';

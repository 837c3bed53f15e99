export { RedisBackend, redisBackend, type RedisBackendOptions } from './redis-backend.js';

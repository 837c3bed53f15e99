export { RedisBackend, redisBackend, type RedisBackendOptions, type RedisKeys, type RedisLease } from './redis-backend.js';
export { RedlockBackend, redlockBackend, type RedlockBackendOptions, type RedlockLease } from './redlock-backend.js';

/** @module @deadbolt/redis */
export {
  RedisBackend,
  redisBackend,
  type RedisBackendOptions,
  type RedisKeys,
  type RedisLease,
  redisOptionRules,
} from './redis-backend.js';
export { RedlockBackend, redlockBackend, type RedlockBackendOptions, type RedlockLease, redlockOptionRules } from './redlock-backend.js';
export { RedisFence, redisFence, redisFenceOptionRules, type RedisFenceOptions } from './fence.js';
export type { ValkeyClient, YourRedisClient } from './connection.js';

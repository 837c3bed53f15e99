/** @module @deadbolt/redis/testing */
// @deadbolt/redis/testing: what tests, the benchmark and fault drills read of a backend that is not
// its API: the Redis keys where a lock lives, to read or break them directly.
import { storeOf, type RedisBackend } from './redis-backend.js';
import { RedlockBackend } from './redlock-backend.js';
import type { RedisKeys } from './store.js';

/** The store of a Redis backend, or of a Redlock backend's first node (its key names are every node's). */
const store = (backend: RedisBackend | RedlockBackend) => storeOf.of(backend instanceof RedlockBackend ? backend.nodes[0]! : backend);

/**
 * The Redis key names of `key`'s lock (a Redlock backend's are the same on every node). The hash tag
 * is a digest of the key (user keys may contain braces); the key itself follows, so two keys never
 * share names. @throws InvalidArgumentError when `backend` is not a Redis or Redlock backend.
 */
export function keysFor(backend: RedisBackend | RedlockBackend, key: string): RedisKeys {
  return store(backend).keysFor(key);
}

/**
 * The Redis key names of a shared key (semaphore or read-write lock); `lock` names the claims.
 * @throws InvalidArgumentError when `backend` is not a Redis or Redlock backend.
 */
export function sharedKeysFor(backend: RedisBackend | RedlockBackend, key: string): RedisKeys {
  return store(backend).sharedKeysFor(key);
}

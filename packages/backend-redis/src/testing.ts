/** @module @deadbolt/redis/testing */
// @deadbolt/redis/testing: what tests, the benchmark and fault drills read of a backend that is not
// its API: the Redis keys where a lock lives, to read or break them directly.
import type { StoreClaims } from '@deadbolt/core/testing';
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

/**
 * `key`'s claims as `backend`'s Redis keys, read and deleted through its client (a cluster's too:
 * a key's names share one hash slot). The lock key holds `<owner>` or, once someone waited,
 * `<owner>|<token>|<lease end ms>`; queue members are `<owner>|<backend id>`; a holder whose lease
 * end has passed holds nothing. @throws InvalidArgumentError when `backend` is not a Redis backend;
 * its methods reject with ioredis's error.
 */
export function claimsOf(backend: RedisBackend): StoreClaims {
  const { client } = backend;
  const nowMs = async () => {
    const [seconds, micros] = await client.time();
    return Number(seconds) * 1000 + Number(micros) / 1000;
  };
  store(backend); // a backend of another kind is refused here, not at the first call
  return {
    async inspect(key) {
      const keys = keysFor(backend, key);
      const [value, queued, now] = await Promise.all([client.get(keys.lock), client.zrange(keys.queue, '0', '-1'), nowMs()]);
      const [holder, , ends] = (value ?? '').split('|');
      const live = holder && (ends === undefined || Number(ends) > now);
      return [...(live ? [holder] : []), ...queued.map((member) => member.slice(0, member.lastIndexOf('|')))];
    },
    async loseClaim(key) {
      await client.del(keysFor(backend, key).lock);
    },
    async inspectShared(key) {
      // Live claims only: an expired one is dropped by the next script that looks at the key.
      const keys = sharedKeysFor(backend, key);
      const live = new Set(await client.zrangebyscore(keys.queue, `(${Math.floor(await nowMs())}`, '+inf'));
      return (await client.zrange(keys.lock, '0', '-1')).filter((owner) => live.has(owner));
    },
    async loseSharedClaim(key, owner) {
      const keys = sharedKeysFor(backend, key);
      await client.multi().zrem(keys.lock, owner).zrem(keys.queue, owner).hdel(keys.deadlines, owner).exec();
    },
  };
}

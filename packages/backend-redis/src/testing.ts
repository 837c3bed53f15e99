/** @module @deadbolt/redis/testing */
// @deadbolt/redis/testing: what tests, the benchmark and fault drills read of a backend that is not
// its API: the Redis keys where a lock lives, to read or break them directly; and a backend and a
// fence on an iovalkey client made from a URL, for the suite's runs on that client (its child
// processes name a factory and plain options).
import { createRequire } from 'node:module';
import type { StoreClaims } from '@deadbolt/core/testing';
import type { Redis, RedisOptions } from 'ioredis';
import { RedisFence, type RedisFenceOptions } from './fence.js';
import { RedisBackend, storeOf, type RedisBackendOptions } from './redis-backend.js';
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

/**
 * An iovalkey client for `url` set up as a careful application would (connect and command
 * timeouts, a connection that sends nothing back for 5 s replaced, one reconnect per command,
 * keep-alive, nothing opened before the first command).
 * iovalkey is loaded here, on the first call: it is an optional peer. @throws Error when iovalkey
 * is not installed.
 */
function valkeyClient(url: string): Redis {
  const { Redis: Valkey } = createRequire(import.meta.url)('iovalkey') as { Redis: new (url: string, options: RedisOptions) => Redis };
  const client = new Valkey(url, {
    lazyConnect: true,
    maxRetriesPerRequest: 1,
    connectTimeout: 2000,
    commandTimeout: 5000,
    socketTimeout: 5000,
    keepAlive: 10_000,
  });
  client.on('error', () => undefined);
  return client;
}

/**
 * A Redis backend on an iovalkey client of its own for `options.url`, which it disconnects on
 * `close()` (a backend leaves a client it was given open). @throws InvalidArgumentError for bad
 * options; Error when iovalkey is not installed.
 */
export function valkeyBackend({ url, ...options }: Omit<RedisBackendOptions, 'client'> & { url: string }): RedisBackend {
  const client = valkeyClient(url);
  return Object.assign(new RedisBackend({ ...options, client }), { close: closing(RedisBackend.prototype.close, client) });
}

/** `valkeyBackend`'s fence: a Redis fence on an iovalkey client of its own. @throws as `valkeyBackend`. */
export function valkeyFence({ url, ...options }: Omit<RedisFenceOptions, 'client'> & { url: string }): RedisFence {
  const client = valkeyClient(url);
  return Object.assign(new RedisFence({ ...options, client }), { close: closing(RedisFence.prototype.close, client) });
}

/** `close` that disconnects `client` once the backend or fence it is bound to has closed. */
function closing(close: () => Promise<void>, client: Redis) {
  return async function (this: object): Promise<void> {
    await close.call(this);
    client.disconnect();
  };
}

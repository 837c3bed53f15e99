import { createLocker, memoryBackend, MemoryLockStore, type LockBackend } from '@deadbolt/core';
import { redisBackend } from '@deadbolt/redis';
import { Redlock } from '@sesamecare-oss/redlock';
import { Redis } from 'ioredis';
import { Mutex } from 'redis-semaphore';

/** Something that takes and gives back one lock, the way its library's user would write it. */
export interface Client {
  acquire(key: string): Promise<() => Promise<void>>;
  close(): Promise<void>;
}

/** One contender in a benchmark: how to make a client with its own connection. */
export interface Subject {
  name: string;
  store: 'memory' | 'redis';
  client(): Promise<Client>;
}

const TTL_MS = 10_000;

function deadbolt(name: string, store: Subject['store'], make: () => LockBackend): Subject {
  return {
    name,
    store,
    async client() {
      const locker = createLocker(make(), { ttlMs: TTL_MS });
      return {
        async acquire(key) {
          const lock = await locker.lock(key);
          return () => lock.release();
        },
        close: () => locker.close(),
      };
    },
  };
}

export function subjects(redisUrl: string): Subject[] {
  const memoryStore = new MemoryLockStore();
  const redisClient = async (make: (redis: Redis) => Client['acquire']): Promise<Client> => {
    const redis = new Redis(redisUrl);
    return { acquire: make(redis), close: async () => void redis.disconnect() };
  };
  return [
    deadbolt('deadbolt memory', 'memory', () => memoryBackend({ store: memoryStore })),
    deadbolt('deadbolt redis', 'redis', () => redisBackend({ url: redisUrl })),
    deadbolt('deadbolt redis unordered', 'redis', () => redisBackend({ url: redisUrl, fifo: false })),
    {
      name: 'redis-semaphore Mutex (defaults)',
      store: 'redis',
      client: () =>
        redisClient((redis) => async (key) => {
          const mutex = new Mutex(redis, key, { lockTimeout: TTL_MS });
          await mutex.acquire();
          return () => mutex.release();
        }),
    },
    {
      name: 'redis-semaphore Mutex (retryInterval 1)',
      store: 'redis',
      client: () =>
        redisClient((redis) => async (key) => {
          const mutex = new Mutex(redis, key, { lockTimeout: TTL_MS, retryInterval: 1, acquireTimeout: 60_000 });
          await mutex.acquire();
          return () => mutex.release();
        }),
    },
    {
      name: 'redlock (defaults, retried by caller)',
      store: 'redis',
      client: () =>
        redisClient((redis) => {
          const redlock = new Redlock([redis]);
          return async (key) => {
            // Default settings give up after 10 retries; a user wraps that in a loop.
            for (;;) {
              try {
                const lock = await redlock.acquire([key], TTL_MS);
                return async () => void (await lock.release());
              } catch {
                /* retry */
              }
            }
          };
        }),
    },
    {
      name: 'redlock (retryDelay 1)',
      store: 'redis',
      client: () =>
        redisClient((redis) => {
          const redlock = new Redlock([redis], { retryCount: -1, retryDelay: 1, retryJitter: 1 });
          return async (key) => {
            const lock = await redlock.acquire([key], TTL_MS);
            return async () => void (await lock.release());
          };
        }),
    },
  ];
}

/** The floor: the store's minimal acquire and release, by the same client library. */
export async function redisFloor(redisUrl: string): Promise<Client> {
  const redis = new Redis(redisUrl);
  let n = 0;
  return {
    async acquire(key) {
      const owner = `floor-${n++}`;
      const ok = await redis.set(key, owner, 'PX', TTL_MS, 'NX');
      if (ok !== 'OK') throw new Error('floor key was busy');
      return async () => void (await redis.del(key));
    },
    close: async () => void redis.disconnect(),
  };
}

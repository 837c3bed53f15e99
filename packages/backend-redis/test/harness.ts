import type { ConformanceHarness, ConformanceOptions } from '@deadbolt/conformance';
import { matrixUrl, restartMatrixServer, storeAddress, viaUrl } from '@deadbolt/conformance';
import { RedisBackend, redisBackend } from '@deadbolt/redis';
import type { LockBackend } from '@deadbolt/core';

/** The shared suite's options for the test-matrix Redis (also one side of the migration suites). */
export function redisSuiteOptions(fifo = true): ConformanceOptions {
  const url = matrixUrl('redis');
  return {
    name: fifo ? 'redis' : 'redis (unordered)',
    createBackend: () => redisBackend({ url, fifo }),
    createUnreachableBackend: () => redisBackend({ url: 'redis://127.0.0.1:1', fifo }),
    network: { store: storeAddress(url), createBackend: (via) => redisBackend({ url: viaUrl(url, via), fifo }) },
    child: { module: import.meta.resolve('@deadbolt/redis'), export: 'redisBackend', options: { url, fifo } },
    harness: redisHarness(url),
  };
}

/** Reads and breaks the store directly, through a backend of its own (for `keysFor`). */
export function redisHarness(url: string): ConformanceHarness {
  const admin = redisBackend({ url });
  return {
    async inspect(key) {
      // The lock key is `<owner>` or, once someone waited, `<owner>|<token>|<lease end ms>`; queue
      // members are `<owner>|<backend id>`. A holder whose lease end has passed holds nothing.
      const keys = admin.keysFor(key);
      const [value, queued, [seconds, micros]] = await Promise.all([admin.client.get(keys.lock), admin.client.zrange(keys.queue, 0, -1), admin.client.time()]);
      const [holder, , ends] = (value ?? '').split('|');
      const live = holder && (ends === undefined || Number(ends) > Number(seconds) * 1000 + Number(micros) / 1000);
      return [...(live ? [holder] : []), ...queued.map((member) => member.slice(0, member.lastIndexOf('|')))];
    },
    async loseClaim(key) {
      await admin.client.del(admin.keysFor(key).lock);
    },
    async inspectShared(key) {
      // Live claims only: an expired one is dropped by the next script that looks at the key.
      const keys = admin.sharedKeysFor(key);
      const [seconds, micros] = await admin.client.time();
      const nowMs = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
      const live = new Set(await admin.client.zrangebyscore(keys.queue, `(${nowMs}`, '+inf'));
      return (await admin.client.zrange(keys.lock, 0, -1)).filter((owner) => live.has(owner));
    },
    async loseSharedClaim(key, owner) {
      const keys = admin.sharedKeysFor(key);
      await admin.client.multi().zrem(keys.lock, owner).zrem(keys.queue, owner).hdel(keys.deadlines, owner).exec();
    },
    async dropConnection(backend: LockBackend) {
      const id = await (backend as RedisBackend).client.client('ID');
      await admin.client.client('KILL', 'ID', String(id));
    },
    restartServer: () => restartMatrixServer('redis'),
    async clearAll() {
      let cursor = '0';
      do {
        const [next, found] = await admin.client.scan(cursor, 'MATCH', 'deadbolt:*', 'COUNT', 1000);
        if (found.length) await admin.client.del(...found);
        cursor = next;
      } while (cursor !== '0');
    },
  };
}

import type { ConformanceHarness } from '@deadbolt/conformance';
import { restartMatrixServer } from '@deadbolt/conformance';
import { RedisBackend, redisBackend } from '@deadbolt/redis';
import type { LockBackend } from '@deadbolt/core';

/** Reads and breaks the store directly, through a backend of its own (for `keysFor`). */
export function redisHarness(url: string): ConformanceHarness {
  const admin = redisBackend({ url });
  return {
    async inspect(key) {
      const keys = admin.keysFor(key);
      const [holder, queued] = await Promise.all([admin.client.get(keys.lock), admin.client.zrange(keys.queue, 0, -1)]);
      return [...(holder ? [holder] : []), ...queued];
    },
    async loseClaim(key) {
      await admin.client.del(admin.keysFor(key).lock);
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

import type { ConformanceHarness } from '@deadbolt/conformance';
import { restartMatrixServer } from '@deadbolt/conformance';
import { etcdBackend } from '@deadbolt/etcd';

/** Reads and breaks the lock keys directly. */
export function etcdHarness(url: string): ConformanceHarness {
  const admin = etcdBackend({ url });
  return {
    async inspect(key) {
      const prefix = admin.prefixFor(key);
      const keys = await admin.client.getAll().prefix(prefix).sort('Create', 'Ascend').keys();
      return keys.map((k) => k.slice(prefix.length));
    },
    async loseClaim(key) {
      await admin.client.delete().prefix(admin.prefixFor(key)).exec();
    },
    async dropConnection() {
      // The lease is etcd's session: revoking it is what a lost client looks like to the store.
      const kvs = await admin.client.getAll().prefix('deadbolt/').exec();
      for (const kv of kvs.kvs) if (kv.lease !== '0') await admin.client.leaseClient.leaseRevoke({ ID: kv.lease }).catch(() => undefined);
    },
    restartServer: () => restartMatrixServer('etcd'),
    async clearAll() {
      await admin.client.delete().prefix('deadbolt/').exec();
    },
  };
}

import type { ConformanceHarness, ConformanceOptions } from '@deadbolt/conformance';
import { matrixUrl, matrixRestartHook, storeAddress, viaUrl, withCredentials } from '@deadbolt/conformance';
import { etcdBackend, etcdOptionRules } from '@deadbolt/etcd';
import { claimsOf, prefixFor } from '@deadbolt/etcd/testing';

/** Reads and breaks the lock keys directly, through a backend of its own. */
export function etcdHarness(url: string): ConformanceHarness {
  const admin = etcdBackend({ url });
  return {
    ...claimsOf(admin),
    async dropConnection(_backend, key) {
      // The lease is etcd's session: revoking it is what a lost client looks like to the store.
      // Only the key's claims: other suites may hold locks in this etcd meanwhile.
      const kvs = await admin.client.getAll().prefix(prefixFor(admin, key)).exec();
      for (const kv of kvs.kvs) if (kv.lease !== '0') await admin.client.leaseClient.leaseRevoke({ ID: kv.lease }).catch(() => undefined);
    },
    ...matrixRestartHook('etcd'),
  };
}

/** The shared suite's options for the test-matrix etcd (also one side of the migration suites). */
export function etcdSuiteOptions(): ConformanceOptions {
  const url = matrixUrl('etcd');
  return {
    name: 'etcd',
    createBackend: () => etcdBackend({ url }),
    createUnreachableBackend: () => etcdBackend({ url: 'etcd://127.0.0.1:1' }),
    network: { store: storeAddress(url), createBackend: (via, _all, extra) => etcdBackend({ url: viaUrl(url, via), ...extra }) },
    factory: {
      create: (options) => etcdBackend(options as never),
      rules: etcdOptionRules,
      valid: (address) => ({ url: viaUrl(url, address) }),
    },
    createBackendInOtherNamespace: () => etcdBackend({ url, namespace: 'deadbolt/other/' }),
    createBackendWithCredentials: (user, password, address) => etcdBackend({ url: withCredentials(url, user, password, address) }),
    child: { module: import.meta.resolve('@deadbolt/etcd'), export: 'etcdBackend', options: { url } },
    fence: { module: import.meta.resolve('@deadbolt/etcd'), export: 'etcdFence', options: { url } },
    harness: etcdHarness(url),
  };
}

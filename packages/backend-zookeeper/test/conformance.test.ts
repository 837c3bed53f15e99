import { defineConformanceSuite, matrixUrl, storeAddress, viaUrl } from '@deadbolt/conformance';
import { zookeeperBackend } from '@deadbolt/zookeeper';
import { zookeeperHarness } from './harness.js';

const url = matrixUrl('zookeeper');

defineConformanceSuite({
  name: 'zookeeper',
  createBackend: () => zookeeperBackend({ url }),
  createUnreachableBackend: () => zookeeperBackend({ url: 'zookeeper://127.0.0.1:1', connectTimeoutMs: 2000 }),
  network: { store: storeAddress(url), createBackend: (via) => zookeeperBackend({ url: viaUrl(url, via) }) },
  child: { module: import.meta.resolve('@deadbolt/zookeeper'), export: 'zookeeperBackend', options: { url } },
  harness: zookeeperHarness(url),
  // Sessions of 1 s leave little room on a busy two-core machine: 2 s keeps the tests about leases.
  ttlMs: 2000,
});

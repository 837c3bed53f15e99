import { defineConformanceSuite, matrixUrl, storeAddress, viaUrl } from '@deadbolt/conformance';
import { etcdBackend } from '@deadbolt/etcd';
import { etcdHarness } from './harness.js';

const url = matrixUrl('etcd');

defineConformanceSuite({
  name: 'etcd',
  createBackend: () => etcdBackend({ url }),
  createUnreachableBackend: () => etcdBackend({ url: 'etcd://127.0.0.1:1' }),
  network: { store: storeAddress(url), createBackend: (via) => etcdBackend({ url: viaUrl(url, via) }) },
  child: { module: import.meta.resolve('@deadbolt/etcd'), export: 'etcdBackend', options: { url } },
  harness: etcdHarness(url),
});

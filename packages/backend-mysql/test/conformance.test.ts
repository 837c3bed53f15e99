import { defineConformanceSuite, matrixUrl, storeAddress, viaUrl } from '@deadbolt/conformance';
import { mysqlBackend } from '@deadbolt/mysql';
import { mysqlHarness, poolInTimeZone } from './harness.js';

const url = matrixUrl('mysql');

for (const mode of ['lease', 'session'] as const) {
  defineConformanceSuite({
    name: mode === 'lease' ? 'mysql' : 'mysql (session)',
    createBackend: () => mysqlBackend({ url, mode }),
    createUnreachableBackend: () => mysqlBackend({ url: 'mysql://root@127.0.0.1:1/test', mode }),
    network: { store: storeAddress(url), createBackend: (via) => mysqlBackend({ url: viaUrl(url, via), mode }) },
    createBackendInTimeZone: (zone) => mysqlBackend({ pool: poolInTimeZone(url, zone), mode }),
    child: { module: import.meta.resolve('@deadbolt/mysql'), export: 'mysqlBackend', options: { url, mode } },
    harness: mysqlHarness(url, mode),
  });
}

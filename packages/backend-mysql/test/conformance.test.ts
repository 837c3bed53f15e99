import { defineConformanceSuite, matrixUrl } from '@deadbolt/conformance';
import { mysqlBackend } from '@deadbolt/mysql';
import { mysqlHarness } from './harness.js';

const url = matrixUrl('mysql');

for (const mode of ['lease', 'session'] as const) {
  defineConformanceSuite({
    name: mode === 'lease' ? 'mysql' : 'mysql (session)',
    createBackend: () => mysqlBackend({ url, mode }),
    createUnreachableBackend: () => mysqlBackend({ url: 'mysql://root@127.0.0.1:1/test', mode }),
    child: { module: import.meta.resolve('@deadbolt/mysql'), export: 'mysqlBackend', options: { url, mode } },
    harness: mysqlHarness(url, mode),
  });
}

import { defineConformanceSuite, matrixUrl } from '@deadbolt/conformance';
import { mysqlBackend } from '@deadbolt/mysql';
import { mysqlHarness } from './harness.js';

const url = matrixUrl('mysql');

defineConformanceSuite({
  name: 'mysql',
  createBackend: () => mysqlBackend({ url }),
  createUnreachableBackend: () => mysqlBackend({ url: 'mysql://root@127.0.0.1:1/test' }),
  child: { module: import.meta.resolve('@deadbolt/mysql'), export: 'mysqlBackend', options: { url } },
  harness: mysqlHarness(url),
});

import type { ConformanceHarness, ConformanceOptions } from '@deadbolt/conformance';
import { matrixUrl, matrixRestartHook, storeAddress, viaUrl, withCredentials } from '@deadbolt/conformance';
import type { LockBackend } from '@deadbolt/core';
import { mysqlBackend, mysqlOptionRules, type MysqlBackend } from '@deadbolt/mysql';
import { claimsOf, threadIds } from '@deadbolt/mysql/testing';
import { createPool, type Pool } from 'mysql2/promise';

/** Reads and breaks the lock tables directly, through a backend of its own in the same mode. */
export function mysqlHarness(url: string, mode: 'lease' | 'session' = 'lease', table = 'deadbolt_locks'): ConformanceHarness {
  const admin = mysqlBackend({ url, mode, table, connectionLimit: 2 });
  return {
    ...claimsOf(admin),
    async dropConnection(backend: LockBackend) {
      for (const id of threadIds(backend as MysqlBackend)) await admin.client.query('KILL ?', [id]).catch(() => undefined);
    },
    ...matrixRestartHook('mysql'),
  };
}

/**
 * A pool whose every connection runs in session time zone `zone`, as an application that sets
 * `time_zone` on its connections would (the query is queued before anything else on the connection).
 */
export function poolInTimeZone(url: string, zone: string): Pool {
  const pool = createPool({ uri: url, connectionLimit: 10, supportBigNumbers: true });
  pool.pool.on('connection', (connection) => void connection.query('SET time_zone = ?', [zone]));
  return pool;
}

/** The shared suite's options for the test-matrix MariaDB (also one side of the migration suites). */
export function mysqlSuiteOptions(mode: 'lease' | 'session' = 'lease'): ConformanceOptions {
  const url = matrixUrl('mysql');
  const child = (options: object = {}) => ({
    module: import.meta.resolve('@deadbolt/mysql'),
    export: 'mysqlBackend',
    options: { url, mode, ...options },
  });
  return {
    name: mode === 'lease' ? 'mysql' : 'mysql (session)',
    createBackend: () => mysqlBackend({ url, mode }),
    createUnreachableBackend: () => mysqlBackend({ url: 'mysql://root@127.0.0.1:1/test', mode }),
    network: { store: storeAddress(url), createBackend: (via, _all, extra) => mysqlBackend({ url: viaUrl(url, via), mode, ...extra }) },
    factory: {
      create: (options) => mysqlBackend(options as never),
      rules: mysqlOptionRules,
      valid: (address) => ({ url: viaUrl(url, address), mode }),
    },
    createBackendInOtherNamespace: () => mysqlBackend({ url, mode, namespace: 'deadbolt_other' }),
    createBackendWithCredentials: (user, password, address) => mysqlBackend({ url: withCredentials(url, user, password, address), mode }),
    createBackendInTimeZone: (zone) => mysqlBackend({ client: poolInTimeZone(url, zone), mode }),
    slowPollChild: (ms) => child({ maxPollDelayMs: ms }),
    child: child(),
    fence: { module: import.meta.resolve('@deadbolt/mysql'), export: 'mysqlFence', options: { url } },
    harness: mysqlHarness(url, mode),
  };
}

import type { Address, ConformanceHarness, ConformanceOptions } from '@deadbolt/conformance';
import { matrixUrl, matrixRestartHook, storeAddress, viaUrl, withCredentials } from '@deadbolt/conformance';
import type { LockBackend } from '@deadbolt/core';
import { postgresBackend, postgresOptionRules, type PostgresBackend } from '@deadbolt/postgres';
import { claimsOf, pids } from '@deadbolt/postgres/testing';
import pg from 'pg';

type Mode = 'lease' | 'session';

/**
 * Reads and breaks the lock tables directly (at `url`), through a backend of its own in the same
 * mode. `pooler`: the backends reach the server through this PgBouncer database URL instead, so
 * their connections are dropped there.
 */
export function postgresHarness(url: string, mode: Mode = 'lease', table = 'deadbolt_locks', pooler?: string): ConformanceHarness {
  const admin = postgresBackend({ url, mode, table, connectionLimit: 2 });
  return {
    ...claimsOf(admin),
    async dropConnection(backend: LockBackend) {
      // Behind PgBouncer the server's sessions are not the client's connections: PgBouncer's own
      // console drops every client of the database (only this suite's backends use it).
      if (pooler) return pgbouncerConsole(pooler, (db) => [`KILL ${db}`, `RESUME ${db}`]);
      for (const pid of pids(backend as PostgresBackend))
        await admin.client.query('SELECT pg_terminate_backend($1)', [pid]).catch(() => undefined);
    },
    ...matrixRestartHook('postgres'),
  };
}

/** Commands to the console of the PgBouncer serving database URL `pooler` (its `pgbouncer` database), given the database's name. */
export async function pgbouncerConsole(pooler: string, commands: (db: string) => string[]): Promise<void> {
  const at = new URL(pooler);
  const db = at.pathname.slice(1);
  at.pathname = '/pgbouncer';
  const console = new pg.Client({ connectionString: at.href });
  await console.connect();
  try {
    for (const command of commands(db)) await console.query(command);
  } finally {
    await console.end();
  }
}

/** A pool whose every connection runs in session time zone `zone`, as an application that sets `TimeZone` would. */
export function poolInTimeZone(url: string, zone: string): pg.Pool {
  return new pg.Pool({ connectionString: url, max: 10, options: `-c TimeZone=${zone}` });
}

/**
 * The shared suite's options for the test-matrix PostgreSQL; with `pooler`, for its backends
 * reaching it through that PgBouncer database URL (the harness still reads the server directly).
 * Through PgBouncer, the suite leaves out what PgBouncer decides itself: who may log in (it logs in
 * as its own user) and a connection's time zone (it drops the startup option that sets one); and
 * its backends re-check every 50 ms at most, as the README advises behind transaction pooling
 * (no notification reaches a waiter there: with the default 250 ms, behaviour 13b's 1000 hand-offs
 * took 119 s of its 120 on a slow day).
 */
export function postgresSuiteOptions(mode: Mode = 'lease', pooler?: string): ConformanceOptions {
  const direct = matrixUrl('postgres');
  const url = pooler ?? direct;
  const base = { mode, ...(pooler ? { maxPollDelayMs: 50 } : {}) };
  const child = (options: object = {}) => ({
    module: import.meta.resolve('@deadbolt/postgres'),
    export: 'postgresBackend',
    options: { url, ...base, ...options },
  });
  return {
    name: (mode === 'lease' ? 'postgres' : 'postgres (session)') + (pooler ? ' via PgBouncer' : ''),
    createBackend: () => postgresBackend({ url, ...base }),
    createUnreachableBackend: () => postgresBackend({ url: 'postgres://postgres@127.0.0.1:1/postgres', ...base }),
    network: {
      store: storeAddress(url),
      createBackend: (via, _all, extra) => postgresBackend({ url: viaUrl(url, via), ...base, ...extra }),
    },
    factory: {
      create: (options) => postgresBackend(options as never),
      rules: postgresOptionRules,
      valid: (address) => ({ url: viaUrl(url, address), ...base }),
    },
    createBackendInOtherNamespace: () => postgresBackend({ url, ...base, namespace: 'deadbolt_other' }),
    ...(pooler
      ? {}
      : {
          createBackendWithCredentials: (user: string, password: string, address: Address) =>
            postgresBackend({ url: withCredentials(url, user, password, address), mode }),
          createBackendInTimeZone: (zone: string) => postgresBackend({ client: poolInTimeZone(url, zone), mode }),
        }),
    slowPollChild: (ms) => child({ maxPollDelayMs: ms }),
    child: child(),
    fence: { module: import.meta.resolve('@deadbolt/postgres'), export: 'postgresFence', options: { url } },
    harness: postgresHarness(direct, mode, 'deadbolt_locks', pooler),
  };
}

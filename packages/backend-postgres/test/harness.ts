import type { Address, ConformanceHarness, ConformanceOptions } from '@deadbolt/conformance';
import { matrixUrl, matrixRestartHook, storeAddress, viaUrl, withCredentials } from '@deadbolt/conformance';
import type { LockBackend } from '@deadbolt/core';
import { PostgresBackend, postgresBackend, postgresOptionRules } from '@deadbolt/postgres';
import { pids } from '@deadbolt/postgres/testing';
import pg from 'pg';

type Mode = 'lease' | 'session';

/**
 * Reads and breaks the lock tables directly (at `url`). `pooler`: the backends reach the server
 * through this PgBouncer database URL instead, so their connections are dropped there.
 */
export function postgresHarness(url: string, mode: Mode = 'lease', table = 'deadbolt_locks', pooler?: string): ConformanceHarness {
  const admin = new pg.Pool({ connectionString: url, max: 2 });
  admin.on('error', () => undefined);
  const key = (k: string) => Buffer.from(k, 'utf8');
  /** Undefined-table errors (no table yet) count as "nothing there". */
  const query = async (text: string, params: unknown[] = []) => {
    try {
      return (await admin.query(text, params)).rows;
    } catch (error) {
      if ((error as { code?: string }).code === '42P01') return [];
      throw error;
    }
  };
  const common: Omit<ConformanceHarness, 'inspect' | 'loseClaim'> = {
    async dropConnection(backend: LockBackend) {
      // Behind PgBouncer the server's sessions are not the client's connections: PgBouncer's own
      // console drops every client of the database (only this suite's backends use it).
      if (pooler) return pgbouncerConsole(pooler, (db) => [`KILL ${db}`, `RESUME ${db}`]);
      for (const pid of pids(backend as PostgresBackend))
        await admin.query('SELECT pg_terminate_backend($1)', [pid]).catch(() => undefined);
    },
    ...matrixRestartHook('postgres'),
  };
  if (mode === 'session') {
    /** The server processes holding (granted) or waiting for the key's advisory lock. */
    const sessions = async (k: string) =>
      (await query(
        `SELECT l.pid, l.granted FROM pg_locks l JOIN "${table}" t ON l.objid = t.id::oid WHERE t.lock_key = $1 AND l.locktype = 'advisory' AND l.objsubid = 2`,
        [key(k)],
      )) as { pid: number; granted: boolean }[];
    const holder = async (k: string) => (await sessions(k)).find((s) => s.granted)?.pid;
    return {
      ...common,
      // The holder's owner id (from the key's row), then a name for each session waiting in the
      // server's own lock queue (the server does not say in which order; nor does it know owner ids).
      async inspect(k) {
        const found = await sessions(k);
        const owners = found.some((s) => s.granted)
          ? (await query(`SELECT owner FROM "${table}" WHERE lock_key = $1`, [key(k)])).map((r) => String(r.owner))
          : [];
        return [...owners, ...found.filter((s) => !s.granted).map((s) => `waiting session ${s.pid}`)];
      },
      async loseClaim(k) {
        const pid = await holder(k);
        if (pid !== undefined) await admin.query('SELECT pg_terminate_backend($1)', [pid]);
      },
    };
  }
  return {
    ...common,
    async inspectShared(k) {
      const rows = await query(
        `SELECT owner FROM "${table}_shared" WHERE lock_key = $1 AND expires_at > clock_timestamp() ORDER BY token`,
        [key(k)],
      );
      return rows.map((r) => String(r.owner));
    },
    async loseSharedClaim(k, owner) {
      await query(`DELETE FROM "${table}_shared" WHERE lock_key = $1 AND owner = $2`, [key(k), owner]);
    },
    async inspect(k) {
      const rows = await query(
        `SELECT owner FROM "${table}" WHERE lock_key = $1 AND owner IS NOT NULL AND expires_at > clock_timestamp()
         UNION ALL SELECT owner FROM (SELECT owner FROM "${table}_waiters" WHERE lock_key = $1 AND expires_at > clock_timestamp() ORDER BY arrival) w`,
        [key(k)],
      );
      return rows.map((r) => String(r.owner));
    },
    async loseClaim(k) {
      await query(`UPDATE "${table}" SET owner = NULL, expires_at = NULL WHERE lock_key = $1`, [key(k)]);
    },
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
    createBackendInOtherNamespace: () => postgresBackend({ url, ...base, table: 'deadbolt_other' }),
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

import { InvalidArgumentError, type Capabilities, type LockBackend } from '@deadbolt/core';
import { readOptions, rules, storeClient, type KeySpace, type LeaseEngine, type Rules, type StoreView } from '@deadbolt/core/backend';
import { claimOfRow, SessionLocks, SqlBackend, sharedViewOfRows } from '@deadbolt/core/sql';
import { TestingHooks } from '@deadbolt/core/testing';
import { createPool, type Pool, type PoolConnection } from 'mysql2/promise';
import { MysqlLeases, type MysqlRowLease } from './lease.js';
import { MysqlSessions, type MysqlSessionLease } from './session.js';
import { MysqlStore } from './store.js';

/** Options of `mysqlBackend`: where the store is (a URL or a client of yours) and how to use it. Unknown names and bad values are `InvalidArgumentError` before any connection. */
export interface MysqlBackendOptions {
  /** `mysql://user[:password]@host:port/database`. The backend creates (and closes) its own pool. */
  url?: string;
  /** Your own mysql2/promise pool; `close()` leaves it open. Used instead of `url`. */
  client?: Pool;
  /**
   * What keeps this backend's locks apart from another's in the same database: the lock table's
   * name (created if absent; the shared-claim tables add `_shared_keys` and `_shared`, and session
   * mode's lock names are made from it). Default `deadbolt_locks`.
   */
  namespace?: string;
  /** Another name for `namespace` (MySQL's word for it); give one of the two. */
  table?: string;
  /** Longest pause between a waiter's re-checks. Default 250 ms. */
  maxPollDelayMs?: number;
  /** Connect timeout for a pool created from `url` (a session-mode waiter rides out failures to get a connection for twice this). Default 2000 ms. */
  connectTimeoutMs?: number;
  /**
   * `lease` (default): rows with a server-clock expiry. `session`: a named lock (`GET_LOCK`) held by
   * a dedicated connection, released by the server when that connection dies or stays idle longer
   * than the ttl. Do not mix modes on one key.
   */
  mode?: 'lease' | 'session';
  /** Connections of a pool created from `url`. Session mode holds one per held lock and per waiter. Default 10 (lease), 200 (session). */
  connectionLimit?: number;
  /**
   * The longest one statement may wait for its answer (a `GET_LOCK` wait excepted). A statement
   * that gets none (a silent server or partition) fails with `BackendUnavailableError` and its
   * connection is destroyed, never reused. Default 5000 ms.
   */
  commandTimeoutMs?: number;
}

/** A lease of either mode: a row or shared claim (lease mode), or a session's named lock. */
export type MysqlLease = MysqlRowLease | MysqlSessionLease;

// The backend adds `_shared_keys` (12 characters) for its own tables; MySQL names stop at 64.
const tableRule = rules.text(/^[A-Za-z_][A-Za-z0-9_]{0,51}$/, 'a plain identifier (letters, digits, _; at most 52 characters)', [
  '',
  '1abc',
  'a-b',
  'x'.repeat(53),
  'a;DROP',
]);

/** How each option of `mysqlBackend` is checked (see core's options.ts); the conformance suite feeds it hostile values. */
export const mysqlOptionRules = {
  url: rules.url(['mysql']),
  client: rules.instance(
    (v): v is Pool => typeof (v as Pool | null)?.getConnection === 'function' && typeof (v as Pool).query === 'function',
    'a mysql2/promise Pool',
  ),
  namespace: tableRule,
  table: rules.alias('namespace', tableRule),
  maxPollDelayMs: rules.ms(),
  connectTimeoutMs: rules.ms(),
  mode: rules.oneOf(['lease', 'session']),
  connectionLimit: rules.count(1, 100_000),
  commandTimeoutMs: rules.ms(),
} satisfies Rules<MysqlBackendOptions>;

/** Each backend's store, for `@deadbolt/mysql/testing` (testing.ts): not part of the backend's API. */
export const storeOf = new TestingHooks<MysqlBackend, MysqlStore>('a MysqlBackend');

/** What the backend promises in each mode. */
const capabilities = {
  lease: {
    fairness: 'none',
    lease: 'ttl',
    wake: 'poll',
    minToken: true,
    semaphore: true,
    readWrite: true,
  },
  // wait_timeout is in whole seconds; a waiter blocks inside GET_LOCK and wakes when the lock frees.
  // The server queues a name's waiters in arrival order and hands a freed lock to the first (its
  // metadata-lock queue appends each waiter at the back): FIFO, checked by 13a/13b.
  session: { fairness: 'fifo', lease: 'session', wake: 'push', minTtlMs: 1000, ttlGranularityMs: 1000, minToken: true },
} satisfies Record<'lease' | 'session', Capabilities>;

/**
 * MySQL / MariaDB lease backend. One row per key holds the owner, the lease end by the server's
 * clock, and the fencing counter; acquire, renew and release are one statement each (two on a
 * key's first use). Waiters poll with core's jittered backoff and are woken at once by releases
 * in the same process. Session mode (`GET_LOCK` on a connection per lock) waits in the server
 * instead, first come first served.
 */
export class MysqlBackend extends SqlBackend<Pool, MysqlLease, MysqlStore> implements LockBackend<MysqlLease> {
  protected readonly engine: LeaseEngine<MysqlLease>;
  protected readonly sessions: SessionLocks<PoolConnection, string> | undefined;

  /** @throws InvalidArgumentError for bad options (before connecting). */
  constructor(raw: MysqlBackendOptions) {
    const options = readOptions(raw, mysqlOptionRules, 'mysqlBackend');
    const mode = options.mode ?? 'lease';
    const commandTimeoutMs = options.commandTimeoutMs ?? 5000;
    const connectTimeoutMs = options.connectTimeoutMs ?? 2000;
    const connectionLimit = options.connectionLimit ?? (mode === 'session' ? 200 : 10);
    const connection = storeClient(options, 'mysqlBackend', 'mysql://user@host:port/db', (url) => {
      if (url.hosts.length !== 1) throw new InvalidArgumentError('url must name one MySQL server');
      return createPool({ uri: url.href, connectTimeout: connectTimeoutMs, connectionLimit, supportBigNumbers: true });
    });
    const store = new MysqlStore(connection.client, options.namespace ?? 'deadbolt_locks', commandTimeoutMs);
    super({ name: 'mysql', connection, commandTimeoutMs, mode, store, capabilities });
    storeOf.set(this, store);
    if (mode === 'lease') {
      const leases = new MysqlLeases(store, this.inFlight, options.maxPollDelayMs ?? 250);
      this.engine = leases;
      this.forceRelease = async (key, owner, space) => {
        await store.tables.run();
        return leases.releaseOwner(key, MysqlStore.hash(key), owner, space, 'force release');
      };
    } else {
      // A pool of your own: its size is not ours to know; mysql2's default is 10.
      const poolSize = connection.url ? connectionLimit : (this.client.pool.config.connectionLimit ?? 10);
      this.engine = this.sessions = new SessionLocks(new MysqlSessions(store, poolSize), 2 * connectTimeoutMs, commandTimeoutMs);
    }
  }

  /** SHA-256 of the key: the primary key, so any key of up to 1024 bytes fits and compares exactly. */
  static hash(key: string): Buffer {
    return MysqlStore.hash(key);
  }

  /**
   * `LockBackend.inspect`, one statement (the backend's first call of any kind makes its tables).
   * Lease mode keeps no queue (waiters poll): `null` waiters. Session mode: the holder is whoever
   * holds the key's named lock, shown with the owner and token its grant wrote to the key's row
   * (for the moment between a grant and that write, the previous holder's); its waiters wait inside
   * `GET_LOCK`, whose order the server does not show: `null`.
   */
  async inspect(key: string, space: KeySpace): Promise<StoreView> {
    const { store } = this;
    await store.tables.run();
    const [hash, keyBytes] = [MysqlStore.hash(key), Buffer.from(key, 'utf8')];
    if (space === 'shared') return sharedViewOfRows(await store.rows('inspect', store.sql.inspectShared, [hash]));
    const [row] = this.sessions
      ? await store.rows('inspect', store.sql.inspectSession, [store.lockName(key), hash, keyBytes])
      : await store.rows('inspect', store.sql.inspect, [hash, keyBytes]);
    const holders = row?.['owner'] ? [claimOfRow(row)] : [];
    return { holders, waiters: null };
  }

  /**
   * See `LockBackend.forceRelease`: lease mode runs the release statement for `owner`. Session mode
   * has none: its locks are named locks of server sessions, which only their own session can free.
   */
  readonly forceRelease: LockBackend['forceRelease'];
}

/**
 * A MySQL / MariaDB backend. @throws InvalidArgumentError for bad options; store failures surface
 * as BackendUnavailableError / BackendError from the Locker's calls.
 */
export function mysqlBackend(options: MysqlBackendOptions): MysqlBackend {
  return new MysqlBackend(options);
}

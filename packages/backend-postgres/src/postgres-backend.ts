import { createHash } from 'node:crypto';
import { InvalidArgumentError, type Capabilities, type LockBackend } from '@deadbolt/core';
import {
  readOptions,
  rules,
  storeClient,
  type KeySpace,
  type LeaseEngine,
  type Rule,
  type Rules,
  type StoreView,
} from '@deadbolt/core/backend';
import { claimOfRow, SessionLocks, SqlBackend, sharedViewOfRows } from '@deadbolt/core/sql';
import { TestingHooks } from '@deadbolt/core/testing';
import pg, { type Pool, type PoolClient } from 'pg';
import { PostgresLeases, type PostgresRowLease } from './lease.js';
import { PostgresSessions, type PostgresSessionLease } from './session.js';
import { PostgresStore } from './store.js';

/** Options of `postgresBackend`: where the store is (a URL or a client of yours) and how to use it. Unknown names and bad values are `InvalidArgumentError` before any connection. */
export interface PostgresBackendOptions {
  /** `postgres://user[:password]@host:port/database`. The backend creates (and closes) its own pool. */
  url?: string;
  /** Your own `pg` Pool; `close()` leaves it open. Used instead of `url`. */
  client?: Pool;
  /**
   * What keeps this backend's locks apart from another's in the same database: the lock table's
   * name (created if absent, with `<table>_waiters`, `<table>_shared` and the like beside it).
   * Default `deadbolt_locks`.
   */
  namespace?: string;
  /** Another name for `namespace` (PostgreSQL's word for it); give one of the two. */
  table?: string;
  /**
   * `lease` (default): rows with a server-clock expiry, a FIFO queue and LISTEN/NOTIFY wake-up.
   * `session`: an advisory lock held by a dedicated connection, freed by the server when that
   * connection dies or stays idle longer than the ttl. Do not mix modes on one key.
   */
  mode?: 'lease' | 'session';
  /** The longest a waiter goes without re-checking, should a notification be lost. Default 250 ms. */
  maxPollDelayMs?: number;
  /** Connect timeout for a pool created from `url` (a session-mode waiter rides out failures to get a connection for twice this). Default 2000 ms. */
  connectTimeoutMs?: number;
  /** Connections of a pool created from `url`. Session mode holds one per held lock and per waiter. Default 10 (lease), 200 (session). */
  connectionLimit?: number;
  /**
   * The longest one statement may wait for its answer (a session-mode wait excepted). A statement
   * that gets none (a silent server or partition) fails with `BackendUnavailableError` and its
   * connection is destroyed, never reused. Default 5000 ms.
   */
  commandTimeoutMs?: number;
  /** Session mode: the first key of every advisory lock `(key1, key2)` (PostgreSQL calls it the lock's namespace). Default: derived from the table name. */
  advisoryNamespace?: number;
}

/** A lease of either mode: a row or shared claim (lease mode), or a session's advisory lock. */
export type PostgresLease = PostgresRowLease | PostgresSessionLease;

// The backend adds `_shared_acquire` and the like; PostgreSQL names stop at 63 bytes.
const tableRule = rules.text(/^[a-z_][a-z0-9_]{0,47}$/, 'a plain lower-case identifier (letters, digits, _; at most 48 characters)', [
  '',
  '1abc',
  'Locks',
  'a-b',
  'x'.repeat(49),
]);

/** A pg Pool (or a client with its API). */
const anyPool = rules.instance(
  (v): v is Pool =>
    v instanceof pg.Pool ||
    (typeof (v as Pool | null)?.connect === 'function' && typeof (v as Pool).query === 'function' && typeof (v as Pool).on === 'function'),
  'a pg Pool',
);
/**
 * A pg Pool of yours. A postgres.js instance (`postgres(url)`: a tagged-template function with
 * `unsafe` and `begin`) is told apart and refused with what to pass instead: this backend's
 * statements, listening connection and session locks are written on pg's connections.
 */
const poolRule: Rule<Pool> = {
  ...anyPool,
  check(value, name) {
    const sql = value as { unsafe?: unknown; begin?: unknown } | null;
    if (typeof value === 'function' && typeof sql?.unsafe === 'function' && typeof sql.begin === 'function')
      throw new InvalidArgumentError(
        `${name} is a postgres.js instance, which this backend does not take yet: pass a pg Pool, or a url (the backend then opens a pool of its own)`,
      );
    return anyPool.check(value, name);
  },
};

/** How each option of `postgresBackend` is checked (see core's options.ts); the conformance suite feeds it hostile values. */
export const postgresOptionRules = {
  url: rules.url(['postgres', 'postgresql'], true),
  client: poolRule,
  namespace: tableRule,
  table: rules.alias('namespace', tableRule),
  mode: rules.oneOf(['lease', 'session']),
  maxPollDelayMs: rules.ms(),
  connectTimeoutMs: rules.ms(),
  connectionLimit: rules.count(1, 100_000),
  commandTimeoutMs: rules.ms(),
  advisoryNamespace: rules.count(0, 0x7fffffff),
} satisfies Rules<PostgresBackendOptions>;

/** What the backend promises in each mode. */
const capabilities = {
  lease: {
    fairness: 'fifo',
    lease: 'ttl',
    wake: 'push',
    minToken: true,
    semaphore: true,
    readWrite: true,
  },
  // idle_session_timeout is an int of ms; the server's lock manager queues waiters in order.
  session: { fairness: 'fifo', lease: 'session', wake: 'push', minTtlMs: 1000, maxTtlMs: 2 ** 31 - 1, minToken: true },
} satisfies Record<'lease' | 'session', Capabilities>;

/** Each backend's store, for `@deadbolt/postgres/testing` (testing.ts): not part of the backend's API. */
export const storeOf = new TestingHooks<PostgresBackend, PostgresStore>('a PostgresBackend');

/**
 * PostgreSQL backend.
 *
 * Lease mode: one row per key holds the owner, the lease end by the server's clock and the fencing
 * counter; a queue table keeps waiters in arrival order. Acquire, renew and release are one
 * statement each. A release notifies (LISTEN/NOTIFY, one listening connection per backend) the
 * head of the queue by name, and only when someone waits; waiters re-check on a bounded backoff in
 * case a notification is lost.
 *
 * Session mode: `pg_advisory_lock(namespace, id)` on a connection of its own, `id` the key's row id
 * (unique per key: no two keys share a lock, however long); the server frees the lock when the
 * connection dies or stays idle past the ttl (`idle_session_timeout`).
 */
export class PostgresBackend extends SqlBackend<Pool, PostgresLease, PostgresStore> implements LockBackend<PostgresLease> {
  protected readonly engine: LeaseEngine<PostgresLease>;
  protected readonly sessions: SessionLocks<PoolClient, number> | undefined;
  /** Lease mode's engine (undefined in session mode): close() ends its listening connection. */
  readonly #leases: PostgresLeases | undefined;

  /** @throws InvalidArgumentError for bad options (before connecting). */
  constructor(raw: PostgresBackendOptions) {
    const options = readOptions(raw, postgresOptionRules, 'postgresBackend');
    const table = options.namespace ?? 'deadbolt_locks';
    const mode = options.mode ?? 'lease';
    const commandTimeoutMs = options.commandTimeoutMs ?? 5000;
    const connectTimeoutMs = options.connectTimeoutMs ?? 2000;
    const connection = storeClient(options, 'postgresBackend', 'postgres://user@host:port/db', (url) => {
      if (url.hosts.length > 1) throw new InvalidArgumentError('url must name one PostgreSQL server');
      return new pg.Pool({
        connectionString: url.href,
        connectionTimeoutMillis: connectTimeoutMs,
        max: options.connectionLimit ?? (mode === 'session' ? 200 : 10),
        // TCP keep-alive probes find a peer that vanished without closing the socket.
        keepAlive: true,
      });
    });
    // Advisory locks are per database; the table names their namespace within it.
    const namespace = options.advisoryNamespace ?? createHash('sha256').update(table).digest().readUInt32BE(0) & 0x7fffffff;
    const store = new PostgresStore(connection.client, table, namespace, commandTimeoutMs);
    super({ name: 'postgres', connection, commandTimeoutMs, mode, store, capabilities });
    storeOf.set(this, store);
    if (mode === 'lease') {
      const leases = (this.#leases = new PostgresLeases(store, this.inFlight, options.maxPollDelayMs ?? 250));
      this.engine = leases;
      this.forceRelease = async (key, owner, space) => {
        await store.tables.run();
        return leases.releaseOwner(Buffer.from(key, 'utf8'), owner, space, 'force release');
      };
    } else {
      this.engine = this.sessions = new SessionLocks(new PostgresSessions(store), 2 * connectTimeoutMs, commandTimeoutMs);
    }
  }

  /**
   * `LockBackend.inspect`, one statement (the backend's first call of any kind makes its tables).
   * Session mode: the holder is whoever holds the key's advisory lock, shown with the owner and
   * token its grant wrote to the key's row (for the moment between a grant and that write, the
   * previous holder's); its waiters queue in the server's lock manager, which does not show their
   * order: `null`.
   */
  async inspect(key: string, space: KeySpace): Promise<StoreView> {
    const keyBytes = Buffer.from(key, 'utf8');
    const { store } = this;
    await store.tables.run();
    if (this.sessions) {
      const [row] = await store.rows('inspect', store.sql.inspectSession, [keyBytes, store.namespace]);
      return { holders: row?.['owner'] ? [claimOfRow(row)] : [], waiters: null };
    }
    if (space === 'shared') return sharedViewOfRows(await store.rows('inspect', store.sql.inspectShared, [keyBytes]));
    const rows = await store.rows('inspect', store.sql.inspect, [keyBytes]);
    return { holders: rows.filter((r) => !r['waiting']).map(claimOfRow), waiters: rows.filter((r) => r['waiting']).map(claimOfRow) };
  }

  /**
   * See `LockBackend.forceRelease`: lease mode runs the release statement for `owner` (which
   * notifies the waiters). Session mode has none: its locks are advisory locks of server sessions,
   * which only their own session can free (ending that session, `pg_terminate_backend`, frees them).
   */
  readonly forceRelease: LockBackend['forceRelease'];

  /** Ends the listening connection, then what every SQL backend ends. */
  protected override async closeStore(): Promise<void> {
    await this.#leases?.close();
    await super.closeStore();
  }
}

/**
 * A PostgreSQL backend. @throws InvalidArgumentError for bad options; store failures surface as
 * BackendUnavailableError / BackendError from the Locker's calls.
 */
export function postgresBackend(options: PostgresBackendOptions): PostgresBackend {
  return new PostgresBackend(options);
}

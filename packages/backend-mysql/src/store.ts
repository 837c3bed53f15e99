// The server as both lock modes see it: the pool, one statement bounded by the command timeout,
// a transaction under a key's row lock, the tables, and how a failure is told apart (the
// connection, or the server refusing a statement).
import { createHash } from 'node:crypto';
import { BackendError, BackendUnavailableError, DeadboltError } from '@deadbolt/core';
import { answerWithin, backendFailure, Once } from '@deadbolt/core/backend';
import { StrandedConnections, type SqlStore } from '@deadbolt/core/sql';
import { escapeId, type Pool, type PoolConnection, type ResultSetHeader, type RowDataPacket } from 'mysql2/promise';
import * as queries from './queries.js';

/** Every statement of queries.ts with this backend's table names in place. */
export type Statements = Record<keyof typeof queries, string>;

/** Server error numbers that mean the connection, not the statement, failed. */
const UNAVAILABLE_ERRNOS = new Set([1040, 1053, 2002, 2003, 2006, 2013, 1927]);

/** Server errors after which a statement is simply sent again: a deadlock or lock wait timeout rolled it back whole. */
const RETRY_ERRNOS = new Set([1205, 1213]);

/** Whether `error` (typed or raw) is a deadlock or lock wait timeout: rolled back whole. */
export function rolledBack(error: unknown): boolean {
  const e = error as { errno?: number; cause?: { errno?: number } };
  return RETRY_ERRNOS.has(e.cause?.errno ?? e.errno ?? 0);
}

/** The lock table, the shared-claim tables and the pool's connections of one backend (`SqlStore` for `SqlBackend`). */
export class MysqlStore implements SqlStore {
  readonly name = 'mysql';
  /** The row that keeps the store's token floor: the empty key's hash (no key is empty). */
  readonly floorRow = [createHash('sha256').update('').digest()];
  readonly client: Pool;
  readonly sql: Statements;
  /** Server thread ids of the pool's open connections (for diagnostics and fault tests). */
  readonly threadIds = new Set<number>();
  readonly #commandTimeoutMs: number;
  /** The lock table's name, as given (its shared-claim tables add `_shared_keys` and `_shared`). */
  readonly table: string;
  /** Threads of the connections checked out of the pool now (the rest of `threadIds` are idle). */
  readonly #busy = new Set<number>();
  /** Connections destroyed after a timeout or a connection error: never handed back to the pool. */
  readonly #broken = new WeakSet<PoolConnection>();
  /** Idle connections that sat through a silence are dropped when taken (the mysql2 pool wraps each checkout anew). */
  readonly #stranded = new StrandedConnections<PoolConnection>((c) => c.connection);
  /**
   * What every named lock of this backend is named after, besides its key: the database and
   * table. Named locks are server-wide, so two applications (or the two sides of a migration) on
   * one server with other tables must not share them. Read once, with the tables.
   */
  #lockSpace: string | undefined;
  /** The tables, and the lock-name space (which needs the database's name): once, again after a failure. */
  readonly tables = new Once(async () => {
    await Promise.all([
      this.run('create table', this.sql.createTable, []),
      this.run('create table', this.sql.createSharedKeys, []),
      this.run('create table', this.sql.createSharedClaims, []),
      this.run<RowDataPacket[]>('create table', this.sql.database, []).then((rows) => {
        this.#lockSpace = `${String(rows[0]?.['db'] ?? '')}\0${this.table}\0`;
      }),
    ]);
  });

  constructor(client: Pool, table: string, commandTimeoutMs: number) {
    this.client = client;
    this.table = table;
    this.#commandTimeoutMs = commandTimeoutMs;
    const names: Record<string, string> = {
      keys: escapeId(`${table}_shared_keys`),
      claims: escapeId(`${table}_shared`),
    };
    const id = escapeId(table);
    this.sql = Object.fromEntries(
      Object.entries(queries).map(([k, text]) => [k, text.replace('??', id).replace(/\{(keys|claims)\}/g, (_, n: string) => names[n]!)]),
    ) as Statements;
    // Track connections, so a fault test can KILL exactly this backend's ones and session mode
    // knows when the pool has none idle.
    client.pool.on('connection', (conn) => {
      const thread = conn.threadId;
      this.threadIds.add(thread);
      const forget = () => (this.threadIds.delete(thread), this.#busy.delete(thread));
      conn.on('end', forget);
      conn.on('error', forget);
    });
    client.pool.on('acquire', (conn) => this.#busy.add(conn.threadId));
    client.pool.on('release', (conn) => this.#busy.delete(conn.threadId));
  }

  /** How many of the pool's open connections are idle now. */
  idleConnections(): number {
    return Math.max(0, this.threadIds.size - this.#busy.size);
  }

  /** SHA-256 of the key: the primary key, so any key of up to 1024 bytes fits and compares exactly. */
  static hash(key: string): Buffer {
    return createHash('sha256').update(key).digest();
  }

  /**
   * The `GET_LOCK` name of a key: a digest of this backend's database, table and the key (the
   * server caps names at 64 characters, and they are server-wide). After the tables are ready only.
   */
  lockName(key: string): string {
    if (this.#lockSpace === undefined)
      throw new BackendError(this.name, 'lock name', { cause: new Error('the backend has not reached its server yet') });
    return `deadbolt:${createHash('sha256').update(this.#lockSpace).update(key).digest('base64url')}`;
  }

  /** A connection from the pool, past any that may have been stranded (`StrandedConnections`). */
  connection(): Promise<PoolConnection> {
    return this.#stranded.take(
      () => this.client.getConnection(),
      (connection) => connection.destroy(),
    );
  }

  /** A connection from the pool, bounded by two command timeouts (a pool whose connections all hang waits here). @throws typed errors */
  async #bounded(operation: string): Promise<PoolConnection> {
    try {
      return await answerWithin(this.connection(), 2 * this.#commandTimeoutMs, this.name, 'connect', {
        onLate: (late) => late.release(),
      });
    } catch (error) {
      throw this.error(operation, error);
    }
  }

  /** Back to the pool; with `error`, destroyed instead (the server frees every named lock it held). */
  giveBack(connection: PoolConnection, error?: unknown): void {
    if (this.#broken.has(connection)) return;
    if (error === undefined) connection.release();
    else connection.destroy();
  }

  /** One statement on a pooled connection, bounded by the command timeout. @throws typed errors */
  async run<T extends ResultSetHeader | RowDataPacket[] = ResultSetHeader>(
    operation: string,
    statement: string,
    params: unknown[],
  ): Promise<T> {
    const connection = await this.#bounded(operation);
    try {
      const result = await this.on<T>(connection, statement, params);
      connection.release();
      return result;
    } catch (error) {
      if (!this.#broken.has(connection)) connection.release();
      throw this.error(operation, error);
    }
  }

  /** `run` for a statement's rows (none for a statement that returns none). @throws typed errors */
  async rows(operation: string, statement: string, params: unknown[]): Promise<RowDataPacket[]> {
    const result = await this.run<RowDataPacket[] | ResultSetHeader>(operation, statement, params);
    return Array.isArray(result) ? result : [];
  }

  /**
   * `run` for a statement on one claim row that InnoDB may pick as a deadlock victim against a
   * key's attempt transaction (it locks the row's index entries in another order): the statement
   * was rolled back whole, so it is simply sent again, a few times.
   */
  async runRetried(operation: string, statement: string, params: unknown[]): Promise<ResultSetHeader> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.run(operation, statement, params);
      } catch (error) {
        if (attempt >= 5 || !rolledBack(error)) throw error;
      }
    }
  }

  /**
   * One statement on `connection`, bounded by the command timeout; the raw error if it fails. A
   * connection that times out or fails as a connection is destroyed: its late answer must never be
   * read as another statement's.
   */
  async on<T extends ResultSetHeader | RowDataPacket[] = ResultSetHeader>(
    connection: PoolConnection,
    statement: string,
    params: unknown[],
  ): Promise<T> {
    // `SET` and transaction control cannot be prepared: they go as text.
    const sentAt = performance.now();
    const sent = /^(SET|START|COMMIT|ROLLBACK)\b/.test(statement)
      ? connection.query<T>(statement, params)
      : connection.execute<T>(statement, params as never[]);
    try {
      const [result] = await answerWithin(sent, this.#commandTimeoutMs, this.name, 'statement', {
        onSilent: () => this.#stranded.silent(sentAt),
      });
      this.#stranded.answered(connection);
      return result;
    } catch (error) {
      if (this.unavailable(error)) {
        this.#broken.add(connection);
        connection.destroy();
      }
      throw error;
    }
  }

  /**
   * `body` in one READ COMMITTED transaction that first locks the shared key's row (so a key's
   * transactions run one at a time, and each statement sees every claim committed before it),
   * committed or rolled back as `body` says. @throws the typed error of any failure (rolled back).
   */
  async keyTransaction<T>(
    operation: string,
    hash: Buffer,
    body: (connection: PoolConnection, storedLimit: number) => Promise<{ commit: boolean; value: T }>,
  ): Promise<T> {
    const connection = await this.#bounded(operation);
    let open = false;
    try {
      await this.on(connection, 'SET TRANSACTION ISOLATION LEVEL READ COMMITTED', []);
      await this.on(connection, 'START TRANSACTION', []);
      open = true;
      const row = (await this.on<RowDataPacket[]>(connection, this.sql.sharedLockKey, [hash]))[0];
      const { commit, value } = await body(connection, Number(row?.['claim_limit'] ?? -1));
      await this.on(connection, commit ? 'COMMIT' : 'ROLLBACK', []);
      open = false;
      return value;
    } catch (error) {
      if (open && !this.#broken.has(connection)) await connection.query('ROLLBACK').catch(() => undefined);
      throw this.error(operation, error);
    } finally {
      if (!this.#broken.has(connection)) connection.release();
    }
  }

  /** A connection failure (or no answer) rather than the server refusing a statement. */
  unavailable(error: unknown): boolean {
    if (error instanceof BackendUnavailableError) return true;
    if (error instanceof DeadboltError) return false;
    const e = error as { errno?: number; sqlState?: string; fatal?: boolean };
    return typeof e.sqlState !== 'string' || UNAVAILABLE_ERRNOS.has(e.errno ?? 0) || e.fatal === true;
  }

  /** The typed error for `error`, with it as the cause (a typed one as it is). */
  error(operation: string, error: unknown): Error {
    return backendFailure(this.name, operation, error, (e) => this.unavailable(e));
  }
}

import { createHash } from 'node:crypto';
import {
  BackendError,
  BackendUnavailableError,
  DeadboltError,
  InvalidArgumentError,
  pollForLease,
  ReleaseNotifier,
  type AcquireRequest,
  type Capabilities,
  type Lease,
  type LockBackend,
} from '@deadbolt/core';
import { createPool, escapeId, type Pool, type PoolConnection, type ResultSetHeader, type RowDataPacket } from 'mysql2/promise';
import * as sql from './queries.js';

export interface MysqlBackendOptions {
  /** `mysql://user[:password]@host:port/database`. The backend creates (and closes) its own pool. */
  url?: string;
  /** Your own mysql2/promise pool; `close()` leaves it open. Used instead of `url`. */
  pool?: Pool;
  /** Table name (created if absent). Default `deadbolt_locks`. */
  table?: string;
  /** Longest pause between a waiter's re-checks. Default 250 ms. */
  maxPollDelayMs?: number;
  /** Connect timeout for a pool created from `url`. Default 2000 ms. */
  connectTimeoutMs?: number;
  /**
   * `lease` (default): rows with a server-clock expiry. `session`: a named lock (`GET_LOCK`) held by
   * a dedicated connection, released by the server when that connection dies or stays idle longer
   * than the ttl. Do not mix modes on one key.
   */
  mode?: 'lease' | 'session';
  /** Connections of a pool created from `url`. Session mode holds one per held lock and per waiter. Default 10 (lease), 200 (session). */
  connectionLimit?: number;
}

const STATEMENTS = ['createTable', 'takeOver', 'insertFirst', 'renew', 'release', 'sessionToken', 'sessionTokenFirst'] as const;
type Statements = Record<(typeof STATEMENTS)[number], string>;

interface MysqlLease extends Lease {
  readonly hash: Buffer;
  /** Session mode: the connection holding the named lock, and the lock's name. */
  readonly connection?: PoolConnection;
  readonly lockName?: string;
}

/** Server error numbers that mean the connection, not the statement, failed. */
const UNAVAILABLE_ERRNOS = new Set([1040, 1053, 2002, 2003, 2006, 2013, 1927]);

/**
 * MySQL / MariaDB lease backend. One row per key holds the owner, the lease end by the server's
 * clock, and the fencing counter; acquire, renew and release are one statement each (two on a
 * key's first use). Waiters poll with core's jittered backoff and are woken at once by releases
 * in the same process.
 */
export class MysqlBackend implements LockBackend {
  readonly name = 'mysql';
  readonly capabilities: Capabilities;
  readonly mode: 'lease' | 'session';
  readonly pool: Pool;
  /** Server thread ids of this backend's open connections (for diagnostics and fault tests). */
  readonly threadIds = new Set<number>();
  readonly #ownsPool: boolean;
  readonly #maxPollDelayMs: number;
  readonly #notifier = new ReleaseNotifier();
  readonly #sql: Statements;
  #ready: Promise<void> | undefined;
  #closed = false;

  /** @throws InvalidArgumentError for bad options (before connecting). */
  constructor(options: MysqlBackendOptions) {
    const table = options.table ?? 'deadbolt_locks';
    if (typeof table !== 'string' || !/^[A-Za-z_][A-Za-z0-9_]{0,63}$/.test(table)) {
      throw new InvalidArgumentError('table must be a plain identifier (letters, digits, _; at most 64)');
    }
    const mode = options.mode ?? 'lease';
    if (mode !== 'lease' && mode !== 'session') throw new InvalidArgumentError("mode must be 'lease' or 'session'");
    this.mode = mode;
    this.capabilities =
      mode === 'lease'
        ? { fencing: 'strict', fairness: 'none', lease: 'ttl', wake: 'poll', minTtlMs: 1, ttlGranularityMs: 1, crossProcess: true }
        : // wait_timeout is in whole seconds; a waiter blocks inside GET_LOCK and wakes when the lock frees.
          { fencing: 'strict', fairness: 'none', lease: 'session', wake: 'push', minTtlMs: 1000, ttlGranularityMs: 1000, crossProcess: true };
    this.#maxPollDelayMs = options.maxPollDelayMs ?? 250;
    if (!Number.isFinite(this.#maxPollDelayMs) || this.#maxPollDelayMs < 1) throw new InvalidArgumentError('maxPollDelayMs must be a number ≥ 1');
    if (options.pool) {
      this.pool = options.pool;
      this.#ownsPool = false;
    } else {
      if (typeof options.url !== 'string' || !/^mysql:\/\//.test(options.url)) {
        throw new InvalidArgumentError('mysqlBackend needs a url (mysql://user@host:port/db) or a pool');
      }
      this.pool = createPool({
        uri: options.url,
        connectTimeout: options.connectTimeoutMs ?? 2000,
        connectionLimit: options.connectionLimit ?? (mode === 'session' ? 200 : 10),
        supportBigNumbers: true,
      });
      this.#ownsPool = true;
    }
    const id = escapeId(table);
    this.#sql = Object.fromEntries(STATEMENTS.map((k) => [k, sql[k].replace('??', id)])) as Statements;
    // Track connections so a fault test can KILL exactly this backend's ones.
    const core = (this.pool as unknown as { pool: { on(e: string, f: (c: { threadId: number; on(e: string, f: () => void): void }) => void): void } }).pool;
    core.on('connection', (conn) => {
      this.threadIds.add(conn.threadId);
      const forget = () => this.threadIds.delete(conn.threadId);
      conn.on('end', forget);
      conn.on('error', forget);
    });
  }

  /** SHA-256 of the key: the primary key, so any key of up to 1024 bytes fits and compares exactly. */
  static hash(key: string): Buffer {
    return createHash('sha256').update(key).digest();
  }

  /** The `GET_LOCK` name of a key in session mode (the server caps names at 64 characters). */
  static lockName(key: string): string {
    return `deadbolt:${MysqlBackend.hash(key).toString('base64url')}`;
  }

  async acquire(req: AcquireRequest): Promise<Lease | null> {
    await this.#ensureTable();
    const hash = MysqlBackend.hash(req.key);
    if (this.mode === 'session') return this.#acquireSession(req, hash);
    if (!req.wait) return this.#attempt(req, hash);
    return pollForLease(req.key, req.signal, () => this.#attempt(req, hash), (lease) => this.release(lease), {
      notifier: this.#notifier,
      maxDelayMs: Math.min(this.#maxPollDelayMs, Math.max(1, Math.floor(req.ttlMs / 4))),
    });
  }

  async renew(lease: Lease, ttlMs: number): Promise<boolean> {
    const { connection, lockName } = lease as MysqlLease;
    if (connection && lockName) {
      // Any statement resets the server's idle clock; this one also proves we still hold the lock.
      try {
        await connection.query(sql.sessionIdleLimit, [ttlMs / 1000]);
        const [rows] = await connection.execute<RowDataPacket[]>(sql.holdsLock, [lockName]);
        return rows[0]?.mine === 1;
      } catch (error) {
        if (this.#classify(error) === 'unavailable') return false; // the connection is gone, and the lock with it
        throw new BackendError(this.name, 'renew', { cause: error });
      }
    }
    const result = await this.#run('renew', this.#sql.renew, [ttlMs * 1000, (lease as MysqlLease).hash, lease.owner]);
    return result.affectedRows === 1;
  }

  async release(lease: Lease): Promise<void> {
    const { connection, lockName } = lease as MysqlLease;
    if (connection && lockName) return this.#releaseSession(connection, lockName, lease.key);
    const result = await this.#run('release', this.#sql.release, [(lease as MysqlLease).hash, lease.owner]);
    if (result.affectedRows === 1) this.#notifier.notify(lease.key);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#ownsPool) await this.pool.end().catch(() => undefined);
  }

  async #attempt(req: AcquireRequest, hash: Buffer): Promise<MysqlLease | null> {
    const acquiredAt = performance.now();
    const micros = req.ttlMs * 1000;
    const keyBytes = Buffer.from(req.key, 'utf8');
    let result = await this.#run('acquire', this.#sql.takeOver, [req.owner, micros, hash, keyBytes]);
    if (result.affectedRows !== 1) {
      try {
        result = await this.#run('acquire', this.#sql.insertFirst, [hash, keyBytes, req.owner, micros]);
      } catch (error) {
        if ((error as { cause?: { errno?: number } }).cause?.errno === 1062) return null; // the row exists: held
        throw error;
      }
    }
    return { key: req.key, owner: req.owner, token: BigInt(result.insertId), acquiredAt, hash };
  }

  async #acquireSession(req: AcquireRequest, hash: Buffer): Promise<MysqlLease | null> {
    const lockName = MysqlBackend.lockName(req.key);
    let connection: PoolConnection;
    try {
      connection = await this.pool.getConnection();
    } catch (error) {
      throw this.#wrap('acquire', error);
    }
    let held = false;
    try {
      await connection.query(sql.sessionIdleLimit, [req.ttlMs / 1000]);
      // A waiter blocks inside the server; aborting it is a KILL QUERY from another connection.
      const kill = () => void this.pool.query('KILL QUERY ?', [connection.threadId]).catch(() => undefined);
      if (req.wait) req.signal.addEventListener('abort', kill, { once: true });
      let got: unknown;
      try {
        const [rows] = await connection.execute<RowDataPacket[]>(sql.getLock, [lockName, req.wait ? 365 * 24 * 3600 : 0]);
        got = rows[0]?.got;
      } catch (error) {
        if (!req.signal.aborted) throw error;
      } finally {
        req.signal.removeEventListener('abort', kill);
      }
      held = got === 1;
      req.signal.throwIfAborted();
      if (!held) {
        if (req.wait) throw new BackendError(this.name, 'acquire', { cause: new Error(`GET_LOCK returned ${String(got)}`) });
        return null;
      }
      // The server's idle clock restarts with each statement: count the lease from this one.
      const acquiredAt = performance.now();
      const keyBytes = Buffer.from(req.key, 'utf8');
      let [result] = await connection.execute<ResultSetHeader>(this.#sql.sessionToken, [req.owner, hash, keyBytes]);
      if (result.affectedRows !== 1) [result] = await connection.execute<ResultSetHeader>(this.#sql.sessionTokenFirst, [hash, keyBytes, req.owner]);
      return { key: req.key, owner: req.owner, token: BigInt(result.insertId), acquiredAt, hash, connection, lockName };
    } catch (error) {
      await this.#releaseSession(connection, lockName, req.key, held).catch(() => undefined);
      if (req.signal.aborted) throw req.signal.reason;
      throw this.#wrap('acquire', error);
    }
  }

  /** Give the named lock back and return the connection to the pool as it was (or drop it if it broke). */
  async #releaseSession(connection: PoolConnection, lockName: string, key: string, held = true): Promise<void> {
    try {
      if (held) await connection.execute(sql.releaseLock, [lockName]);
      await connection.execute(sql.sessionIdleReset);
      connection.release();
      this.#notifier.notify(key);
    } catch (error) {
      connection.destroy(); // the server frees every named lock of a closed connection
      if (this.#classify(error) !== 'unavailable') throw new BackendError(this.name, 'release', { cause: error });
    }
  }

  #ensureTable(): Promise<void> {
    this.#ready ??= this.#run('create table', this.#sql.createTable, []).then(
      () => undefined,
      (error: unknown) => {
        this.#ready = undefined;
        throw error;
      },
    );
    return this.#ready;
  }

  async #run(operation: string, statement: string, params: unknown[]): Promise<ResultSetHeader> {
    try {
      const [result] = await this.pool.execute<ResultSetHeader>(statement, params as never[]);
      return result;
    } catch (error) {
      throw this.#wrap(operation, error);
    }
  }

  /** A server's answer to a statement, or the connection failing. */
  #classify(error: unknown): 'server' | 'unavailable' {
    const e = error as { errno?: number; sqlState?: string; fatal?: boolean };
    return typeof e.sqlState === 'string' && !UNAVAILABLE_ERRNOS.has(e.errno ?? 0) && !e.fatal ? 'server' : 'unavailable';
  }

  #wrap(operation: string, error: unknown): Error {
    if (error instanceof DeadboltError) return error;
    return this.#classify(error) === 'server'
      ? new BackendError(this.name, operation, { cause: error })
      : new BackendUnavailableError(this.name, operation, { cause: error });
  }
}

/**
 * A MySQL / MariaDB backend. @throws InvalidArgumentError for bad options; store failures surface
 * as BackendUnavailableError / BackendError from the Locker's calls.
 */
export function mysqlBackend(options: MysqlBackendOptions): MysqlBackend {
  return new MysqlBackend(options);
}

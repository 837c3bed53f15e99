import { createHash } from 'node:crypto';
import {
  BackendError,
  BackendUnavailableError,
  InvalidArgumentError,
  pollForLease,
  ReleaseNotifier,
  type AcquireRequest,
  type Capabilities,
  type Lease,
  type LockBackend,
} from '@deadbolt/core';
import { createPool, escapeId, type Pool, type ResultSetHeader } from 'mysql2/promise';
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
}

type Statements = Record<'createTable' | 'takeOver' | 'insertFirst' | 'renew' | 'release', string>;

interface MysqlLease extends Lease {
  readonly hash: Buffer;
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
  readonly capabilities: Capabilities = {
    fencing: 'strict',
    fairness: 'none',
    lease: 'ttl',
    wake: 'poll',
    minTtlMs: 1,
    ttlGranularityMs: 1,
    crossProcess: true,
  };
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
    this.#maxPollDelayMs = options.maxPollDelayMs ?? 250;
    if (!Number.isFinite(this.#maxPollDelayMs) || this.#maxPollDelayMs < 1) throw new InvalidArgumentError('maxPollDelayMs must be a number ≥ 1');
    if (options.pool) {
      this.pool = options.pool;
      this.#ownsPool = false;
    } else {
      if (typeof options.url !== 'string' || !/^mysql:\/\//.test(options.url)) {
        throw new InvalidArgumentError('mysqlBackend needs a url (mysql://user@host:port/db) or a pool');
      }
      this.pool = createPool({ uri: options.url, connectTimeout: options.connectTimeoutMs ?? 2000, connectionLimit: 10, supportBigNumbers: true });
      this.#ownsPool = true;
    }
    const id = escapeId(table);
    this.#sql = Object.fromEntries(
      (['createTable', 'takeOver', 'insertFirst', 'renew', 'release'] as const).map((k) => [k, sql[k].replace('??', id)]),
    ) as Statements;
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

  async acquire(req: AcquireRequest): Promise<Lease | null> {
    await this.#ensureTable();
    const hash = MysqlBackend.hash(req.key);
    if (!req.wait) return this.#attempt(req, hash);
    return pollForLease(req.key, req.signal, () => this.#attempt(req, hash), (lease) => this.release(lease), {
      notifier: this.#notifier,
      maxDelayMs: Math.min(this.#maxPollDelayMs, Math.max(1, Math.floor(req.ttlMs / 4))),
    });
  }

  async renew(lease: Lease, ttlMs: number): Promise<boolean> {
    const result = await this.#run('renew', this.#sql.renew, [ttlMs * 1000, (lease as MysqlLease).hash, lease.owner]);
    return result.affectedRows === 1;
  }

  async release(lease: Lease): Promise<void> {
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
      const e = error as { errno?: number; sqlState?: string; fatal?: boolean; code?: string };
      const serverError = typeof e.sqlState === 'string' && !UNAVAILABLE_ERRNOS.has(e.errno ?? 0);
      if (serverError && !e.fatal) throw new BackendError(this.name, operation, { cause: error });
      throw new BackendUnavailableError(this.name, operation, { cause: error });
    }
  }
}

/**
 * A MySQL / MariaDB backend. @throws InvalidArgumentError for bad options; store failures surface
 * as BackendUnavailableError / BackendError from the Locker's calls.
 */
export function mysqlBackend(options: MysqlBackendOptions): MysqlBackend {
  return new MysqlBackend(options);
}

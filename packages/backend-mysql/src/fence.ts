// Fenced writes in MySQL/MariaDB: a table of resources, each with the highest token it accepted. A
// write is one INSERT … ON DUPLICATE KEY UPDATE whose assignments keep the stored row when its
// token is above the new one; the row lock it takes (InnoDB) serializes writers until the
// transaction ends. The statement tells its caller which way it went through LAST_INSERT_ID(expr),
// which the server hands back in the statement's answer (its insert id: 1 accepted, 0 refused):
// affected-row counts cannot tell a refused write from an accepted one that changed nothing.
// `guard` runs the same statement inside a transaction of yours.
import { InvalidArgumentError, StaleTokenError, type FencedValue } from '@deadbolt/core';
import { answerWithin, Once, readOptions, rules, storeClient, StoreFence, type Rules } from '@deadbolt/core/backend';
import { checkFenceToken, fencedTransaction } from '@deadbolt/core/sql';
import {
  createPool,
  escapeId,
  type Connection,
  type Pool,
  type PoolConnection,
  type ResultSetHeader,
  type RowDataPacket,
} from 'mysql2/promise';
import { mysqlOptionRules } from './mysql-backend.js';
import { MysqlStore } from './store.js';

/** Options of `mysqlFence`: where the fenced resources are kept. Unknown names and bad values are `InvalidArgumentError` before any connection. */
export interface MysqlFenceOptions {
  /** `mysql://user[:password]@host:port/database`: the fence makes (and closes) a pool of its own. */
  url?: string;
  /** Your own mysql2/promise pool; `close()` leaves it open. Used instead of `url`. */
  client?: Pool;
  /** What keeps these fences apart from others in the same database: their table's name (created if absent). Default `deadbolt_fences`. */
  namespace?: string;
  /** Another name for `namespace` (MySQL's word for it); give one of the two. */
  table?: string;
  /** The longest one statement waits for its answer. Default 5000 ms. */
  commandTimeoutMs?: number;
}

const tableRule = rules.text(/^[A-Za-z_][A-Za-z0-9_]{0,63}$/, 'a plain identifier (letters, digits, _; at most 64 characters)', [
  '',
  '1abc',
  'a-b',
  'a;DROP',
]);

/** How each option of `mysqlFence` is checked. */
export const mysqlFenceOptionRules = {
  url: rules.url(['mysql']),
  client: mysqlOptionRules.client,
  namespace: tableRule,
  table: rules.alias('namespace', tableRule),
  commandTimeoutMs: rules.ms(),
} satisfies Rules<MysqlFenceOptions>;

/**
 * Values in MySQL/MariaDB guarded by fencing tokens (see core's `Fence`), and `guard` for writes
 * in your own transactions.
 */
export class MysqlFence extends StoreFence {
  readonly client: Pool;
  readonly #store: MysqlStore;
  readonly #commandTimeoutMs: number;
  readonly #sql: { create: string; write: string; guard: string; read: string };
  readonly #table: Once;

  /** @throws InvalidArgumentError for bad options (before connecting). */
  constructor(raw: MysqlFenceOptions) {
    super('mysql');
    const options = readOptions(raw, mysqlFenceOptionRules, 'mysqlFence');
    const connection = storeClient(options, 'mysqlFence', 'mysql://user@host:port/db', (url) => {
      if (url.hosts.length !== 1) throw new InvalidArgumentError('url must name one MySQL server');
      return createPool({ uri: url.href, connectionLimit: 10, supportBigNumbers: true });
    });
    this.client = connection.client;
    this.closes(() => connection.end((pool) => pool.end()));
    this.#commandTimeoutMs = options.commandTimeoutMs ?? 5000;
    this.#store = new MysqlStore(this.client, 'deadbolt_locks', this.#commandTimeoutMs);
    const table = escapeId(options.namespace ?? 'deadbolt_fences');
    // `accepted` only carries the verdict: the assignments run left to right, so it and `value`
    // compare against the stored token before `token` itself changes.
    const upsert = (value: boolean) =>
      `INSERT INTO ${table} (resource, token, ${value ? 'value, ' : ''}accepted) VALUES (?, ?, ${value ? '?, ' : ''}LAST_INSERT_ID(1))
       ON DUPLICATE KEY UPDATE accepted = LAST_INSERT_ID(VALUES(token) >= token),
       ${value ? 'value = IF(VALUES(token) >= token, VALUES(value), value), ' : ''}token = GREATEST(token, VALUES(token))`;
    this.#sql = {
      create: `CREATE TABLE IF NOT EXISTS ${table} (
        resource VARBINARY(1024) NOT NULL PRIMARY KEY COMMENT 'the UTF-8 resource name',
        token DECIMAL(38, 0) NOT NULL COMMENT 'the highest fencing token accepted',
        value LONGTEXT NULL COMMENT 'the last value written with write()',
        accepted TINYINT NOT NULL COMMENT 'whether the last write was accepted'
      ) ENGINE=InnoDB`,
      write: upsert(true),
      guard: upsert(false),
      read: `SELECT CAST(token AS CHAR) AS token, value FROM ${table} WHERE resource = ?`,
    };
    this.#table = new Once(async () => {
      await this.#store.run('create table', this.#sql.create, []);
    });
  }

  protected async writeValue(resource: string, token: bigint, value: string): Promise<void> {
    await this.#table.run();
    const result = await this.#store.run<ResultSetHeader>('fenced write', this.#sql.write, [
      Buffer.from(resource, 'utf8'),
      token.toString(),
      value,
    ]);
    if (Number(result.insertId) !== 1) throw await this.#stale(resource, token);
  }

  /**
   * Inside your open transaction on `tx`: refuses `token` with `StaleTokenError` if `resource` has
   * accepted a higher one, else records it, holding the resource's row lock until your transaction
   * ends. Write your data after it in the same transaction: it commits only under a token that was
   * the newest, and no older holder's write can commit after it. A stale token leaves your
   * transaction open: roll it back.
   * @throws InvalidArgumentError before any I/O; StaleTokenError; BackendUnavailableError /
   *   BackendError (the statement is bounded by the command timeout; roll back after either).
   */
  async guard(tx: Connection | PoolConnection, resource: string, token: bigint): Promise<void> {
    checkFenceToken(resource, token);
    await this.#table.run();
    let result: ResultSetHeader;
    try {
      [result] = await answerWithin(
        tx.execute<ResultSetHeader>(this.#sql.guard, [Buffer.from(resource, 'utf8'), token.toString()]),
        this.#commandTimeoutMs,
        this.#store.name,
        'fenced write',
      );
    } catch (error) {
      throw this.#store.error('fenced write', error);
    }
    if (Number(result.insertId) !== 1) throw await this.#stale(resource, token);
  }

  /**
   * Runs `fn` in a transaction of its own (a connection from the fence's pool) after `guard`:
   * commits what `fn` wrote when it resolves, rolls back when it or the guard throws.
   * @throws what `guard` throws, or what `fn` throws (after the rollback).
   */
  async transaction<T>(resource: string, token: bigint, fn: (tx: PoolConnection) => Promise<T>): Promise<T> {
    checkFenceToken(resource, token);
    await this.#table.run();
    return fencedTransaction(
      this.#store,
      {
        begin: 'START TRANSACTION',
        guard: (tx) => this.guard(tx, resource, token),
        release: (on, broken) => this.#store.giveBack(on, broken),
      },
      fn,
    );
  }

  protected async readValue(resource: string): Promise<FencedValue | null> {
    await this.#table.run();
    const row = (await this.#store.run<RowDataPacket[]>('fenced read', this.#sql.read, [Buffer.from(resource, 'utf8')]))[0];
    return row ? { value: (row['value'] as string | null) ?? '', token: BigInt(row['token'] as string) } : null;
  }

  /** The error for a refused write, with the token that refused it if it can be read. */
  async #stale(resource: string, token: bigint): Promise<StaleTokenError> {
    const highest = await this.read(resource).then(
      (held) => held?.token,
      () => undefined,
    );
    return new StaleTokenError(resource, token, highest);
  }
}

/**
 * A MySQL/MariaDB fence. @throws InvalidArgumentError for bad options; store failures surface from
 * its calls.
 */
export function mysqlFence(options: MysqlFenceOptions): MysqlFence {
  return new MysqlFence(options);
}

// Fenced writes in PostgreSQL: a table of resources, each with the highest token it accepted. A
// write is one upsert whose update only happens when the stored token is not above the new one;
// the row lock it takes serializes writers, so a check and its write can never be split by another.
// `guard` runs the same upsert inside a transaction of yours, so your own writes in it land only
// with a token that is still the newest (the row stays locked until you commit or roll back).
import { createHash } from 'node:crypto';
import { InvalidArgumentError, StaleTokenError, type FencedValue } from '@deadbolt/core';
import { answerWithin, Once, readOptions, rules, storeClient, StoreFence, type Rules } from '@deadbolt/core/backend';
import { checkFenceToken, fencedTransaction } from '@deadbolt/core/sql';
import pg, { type ClientBase, type Pool, type PoolClient } from 'pg';
import { postgresOptionRules } from './postgres-backend.js';
import { PostgresStore } from './store.js';

/** Options of `postgresFence`: where the fenced resources are kept. Unknown names and bad values are `InvalidArgumentError` before any connection. */
export interface PostgresFenceOptions {
  /** `postgres://user[:password]@host:port/database`: the fence makes (and closes) a pool of its own. */
  url?: string;
  /** Your own `pg` Pool; `close()` leaves it open. Used instead of `url`. */
  client?: Pool;
  /** What keeps these fences apart from others in the same database: their table's name (created if absent). Default `deadbolt_fences`. */
  namespace?: string;
  /** Another name for `namespace` (PostgreSQL's word for it); give one of the two. */
  table?: string;
  /** The longest one statement waits for its answer. Default 5000 ms. */
  commandTimeoutMs?: number;
}

const tableRule = rules.text(/^[a-z_][a-z0-9_]{0,62}$/, 'a plain lower-case identifier (letters, digits, _; at most 63 characters)', [
  '',
  '1abc',
  'Fences',
  'a-b',
]);

/** How each option of `postgresFence` is checked. */
export const postgresFenceOptionRules = {
  url: rules.url(['postgres', 'postgresql'], true),
  client: postgresOptionRules.client,
  namespace: tableRule,
  table: rules.alias('namespace', tableRule),
  commandTimeoutMs: rules.ms(),
} satisfies Rules<PostgresFenceOptions>;

/**
 * Values in PostgreSQL guarded by fencing tokens (see core's `Fence`), and `guard` for writes in
 * your own transactions.
 */
export class PostgresFence extends StoreFence {
  readonly client: Pool;
  readonly #store: PostgresStore;
  readonly #sql: { create: string; write: string; guard: string; read: string };
  /** Creates the table once (one creator at a time: concurrent CREATE TABLE IF NOT EXISTS can collide in the catalog). */
  readonly #table: Once;

  /** @throws InvalidArgumentError for bad options (before connecting). */
  constructor(raw: PostgresFenceOptions) {
    super('postgres');
    const options = readOptions(raw, postgresFenceOptionRules, 'postgresFence');
    const connection = storeClient(options, 'postgresFence', 'postgres://user@host:port/db', (url) => {
      if (url.hosts.length > 1) throw new InvalidArgumentError('url must name one PostgreSQL server');
      return new pg.Pool({ connectionString: url.href, max: 10, keepAlive: true });
    });
    this.client = connection.client;
    this.closes(() => connection.end((pool) => pool.end()));
    const table = `"${options.namespace ?? 'deadbolt_fences'}"`;
    const namespace = createHash('sha256').update(table).digest().readUInt32BE(0) & 0x7fffffff;
    this.#store = new PostgresStore(this.client, 'deadbolt_locks', namespace, options.commandTimeoutMs ?? 5000);
    // The update happens only when the stored token is not above the new one; either way the row
    // is locked until the transaction ends. `highest` is read from the statement's snapshot: the
    // token that refused the write (or an older one, if a newer one committed meanwhile).
    const upsert = (columns: string, set: string) =>
      `WITH w AS (INSERT INTO ${table} AS f (${columns}) VALUES ($1, $2::numeric${columns.includes('value') ? ', $3' : ''})
         ON CONFLICT (resource) DO UPDATE SET ${set} WHERE f.token <= EXCLUDED.token RETURNING 1)
       SELECT (SELECT count(*) FROM w)::int AS accepted, (SELECT token::text FROM ${table} WHERE resource = $1) AS highest`;
    this.#sql = {
      create: `SELECT pg_advisory_xact_lock(${namespace}, 1); CREATE TABLE IF NOT EXISTS ${table} (resource bytea PRIMARY KEY, token numeric(38, 0) NOT NULL, value text)`,
      write: upsert('resource, token, value', 'token = EXCLUDED.token, value = EXCLUDED.value'),
      guard: upsert('resource, token', 'token = EXCLUDED.token'),
      read: `SELECT token::text AS token, value FROM ${table} WHERE resource = $1`,
    };
    this.#table = new Once(async () => {
      await this.#store.findPooler();
      await this.#store.run('create table', this.#sql.create, []);
    });
  }

  protected async writeValue(resource: string, token: bigint, value: string): Promise<void> {
    await this.#table.run();
    const result = await this.#store.run('fenced write', this.#sql.write, [Buffer.from(resource, 'utf8'), token.toString(), value]);
    this.#judge(resource, token, result.rows[0]);
  }

  /**
   * Inside your open transaction on `tx`: refuses `token` with `StaleTokenError` if `resource` has
   * accepted a higher one, else records it, holding the resource's row lock until your transaction
   * ends. Write your data after it in the same transaction: it commits only under a token that was
   * the newest, and no older holder's write can commit after it. A stale token leaves your
   * transaction open: roll it back. Under REPEATABLE READ or SERIALIZABLE a concurrent fenced
   * write may fail it with a serialization error (`BackendError`, cause code 40001): retry, as
   * for any such failure.
   * @throws InvalidArgumentError before any I/O; StaleTokenError; BackendUnavailableError /
   *   BackendError (the statement is bounded by the command timeout; roll back after either).
   */
  async guard(tx: ClientBase, resource: string, token: bigint): Promise<void> {
    checkFenceToken(resource, token);
    await this.#table.run();
    const { commandTimeoutMs } = this.#store;
    let result: pg.QueryResult;
    try {
      result = await answerWithin(
        tx.query(this.#sql.guard, [Buffer.from(resource, 'utf8'), token.toString()]),
        commandTimeoutMs,
        this.#store.name,
        'fenced write',
      );
    } catch (error) {
      throw this.#store.error('fenced write', error);
    }
    this.#judge(resource, token, result.rows[0]);
  }

  /**
   * Runs `fn` in a transaction of its own (a connection from the fence's pool) after `guard`:
   * commits what `fn` wrote when it resolves, rolls back when it or the guard throws.
   * @throws what `guard` throws, or what `fn` throws (after the rollback).
   */
  async transaction<T>(resource: string, token: bigint, fn: (tx: PoolClient) => Promise<T>): Promise<T> {
    checkFenceToken(resource, token);
    await this.#table.run();
    return fencedTransaction(
      this.#store,
      {
        begin: 'BEGIN',
        guard: (tx) => this.guard(tx, resource, token),
        release: (on, broken) => on.release(broken === undefined ? undefined : (broken as Error)),
      },
      fn,
    );
  }

  protected async readValue(resource: string): Promise<FencedValue | null> {
    await this.#table.run();
    const row = (await this.#store.run('fenced read', this.#sql.read, [Buffer.from(resource, 'utf8')])).rows[0];
    return row ? { value: (row['value'] as string | null) ?? '', token: BigInt(row['token'] as string) } : null;
  }

  #judge(resource: string, token: bigint, row: Record<string, unknown> | undefined): void {
    if (row?.['accepted'] === 1) return;
    const highest = row?.['highest'];
    throw new StaleTokenError(resource, token, typeof highest === 'string' ? BigInt(highest) : undefined);
  }
}

/**
 * A PostgreSQL fence. @throws InvalidArgumentError for bad options; store failures surface from
 * its calls.
 */
export function postgresFence(options: PostgresFenceOptions): PostgresFence {
  return new PostgresFence(options);
}

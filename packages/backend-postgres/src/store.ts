// The server as both lock modes see it: the pool, one statement bounded by the command timeout,
// the tables, and how a failure is told apart (the connection, or the server refusing a statement).
import { createHash } from 'node:crypto';
import { BackendUnavailableError } from '@deadbolt/core';
import { backendFailure, noAnswer, Once, StrandedConnections, withTimeout } from '@deadbolt/core/backend';
import pg, { type Pool, type PoolClient, type QueryResultRow } from 'pg';
import * as queries from './queries.js';

/** Every statement of queries.ts with this backend's names in place. */
export type Statements = Record<keyof typeof queries, string>;

export class PostgresStore {
  readonly name = 'postgres';
  readonly client: Pool;
  readonly sql: Statements;
  /** Server process ids of this backend's open connections (for diagnostics and fault tests). */
  readonly pids = new Set<number>();
  /** Session mode: the first key of every advisory lock `(namespace, id)`. */
  readonly namespace: number;
  /** LISTEN/NOTIFY channel of lease mode's releases. */
  readonly channel: string;
  readonly commandTimeoutMs: number;
  /** Idle connections that sat through a silence are dropped when taken. */
  readonly #stranded = new StrandedConnections<PoolClient>((c) => c);
  /**
   * Creates the tables and the notify function when something is missing, once per backend. Schema
   * changes take strong locks, so none is made when all exist; and one creator at a time
   * (concurrent CREATE TABLE IF NOT EXISTS can collide in the catalog): the statements and an
   * advisory lock share one implicit transaction.
   */
  readonly tables: Once;

  constructor(client: Pool, table: string, namespace: number, commandTimeoutMs: number) {
    this.client = client;
    this.namespace = namespace;
    this.commandTimeoutMs = commandTimeoutMs;
    this.channel = `${table}_released`;
    const names: Record<string, string> = {
      locks: `"${table}"`,
      waiters: `"${table}_waiters"`,
      waitersOrder: `"${table}_waiters_order"`,
      notifyHead: `"${table}_notify_head"`,
      sharedKeys: `"${table}_shared_keys"`,
      shared: `"${table}_shared"`,
      sharedOrder: `"${table}_shared_order"`,
      sharedAcquire: `"${table}_shared_acquire"`,
    };
    this.sql = Object.fromEntries(
      Object.entries(queries).map(([k, text]) => [k, text.replace(/\{(\w+)\}/g, (_, name: string) => names[name]!)]),
    ) as Statements;
    this.tables = new Once(async () => {
      const found = await this.run('create table', this.sql.tablesExist, [
        names.locks,
        names.waiters,
        names.notifyHead,
        names.sharedAcquire,
      ]);
      if (found.rows[0]?.['ready'] === true) return;
      await this.run('create table', `SELECT pg_advisory_xact_lock(${namespace}, 0); ${this.sql.createTables}`, []);
    });
    // Errors of idle pooled connections reach callers through their next statement; this only
    // keeps them from being thrown as unhandled.
    client.on('error', () => undefined);
    // Track connections so a fault test can terminate exactly this backend's ones.
    client.on('connect', (c) => this.track(c));
  }

  /** A connection from the pool, past any that may have been stranded (`StrandedConnections`). */
  connection(): Promise<PoolClient> {
    return this.#stranded.take(
      () => this.client.connect(),
      (client) => {
        PostgresStore.cut(client);
        client.release(new Error('stranded by a silence'));
      },
    );
  }

  /** Ends `client`'s socket, so nothing can answer on it any more (ending it politely would wait on the store). */
  static cut(client: PoolClient): void {
    client.connection.stream.destroy();
  }

  /** One statement on a pooled connection, bounded by the command timeout. @throws typed errors */
  async run(operation: string, statement: string, params: unknown[]): Promise<pg.QueryResult<QueryResultRow>> {
    let client: PoolClient;
    try {
      // A pool whose connections all hang waits here; they are destroyed within a command timeout.
      client = await withTimeout(
        this.connection(),
        2 * this.commandTimeoutMs,
        () => noAnswer(this.name, 'connect', 2 * this.commandTimeoutMs),
        (late) => late.release(),
      );
    } catch (error) {
      throw this.error(operation, error);
    }
    try {
      const result = await this.on(client, statement, params);
      client.release();
      return result;
    } catch (error) {
      client.release(this.unavailable(error) ? (error as Error) : undefined);
      throw this.error(operation, error);
    }
  }

  /**
   * One statement on `client`, bounded by the command timeout; the raw error if it fails. A
   * connection that times out is destroyed: its late answer must never be read as another
   * statement's.
   */
  async on(client: PoolClient, statement: string, params: unknown[]): Promise<pg.QueryResult<QueryResultRow>> {
    // With parameters, as a named prepared statement, parsed and planned once per connection
    // (node-postgres would otherwise parse every one anew); without, as a simple query (the table
    // creation is several statements).
    const sentAt = performance.now();
    const sent = params.length
      ? client.query({ name: statementName(statement), text: statement, values: params })
      : client.query(statement);
    const result = await withTimeout(sent, this.commandTimeoutMs, () => {
      this.#stranded.silent(sentAt);
      PostgresStore.cut(client);
      return noAnswer(this.name, 'statement', this.commandTimeoutMs);
    });
    this.#stranded.answered(client);
    return result;
  }

  /** Remembers `client`'s server process among `pids` while it is open. */
  track(client: pg.Client | PoolClient): void {
    const pid = processId(client);
    if (pid === undefined) return;
    this.pids.add(pid);
    const forget = () => this.pids.delete(pid);
    client.on('end', forget);
    client.on('error', forget);
  }

  /** A connection failure rather than a statement's error (SQLSTATE classes 08, 57P0x, 53300, or no SQLSTATE). */
  unavailable(error: unknown): boolean {
    if (error instanceof BackendUnavailableError) return true;
    const code = (error as { code?: unknown })?.code;
    if (typeof code !== 'string' || !/^[0-9A-Z]{5}$/.test(code)) return true;
    return /^(08|57P0|53300)/.test(code);
  }

  /** The typed error for `error`, with it as the cause (a typed one as it is). */
  error(operation: string, error: unknown): Error {
    return backendFailure(this.name, operation, error, (e) => this.unavailable(e));
  }
}

/** The server process of a connected client (pg sets it from the server's first message; its types leave it out). */
export function processId(client: object): number | undefined {
  return 'processID' in client && typeof client.processID === 'number' ? client.processID : undefined;
}

/** A prepared statement's name: a digest of its text, so each distinct statement has one. */
const statementNames = new Map<string, string>();
function statementName(text: string): string {
  let name = statementNames.get(text);
  if (!name) statementNames.set(text, (name = `deadbolt_${createHash('sha256').update(text).digest('hex').slice(0, 16)}`));
  return name;
}

// The server as both lock modes see it: the pool, one statement bounded by the command timeout,
// the tables, and how a failure is told apart (the connection, or the server refusing a statement).
import { createHash } from 'node:crypto';
import { BackendUnavailableError } from '@deadbolt/core';
import { answerWithin, backendFailure, Once } from '@deadbolt/core/backend';
import { StrandedConnections, type SqlStore } from '@deadbolt/core/sql';
import pg, { type Pool, type PoolClient, type QueryResultRow } from 'pg';
import * as queries from './queries.js';

/** Every statement of queries.ts with this backend's names in place. */
export type Statements = Record<keyof typeof queries, string>;

/** The lock tables, the notify function and the pool's connections of one backend (`SqlStore` for `SqlBackend`). */
export class PostgresStore implements SqlStore {
  /** The floor's row is the empty key's, named in the statements themselves. */
  readonly floorRow = [];
  readonly name = 'postgres';
  readonly client: Pool;
  readonly sql: Statements;
  /** Server process ids of this backend's open connections (for diagnostics and fault tests). */
  readonly pids = new Set<number>();
  /** Session mode: the first key of every advisory lock `(namespace, id)`. */
  readonly namespace: number;
  /** The lock table's name, as given (the other tables add `_waiters`, `_shared` and so on to it). */
  readonly table: string;
  /** LISTEN/NOTIFY channel of lease mode's releases. */
  readonly channel: string;
  readonly commandTimeoutMs: number;
  /** Idle connections that sat through a silence are dropped when taken. */
  readonly #stranded = new StrandedConnections<PoolClient>((c) => c);
  /**
   * Whether a connection pooler (PgBouncer, say) stands between this client and the server, found
   * on the first connection (undefined until then): a pooler hands each client a process id of its
   * own making, so the server's `pg_backend_pid()` differs from the one the connection was given.
   * Behind one, statements go unnamed (a transaction pooler runs each transaction on whichever
   * server session is free, where a statement prepared on another does not exist) and a
   * connection's server process is asked of the server.
   */
  #pooled: boolean | undefined;
  /** Server process ids asked of the server, by connection (behind a pooler). */
  readonly #serverPids = new WeakMap<object, number>();
  /**
   * Creates the tables and the notify function when something is missing, once per backend. Schema
   * changes take strong locks, so none is made when all exist; and one creator at a time
   * (concurrent CREATE TABLE IF NOT EXISTS can collide in the catalog): the statements and an
   * advisory lock share one implicit transaction.
   */
  readonly tables: Once;

  constructor(client: Pool, table: string, namespace: number, commandTimeoutMs: number) {
    this.client = client;
    this.table = table;
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
      await this.findPooler();
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
  static cut(client: pg.Client): void {
    client.connection.stream.destroy();
  }

  /** Whether a pooler stands between this client and the server (see `#pooled`); undefined until `findPooler`. */
  get pooled(): boolean | undefined {
    return this.#pooled;
  }

  /** Finds out whether a pooler stands between (once; each user's first step). @throws typed errors */
  async findPooler(): Promise<void> {
    if (this.#pooled === undefined) await this.borrow('connect', (c) => this.serverPid(c));
  }

  /** One statement on a pooled connection, bounded by the command timeout. @throws typed errors */
  run(operation: string, statement: string, params: unknown[]): Promise<pg.QueryResult<QueryResultRow>> {
    return this.borrow(operation, (client) => this.on(client, statement, params));
  }

  /** `run` for a statement's rows. @throws typed errors */
  async rows(operation: string, statement: string, params: unknown[]): Promise<QueryResultRow[]> {
    return (await this.run(operation, statement, params)).rows;
  }

  /** `fn` on a pooled connection, given back after (destroyed if it failed). @throws typed errors */
  async borrow<T>(operation: string, fn: (client: PoolClient) => Promise<T>): Promise<T> {
    let client: PoolClient;
    try {
      // A pool whose connections all hang waits here; they are destroyed within a command timeout.
      client = await answerWithin(this.connection(), 2 * this.commandTimeoutMs, this.name, 'connect', {
        onLate: (late) => late.release(),
      });
    } catch (error) {
      throw this.error(operation, error);
    }
    try {
      const result = await fn(client);
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
  async on(client: pg.Client, statement: string, params: unknown[]): Promise<pg.QueryResult<QueryResultRow>> {
    // With parameters, as a named prepared statement, parsed and planned once per connection
    // (node-postgres would otherwise parse every one anew), unless a pooler may move the
    // connection between server sessions; without, as a simple query (the table creation is
    // several statements).
    const sentAt = performance.now();
    const sent = !params.length
      ? client.query(statement)
      : this.#pooled === false
        ? client.query({ name: statementName(statement), text: statement, values: params })
        : client.query(statement, params);
    const result = await answerWithin(sent, this.commandTimeoutMs, this.name, 'statement', {
      onSilent: () => {
        this.#stranded.silent(sentAt);
        PostgresStore.cut(client);
      },
    });
    if (fromPool(client)) this.#stranded.answered(client);
    return result;
  }

  /**
   * The server process behind `client`, asked of the server the first time (and whether a pooler
   * stands between, the first time of all). Behind a transaction pooler it is only the process of
   * that one statement. @throws the driver's error
   */
  async serverPid(client: pg.Client): Promise<number> {
    const known = this.#serverPids.get(client);
    if (known !== undefined) return known;
    const pid = await this.#askPid(client);
    this.#serverPids.set(client, pid);
    this.#pooled ??= pid !== processId(client);
    return pid;
  }

  /** The server process of `client` as far as known without asking: asked before, or the one it was given. */
  pidOf(client: object): number | undefined {
    return this.#serverPids.get(client) ?? processId(client);
  }

  /**
   * Behind a pooler: whether it shares server sessions between its clients (transaction or
   * statement pooling), on two connections of its own. A asks its server's process; B opens a
   * transaction (which keeps B on one server session) and asks; A asks again. A session pooler
   * gives each client one server session for the client's life, so A's stays and B's differs. A
   * transaction pooler hands A's idle session to B (PgBouncer takes the most recently used) or,
   * with that one taken, moves A to another: either shows. @throws typed errors
   */
  async sharesSessions(): Promise<boolean> {
    const [a, b] = [new pg.Client(this.client.options), new pg.Client(this.client.options)];
    try {
      // A pool you made yourself may set no connect timeout: the command timeout bounds these.
      await answerWithin(Promise.all([a.connect(), b.connect()]), this.commandTimeoutMs, this.name, 'connect');
      const first = await this.#askPid(a);
      await this.on(b, 'BEGIN', []);
      const other = await this.#askPid(b);
      const again = await this.#askPid(a);
      await this.on(b, 'ROLLBACK', []);
      return other === first || again !== first;
    } catch (error) {
      throw this.error('connect', error);
    } finally {
      for (const client of [a, b]) void client.end().catch(() => undefined);
    }
  }

  /** The server process running this statement on `client` (behind a transaction pooler, only this one's). */
  async #askPid(client: pg.Client): Promise<number> {
    return Number((await this.on(client, 'SELECT pg_backend_pid() AS pid', [])).rows[0]?.['pid']);
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

/** Whether `client` came from the pool (`sharesSessions`' own connections did not). */
const fromPool = (client: pg.Client): client is PoolClient => 'release' in client;

import { createHash } from 'node:crypto';
import {
  BackendError,
  BackendUnavailableError,
  InvalidArgumentError,
  LimitMismatchError,
  type Capabilities,
  type LockBackend,
} from '@deadbolt/core';
import {
  AGAIN,
  backendFailure,
  cancelOnAbort,
  InFlight,
  Once,
  count,
  instance,
  ms,
  noAnswer,
  oneOf,
  readOptions,
  urlOrClient,
  text,
  url,
  waiterCadence,
  type Rules,
  pollForLease,
  raceSignal,
  ReleaseNotifier,
  sleep,
  StrandedConnections,
  waitOnConnections,
  watchBlocked,
  withTimeout,
  type AcquireRequest,
  type Lease,
  type SharedRequest,
} from '@deadbolt/core/backend';
import pg, { type Pool, type PoolClient, type QueryResultRow } from 'pg';
import * as sql from './queries.js';

export interface PostgresBackendOptions {
  /** `postgres://user[:password]@host:port/database`. The backend creates (and closes) its own pool. */
  url?: string;
  /** Your own `pg` Pool; `close()` leaves it open. Used instead of `url`. */
  client?: Pool;
  /** Table name (created if absent, with `<table>_waiters` beside it). Default `deadbolt_locks`. */
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
  /** Session mode: the first key of every advisory lock `(namespace, id)`. Default: derived from the table name. */
  advisoryNamespace?: number;
}

export interface PostgresLease extends Lease {
  readonly keyBytes: Buffer;
  /** A semaphore permit or read-write lock (lease mode). */
  readonly shared?: true;
  /** Session mode: the holder asked for lock-delay, so its marker is renewed and cleared with it. */
  readonly lockDelay?: true;
  /** Session mode: the connection holding the advisory lock, and the lock's id. */
  readonly client?: PoolClient;
  readonly id?: number;
}

/** How each option of `postgresBackend` is checked (see core's options.ts); the conformance suite feeds it hostile values. */
export const postgresOptionRules = {
  url: url(['postgres', 'postgresql'], true),
  client: instance(
    (v): v is Pool =>
      v instanceof pg.Pool ||
      (typeof (v as Pool | null)?.connect === 'function' &&
        typeof (v as Pool).query === 'function' &&
        typeof (v as Pool).on === 'function'),
    'a pg Pool',
  ),
  // The backend adds `_shared_acquire` and the like; PostgreSQL names stop at 63 bytes.
  table: text(/^[a-z_][a-z0-9_]{0,47}$/, 'a plain lower-case identifier (letters, digits, _; at most 48 characters)', [
    '',
    '1abc',
    'Locks',
    'a-b',
    'x'.repeat(49),
  ]),
  mode: oneOf(['lease', 'session']),
  maxPollDelayMs: ms(),
  connectTimeoutMs: ms(),
  connectionLimit: count(1, 100_000),
  commandTimeoutMs: ms(),
  advisoryNamespace: count(0, 0x7fffffff),
} satisfies Rules<PostgresBackendOptions>;

/** How many keys' advisory lock ids a backend remembers. */
const KEY_ID_CACHE = 1000;

/** How many session connections a backend opens at once (see `#sessionConnect`). */
const OPENING_AT_ONCE = 8;

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
export class PostgresBackend implements LockBackend<PostgresLease> {
  readonly name = 'postgres';
  readonly capabilities: Capabilities;
  readonly mode: 'lease' | 'session';
  readonly client: Pool;
  /** Server process ids of this backend's open connections (for diagnostics and fault tests). */
  readonly pids = new Set<number>();
  readonly #ownsClient: boolean;
  readonly #maxPollDelayMs: number;
  /** How long a session waiter keeps trying to get a connection (see `#acquireSession`). */
  readonly #connectGraceMs: number;
  readonly #commandTimeoutMs: number;
  /** Idle connections that sat through a silence are dropped when taken. */
  readonly #stranded = new StrandedConnections<PoolClient>((c) => c);
  readonly #namespace: number;
  readonly #channel: string;
  readonly #sql: Record<keyof typeof sql, string>;
  /** The quoted names of the tables, index and function. */
  readonly #names: Record<
    'locks' | 'waiters' | 'waitersOrder' | 'notifyHead' | 'sharedKeys' | 'shared' | 'sharedOrder' | 'sharedAcquire',
    string
  >;
  readonly #notifier = new ReleaseNotifier();
  readonly #acquiring: InFlight;
  /** Session leases already released: their connection is back in the pool. */
  readonly #releasedSessions = new WeakSet<Lease>();
  /** Session mode: advisory lock ids of recently used keys (base64 of the key → id). */
  readonly #ids = new Map<string, number>();
  /**
   * Session mode: the connections taken from the pool for a wait or a held lock, until given back,
   * each with the function that gives its place among the pool's connections back.
   */
  readonly #sessionClients = new Map<PoolClient, () => void>();
  /** Session mode: places among the pool's connections, and turns to open one (see `#sessionConnect`). */
  readonly #places: Gate;
  readonly #opening = new Gate(OPENING_AT_ONCE);
  /**
   * Creates the tables and the notify function when something is missing, once per backend. Schema
   * changes take strong locks, so none is made when all exist; and one creator at a time
   * (concurrent CREATE TABLE IF NOT EXISTS can collide in the catalog): the statements and an
   * advisory lock share one implicit transaction.
   */
  readonly #tables = new Once(async () => {
    const { locks, waiters, notifyHead, sharedAcquire } = this.#names;
    const found = await this.#run('create table', this.#sql.tablesExist, [locks, waiters, notifyHead, sharedAcquire]);
    if (found.rows[0]?.['ready'] === true) return;
    await this.#run('create table', `SELECT pg_advisory_xact_lock(${this.#namespace}, 0); ${this.#sql.createTables}`, []);
  });
  #listener: Promise<pg.Client> | undefined;
  #closed = false;

  /** @throws InvalidArgumentError for bad options (before connecting). */
  constructor(raw: PostgresBackendOptions) {
    const options = readOptions(raw, postgresOptionRules, 'postgresBackend');
    const table = options.table ?? 'deadbolt_locks';
    const mode = options.mode ?? 'lease';
    this.mode = mode;
    this.capabilities =
      mode === 'lease'
        ? {
            fencing: 'strict',
            fairness: 'fifo',
            lease: 'ttl',
            wake: 'push',
            minTtlMs: 1,
            ttlGranularityMs: 1,
            crossProcess: true,
            minToken: true,
            semaphore: true,
            readWrite: true,
          }
        : // idle_session_timeout is an int of ms; the server's lock manager queues waiters in order.
          {
            fencing: 'strict',
            fairness: 'fifo',
            lease: 'session',
            wake: 'push',
            minTtlMs: 1000,
            ttlGranularityMs: 1,
            maxTtlMs: 2 ** 31 - 1,
            crossProcess: true,
            minToken: true,
          };
    this.#maxPollDelayMs = options.maxPollDelayMs ?? 250;
    this.#commandTimeoutMs = options.commandTimeoutMs ?? 5000;
    this.#acquiring = new InFlight(this.#commandTimeoutMs);
    // Advisory locks are per database; the table names their namespace within it.
    this.#namespace = options.advisoryNamespace ?? createHash('sha256').update(table).digest().readUInt32BE(0) & 0x7fffffff;
    const connectTimeoutMs = options.connectTimeoutMs ?? 2000;
    // Two connect timeouts: a connect that fails takes one itself, so a shorter grace would allow
    // no second try.
    this.#connectGraceMs = 2 * connectTimeoutMs;
    const store = urlOrClient(options, 'postgresBackend', 'postgres://user@host:port/db');
    if (store.client) {
      this.client = store.client;
      this.#ownsClient = false;
    } else {
      const url = store.url;
      if (url.hosts.length > 1) throw new InvalidArgumentError('url must name one PostgreSQL server');
      this.client = new pg.Pool({
        connectionString: url.href,
        connectionTimeoutMillis: connectTimeoutMs,
        max: options.connectionLimit ?? (mode === 'session' ? 200 : 10),
        // TCP keep-alive probes find a peer that vanished without closing the socket.
        keepAlive: true,
      });
      this.#ownsClient = true;
    }
    this.#places = new Gate(this.client.options.max ?? 10);
    // Errors of idle pooled connections reach callers through their next statement; this only
    // keeps them from being thrown as unhandled.
    this.client.on('error', () => undefined);
    // Track connections so a fault test can terminate exactly this backend's ones.
    this.client.on('connect', (client) => this.#track(client));
    const names = {
      locks: `"${table}"`,
      waiters: `"${table}_waiters"`,
      waitersOrder: `"${table}_waiters_order"`,
      notifyHead: `"${table}_notify_head"`,
      sharedKeys: `"${table}_shared_keys"`,
      shared: `"${table}_shared"`,
      sharedOrder: `"${table}_shared_order"`,
      sharedAcquire: `"${table}_shared_acquire"`,
    };
    this.#names = names;
    this.#sql = Object.fromEntries(
      Object.entries(sql).map(([k, text]) => [k, text.replace(/\{(\w+)\}/g, (_, name: keyof typeof names) => names[name])]),
    ) as Record<keyof typeof sql, string>;
    this.#channel = `${table}_released`;
  }

  /** The wake-up channel's word for a key: its SHA-256 (base64), as the release statement computes it. */
  static digest(keyBytes: Buffer): string {
    return createHash('sha256').update(keyBytes).digest('base64');
  }

  acquire(req: AcquireRequest): Promise<PostgresLease | null> {
    return this.#acquiring.track(this.#acquire(req));
  }

  /** Lease mode only (the capabilities say so): one function call per attempt, see queries.ts. */
  acquireShared(req: SharedRequest): Promise<PostgresLease | null> {
    return this.#acquiring.track(this.#acquireShared(req));
  }

  async #acquireShared(req: SharedRequest): Promise<PostgresLease | null> {
    if (this.mode === 'session') throw new BackendError(this.name, 'acquire', { cause: new Error('session mode has no shared claims') });
    await this.#tables.run();
    const keyBytes = Buffer.from(req.key, 'utf8');
    const leave = () => this.#run('release', this.#sql.sharedRelease, [keyBytes, req.owner, this.#channel]).then(() => undefined);
    const attempt = async (queue: boolean): Promise<PostgresLease | null> => {
      const acquiredAt = performance.now();
      const waiterMs = waiterCadence(req.ttlMs, this.#maxPollDelayMs).placeMs;
      const params = [keyBytes, req.owner, req.ttlMs, queue, req.mode, req.limit, waiterMs, (req.minToken ?? 0n).toString()];
      const row = (await this.#run('acquire', this.#sql.sharedAcquire, params)).rows[0]!;
      if (row['status'] === 2) {
        if (queue) await leave();
        throw new LimitMismatchError(req.key, Number(row['val']), req.limit);
      }
      if (row['status'] !== 1) return null;
      return { key: req.key, owner: req.owner, token: BigInt(row['val'] as string), acquiredAt, keyBytes, shared: true };
    };
    if (!req.wait) return attempt(false);
    await this.#listen();
    const recheck = waiterCadence(req.ttlMs, this.#maxPollDelayMs).pollMs;
    try {
      return await pollForLease(
        `s:${PostgresBackend.digest(keyBytes)}`,
        req.signal,
        () => attempt(true),
        (lease) => this.release(lease),
        {
          notifier: this.#notifier,
          minDelayMs: Math.min(5, recheck),
          maxDelayMs: recheck,
        },
      );
    } catch (error) {
      // Leave the queue before reporting the abort or failure: nothing of this waiter stays behind.
      await this.#acquiring.leave(leave, req.ttlMs);
      throw error;
    }
  }

  async #acquire(req: AcquireRequest): Promise<PostgresLease | null> {
    const keyBytes = Buffer.from(req.key, 'utf8');
    if (this.mode === 'session') return this.#acquireSession(req, keyBytes);
    await this.#tables.run();
    const first = await this.#attempt(req, keyBytes, false);
    if (first || !req.wait) return first;
    await this.#listen();
    const recheck = waiterCadence(req.ttlMs, this.#maxPollDelayMs).pollMs;
    try {
      // Mostly asleep: the release that frees the key names the queue's head, which tries at once.
      return await pollForLease(
        PostgresBackend.digest(keyBytes),
        req.signal,
        () => this.#attempt(req, keyBytes, true),
        (lease) => this.#run('release', this.#sql.leave, [lease.keyBytes, lease.owner, this.#channel]).then(() => undefined),
        {
          notifier: this.#notifier,
          owner: req.owner,
          minDelayMs: recheck,
          maxDelayMs: recheck,
        },
      );
    } catch (error) {
      // Leave the queue before reporting the abort or failure: nothing of this waiter stays behind.
      await this.#acquiring.leave(() => this.#run('release', this.#sql.leave, [keyBytes, req.owner, this.#channel]), req.ttlMs);
      throw error;
    }
  }

  async renew(lease: PostgresLease, ttlMs: number): Promise<boolean> {
    const l = lease;
    if (l.shared) return (await this.#run('renew', this.#sql.sharedRenew, [l.keyBytes, l.owner, ttlMs])).rowCount === 1;
    if (!l.client) return (await this.#run('renew', this.#sql.renew, [l.keyBytes, l.owner, ttlMs])).rowCount === 1;
    const result = await this.#onSession(l, 'renew', this.#sql.sessionRenew, [this.#namespace, l.id, `${ttlMs}ms`]);
    const mine = result?.rows[0]?.['mine'] === true;
    if (mine && l.lockDelay) await this.#onSession(l, 'renew', this.#sql.sessionDelayMark, [l.keyBytes, l.owner, ttlMs]);
    return mine;
  }

  async release(lease: PostgresLease): Promise<void> {
    const l = lease;
    if (l.shared) {
      await this.#run('release', this.#sql.sharedRelease, [l.keyBytes, l.owner, this.#channel]);
      return;
    }
    if (!l.client) {
      await this.#run('release', this.#sql.release, [l.keyBytes, l.owner, this.#channel]);
      return;
    }
    // Once only: the connection goes back to the pool, where it may soon hold another lease's lock.
    if (this.#releasedSessions.has(lease)) return;
    // A release is not a loss: clear our lock-delay marker first, so the next holder does not wait.
    if (l.lockDelay) await this.#onSession(l, 'release', this.#sql.sessionDelayMark, [l.keyBytes, l.owner, 0]).catch(() => undefined);
    this.#releasedSessions.add(lease);
    await this.#releaseSession(l.client, l.id!, true);
  }

  async raiseTokenFloor(lease: PostgresLease, floor: bigint): Promise<boolean> {
    const l = lease;
    if (l.shared)
      return (await this.#run('raise token floor', this.#sql.sharedRaiseFloor, [l.keyBytes, l.owner, floor.toString()])).rowCount === 1;
    const params = [l.keyBytes, l.owner, floor.toString()];
    if (!l.client) return (await this.#run('raise token floor', this.#sql.raiseFloor, params)).rowCount === 1;
    return (await this.#onSession(l, 'raise token floor', this.#sql.raiseFloor, params))?.rowCount === 1;
  }

  /**
   * One statement on a held session lease's own connection; undefined when the lease is gone: it
   * was released (the pool has its connection back, maybe holding another lease's lock), or the
   * connection died, taking the advisory lock with it.
   */
  async #onSession(
    lease: PostgresLease,
    operation: string,
    statement: string,
    params: unknown[],
  ): Promise<pg.QueryResult<QueryResultRow> | undefined> {
    if (this.#releasedSessions.has(lease)) return undefined;
    try {
      return await this.#on(lease.client!, statement, params);
    } catch (error) {
      if (this.#unavailable(error)) return undefined;
      throw this.#error(operation, error);
    }
  }

  /**
   * Lets aborted acquisitions finish removing what they wrote (unless the server has gone silent),
   * ends the sessions of locks still held (the server frees them), then closes the connections.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#acquiring.settled();
    for (const client of [...this.#sessionClients.keys()]) this.#giveBack(client, new Error('the backend was closed'));
    const listener = this.#listener;
    this.#listener = undefined;
    await listener?.then((client) => client.end()).catch(() => undefined);
    if (this.#ownsClient) await this.client.end().catch(() => undefined);
  }

  /** One attempt; `queued`: as a waiter, which joins (or keeps its place in) the queue when the key is busy. */
  async #attempt(req: AcquireRequest, keyBytes: Buffer, queued: boolean): Promise<PostgresLease | null> {
    const acquiredAt = performance.now();
    const least = (req.minToken ?? 0n).toString();
    // A queued waiter is dropped if it stays silent for about a ttl (core's waiterCadence).
    const result = queued
      ? await this.#run('acquire', this.#sql.acquireQueued, [
          keyBytes,
          req.owner,
          req.ttlMs,
          waiterCadence(req.ttlMs, this.#maxPollDelayMs).placeMs,
          least,
        ])
      : await this.#run('acquire', this.#sql.acquire, [keyBytes, req.owner, req.ttlMs, least]);
    const token = result.rows[0]?.['token'];
    if (token === undefined) return null;
    return { key: req.key, owner: req.owner, token: BigInt(token as string), acquiredAt, keyBytes };
  }

  /**
   * Session mode: an advisory lock on a connection of its own. A wait whose connection is cut
   * waits again on a new one for as long as the caller's deadline allows. An abort cancels the
   * waiting statement (`pg_cancel_backend`, repeated until it ends, in case it had not started).
   */
  async #acquireSession(req: AcquireRequest, keyBytes: Buffer): Promise<PostgresLease | null> {
    // A waiter whose connection could not be had in time (a hundred session locks asked for at
    // once open a hundred connections, which took over 2 s on a loaded 2-core machine) tries again
    // while such failures have lasted less than two connect timeouts.
    return waitOnConnections(req.wait, req.signal, this.#connectGraceMs, () => this.#sessionAttempt(req, keyBytes));
  }

  async #sessionAttempt(req: AcquireRequest, keyBytes: Buffer): Promise<PostgresLease | null | typeof AGAIN> {
    await this.#tables.run(); // in each attempt, so a wait rides out a failed first try like any other
    const client = await this.#sessionConnect(req.signal);
    let held = false;
    let id = 0;
    try {
      id = await this.#keyId(client, keyBytes);
      req.signal.throwIfAborted();
      const params = [this.#namespace, id, `${req.ttlMs}ms`];
      // A try first, bounded by the command timeout like every statement: a free key is granted at
      // once, and a connection that went silent for good (an idle one from the pool, say) is found
      // out there and replaced, rather than by a blocking wait that would never end on it.
      let got: unknown = (await this.#on(client, this.#sql.lockTry, params)).rows[0]?.['got'];
      if (req.wait && got !== true) {
        const pid = processId(client);
        const stopCancelling = cancelOnAbort(req.signal, () => this.#run('cancel', 'SELECT pg_cancel_backend($1)', [pid ?? null]));
        try {
          // The connection may go silent for good while it blocks: watched from the pool.
          const blocked = client.query(this.#sql.lockWait, params);
          const suspect = async () =>
            (await this.#run('watch', this.#sql.waitStranded, [pid, this.#namespace, id])).rows[0]?.['stranded'] === true;
          got = (await watchBlocked(this.name, blocked, suspect, this.#commandTimeoutMs)).rows[0]?.['got'];
        } catch (error) {
          if (!req.signal.aborted) {
            if (!this.#unavailable(error)) throw error;
            // A cut connection: the server frees what it held. A silent one it may never see cut,
            // so its session (if it still waits on or holds this lock) is ended from another.
            PostgresBackend.#cut(client);
            this.#giveBack(client, error);
            void this.#run('watch', this.#sql.endStranded, [pid, this.#namespace, id]).catch(() => undefined);
            return AGAIN;
          }
        } finally {
          stopCancelling();
        }
      }
      held = got === true;
      req.signal.throwIfAborted();
      if (!held) {
        if (req.wait) throw new BackendError(this.name, 'acquire', { cause: new Error(`the advisory lock wait returned ${String(got)}`) });
        await this.#releaseSession(client, id, false);
        return null;
      }
      await this.#waitOutDelay(client, keyBytes, req);
      // The server's idle clock restarts with each statement: count the lease from this one.
      const acquiredAt = performance.now();
      const mark = req.lockDelayMs ? req.ttlMs : 0;
      const result = await this.#on(client, this.#sql.sessionToken, [(req.minToken ?? 0n).toString(), req.owner, keyBytes, id, mark]);
      const token = result.rows[0]?.['token'];
      if (token === undefined) {
        // The key's row was replaced (the table emptied meanwhile): its id is another now.
        this.#ids.delete(keyBytes.toString('base64'));
        await this.#releaseSession(client, id, true);
        return AGAIN;
      }
      return {
        key: req.key,
        owner: req.owner,
        token: BigInt(token as string),
        acquiredAt,
        keyBytes,
        client,
        id,
        ...(mark ? { lockDelay: true as const } : {}),
      };
    } catch (error) {
      await this.#releaseSession(client, id, held).catch(() => undefined);
      if (req.signal.aborted) throw req.signal.reason;
      throw this.#error('acquire', error);
    }
  }

  /**
   * Lock-delay in session mode: the server frees an advisory lock the moment its connection closes
   * (a killed process), so a holder that asked for lock-delay leaves a marker in the key's row,
   * renewed with its session and cleared by its release. Having won the lock, we wait until the
   * previous holder's marker has run out (every acquirer does, whatever its own setting), with a
   * statement every ttl / 3 so our own idle limit does not end our session.
   */
  async #waitOutDelay(client: PoolClient, keyBytes: Buffer, req: AcquireRequest): Promise<void> {
    for (;;) {
      const leftMs = Number((await this.#on(client, this.#sql.sessionDelayLeft, [keyBytes])).rows[0]?.['left_ms'] ?? 0);
      if (leftMs <= 0) return;
      await sleep(Math.min(leftMs, req.ttlMs / 3), req.signal);
    }
  }

  /**
   * The key's advisory lock id (its row's), creating the row on first use. Remembered for the most
   * recent KEY_ID_CACHE keys; a remembered id is checked by the token statement that follows the
   * lock (the row must still have it), so a table emptied meanwhile costs one more try, never a
   * lock under another key's id.
   */
  async #keyId(client: PoolClient, keyBytes: Buffer): Promise<number> {
    const cacheKey = keyBytes.toString('base64');
    const cached = this.#ids.get(cacheKey);
    if (cached !== undefined) return cached;
    for (let attempt = 0; attempt < 3; attempt++) {
      // No row when another connection created it concurrently (invisible to our snapshot): look again.
      const id = (await this.#on(client, this.#sql.keyId, [keyBytes])).rows[0]?.['id'];
      if (id === undefined) continue;
      const n = Number(id);
      if (n > 0x7fffffff)
        throw new BackendError(this.name, 'acquire', { cause: new Error(`key id ${n} is beyond the advisory lock's 32-bit key`) });
      this.#ids.set(cacheKey, n);
      if (this.#ids.size > KEY_ID_CACHE) this.#ids.delete(this.#ids.keys().next().value!);
      return n;
    }
    throw new BackendError(this.name, 'acquire', { cause: new Error('the key row could not be read') });
  }

  /**
   * A connection for a session wait or lock, taken from the pool and added to `#sessionClients`.
   * Two queues, both bounded by the caller's deadline (`signal`) rather than the connect timeout:
   * - a place among the pool's connections, so that waiters beyond the pool's size wait for a
   *   held lock to be given back instead of failing when the pool's own queue times out;
   * - a turn to open a new connection. The server starts a process per connection: two hundred
   *   opened at once (two hundred waiters arriving together) took over 2 s each, the connect
   *   timeout, on a loaded 2-core machine, while a few at a time open in milliseconds. The connect
   *   timeout then bounds the opening alone. An opening that fails for want of the server fails
   *   those waiting for their turn with it, so that a server that does not answer fails them as
   *   soon as it would have without the queue (each retries within its grace, `#acquireSession`).
   */
  async #sessionConnect(signal: AbortSignal): Promise<PoolClient> {
    const leavePool = await this.#places.enter(signal).catch((error: unknown) => {
      throw signal.aborted ? signal.reason : error;
    });
    let leaveOpening: (() => void) | undefined;
    try {
      if (this.client.idleCount === 0) leaveOpening = await this.#opening.enter(signal);
      const client = await raceSignal(this.#connection(), signal, (late) => late.release());
      this.#sessionClients.set(client, leavePool);
      return client;
    } catch (error) {
      leavePool();
      if (signal.aborted) throw signal.reason;
      if (leaveOpening && this.#unavailable(error)) this.#opening.failQueued(error);
      throw this.#error('acquire', error);
    } finally {
      leaveOpening?.();
    }
  }

  /** Give the advisory lock back and return the connection to the pool as it was (or drop it if it broke). */
  async #releaseSession(client: PoolClient, id: number, held: boolean): Promise<void> {
    if (!this.#sessionClients.has(client)) return; // given back already (the backend was closed)
    try {
      if (held) await this.#on(client, this.#sql.sessionRelease, [this.#namespace, id]);
      else await this.#on(client, this.#sql.sessionReset, []);
      this.#giveBack(client);
    } catch (error) {
      this.#giveBack(client, error); // a closed connection frees every advisory lock it held
      if (!this.#unavailable(error)) throw this.#error('release', error);
    }
  }

  /** Returns a session connection to the pool, once; with an error, the pool closes it instead. */
  #giveBack(client: PoolClient, error?: unknown): void {
    const leavePool = this.#sessionClients.get(client);
    if (!leavePool) return;
    this.#sessionClients.delete(client);
    leavePool();
    client.release(error === undefined ? undefined : error instanceof Error ? error : new Error(String(error)));
  }

  /** The one listening connection: LISTEN on the channel, turn notifications into wake-ups. */
  #listen(): Promise<pg.Client> {
    this.#listener ??= (async () => {
      const client = new pg.Client({ ...this.client.options, keepAlive: true });
      const drop = () => {
        if (this.#listener === listening) this.#listener = undefined; // the next waiter listens again
        client.end().catch(() => undefined);
      };
      client.on('error', drop);
      client.on('end', drop);
      client.on('notification', (message) => {
        const payload = message.payload ?? '';
        const split = payload.lastIndexOf(' ');
        this.#notifier.notify(payload.slice(0, split), payload.slice(split + 1) || undefined);
      });
      try {
        await withTimeout(client.connect(), this.#commandTimeoutMs, () => noAnswer(this.name, 'listen', this.#commandTimeoutMs));
        this.#track(client);
        await withTimeout(client.query(`LISTEN "${this.#channel}"`), this.#commandTimeoutMs, () =>
          noAnswer(this.name, 'listen', this.#commandTimeoutMs),
        );
        return client;
      } catch (error) {
        drop();
        throw this.#error('listen', error);
      }
    })();
    const listening = this.#listener;
    return listening;
  }

  /** A connection from the pool, past any that may have been stranded (`StrandedConnections`). */
  #connection(): Promise<PoolClient> {
    return this.#stranded.take(
      () => this.client.connect(),
      (client) => {
        PostgresBackend.#cut(client);
        client.release(new Error('stranded by a silence'));
      },
    );
  }

  /** Ends `client`'s socket, so nothing can answer on it any more (ending it politely would wait on the store). */
  static #cut(client: PoolClient): void {
    client.connection.stream.destroy();
  }

  /** One statement on a pooled connection, bounded by the command timeout. */
  async #run(operation: string, statement: string, params: unknown[]): Promise<pg.QueryResult<QueryResultRow>> {
    let client: PoolClient;
    try {
      client = await withTimeout(
        this.#connection(),
        2 * this.#commandTimeoutMs,
        () => noAnswer(this.name, 'connect', 2 * this.#commandTimeoutMs),
        (late) => late.release(),
      );
    } catch (error) {
      throw this.#error(operation, error);
    }
    try {
      const result = await this.#on(client, statement, params);
      client.release();
      return result;
    } catch (error) {
      client.release(this.#unavailable(error) ? (error as Error) : undefined);
      throw this.#error(operation, error);
    }
  }

  /**
   * One statement on `client`, bounded by the command timeout. A connection that times out is
   * destroyed: its late answer must never be read as another statement's.
   */
  async #on(client: PoolClient, statement: string, params: unknown[]): Promise<pg.QueryResult<QueryResultRow>> {
    // With parameters, as a named prepared statement, parsed and planned once per connection
    // (node-postgres would otherwise parse every one anew); without, as a simple query (the table
    // creation is several statements).
    const sentAt = performance.now();
    const sent = params.length
      ? client.query({ name: statementName(statement), text: statement, values: params })
      : client.query(statement);
    const result = await withTimeout(sent, this.#commandTimeoutMs, () => {
      this.#stranded.silent(sentAt);
      PostgresBackend.#cut(client);
      return noAnswer(this.name, 'statement', this.#commandTimeoutMs);
    });
    this.#stranded.answered(client);
    return result;
  }

  #track(client: pg.Client | PoolClient): void {
    const pid = processId(client);
    if (pid === undefined) return;
    this.pids.add(pid);
    const forget = () => this.pids.delete(pid);
    client.on('end', forget);
    client.on('error', forget);
  }

  /** A connection failure rather than a statement's error (SQLSTATE classes 08, 57P0x, 53300, or no SQLSTATE). */
  #unavailable(error: unknown): boolean {
    if (error instanceof BackendUnavailableError) return true;
    const code = (error as { code?: unknown })?.code;
    if (typeof code !== 'string' || !/^[0-9A-Z]{5}$/.test(code)) return true;
    return /^(08|57P0|53300)/.test(code);
  }

  #error(operation: string, error: unknown): Error {
    return backendFailure(this.name, operation, error, (e) => this.#unavailable(e));
  }
}

/** A prepared statement's name: a digest of its text, so each distinct statement has one. */
/** The server process of a connected client (pg sets it from the server's first message; its types leave it out). */
function processId(client: object): number | undefined {
  return 'processID' in client && typeof client.processID === 'number' ? client.processID : undefined;
}

const statementNames = new Map<string, string>();
function statementName(text: string): string {
  let name = statementNames.get(text);
  if (!name) statementNames.set(text, (name = `deadbolt_${createHash('sha256').update(text).digest('hex').slice(0, 16)}`));
  return name;
}

/**
 * A PostgreSQL backend. @throws InvalidArgumentError for bad options; store failures surface as
 * BackendUnavailableError / BackendError from the Locker's calls.
 */
export function postgresBackend(options: PostgresBackendOptions): PostgresBackend {
  return new PostgresBackend(options);
}

/** At most `limit` holders at a time; the others wait their turn in arrival order. */
class Gate {
  #free: number;
  readonly #queue: Array<{ admit(): void; fail(error: unknown): void }> = [];

  constructor(limit: number) {
    this.#free = limit;
  }

  /**
   * Resolves to the function that gives the place back, once it is this caller's turn.
   * @throws the signal's reason if it aborts first (the caller leaves the queue).
   */
  async enter(signal: AbortSignal): Promise<() => void> {
    signal.throwIfAborted();
    if (this.#free > 0) this.#free--;
    else {
      await new Promise<void>((resolve, reject) => {
        const waiter = {
          admit: () => {
            signal.removeEventListener('abort', abort);
            resolve();
          },
          fail: (error: unknown) => {
            signal.removeEventListener('abort', abort);
            reject(error);
          },
        };
        const abort = () => {
          this.#queue.splice(this.#queue.indexOf(waiter), 1);
          reject(signal.reason);
        };
        this.#queue.push(waiter);
        signal.addEventListener('abort', abort, { once: true });
      });
    }
    let left = false;
    return () => {
      if (left) return;
      left = true;
      const next = this.#queue.shift();
      if (next)
        next.admit(); // the place passes straight to the next in line
      else this.#free++;
    };
  }

  /** Rejects everyone waiting for a place with `error`. */
  failQueued(error: unknown): void {
    for (const waiter of this.#queue.splice(0)) waiter.fail(error);
  }
}

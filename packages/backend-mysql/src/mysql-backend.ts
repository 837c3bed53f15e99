import { createHash } from 'node:crypto';
import {
  BackendError,
  BackendUnavailableError,
  DeadboltError,
  InvalidArgumentError,
  LimitMismatchError,
  type Capabilities,
  type LockBackend,
} from '@deadbolt/core';
import {
  AGAIN,
  cancelOnAbort,
  InFlight,
  Once,
  grantable,
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
import { createPool, escapeId, type Pool, type PoolConnection, type ResultSetHeader, type RowDataPacket } from 'mysql2/promise';
import * as sql from './queries.js';

export interface MysqlBackendOptions {
  /** `mysql://user[:password]@host:port/database`. The backend creates (and closes) its own pool. */
  url?: string;
  /** Your own mysql2/promise pool; `close()` leaves it open. Used instead of `url`. */
  client?: Pool;
  /** Table name (created if absent). Default `deadbolt_locks`. */
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

const STATEMENTS = [
  'createTable',
  'acquire',
  'renew',
  'release',
  'sessionToken',
  'sessionTokenFirst',
  'sessionDelayLeft',
  'sessionDelayMark',
  'raiseFloor',
] as const;
type Statements = Record<(typeof STATEMENTS)[number], string>;
const SHARED_STATEMENTS = [
  'createSharedKeys',
  'createSharedClaims',
  'sharedKeyRow',
  'sharedLockKey',
  'sharedPurge',
  'sharedQueue',
  'sharedNextToken',
  'sharedInsert',
  'sharedRenew',
  'sharedRelease',
  'sharedRaiseFloor',
] as const;
type SharedStatements = Record<(typeof SHARED_STATEMENTS)[number], string>;

/** Server errors an attempt at a shared claim retries: a deadlock or lock wait timeout rolled it back. */
const RETRY_ERRNOS = new Set([1205, 1213]);

export interface MysqlLease extends Lease {
  readonly hash: Buffer;
  /** A semaphore permit or read-write lock (lease mode). */
  readonly shared?: true;
  /** Session mode: the connection holding the named lock, and the lock's name. */
  readonly connection?: PoolConnection;
  readonly lockName?: string;
  /** Session mode: the holder asked for lock-delay, so its marker is renewed and cleared with it. */
  readonly lockDelay?: true;
}

const noop = () => undefined;

/** How each option of `mysqlBackend` is checked (see core's options.ts); the conformance suite feeds it hostile values. */
export const mysqlOptionRules = {
  url: url(['mysql']),
  client: instance(
    (v): v is Pool => typeof (v as Pool | null)?.getConnection === 'function' && typeof (v as Pool).query === 'function',
    'a mysql2/promise Pool',
  ),
  // The backend adds `_shared_keys` (12 characters) for its own tables; MySQL names stop at 64.
  table: text(/^[A-Za-z_][A-Za-z0-9_]{0,51}$/, 'a plain identifier (letters, digits, _; at most 52 characters)', [
    '',
    '1abc',
    'a-b',
    'x'.repeat(53),
    'a;DROP',
  ]),
  maxPollDelayMs: ms(),
  connectTimeoutMs: ms(),
  mode: oneOf(['lease', 'session']),
  connectionLimit: count(1, 100_000),
  commandTimeoutMs: ms(),
} satisfies Rules<MysqlBackendOptions>;

/** Server error numbers that mean the connection, not the statement, failed. */
const UNAVAILABLE_ERRNOS = new Set([1040, 1053, 2002, 2003, 2006, 2013, 1927]);

/**
 * MySQL / MariaDB lease backend. One row per key holds the owner, the lease end by the server's
 * clock, and the fencing counter; acquire, renew and release are one statement each (two on a
 * key's first use). Waiters poll with core's jittered backoff and are woken at once by releases
 * in the same process. Session mode (`GET_LOCK` on a connection per lock) waits in the server
 * instead, first come first served.
 */
export class MysqlBackend implements LockBackend<MysqlLease> {
  readonly name = 'mysql';
  readonly capabilities: Capabilities;
  readonly mode: 'lease' | 'session';
  readonly client: Pool;
  /** Server thread ids of this backend's open connections (for diagnostics and fault tests). */
  readonly threadIds = new Set<number>();
  readonly #ownsClient: boolean;
  readonly #maxPollDelayMs: number;
  readonly #commandTimeoutMs: number;
  /** How long a session-mode waiter rides out failures to get a connection: two connect timeouts. */
  readonly #connectGraceMs: number;
  /** Connections destroyed after a timeout or a connection error: never handed back to the pool. */
  readonly #broken = new WeakSet<PoolConnection>();
  /** Idle connections that sat through a silence are dropped when taken (the mysql2 pool wraps each checkout anew). */
  readonly #stranded = new StrandedConnections<PoolConnection>((c) => c.connection);
  /** Session leases already released: their connection is back in the pool. */
  readonly #releasedSessions = new WeakSet<Lease>();
  readonly #notifier = new ReleaseNotifier();
  readonly #acquiring: InFlight;
  readonly #sql: Statements;
  readonly #sharedSql: SharedStatements;
  readonly #table: string;
  /**
   * Session mode: what every named lock of this backend is named after, besides its key: the
   * database and table. Named locks are server-wide, so two applications (or the two sides of a
   * migration) on one server with other tables must not share them. Read once, with the tables.
   */
  #lockSpace: string | undefined;
  /** The tables, and this backend's lock-name space (which needs the database's name): once, again after a failure. */
  readonly #tables = new Once(async () => {
    await Promise.all([
      this.#run('create table', this.#sql.createTable, []),
      this.#run('create table', this.#sharedSql.createSharedKeys, []),
      this.#run('create table', this.#sharedSql.createSharedClaims, []),
      this.#run<RowDataPacket[]>('create table', sql.database, []).then((rows) => {
        this.#lockSpace = `${String(rows[0]?.['db'] ?? '')}\0${this.#table}\0`;
      }),
    ]);
  });
  #closed = false;

  /** @throws InvalidArgumentError for bad options (before connecting). */
  constructor(raw: MysqlBackendOptions) {
    const options = readOptions(raw, mysqlOptionRules, 'mysqlBackend');
    const table = options.table ?? 'deadbolt_locks';
    this.#table = table;
    const mode = options.mode ?? 'lease';
    this.mode = mode;
    this.capabilities =
      mode === 'lease'
        ? {
            fencing: 'strict',
            fairness: 'none',
            lease: 'ttl',
            wake: 'poll',
            minTtlMs: 1,
            ttlGranularityMs: 1,
            crossProcess: true,
            minToken: true,
            semaphore: true,
            readWrite: true,
          }
        : // wait_timeout is in whole seconds; a waiter blocks inside GET_LOCK and wakes when the lock
          // frees. The server queues a name's waiters in arrival order and hands a freed lock to the
          // first (its metadata-lock queue appends each waiter at the back): FIFO, checked by 13a/13b.
          {
            fencing: 'strict',
            fairness: 'fifo',
            lease: 'session',
            wake: 'push',
            minTtlMs: 1000,
            ttlGranularityMs: 1000,
            crossProcess: true,
            minToken: true,
          };
    this.#maxPollDelayMs = options.maxPollDelayMs ?? 250;
    this.#commandTimeoutMs = options.commandTimeoutMs ?? 5000;
    this.#acquiring = new InFlight(this.#commandTimeoutMs);
    const connectTimeoutMs = options.connectTimeoutMs ?? 2000;
    this.#connectGraceMs = 2 * connectTimeoutMs;
    const store = urlOrClient(options, 'mysqlBackend', 'mysql://user@host:port/db');
    if (store.client) {
      this.client = store.client;
      this.#ownsClient = false;
    } else {
      const url = store.url;
      if (url.hosts.length !== 1) throw new InvalidArgumentError('url must name one MySQL server');
      this.client = createPool({
        uri: url.href,
        connectTimeout: connectTimeoutMs,
        connectionLimit: options.connectionLimit ?? (mode === 'session' ? 200 : 10),
        supportBigNumbers: true,
      });
      this.#ownsClient = true;
    }
    const id = escapeId(table);
    this.#sql = Object.fromEntries(STATEMENTS.map((k) => [k, sql[k].replace('??', id)])) as Statements;
    const names = { keys: escapeId(`${table}_shared_keys`), claims: escapeId(`${table}_shared`) };
    this.#sharedSql = Object.fromEntries(
      SHARED_STATEMENTS.map((k) => [k, sql[k].replace(/\{(keys|claims)\}/g, (_, n: keyof typeof names) => names[n])]),
    ) as SharedStatements;
    // Track connections so a fault test can KILL exactly this backend's ones.
    this.client.pool.on('connection', (conn) => {
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

  /**
   * The `GET_LOCK` name of a key in session mode: a digest of this backend's database, table and
   * the key (the server caps names at 64 characters, and they are server-wide). After the first
   * acquisition (which reads the database) only.
   */
  lockName(key: string): string {
    if (this.#lockSpace === undefined)
      throw new BackendError(this.name, 'lock name', { cause: new Error('the backend has not reached its server yet') });
    return `deadbolt:${createHash('sha256').update(this.#lockSpace).update(key).digest('base64url')}`;
  }

  /**
   * Session mode: the server thread (connection id) that holds `key`'s named lock, or null. For
   * diagnostics and fault injection: `KILL` it and the holder loses its lock as a crashed one would.
   * @throws BackendUnavailableError / BackendError when the server fails.
   */
  async holderThread(key: string): Promise<number | null> {
    await this.#tables.run();
    const rows = await this.#run<RowDataPacket[]>('holder', sql.holderThread, [this.lockName(key)]);
    return (rows[0]?.['thread'] as number | null | undefined) ?? null;
  }

  acquire(req: AcquireRequest): Promise<MysqlLease | null> {
    return this.#acquiring.track(this.#acquire(req));
  }

  /** Lease mode only (the capabilities say so); see the shared statements in queries.ts. */
  acquireShared(req: SharedRequest): Promise<MysqlLease | null> {
    return this.#acquiring.track(this.#acquireShared(req));
  }

  async #acquireShared(req: SharedRequest): Promise<MysqlLease | null> {
    if (this.mode === 'session') throw new BackendError(this.name, 'acquire', { cause: new Error('session mode has no shared claims') });
    const hash = MysqlBackend.hash(req.key);
    if (!req.wait) return this.#sharedAttempt(req, hash);
    try {
      return await pollForLease(
        `shared:${req.key}`,
        req.signal,
        () => this.#sharedAttempt(req, hash),
        (lease) => this.release(lease),
        {
          notifier: this.#notifier,
          maxDelayMs: waiterCadence(req.ttlMs, this.#maxPollDelayMs).pollMs,
        },
      );
    } catch (error) {
      // Leave the queue before reporting the abort or failure: nothing of this waiter stays behind
      // (again later if the store is out of reach: `InFlight.leave`).
      await this.#acquiring.leave(() => this.#run('release', this.#sharedSql.sharedRelease, [hash, req.owner]), req.ttlMs);
      throw error;
    }
  }

  /**
   * One attempt at a shared claim: join the queue (or refresh our place) and judge it by the rule,
   * in one transaction under the key's row lock. A one-shot attempt that is not granted rolls back,
   * leaving nothing. A deadlock or lock wait timeout (the transaction rolled back whole) counts as
   * "not yet" for a waiter and is tried again at once, a few times, for a one-shot attempt.
   */
  async #sharedAttempt(req: SharedRequest, hash: Buffer, tries = 1): Promise<MysqlLease | null> {
    await this.#tables.run(); // in each attempt, so a wait rides out a failed first try like any other
    const q = this.#sharedSql;
    await this.#run('acquire', q.sharedKeyRow, [hash, req.limit]);
    try {
      return await this.#keyTransaction('acquire', hash, async (connection, stored) => {
        const acquiredAt = performance.now();
        await this.#on(connection, q.sharedPurge, [hash]);
        let queue = (await this.#on<RowDataPacket[]>(connection, q.sharedQueue, [hash])).map((r) => ({
          owner: r['owner'] as string,
          token: BigInt(r['token'] as string | number),
          mode: r['exclusive'] ? ('exclusive' as const) : ('shared' as const),
        }));
        let mine = queue.find((c) => c.owner === req.owner);
        if (!mine) {
          if (queue.length > 0 && stored !== req.limit) throw new LimitMismatchError(req.key, stored, req.limit);
          const next = await this.#on<ResultSetHeader>(connection, q.sharedNextToken, [(req.minToken ?? 0n).toString(), req.limit, hash]);
          mine = { owner: req.owner, token: BigInt(next.insertId), mode: req.mode };
          await this.#on(connection, q.sharedInsert, [hash, req.owner, mine.token.toString(), req.mode === 'exclusive', req.ttlMs * 1000]);
          queue = [...queue, mine];
        }
        const ok = grantable(queue, queue.indexOf(mine), req.limit);
        if (!ok && !req.wait) return { commit: false, value: null };
        // A waiter's place lasts about a ttl past each attempt (core's waiterCadence).
        const ttlMs = ok ? req.ttlMs : waiterCadence(req.ttlMs, this.#maxPollDelayMs).placeMs;
        await this.#on(connection, q.sharedRenew, [ttlMs * 1000, hash, req.owner]);
        return {
          commit: true,
          value: ok ? { key: req.key, owner: req.owner, token: mine.token, acquiredAt, hash, shared: true as const } : null,
        };
      });
    } catch (error) {
      if (RETRY_ERRNOS.has((error as { cause?: { errno?: number } }).cause?.errno ?? 0)) {
        // Rolled back whole: a waiter simply looks again later; a one-shot attempt tries again now.
        if (req.wait) return null;
        if (tries < 5) return this.#sharedAttempt(req, hash, tries + 1);
      }
      throw error;
    }
  }

  /**
   * `body` in one READ COMMITTED transaction that first locks the shared key's row (so a key's
   * transactions run one at a time, and each statement sees every claim committed before it),
   * committed or rolled back as `body` says. @throws the typed error of any failure (rolled back).
   */
  async #keyTransaction<T>(
    operation: string,
    hash: Buffer,
    body: (connection: PoolConnection, storedLimit: number) => Promise<{ commit: boolean; value: T }>,
  ): Promise<T> {
    let connection: PoolConnection;
    try {
      connection = await withTimeout(
        this.#connection(),
        2 * this.#commandTimeoutMs,
        () => noAnswer(this.name, 'connect', 2 * this.#commandTimeoutMs),
        (late) => late.release(),
      );
    } catch (error) {
      throw this.#wrap(operation, error);
    }
    let open = false;
    try {
      await this.#on(connection, 'SET TRANSACTION ISOLATION LEVEL READ COMMITTED', []);
      await this.#on(connection, 'START TRANSACTION', []);
      open = true;
      const row = (await this.#on<RowDataPacket[]>(connection, this.#sharedSql.sharedLockKey, [hash]))[0];
      const { commit, value } = await body(connection, Number(row?.['claim_limit'] ?? -1));
      await this.#on(connection, commit ? 'COMMIT' : 'ROLLBACK', []);
      open = false;
      return value;
    } catch (error) {
      if (open && !this.#broken.has(connection)) await connection.query('ROLLBACK').catch(() => undefined);
      throw this.#wrap(operation, error);
    } finally {
      if (!this.#broken.has(connection)) connection.release();
    }
  }

  async #acquire(req: AcquireRequest): Promise<MysqlLease | null> {
    const hash = MysqlBackend.hash(req.key);
    if (this.mode === 'session') return this.#acquireSession(req, hash);
    if (!req.wait) return this.#attempt(req, hash);
    return pollForLease(
      req.key,
      req.signal,
      () => this.#attempt(req, hash),
      (lease) => this.release(lease),
      {
        notifier: this.#notifier,
        maxDelayMs: waiterCadence(req.ttlMs, this.#maxPollDelayMs).pollMs,
      },
    );
  }

  async renew(lease: MysqlLease, ttlMs: number): Promise<boolean> {
    const { connection, lockName } = lease;
    if (lease.shared)
      return (await this.#runRetried('renew', this.#sharedSql.sharedRenew, [ttlMs * 1000, lease.hash, lease.owner])).affectedRows === 1;
    if (connection && lockName) {
      // Any statement resets the server's idle clock; this one also proves we still hold the lock.
      const mine = await this.#onSession(lease, 'renew', async (held) => {
        await this.#on(held, sql.sessionIdleLimit, [ttlMs / 1000]);
        const ours = (await this.#on<RowDataPacket[]>(held, sql.holdsLock, [lockName]))[0]?.mine === 1;
        if (ours && lease.lockDelay)
          await this.#on(held, this.#sql.sessionDelayMark, [ttlMs * 1000, ttlMs * 1000, lease.hash, lease.owner]);
        return ours;
      });
      return mine === true;
    }
    const result = await this.#run('renew', this.#sql.renew, [ttlMs * 1000, lease.hash, lease.owner]);
    return result.affectedRows === 1;
  }

  async release(lease: MysqlLease): Promise<void> {
    const { connection, lockName } = lease;
    if (lease.shared) {
      const result = await this.#runRetried('release', this.#sharedSql.sharedRelease, [lease.hash, lease.owner]);
      if (result.affectedRows === 1) this.#notifier.notify(`shared:${lease.key}`);
      return;
    }
    if (connection && lockName) {
      // Once only: the connection goes back to the pool, where it may soon hold another lease's
      // named lock (of the same key, even), which a second RELEASE_LOCK on it would free.
      if (this.#releasedSessions.has(lease)) return;
      this.#releasedSessions.add(lease);
      // A release is not a loss: clear our lock-delay marker first, so the next holder does not wait.
      if (lease.lockDelay) await this.#on(connection, this.#sql.sessionDelayMark, [0, 0, lease.hash, lease.owner]).catch(noop);
      return this.#releaseSession(connection, lockName, lease.key);
    }
    const result = await this.#run('release', this.#sql.release, [lease.hash, lease.owner]);
    if (result.affectedRows === 1) this.#notifier.notify(lease.key);
  }

  async raiseTokenFloor(lease: MysqlLease, floor: bigint): Promise<boolean> {
    const { connection, hash } = lease;
    if (lease.shared) {
      return this.#keyTransaction('raise token floor', hash, async (held) => {
        const result = await this.#on<ResultSetHeader>(held, this.#sharedSql.sharedRaiseFloor, [floor.toString(), hash, hash, lease.owner]);
        return { commit: true, value: result.affectedRows === 1 };
      });
    }
    const params = [floor.toString(), hash, lease.owner];
    if (!connection) return (await this.#run('raise token floor', this.#sql.raiseFloor, params)).affectedRows === 1;
    const raised = await this.#onSession(
      lease,
      'raise token floor',
      async (held) => (await this.#on<ResultSetHeader>(held, this.#sql.raiseFloor, params)).affectedRows === 1,
    );
    return raised === true;
  }

  /**
   * Statements on a held session lease's own connection; undefined when the lease is gone: it was
   * released (the pool has its connection back, maybe holding another lease's named lock), or the
   * connection died, taking the named lock with it.
   */
  async #onSession<T>(
    lease: MysqlLease,
    operation: string,
    statements: (connection: PoolConnection) => Promise<T>,
  ): Promise<T | undefined> {
    if (this.#releasedSessions.has(lease)) return undefined;
    try {
      return await statements(lease.connection!);
    } catch (error) {
      if (this.#classify(error) === 'unavailable') return undefined;
      throw this.#wrap(operation, error);
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // Aborted acquisitions finish removing what they wrote first, unless the server went silent.
    await this.#acquiring.settled();
    if (this.#ownsClient) await this.client.end().catch(() => undefined);
  }

  async #attempt(req: AcquireRequest, hash: Buffer): Promise<MysqlLease | null> {
    await this.#tables.run(); // in each attempt, so a wait rides out a failed first try like any other
    const acquiredAt = performance.now();
    const micros = req.ttlMs * 1000;
    const keyBytes = Buffer.from(req.key, 'utf8');
    const least = (req.minToken ?? 0n).toString();
    const result = await this.#run('acquire', this.#sql.acquire, [hash, keyBytes, req.owner, micros, least, least]);
    // Insert id 0: the row is held (see queries.ts).
    if (!result.insertId) return null;
    return { key: req.key, owner: req.owner, token: BigInt(result.insertId), acquiredAt, hash };
  }

  /**
   * Session mode: `GET_LOCK` on a connection of its own. A wait whose connection is reset (the
   * server or a middlebox cut it) kills what may be left of it on the server and waits again on a
   * new connection, for as long as the caller's deadline allows; it fails only when no new
   * connection can be had. An abort at any point, also while a connection is being set up, ends
   * the wait without starting a `GET_LOCK`.
   */
  async #acquireSession(req: AcquireRequest, hash: Buffer): Promise<MysqlLease | null> {
    // A waiter whose connection could not be had in time (250 waiters opening 200 connections at
    // once took over 2 s on the loaded 2-core CI machine) tries again while such failures have
    // lasted less than two connect timeouts; a cut connection waits again on a new one.
    return waitOnConnections(req.wait, req.signal, this.#connectGraceMs, () => this.#sessionAttempt(req, hash));
  }

  async #sessionAttempt(req: AcquireRequest, hash: Buffer): Promise<MysqlLease | null | typeof AGAIN> {
    await this.#tables.run(); // in each attempt, so a wait rides out a failed first try like any other
    const lockName = this.lockName(req.key);
    let connection: PoolConnection;
    try {
      connection = await raceSignal(this.#connection(), req.signal, (late) => late.release());
    } catch (error) {
      if (req.signal.aborted) throw req.signal.reason;
      throw this.#wrap('acquire', error);
    }
    let held = false;
    try {
      await this.#on(connection, sql.sessionIdleLimit, [req.ttlMs / 1000]);
      // Checked before every listener: one added to an already-aborted signal never runs.
      req.signal.throwIfAborted();
      // A waiter blocks inside the server; aborting it is a KILL QUERY from another connection.
      const stopKilling = req.wait
        ? cancelOnAbort(req.signal, () => this.client.query('KILL QUERY ?', [connection.threadId]))
        : () => undefined;
      let got: unknown;
      try {
        const blocked = connection.execute<RowDataPacket[]>(sql.getLock, [lockName, req.wait ? 365 * 24 * 3600 : 0]);
        // A waiter's connection may go silent for good while it blocks: watched from the pool.
        const thread = connection.threadId;
        const [rows] = req.wait
          ? await watchBlocked(this.name, blocked, () => this.#waitStranded(lockName, thread), this.#commandTimeoutMs)
          : await blocked;
        got = rows[0]?.got;
      } catch (error) {
        if (!req.signal.aborted) {
          if (!req.wait || this.#classify(error) !== 'unavailable') throw error;
          // The server may not notice the cut until it writes the answer: end that thread now so
          // it cannot take the lock for a client that is gone.
          void this.client.query('KILL ?', [connection.threadId]).catch(() => undefined);
          connection.destroy();
          return AGAIN;
        }
      } finally {
        stopKilling();
      }
      held = got === 1;
      req.signal.throwIfAborted();
      if (!held) {
        if (req.wait) throw new BackendError(this.name, 'acquire', { cause: new Error(`GET_LOCK returned ${String(got)}`) });
        await this.#releaseSession(connection, lockName, req.key, false);
        return null;
      }
      const keyBytes = Buffer.from(req.key, 'utf8');
      const least = (req.minToken ?? 0n).toString();
      const mark = req.lockDelayMs ? req.ttlMs * 1000 : 0;
      for (let ranOut = false; ;) {
        // The server's idle clock restarts with each statement: count the lease from this one.
        const acquiredAt = performance.now();
        let result = await this.#on<ResultSetHeader>(connection, this.#sql.sessionToken, [least, req.owner, mark, mark, hash, keyBytes]);
        if (result.affectedRows !== 1) {
          const leftMs = await this.#delayLeft(connection, hash);
          if (leftMs > 0) {
            await sleep(Math.min(leftMs, req.ttlMs / 3), req.signal);
            continue;
          }
          // 0: the marker ran out between the two statements, so the next update lands (once: a row
          // that still refuses it holds another key under our hash, and the insert reports that).
          if (leftMs === 0 && !ranOut) {
            ranOut = true;
            continue;
          }
          result = await this.#on<ResultSetHeader>(connection, this.#sql.sessionTokenFirst, [hash, keyBytes, req.owner, mark, mark, least]);
        }
        return {
          key: req.key,
          owner: req.owner,
          token: BigInt(result.insertId),
          acquiredAt,
          hash,
          connection,
          lockName,
          ...(mark ? { lockDelay: true as const } : {}),
        };
      }
    } catch (error) {
      if (!this.#broken.has(connection)) await this.#releaseSession(connection, lockName, req.key, held).catch(() => undefined);
      if (req.signal.aborted) throw req.signal.reason;
      throw this.#wrap('acquire', error);
    }
  }

  /** Whether the named lock `thread` blocks on is already its own or free, or `thread` is gone: its answer should have come. */
  async #waitStranded(lockName: string, thread: number): Promise<boolean> {
    const [row] = await this.#run<RowDataPacket[]>('watch', sql.waitState, [lockName, thread]);
    return !Number(row?.['alive']) || row?.['holder'] === null || Number(row?.['holder']) === thread;
  }

  /**
   * Lock-delay in session mode: the server frees a named lock the moment its connection closes (a
   * killed process), so a holder that asked for lock-delay leaves a marker in the key's row, renewed
   * with its session and cleared by its release. Having won the named lock, we take the token only
   * once the previous holder's marker has run out (every acquirer does, whatever its own setting),
   * the statements meanwhile keeping our own connection from its idle limit. This tells how long
   * the marker still runs: ms, 0 if none, -1 when the key has no row yet.
   */
  async #delayLeft(connection: PoolConnection, hash: Buffer): Promise<number> {
    const rows = await this.#on<RowDataPacket[]>(connection, this.#sql.sessionDelayLeft, [hash]);
    return rows[0] ? Number(rows[0]['left_us'] ?? 0) / 1000 : -1;
  }

  /** Give the named lock back and return the connection to the pool as it was (or drop it if it broke). */
  async #releaseSession(connection: PoolConnection, lockName: string, key: string, held = true): Promise<void> {
    try {
      await (held ? this.#on(connection, sql.releaseLock, [lockName]) : this.#on(connection, sql.sessionIdleReset, []));
      connection.release();
      this.#notifier.notify(key);
    } catch (error) {
      connection.destroy(); // the server frees every named lock of a closed connection
      if (this.#classify(error) !== 'unavailable') throw new BackendError(this.name, 'release', { cause: error });
    }
  }

  /**
   * `#run` for a statement on one claim row that InnoDB may pick as a deadlock victim against a
   * key's attempt transaction (it locks the row's index entries in another order): the statement
   * was rolled back whole, so it is simply sent again, a few times.
   */
  async #runRetried(operation: string, statement: string, params: unknown[]): Promise<ResultSetHeader> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.#run(operation, statement, params);
      } catch (error) {
        if (attempt >= 5 || !RETRY_ERRNOS.has((error as { cause?: { errno?: number } }).cause?.errno ?? 0)) throw error;
      }
    }
  }

  /** A connection from the pool, past any that may have been stranded (`StrandedConnections`). */
  #connection(): Promise<PoolConnection> {
    return this.#stranded.take(
      () => this.client.getConnection(),
      (connection) => connection.destroy(),
    );
  }

  /** One statement on a pooled connection, bounded by the command timeout. */
  async #run<T extends ResultSetHeader | RowDataPacket[] = ResultSetHeader>(
    operation: string,
    statement: string,
    params: unknown[],
  ): Promise<T> {
    let connection: PoolConnection;
    try {
      // A pool whose connections all hang waits here; they are destroyed within a command timeout.
      connection = await withTimeout(
        this.#connection(),
        2 * this.#commandTimeoutMs,
        () => noAnswer(this.name, 'connect', 2 * this.#commandTimeoutMs),
        (late) => late.release(),
      );
    } catch (error) {
      throw this.#wrap(operation, error);
    }
    try {
      const result = await this.#on<T>(connection, statement, params);
      connection.release();
      return result;
    } catch (error) {
      if (!this.#broken.has(connection)) connection.release();
      throw this.#wrap(operation, error);
    }
  }

  /**
   * One statement on `connection`, bounded by the command timeout. A connection that times out or
   * fails as a connection is destroyed: its late answer must never be read as another statement's.
   */
  async #on<T extends ResultSetHeader | RowDataPacket[]>(connection: PoolConnection, statement: string, params: unknown[]): Promise<T> {
    // `SET` and transaction control cannot be prepared: they go as text.
    const sentAt = performance.now();
    const sent = /^(SET|START|COMMIT|ROLLBACK)\b/.test(statement)
      ? connection.query<T>(statement, params)
      : connection.execute<T>(statement, params as never[]);
    try {
      const [result] = await withTimeout(sent, this.#commandTimeoutMs, () => {
        this.#stranded.silent(sentAt);
        return noAnswer(this.name, 'statement', this.#commandTimeoutMs);
      });
      this.#stranded.answered(connection);
      return result;
    } catch (error) {
      if (this.#classify(error) === 'unavailable') {
        this.#broken.add(connection);
        connection.destroy();
      }
      throw error;
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

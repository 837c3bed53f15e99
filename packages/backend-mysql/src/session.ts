// Session mode's statements: a named lock (`GET_LOCK`) held by a connection of its own, which the
// server frees when that connection closes or stays idle past the ttl (`wait_timeout`). The key's
// row supplies only the fencing counter and the lock-delay marker. Core's `SessionLocks` runs the
// lock's life; this says what each step is on MySQL / MariaDB.
import { type AcquireRequest } from '@deadbolt/core/backend';
import { type BlockedWait, type SessionDialect, type SessionLease } from '@deadbolt/core/sql';
import type { PoolConnection, ResultSetHeader, RowDataPacket } from 'mysql2/promise';
import { MysqlStore } from './store.js';

/** A held session lock: its connection, and the named lock's name. */
export type MysqlSessionLease = SessionLease<PoolConnection, string>;

/** A wait in `GET_LOCK` has no end of its own: the engine watches and cancels it. */
const A_YEAR_S = 365 * 24 * 3600;

export class MysqlSessions implements SessionDialect<PoolConnection, string> {
  readonly name = 'mysql';
  readonly poolSize: number;
  readonly #store: MysqlStore;

  constructor(store: MysqlStore, poolSize: number) {
    this.#store = store;
    this.poolSize = poolSize;
  }

  idleConnections(): number {
    return this.#store.idleConnections();
  }

  ready(): Promise<void> {
    return this.#store.tables.run();
  }

  connect(): Promise<PoolConnection> {
    return this.#store.connection();
  }

  giveBack(connection: PoolConnection, error?: unknown): void {
    this.#store.giveBack(connection, error);
  }

  async prepare(connection: PoolConnection, key: string, ttlMs: number): Promise<string> {
    // The server closes an idle connection (so frees its lock) after `wait_timeout` seconds.
    await this.#store.on(connection, this.#store.sql.sessionIdleLimit, [ttlMs / 1000]);
    return this.#store.lockName(key);
  }

  async tryLock(connection: PoolConnection, lockName: string): Promise<boolean> {
    return (await this.#store.on<RowDataPacket[]>(connection, this.#store.sql.getLock, [lockName, 0]))[0]?.['got'] === 1;
  }

  async waitLock(connection: PoolConnection, lockName: string): Promise<boolean> {
    const [rows] = await connection.execute<RowDataPacket[]>(this.#store.sql.getLock, [lockName, A_YEAR_S]);
    return rows[0]?.['got'] === 1;
  }

  cancelWait(connection: PoolConnection): Promise<unknown> {
    return this.#store.client.query('KILL QUERY ?', [connection.threadId]);
  }

  async waitsStranded(waits: ReadonlyArray<BlockedWait<PoolConnection, string>>): Promise<boolean[]> {
    const pairs = JSON.stringify(waits.map((w) => [w.connection.threadId, w.lock]));
    const rows = await this.#store.run<RowDataPacket[]>('watch', this.#store.sql.waitStates, [pairs]);
    const stranded = waits.map(() => false); // one missing from the answer counts as a failed check: a no
    for (const row of rows) {
      stranded[Number(row['i']) - 1] = !Number(row['alive']) || row['holder'] === null || Number(row['holder']) === Number(row['id']);
    }
    return stranded;
  }

  abandon(connection: PoolConnection): void {
    // The server may not notice the cut until it writes the answer: end that thread now, so that
    // it cannot take the lock for a client that is gone.
    void this.#store.client.query('KILL ?', [connection.threadId]).catch(() => undefined);
  }

  async unlock(connection: PoolConnection, lockName: string): Promise<void> {
    await this.#store.on(connection, this.#store.sql.releaseLock, [lockName]);
  }

  async reset(connection: PoolConnection): Promise<void> {
    await this.#store.on(connection, this.#store.sql.sessionIdleReset, []);
  }

  /**
   * One statement in the common handoff: it takes the token unless a previous holder's lock-delay
   * marker still runs. When it changes nothing, the marker's time left tells why: still running
   * (wait), just run out (once more), or the key's first use (insert the row).
   */
  async takeToken(
    connection: PoolConnection,
    req: AcquireRequest,
    _lockName: string,
    markMs: number,
  ): Promise<bigint | { waitMs: number }> {
    const { sql } = this.#store;
    const hash = MysqlStore.hash(req.key);
    const keyBytes = Buffer.from(req.key, 'utf8');
    const least = (req.minToken ?? 0n).toString();
    const mark = markMs * 1000;
    for (let ranOut = false; ; ranOut = true) {
      const result = await this.#store.on(connection, sql.sessionToken, [least, req.owner, mark, mark, hash, keyBytes]);
      if (result.affectedRows === 1) return BigInt(result.insertId);
      const rows = await this.#store.on<RowDataPacket[]>(connection, sql.sessionDelayLeft, [hash]);
      const leftMs = rows[0] ? Number(rows[0]['left_us'] ?? 0) / 1000 : -1;
      if (leftMs > 0) return { waitMs: leftMs };
      // 0: the marker ran out between the two statements, so the update lands now (once: a row
      // that still refuses it holds another key under our hash, and the insert reports that).
      if (leftMs === 0 && !ranOut) continue;
      const first = await this.#store.on<ResultSetHeader>(connection, sql.sessionTokenFirst, [
        hash,
        keyBytes,
        req.owner,
        mark,
        mark,
        least,
      ]);
      return BigInt(first.insertId);
    }
  }

  async keepAlive(connection: PoolConnection, lockName: string, ttlMs: number): Promise<boolean> {
    // Any statement resets the server's idle clock; this one also proves we still hold the lock.
    await this.#store.on(connection, this.#store.sql.sessionIdleLimit, [ttlMs / 1000]);
    return (await this.#store.on<RowDataPacket[]>(connection, this.#store.sql.holdsLock, [lockName]))[0]?.['mine'] === 1;
  }

  markDelay(lease: MysqlSessionLease, ms: number): Promise<unknown> {
    return this.#store.on(lease.connection, this.#store.sql.sessionDelayMark, [
      ms * 1000,
      ms * 1000,
      MysqlStore.hash(lease.key),
      lease.owner,
    ]);
  }

  async raiseFloor(lease: MysqlSessionLease, floor: bigint): Promise<boolean> {
    const params = [floor.toString(), MysqlStore.hash(lease.key), lease.owner];
    return (await this.#store.on(lease.connection, this.#store.sql.raiseFloor, params)).affectedRows === 1;
  }

  unavailable(error: unknown): boolean {
    return this.#store.unavailable(error);
  }

  error(operation: string, error: unknown): Error {
    return this.#store.error(operation, error);
  }
}

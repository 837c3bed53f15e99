// Session mode's statements: `pg_advisory_lock(namespace, id)` on a connection of its own, `id` the
// key's row id (unique per key: no two keys share a lock, however long); the server frees the lock
// when the connection dies or stays idle past the ttl (`idle_session_timeout`). The key's row
// supplies the fencing counter and the lock-delay marker. Core's `SessionLocks` runs the lock's
// life; this says what each step is on PostgreSQL.
import { BackendError } from '@deadbolt/core';
import { Once, type AcquireRequest } from '@deadbolt/core/backend';
import { type BlockedWait, type SessionDialect, type SessionLease } from '@deadbolt/core/sql';
import type { PoolClient } from 'pg';
import { PostgresStore } from './store.js';

/** A held session lock: its connection, and the advisory lock's id. */
export type PostgresSessionLease = SessionLease<PoolClient, number>;

/** How many keys' advisory lock ids a backend remembers. */
const KEY_ID_CACHE = 1000;

export class PostgresSessions implements SessionDialect<PoolClient, number> {
  readonly name = 'postgres';
  readonly poolSize: number;
  readonly #store: PostgresStore;
  /** Advisory lock ids of recently used keys (base64 of the key → id). */
  readonly #ids = new Map<string, number>();

  constructor(store: PostgresStore) {
    this.#store = store;
    this.poolSize = store.client.options.max ?? 10;
  }

  idleConnections(): number {
    return this.#store.client.idleCount;
  }

  /** Why session locks cannot work through this backend's connections, once found. */
  #refused: Error | undefined;
  readonly #ready = new Once(async () => {
    await this.#store.tables.run();
    if (this.#store.pooled && (await this.#store.sharesSessions()))
      this.#refused = new BackendError(this.name, 'acquire', {
        cause: new Error(
          'session mode holds each lock in a server session, and the connection pooler between this client and PostgreSQL ' +
            '(PgBouncer with pool_mode transaction or statement, or another) shares server sessions between its clients: ' +
            'a lock would be held for whoever runs on that session next. Use mode "lease" through the pooler, or connect ' +
            'session mode to PostgreSQL directly or through session pooling',
        ),
      });
  });

  /** The tables, and (behind a pooler) whether it keeps each client on one server session. @throws BackendError when it does not */
  async ready(): Promise<void> {
    await this.#ready.run();
    if (this.#refused) throw this.#refused;
  }

  /** A connection; behind a (session) pooler, its server process is asked now, while it is free to answer. */
  async connect(): Promise<PoolClient> {
    const client = await this.#store.connection();
    if (!this.#store.pooled) return client;
    try {
      await this.#store.serverPid(client);
      return client;
    } catch (error) {
      client.release(error instanceof Error ? error : new Error(String(error)));
      throw error;
    }
  }

  giveBack(client: PoolClient, error?: unknown): void {
    client.release(error === undefined ? undefined : error instanceof Error ? error : new Error(String(error)));
  }

  /**
   * The key's advisory lock id (its row's), creating the row on first use. Remembered for the most
   * recent KEY_ID_CACHE keys; a remembered id is checked by the token statement that follows the
   * lock (the row must still have it), so a table emptied meanwhile costs one more try, never a
   * lock under another key's id.
   */
  async prepare(client: PoolClient, key: string): Promise<number> {
    const cached = this.#ids.get(key);
    if (cached !== undefined) return cached;
    for (let attempt = 0; attempt < 3; attempt++) {
      // No row when another connection created it concurrently (invisible to our snapshot): look again.
      const id = (await this.#store.on(client, this.#store.sql.keyId, [Buffer.from(key, 'utf8')])).rows[0]?.['id'];
      if (id === undefined) continue;
      const n = Number(id);
      if (n > 0x7fffffff)
        throw new BackendError(this.name, 'acquire', { cause: new Error(`key id ${n} is beyond the advisory lock's 32-bit key`) });
      this.#ids.set(key, n);
      if (this.#ids.size > KEY_ID_CACHE) this.#ids.delete(this.#ids.keys().next().value!);
      return n;
    }
    throw new BackendError(this.name, 'acquire', { cause: new Error('the key row could not be read') });
  }

  async tryLock(client: PoolClient, id: number, ttlMs: number): Promise<boolean> {
    return (await this.#store.on(client, this.#store.sql.lockTry, [this.#store.namespace, id, `${ttlMs}ms`])).rows[0]?.['got'] === true;
  }

  async waitLock(client: PoolClient, id: number, ttlMs: number): Promise<boolean> {
    return (await client.query(this.#store.sql.lockWait, [this.#store.namespace, id, `${ttlMs}ms`])).rows[0]?.['got'] === true;
  }

  cancelWait(client: PoolClient): Promise<unknown> {
    return this.#store.run('cancel', 'SELECT pg_cancel_backend($1)', [this.#store.pidOf(client) ?? null]);
  }

  async waitsStranded(waits: ReadonlyArray<BlockedWait<PoolClient, number>>): Promise<boolean[]> {
    const pids = waits.map((w) => this.#store.pidOf(w.connection) ?? null);
    const { rows } = await this.#store.run('watch', this.#store.sql.waitsQueued, [this.#store.namespace, pids]);
    const queued = new Set(rows.map((row) => `${row['pid']}:${row['id']}`));
    return waits.map((w, i) => !queued.has(`${pids[i]}:${w.lock}`));
  }

  abandon(client: PoolClient, id: number): void {
    // A cut connection: the server frees what it held. A silent one it may never see cut, so its
    // session (if it still waits on or holds this lock) is ended from another.
    const pid = this.#store.pidOf(client);
    PostgresStore.cut(client);
    void this.#store.run('watch', this.#store.sql.endStranded, [pid, this.#store.namespace, id]).catch(() => undefined);
  }

  async unlock(client: PoolClient, id: number): Promise<void> {
    await this.#store.on(client, this.#store.sql.sessionRelease, [this.#store.namespace, id]);
  }

  async reset(client: PoolClient): Promise<void> {
    await this.#store.on(client, this.#store.sql.sessionReset, []);
  }

  async takeToken(client: PoolClient, req: AcquireRequest, id: number, markMs: number): Promise<bigint | { waitMs: number } | 'again'> {
    const { sql } = this.#store;
    const params = [(req.minToken ?? 0n).toString(), req.owner, Buffer.from(req.key, 'utf8'), id, markMs];
    const row = (await this.#store.on(client, sql.sessionToken, params)).rows[0];
    if (row?.['token'] != null) return BigInt(row['token'] as string);
    const waitMs = Number(row?.['left_ms'] ?? 0);
    if (waitMs > 0) return { waitMs };
    // The key's row was replaced (the table emptied meanwhile): its id is another now.
    this.#ids.delete(req.key);
    return 'again';
  }

  async keepAlive(client: PoolClient, id: number, ttlMs: number): Promise<boolean> {
    return (
      (await this.#store.on(client, this.#store.sql.sessionRenew, [this.#store.namespace, id, `${ttlMs}ms`])).rows[0]?.['mine'] === true
    );
  }

  markDelay(lease: PostgresSessionLease, ms: number): Promise<unknown> {
    return this.#store.on(lease.connection, this.#store.sql.sessionDelayMark, [Buffer.from(lease.key, 'utf8'), lease.owner, ms]);
  }

  async raiseFloor(lease: PostgresSessionLease, floor: bigint): Promise<boolean> {
    const params = [Buffer.from(lease.key, 'utf8'), lease.owner, floor.toString()];
    return (await this.#store.on(lease.connection, this.#store.sql.raiseFloor, params)).rowCount === 1;
  }

  unavailable(error: unknown): boolean {
    return this.#store.unavailable(error);
  }

  error(operation: string, error: unknown): Error {
    return this.#store.error(operation, error);
  }
}

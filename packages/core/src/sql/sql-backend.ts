// What MySQL's and PostgreSQL's backends share beyond `StoreBackend`: each runs in one of two modes,
// chosen once in its constructor (rows with a server-clock expiry, or locks that live on a
// connection), and keeps its store's token floor in the empty key's row. A SQL backend states its
// capabilities per mode, its statements and its two engines; this class routes every lease to the
// engine of its mode and reads the floor and the ceiling.
import type { AcquireRequest, Capabilities, Lease, LeaseEngine } from '../kit/backend.js';
import type { Once } from '../kit/once.js';
import { StoreBackend, type StoreBackendParts } from '../kit/store-backend.js';
import type { SessionLocks } from './session-locks.js';

/** A SQL backend's store, as `SqlBackend` uses it. */
export interface SqlStore {
  /** Makes the tables when they are missing: once, and again after a failure. */
  readonly tables: Once;
  /** One statement's rows (none for a statement that returns none), bounded by the command timeout. @throws BackendUnavailableError / BackendError */
  rows(operation: string, statement: string, params: unknown[]): Promise<Record<string, unknown>[]>;
  /** The floor statements; the floor's row is named by `floorRow` (parameters before the value). */
  readonly sql: { readonly storeFloor: string; readonly liftStoreFloor: string; readonly tokenCeiling: string };
  readonly floorRow: readonly unknown[];
}

/** The driver's pool, as `SqlBackend` closes it. */
export interface SqlPool {
  /** Closes every connection of the pool (a pool the backend made from `url` only). */
  end(): Promise<void>;
}

/** What a `SqlBackend` is made of, beside `StoreBackend`'s parts. */
export interface SqlBackendParts<C, S extends SqlStore> extends StoreBackendParts<C> {
  readonly mode: 'lease' | 'session';
  /** What the backend promises in each mode; `capabilities` is the one of `mode`. */
  readonly capabilities: { readonly lease: Capabilities; readonly session: Capabilities };
  readonly store: S;
}

/**
 * A SQL store's backend: `StoreBackend` with one engine, picked by `mode` in the constructor, that
 * takes, renews and releases every lease, and the store's token floor and ceiling read from the
 * tables. A subclass sets `engine` (and `sessions` in session mode) in its constructor and writes
 * `inspect`. @throws from every call what the store's statements throw: BackendUnavailableError
 * when the server cannot be reached or does not answer in time, BackendError when it refuses.
 */
export abstract class SqlBackend<C extends SqlPool, L extends Lease, S extends SqlStore> extends StoreBackend<C, L> {
  readonly capabilities: Capabilities;
  /** `lease`: rows with a server-clock expiry. `session`: a lock held by a connection of its own. */
  readonly mode: 'lease' | 'session';
  protected readonly store: S;
  /** The claims of this backend's mode (`sessions` in session mode). */
  protected abstract readonly engine: LeaseEngine<L>;
  /** Session mode's engine, or undefined: its reads ride out connects as its waits do, and `close()` ends its sessions. */
  protected abstract readonly sessions: SessionLocks<unknown, unknown> | undefined;

  protected constructor(parts: SqlBackendParts<C, S>) {
    super(parts);
    this.mode = parts.mode;
    this.capabilities = parts.capabilities[parts.mode];
    this.store = parts.store;
  }

  protected acquireClaim(req: AcquireRequest): Promise<L | null> {
    return this.engine.acquire(req);
  }

  renew(lease: L, ttlMs: number): Promise<boolean> {
    return this.engine.renew(lease, ttlMs);
  }

  release(lease: L): Promise<void> {
    return this.engine.release(lease);
  }

  /** See `LockBackend.raiseTokenFloor`: lifts the lease's key's counter to `floor` while the lease still holds it. */
  raiseTokenFloor(lease: L, floor: bigint): Promise<boolean> {
    return this.engine.raiseTokenFloor(lease, floor);
  }

  /** See `LockBackend.tokenFloor`: the counter of the empty key's row (no key is empty), which every mode's grants exceed. */
  tokenFloor(raise = 0n): Promise<bigint> {
    const { store } = this;
    const read = async () => {
      await store.tables.run();
      if (raise > 0n) await store.rows('token floor', store.sql.liftStoreFloor, [...store.floorRow, raise.toString()]);
      const [row] = await store.rows('token floor', store.sql.storeFloor, [...store.floorRow]);
      return BigInt(String(row?.['token'] ?? 0));
    };
    return this.sessions ? this.sessions.ridingOut(read) : read();
  }

  /** See `LockBackend.tokenCeiling`: the largest counter of the lock table and the shared-claim table (a scan of each). */
  async tokenCeiling(): Promise<bigint> {
    await this.store.tables.run();
    const [row] = await this.store.rows('token ceiling', this.store.sql.tokenCeiling, []);
    return BigInt(String(row?.['ceiling'] ?? 0));
  }

  /** Ends the sessions of locks still held (the server frees their locks), then the pool it made. */
  protected async closeStore(): Promise<void> {
    this.sessions?.close();
    await this.connection.end((pool) => pool.end());
  }
}

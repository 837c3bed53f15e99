// Lease mode: one row per key holds the owner, the lease end by the server's clock and the fencing
// counter; a queue table keeps waiters in arrival order; shared claims (semaphore permits, read and
// write locks) are judged by core's rule in one server function. Acquire, renew and release are one
// statement each. A release notifies (LISTEN/NOTIFY, one listening connection per backend) the head
// of the queue by name, and only when someone waits; the head re-checks on a bounded backoff in
// case a notification is lost or its holder died, and waiters behind it only keep their places.
import { createHash, randomUUID } from 'node:crypto';
import { LimitMismatchError } from '@deadbolt/core';
import {
  answerWithin,
  pollForLease,
  ReleaseNotifier,
  keySpace,
  waiterCadence,
  type AcquireRequest,
  type InFlight,
  type KeySpace,
  type Lease,
} from '@deadbolt/core/backend';
import pg from 'pg';
import type { PostgresStore } from './store.js';

/** What a listening connection's probe notification starts with (a key's word is a base64 digest, never this). */
const PROBE = 'deadbolt-probe';

/** A lease-mode claim: a mutex's row, or a claim on a shared key (its key space says which). */
export interface PostgresRowLease extends Lease {
  readonly space: KeySpace;
  readonly keyBytes: Buffer;
}

/** The statements on a held claim of one key space (queries.ts). */
interface HeldStatements {
  readonly renew: string;
  readonly release: string;
  readonly raiseFloor: string;
}

export class PostgresLeases {
  readonly #store: PostgresStore;
  readonly #acquiring: InFlight;
  readonly #maxPollDelayMs: number;
  readonly #notifier = new ReleaseNotifier();
  #listener: Promise<pg.Client> | undefined;
  /** Whether the listening connection is up (LISTEN answered, not dropped since). */
  #heard = false;
  /**
   * Whether notifications are seen to arrive on the listening connection: a probe it sent came
   * back (see `#listen`). Until then, and after the connection drops, waiters behind the head
   * re-check at the head's pace, since a release's notification may never reach the next head.
   */
  #delivers = false;
  /** Each key space's statements on a held claim. */
  readonly #held: Record<KeySpace, HeldStatements>;

  constructor(store: PostgresStore, acquiring: InFlight, maxPollDelayMs: number) {
    this.#store = store;
    this.#acquiring = acquiring;
    this.#maxPollDelayMs = maxPollDelayMs;
    const { sql } = store;
    this.#held = {
      mutex: { renew: sql.renew, release: sql.release, raiseFloor: sql.raiseFloor },
      shared: { renew: sql.sharedRenew, release: sql.sharedRelease, raiseFloor: sql.sharedRaiseFloor },
    };
  }

  /** The name waiters of a key listen under (a digest: the key may be long, NOTIFY payloads are short). */
  static digest(keyBytes: Buffer): string {
    return createHash('sha256').update(keyBytes).digest('base64');
  }

  /** `LockBackend.acquire`: a mutex's row, or a claim in a shared key's queue. */
  acquire(req: AcquireRequest): Promise<PostgresRowLease | null> {
    return keySpace(req) === 'mutex' ? this.#acquireRow(req) : this.#acquireShared(req);
  }

  async #acquireRow(req: AcquireRequest): Promise<PostgresRowLease | null> {
    const keyBytes = Buffer.from(req.key, 'utf8');
    await this.#store.tables.run();
    const first = await this.#attempt(req, keyBytes, false);
    if (first || !req.wait) return first;
    const { pollMs, behindMs } = waiterCadence(req.ttlMs, this.#maxPollDelayMs);
    const leave = () => this.#store.run('release', this.#store.sql.leave, [keyBytes, req.owner, this.#store.channel]);
    /** Whether the last attempt saw a live waiter ahead of ours. */
    let behind = false;
    // Mostly asleep: the release that frees the key names the queue's head, which tries at once;
    // the head re-checks every `pollMs` (a holder that died sends nothing), the rest only keep
    // their places.
    return this.#acquiring.waitInLine(
      () =>
        pollForLease(
          PostgresLeases.digest(keyBytes),
          req.signal,
          () => this.#queued(() => this.#attempt(req, keyBytes, true, (ahead) => (behind = ahead))),
          (lease) => leave().then(() => undefined),
          {
            notifier: this.#notifier,
            owner: req.owner,
            minDelayMs: pollMs,
            maxDelayMs: pollMs,
            nextDelayMs: () => (behind && this.#delivers ? behindMs : pollMs),
          },
        ),
      leave,
      req.ttlMs,
    );
  }

  /**
   * One attempt; `queued`: as a waiter, which joins (or keeps its place in) the queue when the key
   * is busy, and tells `onPlace` whether a live waiter is ahead of it.
   */
  async #attempt(
    req: AcquireRequest,
    keyBytes: Buffer,
    queued: boolean,
    onPlace?: (behind: boolean) => void,
  ): Promise<PostgresRowLease | null> {
    const acquiredAt = performance.now();
    const least = (req.minToken ?? 0n).toString();
    const { sql } = this.#store;
    // A queued waiter is dropped if it stays silent for about a ttl (core's waiterCadence).
    const placeMs = waiterCadence(req.ttlMs, this.#maxPollDelayMs).placeMs;
    const result = queued
      ? await this.#store.run('acquire', sql.acquireQueued, [keyBytes, req.owner, req.ttlMs, placeMs, least])
      : await this.#store.run('acquire', sql.acquire, [keyBytes, req.owner, req.ttlMs, least]);
    const row = result.rows[0];
    const token = row?.['token'];
    if (token === undefined || token === null) {
      onPlace?.(row?.['behind'] === true);
      return null;
    }
    return { space: 'mutex', key: req.key, owner: req.owner, token: BigInt(token as string), acquiredAt, keyBytes };
  }

  /** One function call per attempt, see queries.ts. */
  async #acquireShared(req: AcquireRequest): Promise<PostgresRowLease | null> {
    await this.#store.tables.run();
    const { sql, channel } = this.#store;
    const keyBytes = Buffer.from(req.key, 'utf8');
    const leave = () => this.#store.run('release', sql.sharedRelease, [keyBytes, req.owner, channel]);
    const attempt = async (queue: boolean): Promise<PostgresRowLease | null> => {
      const acquiredAt = performance.now();
      const waiterMs = waiterCadence(req.ttlMs, this.#maxPollDelayMs).placeMs;
      const params = [keyBytes, req.owner, req.ttlMs, queue, req.mode, req.limit, waiterMs, (req.minToken ?? 0n).toString()];
      const row = (await this.#store.run('acquire', sql.sharedAcquire, params)).rows[0]!;
      if (row['status'] === 2) {
        if (queue) await leave();
        throw new LimitMismatchError(req.key, Number(row['val']), req.limit);
      }
      if (row['status'] !== 1) return null;
      return { space: 'shared', key: req.key, owner: req.owner, token: BigInt(row['val'] as string), acquiredAt, keyBytes };
    };
    if (!req.wait) return attempt(false);
    const recheck = waiterCadence(req.ttlMs, this.#maxPollDelayMs).pollMs;
    return this.#acquiring.waitInLine(
      () =>
        pollForLease(
          `s:${PostgresLeases.digest(keyBytes)}`,
          req.signal,
          () => this.#queued(() => attempt(true)),
          (lease) => this.release(lease),
          { notifier: this.#notifier, minDelayMs: Math.min(5, recheck), maxDelayMs: recheck },
        ),
      leave,
      req.ttlMs,
    );
  }

  async renew(lease: PostgresRowLease, ttlMs: number): Promise<boolean> {
    return (await this.#store.run('renew', this.#held[lease.space].renew, [lease.keyBytes, lease.owner, ttlMs])).rowCount === 1;
  }

  async release(lease: PostgresRowLease): Promise<void> {
    await this.releaseOwner(lease.keyBytes, lease.owner, lease.space);
  }

  /** The release statement for `owner` (it wakes the waiters); whether `owner` had the claim. Also `LockBackend.forceRelease`. */
  async releaseOwner(keyBytes: Buffer, owner: string, space: KeySpace, operation = 'release'): Promise<boolean> {
    const result = await this.#store.run(operation, this.#held[space].release, [keyBytes, owner, this.#store.channel]);
    return result.rowCount === 1;
  }

  async raiseTokenFloor(lease: PostgresRowLease, floor: bigint): Promise<boolean> {
    const params = [lease.keyBytes, lease.owner, floor.toString()];
    return (await this.#store.run('raise token floor', this.#held[lease.space].raiseFloor, params)).rowCount === 1;
  }

  /** Ends the listening connection. */
  async close(): Promise<void> {
    const listener = this.#listener;
    this.#listener = undefined;
    this.#heard = false;
    await listener?.then((client) => client.end()).catch(() => undefined);
  }

  /**
   * A waiter's attempt, which joins the queue (or keeps its place), and then makes sure this
   * backend listens. The first wait of a backend opens the listening connection (a new server
   * process); joining the queue before it rather than after keeps arrival order the order in which
   * the waits began: on a loaded machine the connection took longer than other callers took to
   * arrive. A waiter queued before the listener was up may have missed its release's notification,
   * so it tries once more as soon as it listens.
   */
  async #queued<L>(attempt: () => Promise<L | null>): Promise<L | null> {
    const listened = this.#heard;
    const got = await attempt();
    if (got || listened) return got;
    await this.#listen();
    return attempt();
  }

  /** The one listening connection: LISTEN on the channel, turn notifications into wake-ups. */
  #listen(): Promise<pg.Client> {
    const store = this.#store;
    this.#listener ??= (async () => {
      const client = new pg.Client({ ...store.client.options, keepAlive: true });
      const current = () => this.#listener === listening;
      const drop = () => {
        if (current()) {
          this.#listener = undefined; // the next waiter listens again
          this.#heard = false;
          this.#delivers = false;
        }
        client.end().catch(() => undefined);
      };
      client.on('error', drop);
      client.on('end', drop);
      const probe = `${PROBE} ${randomUUID()}`;
      client.on('notification', (message) => {
        const payload = message.payload ?? '';
        if (payload === probe) return void (this.#delivers = current());
        if (payload.startsWith(PROBE)) return; // another backend's probe
        const split = payload.lastIndexOf(' ');
        this.#notifier.notify(payload.slice(0, split), payload.slice(split + 1) || undefined);
      });
      const bounded = <T>(sent: Promise<T>) => answerWithin(sent, store.commandTimeoutMs, store.name, 'listen');
      try {
        await bounded(client.connect());
        store.track(client);
        await bounded(client.query(`LISTEN "${store.channel}"`));
        if (current()) this.#heard = true;
        // Do notifications reach this connection? Through a pooler that runs each transaction on
        // another server session (PgBouncer's transaction pooling) they go to a session nobody
        // listens on. One sent from the pool answers it: when it comes back, waiters behind the
        // head may sleep until a release names them.
        void store.run('listen', 'SELECT pg_notify($1, $2)', [store.channel, probe]).catch(() => undefined);
        return client;
      } catch (error) {
        drop();
        throw store.error('listen', error);
      }
    })();
    const listening = this.#listener;
    return listening;
  }
}

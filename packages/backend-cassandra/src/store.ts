// What every algorithm of the Cassandra backend shares: how statements are sent and their errors
// classified, client timestamps, slots (the rows an acquisition writes in), the fencing-token row,
// waiting, and the lease types. The algorithms (queue.ts, shadow.ts, lwt.ts, shared-claims.ts) are
// written on top of it, each in its own file; cassandra-backend.ts picks the algorithm once and
// hands each lease to its key space's module. Long: what is here is what those four would
// otherwise each write again.
import { BackendError, BackendUnavailableError, type ClaimInfo } from '@deadbolt/core';
import {
  backendFailure,
  InFlight,
  pollForLease,
  ReleaseNotifier,
  sleep,
  LeaseKeeper,
  stillStands,
  waiterCadence,
  wallMicros,
  type AcquireRequest,
  type Lease,
  type PollOptions,
  type StoreView,
} from '@deadbolt/core/backend';
import { randomUUID } from 'node:crypto';
import cassandra, { type Client, type QueryOptions, type types } from 'cassandra-driver';

/** One statement of a batch. */
export type Statement = { query: string; params: unknown[] };
/** An attempt that found the key busy. */
export const NOT_YET = null;
/** Where each mutex algorithm records the holder. */
export type HolderTable = 'lock_holders' | 'shadow_holders' | 'lock_lwt';

/** One of a backend's rows on a key, held by one acquisition from its start to its release (see schema.ts). */
export interface Slot {
  /** `<backend instance id>/<index>`: the clustering key. */
  readonly name: string;
  readonly index: number;
  /** Set by the first release: the slot may be reused after that, so no later call may delete in it. */
  released: boolean;
  /**
   * When (local monotonic ms) our main cell in the slot was last written, the write sent, and the
   * least time it lives from its landing (its ttl): how a renewal knows the cell never lapsed.
   * Zeros (never) until the queue algorithm or a renewal writes it.
   */
  written: { at: number; ttlMs: number };
  /**
   * When the ttl of the slot's last written cell runs out (local monotonic ms, from that write's
   * send): how long a cleanup that failed is worth sending again (`InFlight.cleanUp`).
   */
  lastsUntil: number;
}

interface LeaseOnKey extends Lease {
  /** The key's partition: its UTF-8 bytes. */
  readonly id: Buffer;
}
/** A hold of the shadow algorithm: its slot (and, of the queue algorithm, its arrival stamp as well). */
export interface ShadowLease extends LeaseOnKey {
  readonly slot: Slot;
  /** The queue's: `<20-digit µs>/<owner>`, its arrival stamp, which orders the queue (its cell in `lock_waiters` is renewed too). */
  readonly entry?: string;
}
/** A hold of the queue algorithm: its slot, and its arrival stamp. */
export interface QueueLease extends ShadowLease {
  readonly entry: string;
}
/** A hold of the lightweight-transaction algorithm: the key's one row. */
export type LwtLease = LeaseOnKey;
/**
 * A semaphore permit or read-write lock: its row in `shared_claims` (the token is its clustering
 * key, `seq`); a renewal writes the mode again with the owner, so both cells live as long.
 */
export interface SharedLease extends LeaseOnKey {
  readonly mode: AcquireRequest['mode'];
}
export type MutexLease = QueueLease | ShadowLease | LwtLease;
export type CassandraLease = MutexLease | SharedLease;

/** What keeps one key space's claims (the mutex algorithm, or the shared claims): the contract's calls on them. */
export interface ClaimModule<L extends CassandraLease> {
  /** `LockBackend.inspect` of a key of this space. */
  inspect(id: Buffer): Promise<StoreView>;
  acquire(req: AcquireRequest, id: Buffer): Promise<L | null>;
  renew(lease: L, ttlMs: number): Promise<boolean>;
  release(lease: L): Promise<void>;
  /** `LockBackend.raiseTokenFloor`: lifts the key's counter to `floor` while `lease` still holds the key. */
  raiseFloor(lease: L, floor: bigint): Promise<boolean>;
  /** `LockBackend.forceRelease`: frees `owner`'s hold; whether it held. */
  free(id: Buffer, key: string, owner: string): Promise<boolean>;
}

/** A mutex algorithm: how it takes, keeps and gives back a key, and where it records the holder. */
export interface MutexAlgorithm<L extends MutexLease> extends ClaimModule<L> {
  readonly holderTable: HolderTable;
}

/** How many keys this process's guesses (the token cache, the queue's crowded keys) remember: the most recently used. */
const RECENT_KEYS = 1000;

/**
 * The driver's "no host" error says what each host tried answered with that host's error printed
 * whole, stack and all, inside its message: one line per host instead, the driver's error as cause.
 */
function hostsTried(error: InstanceType<typeof cassandra.errors.NoHostAvailableError>): Error {
  const hosts = Object.entries(error.innerErrors ?? {}).map(
    ([host, inner]) => `${host}: ${inner instanceof Error ? inner.message : String(inner)}`,
  );
  return new Error(`no host could be reached (${hosts.join('; ') || 'none was tried'})`, { cause: error });
}

/** What {@link dropClosedConnections} reads of the driver's hosts (not its public API: absent, it does nothing). */
interface DriverHost {
  pool?: { connections?: readonly { isSocketOpen?: boolean }[] };
  removeFromPool?(connection: unknown): void;
}

/**
 * cassandra-driver 4.10 can leave a closed connection in a host's pool after connection resets:
 * its control connection, reconnecting, hands the pool its connection, and two reconnections
 * running at once (the driver adds a second set of listeners for each) can hand it one that has
 * closed meanwhile. Nothing removes that one, and a request sent on it is answered only by the
 * request timeout (`commandTimeoutMs`, 8 s): a wait saw the release that long late. So before
 * each request the pools lose their closed connections, through the driver's own
 * `removeFromPool` (which schedules a new connection); a few property reads per host.
 */
function dropClosedConnections(client: Client): void {
  for (const host of client.hosts.values() as DriverHost[]) {
    for (const connection of host.pool?.connections ?? []) if (connection.isSocketOpen === false) host.removeFromPool?.(connection);
  }
}

/** Driver errors that mean the cluster could not be reached or could not answer in time. */
function isUnavailable(error: unknown): boolean {
  const e = error as { name?: string; code?: number };
  if (e instanceof cassandra.errors.NoHostAvailableError || e instanceof cassandra.errors.OperationTimedOutError) return true;
  if (e instanceof cassandra.errors.DriverError && /connect|closed|shut ?down|socket/i.test(String((e as Error).message))) return true;
  // The driver can mark a host up again before its pool has a connection (a reset during its
  // reconnection's re-preparing); a statement prepared then fails with this plain Error.
  if (e instanceof Error && e.message === 'No connection available') return true;
  const codes = cassandra.types.responseErrorCodes;
  return (
    e instanceof cassandra.errors.ResponseError &&
    [codes.unavailableException, codes.overloaded, codes.isBootstrapping, codes.writeTimeout, codes.readTimeout].includes(e.code!)
  );
}

export const maxOf = (a: bigint, b: bigint) => (a > b ? a : b);
/** A cell's `TTL()` (whole seconds left; null for none) in ms. */
export const secondsLeft = (ttl: unknown): number | null => (ttl === null || ttl === undefined ? null : Number(ttl) * 1000);
export const toBigInt = (value: unknown): bigint => (typeof value === 'bigint' ? value : BigInt(String(value)));

/**
 * A token as a CQL `bigint` parameter. @throws BackendError beyond 2^63 − 1: the driver would send
 * what a signed 64-bit number keeps of it, another token.
 */
export function tokenParam(value: bigint): string {
  if (value > 2n ** 63n - 1n)
    throw new BackendError('cassandra', 'fencing token', {
      cause: new Error(`a token of ${value} is beyond 2^63 - 1, the largest a Cassandra bigint holds`),
    });
  return String(value);
}

/** Drops the oldest entry (Maps and Sets iterate in insertion order) once there are more than RECENT_KEYS. */
export function keepNewest(recent: Map<string, unknown> | Set<string>): void {
  if (recent.size > RECENT_KEYS) recent.delete(recent.keys().next().value!);
}

/** Cell TTL for a lease of `ttlMs`: Cassandra may expire a cell up to a second early, so one more. */
export function ttlSeconds(ttlMs: number): number {
  return ttlMs / 1000 + 1;
}

export interface StoreSettings {
  readonly name: string;
  readonly client: Client;
  readonly keyspace: string;
  readonly consistency: types.consistencies;
  readonly serial: types.consistencies;
  /** Waiters' backoff (never slower than core's cadence rule). */
  readonly poll: { readonly minDelayMs: number; readonly maxDelayMs: number };
  /** The backend's acquisitions and clean-ups in flight (`StoreBackend`). */
  readonly inFlight: InFlight;
}

/** The token row of the store's token floor (`tokenFloor`): no key's UTF-8 is the byte 0xFF. */
const FLOOR_ID = Buffer.from([0xff]);

/** The shared part of the backend (see the file's opening comment). */
export class CassandraStore {
  readonly name: string;
  readonly client: Client;
  readonly keyspace: string;
  readonly poll: StoreSettings['poll'];
  /** Wakes this process's waiters when a key is released here (Cassandra has no notifications). */
  readonly notifier = new ReleaseNotifier();
  /** Acquisitions and cleanups under way: `close()` lets aborted ones remove their cells first. */
  readonly inFlight: InFlight;
  readonly #consistency: types.consistencies;
  readonly #serial: types.consistencies;
  /**
   * The last token this process saw per key: the first compare-and-set guess. Only a guess (a
   * wrong one costs one more round), so it keeps the most recent RECENT_KEYS keys and no more.
   */
  readonly #tokens = new Map<string, bigint>();
  /** This backend's rows are named after it (see schema.ts). */
  readonly #instance = randomUUID();
  /** Per key (base64), the slot indices its acquisitions are using now. */
  readonly #slots = new Map<string, Set<number>>();
  #lastTimestamp = 0;

  constructor(settings: StoreSettings) {
    this.name = settings.name;
    this.client = settings.client;
    this.keyspace = settings.keyspace;
    this.poll = settings.poll;
    this.inFlight = settings.inFlight;
    this.#consistency = settings.consistency;
    this.#serial = settings.serial;
  }

  // --- statements -------------------------------------------------------------------------------

  /** One statement; `lwt` adds the serial consistency, `serialRead` reads at it. @throws typed (`error`). */
  async run(
    operation: string,
    query: string,
    params: unknown[],
    how: { lwt?: boolean; serialRead?: boolean } = {},
  ): Promise<types.ResultSet> {
    const options: QueryOptions = {
      prepare: true,
      consistency: how.serialRead ? this.#serial : this.#consistency,
      ...(how.lwt ? { serialConsistency: this.#serial } : {}),
    };
    dropClosedConnections(this.client);
    try {
      return await this.client.execute(query, params, options);
    } catch (error) {
      throw this.error(operation, error);
    }
  }

  /**
   * Writes in one request (an unlogged batch): the same as sending them side by side, each applied
   * on its own, for one request instead of several. @throws typed (`error`).
   */
  async batch(operation: string, statements: Statement[]): Promise<void> {
    dropClosedConnections(this.client);
    try {
      await this.client.batch(statements, { prepare: true, logged: false, consistency: this.#consistency });
    } catch (error) {
      throw this.error(operation, error);
    }
  }

  /** The typed error for a driver error: unavailable (no host, a timeout, a connection gone) or not. */
  error(operation: string, error: unknown): Error {
    if (error instanceof cassandra.errors.NoHostAvailableError)
      return new BackendUnavailableError(this.name, operation, { cause: hostsTried(error) });
    return backendFailure(this.name, operation, error, isUnavailable);
  }

  /** Client timestamps (µs), strictly increasing per backend: a release is always later than the renewals before it. */
  timestamp(): number {
    this.#lastTimestamp = Math.max(this.#lastTimestamp + 1, wallMicros());
    return this.#lastTimestamp;
  }

  /**
   * The owners in `table`'s partition for `id`: at most two (enough to tell "nobody" and "alone"),
   * or with `all` every one (enough to tell whether one of them is ours: two cells of others may
   * sort before it).
   */
  async owners(operation: string, table: string, id: Buffer, all = false): Promise<string[]> {
    const result = await this.run(operation, `SELECT owner FROM ${this.keyspace}.${table} WHERE lock_id = ?${all ? '' : ' LIMIT 2'}`, [id]);
    return result.rows.map((r) => r['owner'] as string);
  }

  // --- slots (see schema.ts) --------------------------------------------------------------------

  /** The smallest slot index no acquisition of this backend is using on the key. */
  takeSlot(id: Buffer): Slot {
    const key = id.toString('base64');
    let used = this.#slots.get(key);
    if (!used) this.#slots.set(key, (used = new Set()));
    let index = 0;
    while (used.has(index)) index++;
    used.add(index);
    return { name: `${this.#instance}/${index}`, index, released: false, written: { at: 0, ttlMs: 0 }, lastsUntil: 0 };
  }

  /**
   * Marks `slot` released and frees its index, once; true the first time. Only the first release
   * may delete in the slot: after it, the slot may already hold another acquisition's rows.
   */
  freeSlot(id: Buffer, slot: Slot): boolean {
    if (slot.released) return false;
    slot.released = true;
    const key = id.toString('base64');
    const used = this.#slots.get(key);
    used?.delete(slot.index);
    if (used?.size === 0) this.#slots.delete(key);
    return true;
  }

  /** Notes a write of cells that live `ttl` seconds in `slot` (see `Slot.lastsUntil`). */
  writing(slot: Slot, ttl: number): void {
    slot.lastsUntil = Math.max(slot.lastsUntil, performance.now() + ttl * 1000);
  }

  /**
   * Frees `slot` and sends `deletes` (built with `timestamp`, taken before the slot is freed: any
   * later write to the slot is later still), again later while the store is out of reach, as
   * long as its cells may live (`InFlight.cleanUp`). Once per slot. @throws the first send's error.
   */
  async leaveSlot(operation: string, id: Buffer, slot: Slot, deletes: (timestamp: number) => Statement[]): Promise<void> {
    if (slot.released) return;
    const timestamp = this.timestamp();
    this.freeSlot(id, slot);
    const statements = deletes(timestamp);
    await this.inFlight.cleanUp(() => this.batch(operation, statements), slot.lastsUntil);
  }

  /**
   * `LockBackend.forceRelease` for the slot algorithms: deletes `owner`'s cells in `main` (and in
   * `also`: the queue's) at a timestamp above each cell's own write, which a holder whose clock
   * runs ahead of ours would otherwise outlast, and reads again: a renewal under way may have
   * written its cell back meanwhile (its timestamp taken before ours). True when `owner` held.
   * @throws BackendError when the cell is still there after three deletions.
   */
  async freeOwner(id: Buffer, owner: string, main: HolderTable, also: readonly string[] = []): Promise<boolean> {
    let found = false;
    for (let attempt = 0; attempt < 3; attempt++) {
      const query = `SELECT slot, owner, WRITETIME(owner) AS written FROM ${this.keyspace}.${main} WHERE lock_id = ?`;
      const cells = (await this.run('force release', query, [id])).rows.filter((r) => r['owner'] === owner);
      if (cells.length === 0) return found;
      found = true;
      await this.batch(
        'force release',
        cells.flatMap((cell) => {
          const timestamp = Math.max(this.timestamp(), Number(toBigInt(cell['written'])) + 1);
          return [main, ...also].map((table) => ({
            query: `DELETE FROM ${this.keyspace}.${table} USING TIMESTAMP ? WHERE lock_id = ? AND slot = ?`,
            params: [timestamp, id, cell['slot']],
          }));
        }),
      );
    }
    throw new BackendError('cassandra', 'force release', { cause: new Error(`${owner}'s hold came back after three deletions`) });
  }

  /**
   * A renewal of a slot's hold in `main` (and of its queue cell, for the queue algorithm): rewrite
   * our cell if it is still ours, then check again. Resolves false when it is lost, with `giveUp` under way.
   */
  async renewSlot(lease: ShadowLease, main: HolderTable, ttlMs: number, giveUp: () => Promise<void>): Promise<boolean> {
    const { slot } = lease;
    if (slot.released) return false;
    const ttl = ttlSeconds(ttlMs);
    // The write's timestamp is taken before the read: a release issued meanwhile (always later,
    // timestamps only grow) then wins over this write, so a renewal that read "still ours" just
    // before the release can never put the released cell back.
    const timestamp = this.timestamp();
    const previous = slot.written;
    const sentAt = performance.now();
    if ((await this.owners('renew', main, lease.id, true)).includes(lease.owner)) {
      this.writing(slot, ttl);
      await Promise.all([
        this.run('renew', `INSERT INTO ${this.keyspace}.${main} (lock_id, slot, owner) VALUES (?, ?, ?) USING TTL ? AND TIMESTAMP ?`, [
          lease.id,
          slot.name,
          lease.owner,
          ttl,
          timestamp,
        ]),
        lease.entry !== undefined &&
          this.run(
            'renew',
            `INSERT INTO ${this.keyspace}.lock_waiters (lock_id, slot, entry, owner) VALUES (?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?`,
            [lease.id, slot.name, lease.entry, lease.owner, ttl, timestamp],
          ),
      ]);
      // Our last write lasts at least as long as core counts the lease from it (its send time plus
      // the ttl less the drift allowance). This write, answered before that, landed while our cell
      // still stood: the cell never lapsed, so nobody was alone in main meanwhile.
      const neverLapsed = performance.now() - previous.at < LeaseKeeper.safeLifetime(previous.ttlMs);
      // Check again: had our cell expired between the read and the write (a pause), someone else
      // may hold the lock now; take ours back out rather than stand beside them. Another cell
      // beside ours is no holder, though, if ours never lapsed: it is a taker's that backs off at
      // its own read (a newcomer's first attempt writes main before it knows its place: see the
      // queue's `#atOnce`). Half the ttl (`stillStands`) was too strict a test here: a store
      // answering a twentieth of the ttl late made a renewal end past it, and the holder gave up a
      // healthy lock when a newcomer's cell was in main at its second read.
      const owners = await this.owners('renew', main, lease.id, true);
      if (owners.includes(lease.owner) && (owners.length === 1 || neverLapsed)) {
        slot.written = { at: sentAt, ttlMs };
        return true;
      }
    }
    // Lost: say so at once. Clearing our rows (they are ours alone) and giving the slot back goes
    // on meanwhile, tracked so that close() lets it land: waiting for it delayed the loss by a
    // round trip, and its failure would have reported the loss as a failed renewal, to be retried.
    this.inFlight.keep(giveUp());
    return false;
  }

  // --- waiting ----------------------------------------------------------------------------------

  /** Polls `attempt` with core's backoff, woken early by releases in this process; `giveBack` releases a grant the wait no longer wants. */
  pollLease<L extends CassandraLease>(
    req: AcquireRequest,
    attempt: () => Promise<L | null | 'soon'>,
    giveBack: (lease: L) => Promise<void>,
    more: PollOptions = {},
  ): Promise<L> {
    return pollForLease(req.key, req.signal, attempt, giveBack, { ...this.pollOptions(req.ttlMs), notifier: this.notifier, ...more });
  }

  /** The backoff of a waiter with a lease of `ttlMs`: ours, but never slower than core's cadence rule (a quarter of the ttl). */
  pollOptions(ttlMs: number): { minDelayMs: number; maxDelayMs: number } {
    const { pollMs } = waiterCadence(ttlMs, this.poll.maxDelayMs);
    return { minDelayMs: Math.min(this.poll.minDelayMs, pollMs), maxDelayMs: pollMs };
  }

  // --- fencing tokens ---------------------------------------------------------------------------

  /**
   * Gives a freshly won lease its fencing token: compare-and-set the key's token row to one more
   * than it holds, or to `req.minToken` (a migration's hint) if that is higher (one LWT, plus a
   * SERIAL read the first time this process sees the key), then check the lock is still ours, so
   * a holder paused between winning and counting can never carry a token newer than its
   * successor's. On failure the lease is given back (`giveBack`) before the error is reported.
   */
  async fence<L extends MutexLease>(won: L, table: HolderTable, req: AcquireRequest, giveBack: (lease: L) => Promise<void>): Promise<L> {
    try {
      const token = await this.setToken(won.id, (current) => maxOf((current ?? 0n) + 1n, req.minToken ?? 0n));
      // Our holder cell was written after `acquiredAt` with the full ttl and only our own release
      // deletes it: only a slow token round needs the read.
      if (!stillStands({ at: won.acquiredAt, ttlMs: req.ttlMs }) && !(await this.stillOurs(won, table))) {
        throw new BackendUnavailableError(this.name, 'acquire', {
          cause: new Error('the lease expired while its fencing token was being taken'),
        });
      }
      return { ...won, token };
    } catch (error) {
      await giveBack(won).catch(() => undefined);
      throw error;
    }
  }

  /**
   * `LockBackend.raiseTokenFloor` for a mutex: the token row is lifted by compare-and-set, then the
   * lock must still be ours. A successor that won in between either counted before the lift (and
   * the check finds it) or counts from the lifted value.
   */
  async raiseFloor(lease: MutexLease, table: HolderTable, floor: bigint): Promise<boolean> {
    await this.setToken(lease.id, (current) => (current === undefined || current < floor ? floor : undefined));
    return this.stillOurs(lease, table);
  }

  /**
   * `LockBackend.tokenFloor`: the token row of id `0xFF`, which no key's UTF-8 has (a key is
   * well-formed Unicode), lifted by compare-and-set, read at SERIAL.
   */
  async tokenFloor(raise: bigint): Promise<bigint> {
    if (raise > 0n) await this.setToken(FLOOR_ID, (current) => (current === undefined || current < raise ? raise : undefined));
    const row = (
      await this.run('token floor', `SELECT fencing_token FROM ${this.keyspace}.lock_token WHERE lock_id = ?`, [FLOOR_ID], {
        serialRead: true,
      })
    ).first();
    return row ? toBigInt(row['fencing_token']) : 0n;
  }

  /** `LockBackend.tokenCeiling`: the largest token row and shared-key counter (the floor's row among them); a scan of both tables. */
  async tokenCeiling(): Promise<bigint> {
    let ceiling = 0n;
    const scan = async (query: string, column: string) => {
      dropClosedConnections(this.client);
      const seen = (_index: number, row: types.Row) => {
        const value = row[column];
        if (value !== null && value !== undefined && toBigInt(value) > ceiling) ceiling = toBigInt(value);
      };
      const options = { prepare: true, consistency: this.#consistency, fetchSize: 1000, autoPage: true };
      await new Promise<void>((resolve, reject) =>
        this.client.eachRow(query, [], options, seen, (error) => (error ? reject(this.error('token ceiling', error)) : resolve())),
      );
    };
    await scan(`SELECT fencing_token FROM ${this.keyspace}.lock_token`, 'fencing_token');
    await scan(`SELECT DISTINCT lock_id, claim_counter FROM ${this.keyspace}.shared_claims`, 'claim_counter');
    return ceiling;
  }

  /**
   * Moves the key's token row to `next(current)` by compare-and-set, retrying on a lost race with
   * the value the race returned; `next` returning undefined leaves it as it is. Resolves the value
   * the row then holds. Starts from this process's last sighting (a guess: a wrong one costs one
   * more round), else a SERIAL read.
   */
  async setToken(id: Buffer, next: (current: bigint | undefined) => bigint | undefined): Promise<bigint> {
    const cacheKey = id.toString('base64');
    let current = this.#tokens.get(cacheKey);
    if (current === undefined) {
      const row = (
        await this.run('acquire', `SELECT fencing_token FROM ${this.keyspace}.lock_token WHERE lock_id = ?`, [id], { serialRead: true })
      ).first();
      current = row ? toBigInt(row['fencing_token']) : undefined;
    }
    for (;;) {
      const value = next(current);
      if (value === undefined) return current!;
      const result =
        current === undefined
          ? await this.run(
              'acquire',
              `INSERT INTO ${this.keyspace}.lock_token (lock_id, fencing_token) VALUES (?, ?) IF NOT EXISTS`,
              [id, tokenParam(value)],
              { lwt: true },
            )
          : await this.run(
              'acquire',
              `UPDATE ${this.keyspace}.lock_token SET fencing_token = ? WHERE lock_id = ? IF fencing_token = ?`,
              [tokenParam(value), id, String(current)],
              { lwt: true },
            );
      if (result.wasApplied()) {
        // Map order is insertion order: re-insert to keep the newest last, drop the oldest.
        this.#tokens.delete(cacheKey);
        keepNewest(this.#tokens.set(cacheKey, value));
        return value;
      }
      const seen = result.first()?.['fencing_token'];
      current = seen === undefined || seen === null ? undefined : toBigInt(seen);
    }
  }

  /**
   * The key's holder as `table` records it, with the key's token and the time its cell has left
   * (Cassandra counts whole seconds). Two or more cells are a contender between its write and its
   * withdrawal ("ours if alone"): read again a few times, then the cell that comes first in
   * `arrival` (the queue's order: the holder is the queue's head) holds, else the one written
   * first. Write time alone misleads when the holder renews while a contender's cell stands: the
   * renewal makes the holder's cell the newer one. The token row is written just after a grant:
   * for that moment the previous holder's token shows.
   */
  async holderIn(table: HolderTable, id: Buffer, arrival: readonly (string | undefined)[] = []): Promise<ClaimInfo[]> {
    const serialRead = table === 'lock_lwt';
    let rows: types.Row[] = [];
    for (let attempt = 0; attempt < 4; attempt++) {
      if (attempt > 0) await sleep(25);
      const query = `SELECT owner, TTL(owner) AS ttl, WRITETIME(owner) AS written FROM ${this.keyspace}.${table} WHERE lock_id = ?`;
      rows = (await this.run('inspect', query, [id], { serialRead })).rows.filter((r) => r['owner'] !== null);
      if (rows.length <= 1) break;
    }
    const place = (row: types.Row) => {
      const index = arrival.indexOf(row['owner'] as string);
      return index < 0 ? arrival.length : index;
    };
    const [first] = rows.sort((a, b) => place(a) - place(b) || (toBigInt(a['written']) < toBigInt(b['written']) ? -1 : 1));
    if (!first) return [];
    const token = (await this.run('inspect', `SELECT fencing_token FROM ${this.keyspace}.lock_token WHERE lock_id = ?`, [id])).first();
    return [
      { owner: first['owner'] as string, token: token ? toBigInt(token['fencing_token']) : null, ttlLeftMs: secondsLeft(first['ttl']) },
    ];
  }

  /** Whether `table` still records `lease.owner` as a holder of the key. */
  async stillOurs(lease: Pick<MutexLease, 'id' | 'owner'>, table: HolderTable): Promise<boolean> {
    if (table === 'lock_lwt') {
      return (
        (
          await this.run('acquire', `SELECT owner FROM ${this.keyspace}.lock_lwt WHERE lock_id = ?`, [lease.id], { serialRead: true })
        ).first()?.['owner'] === lease.owner
      );
    }
    return (await this.owners('acquire', table, lease.id, true)).includes(lease.owner);
  }
}

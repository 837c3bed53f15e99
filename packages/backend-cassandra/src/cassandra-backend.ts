import { BackendUnavailableError, InvalidArgumentError, LimitMismatchError, type Capabilities, type LockBackend } from '@deadbolt/core';
import {
  backendFailure,
  describe,
  grantable,
  InFlight,
  instance,
  ms,
  nested,
  oneOf,
  POLL_SOON,
  readOptions,
  text,
  url,
  waiterCadence,
  type PollOptions,
  type Rule,
  type Rules,
  pollForLease,
  ReleaseNotifier,
  sleep,
  UnavailableGrace,
  type AcquireRequest,
  type Lease,
  type SharedRequest,
} from '@deadbolt/core/backend';
import { randomUUID } from 'node:crypto';
import cassandra, { type Client, type QueryOptions, type types } from 'cassandra-driver';
import { ensureSchema } from './schema.js';
import { CassandraTimeService, wallMicros, type TimeServiceOptions } from './time-service.js';

/**
 * - `queue` (default): the thesis' fair queue lock (FIFO by time-service order).
 * - `shadow`: the thesis' old shadow-row algorithm, unfair under contention; a benchmark baseline.
 * - `lwt`: one row per lock written with lightweight transactions (Paxos).
 */
export type CassandraAlgorithm = 'queue' | 'shadow' | 'lwt';

export interface CassandraBackendOptions {
  /** `cassandra://host[:port][,host[:port]…]/keyspace`. The backend makes and closes its client. */
  url?: string;
  /** Your own cassandra-driver client instead of `url`; `close()` leaves it open. Needs `keyspace`. */
  client?: Client;
  /** Keyspace of the lock tables (with `client`; with `url` it is the URL's path). Default `deadbolt`. */
  keyspace?: string;
  /** Default `queue`. */
  algorithm?: CassandraAlgorithm;
  /** Data center the client routes to (with `url`). Default `datacenter1`. */
  localDataCenter?: string;
  /**
   * Replication of the keyspace when the backend creates it. Default SimpleStrategy, factor 1: fine
   * for one node, not for production, where correctness needs QUORUM over a replication factor ≥ 3
   * (e.g. `{'class': 'NetworkTopologyStrategy', 'dc1': 3}`).
   */
  replication?: string;
  /** Consistency of every read and write. Default QUORUM. */
  consistency?: types.consistencies;
  /** Serial consistency of lightweight transactions. Default SERIAL (LOCAL_SERIAL within one DC). */
  serialConsistency?: types.consistencies;
  /** Connect timeout for a client made from `url`. Default 2000 ms. */
  connectTimeoutMs?: number;
  /**
   * The longest a request of a client made from `url` waits for its answer; a silent node fails it
   * with `BackendUnavailableError`. Above the server's own timeouts (2 s for writes, 5 s for reads
   * by default), so a slow but working cluster answers first. A connection with a request left
   * unanswered that long is closed and opened again. Default 8000 ms.
   */
  commandTimeoutMs?: number;
  /** The queue algorithm's time service. */
  timeService?: TimeServiceOptions;
  /** Waiters poll: delays grow ×2 from `minDelayMs` (default 2) to `maxDelayMs` (default 50). */
  poll?: { minDelayMs?: number; maxDelayMs?: number };
  /**
   * The shadow algorithm's randomized waits: up to `ownerWaitMs` (default 1000) when another owner
   * holds the lock, up to `concurrentStepMs` × attempt (default 50) after a concurrent attempt.
   */
  shadowBackoff?: { ownerWaitMs?: number; concurrentStepMs?: number };
}

export interface CassandraLease extends Lease {
  readonly id: Buffer;
  /** A semaphore permit or read-write lock: its row in `shared_claims` (the token is its clustering key, `seq`). */
  readonly shared?: true;
  /** A shared claim's mode: a renewal writes it again with the owner, so both cells live as long. */
  readonly mode?: SharedRequest['mode'];
  /** The queue and shadow algorithms' row in each partition (see schema.ts). */
  readonly slot?: Slot;
  /** The queue algorithm's arrival stamp (`<20-digit µs>/<owner>`), which orders the queue. */
  readonly entry?: string;
}

/** One of this backend's rows on a key, held by one acquisition from its start to its release. */
interface Slot {
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
  /** The latest any cell written in the slot can live until (local monotonic ms): how long a cleanup that failed is worth sending again. */
  lastsUntil: number;
}

const { consistencies } = cassandra.types;

/** A keyspace: a CQL identifier that needs no quotes (it starts with a letter). */
const keyspaceRule = text(/^[A-Za-z]\w{0,47}$/, 'a plain CQL identifier (a letter, then letters, digits or _; at most 48)', [
  '',
  '1abc',
  'a-b',
  'a;b',
  'x'.repeat(49),
]);

/** One of `allowed`, cassandra-driver's `types.consistencies` values. */
function consistencyRule(allowed: readonly types.consistencies[]): Rule<types.consistencies> {
  return {
    check: (value, name) => {
      if (!allowed.includes(value as types.consistencies))
        throw new InvalidArgumentError(
          `${name} must be one of cassandra-driver's types.consistencies (${allowed.join(', ')}), got ${describe(value)}`,
        );
      return value as types.consistencies;
    },
    hostile: [null, 'quorum', 99, -1, 1.5, true],
  };
}

/** How each option of `cassandraBackend` is checked (see core's options.ts); the conformance suite feeds it hostile values. */
export const cassandraOptionRules = {
  url: url(['cassandra']),
  client: instance((v): v is Client => v instanceof cassandra.Client, 'a cassandra-driver Client'),
  keyspace: keyspaceRule,
  algorithm: oneOf(['queue', 'shadow', 'lwt']),
  localDataCenter: text(/^[\w.-]{1,100}$/, 'a data center name'),
  // Pasted into CREATE KEYSPACE: a CQL map of plain names and numbers, nothing else.
  replication: text(
    /^\{\s*'[\w.-]+'\s*:\s*(?:'[\w.-]+'|\d+)\s*(?:,\s*'[\w.-]+'\s*:\s*(?:'[\w.-]+'|\d+)\s*)*\}$/,
    "a CQL replication map such as {'class': 'NetworkTopologyStrategy', 'dc1': 3}",
    ["{'class': 'SimpleStrategy', 'replication_factor': 1} AND durable_writes = false", "{'class': 'x'}; DROP KEYSPACE x", '{}'],
  ),
  consistency: consistencyRule(Object.values(consistencies) as types.consistencies[]),
  serialConsistency: consistencyRule([consistencies.serial, consistencies.localSerial]),
  connectTimeoutMs: ms(),
  commandTimeoutMs: ms(),
  timeService: nested({ intervalMs: ms(10), maxAheadMs: ms(0) } satisfies Rules<TimeServiceOptions>),
  poll: nested({ minDelayMs: ms(), maxDelayMs: ms() }),
  shadowBackoff: nested({ ownerWaitMs: ms(), concurrentStepMs: ms() }),
} satisfies Rules<CassandraBackendOptions>;
/** One statement of a batch. */
type Statement = { query: string; params: unknown[] };
/** How many keys this process's guesses (`#tokens`, `#crowded`) remember: the most recently used. */
const RECENT_KEYS = 1000;
const NOT_YET = null;
/** A shared claim lost the race to join: read the partition again at once. */
const POLL_AGAIN = Symbol('again');

/** Driver errors that mean the cluster could not be reached or could not answer in time. */
function isUnavailable(error: unknown): boolean {
  const e = error as { name?: string; code?: number };
  if (e instanceof cassandra.errors.NoHostAvailableError || e instanceof cassandra.errors.OperationTimedOutError) return true;
  if (e instanceof cassandra.errors.DriverError && /connect|closed|shut ?down|socket/i.test(String((e as Error).message))) return true;
  const codes = cassandra.types.responseErrorCodes;
  return (
    e instanceof cassandra.errors.ResponseError &&
    [codes.unavailableException, codes.overloaded, codes.isBootstrapping, codes.writeTimeout, codes.readTimeout].includes(e.code!)
  );
}

/** Where each algorithm records the holder. */
type HolderTable = 'lock_holders' | 'shadow_holders' | 'lock_lwt';
const HOLDER_TABLES: Record<CassandraAlgorithm, HolderTable> = { queue: 'lock_holders', shadow: 'shadow_holders', lwt: 'lock_lwt' };

const maxOf = (a: bigint, b: bigint) => (a > b ? a : b);
const toBigInt = (value: unknown): bigint => (typeof value === 'bigint' ? value : BigInt(String(value)));

/**
 * Apache Cassandra backend. Every algorithm keeps its cells with a TTL of ttl + 1 s (Cassandra
 * counts TTLs in whole seconds from the second the write lands, so one more second guarantees at
 * least ttl), rewritten by core's renewer every ttl/3; release deletes them with a client
 * timestamp later than any renewal's, so a late renewal never resurrects a released cell. Fencing
 * tokens come from a token row without TTL, advanced by compare-and-set after the lock is won.
 */
export class CassandraBackend implements LockBackend<CassandraLease> {
  readonly name = 'cassandra';
  readonly capabilities: Capabilities;
  readonly algorithm: CassandraAlgorithm;
  readonly client: Client;
  readonly keyspace: string;
  readonly timeService: CassandraTimeService;
  readonly #ownsClient: boolean;
  readonly #replication: string;
  readonly #consistency: types.consistencies;
  readonly #serial: types.consistencies;
  readonly #poll: { minDelayMs: number; maxDelayMs: number };
  readonly #shadow: { ownerWaitMs: number; concurrentStepMs: number };
  readonly #notifier = new ReleaseNotifier();
  /**
   * The last token this process saw per key: the first compare-and-set guess. Only a guess (a
   * wrong one costs one more round), so it keeps the most recent RECENT_KEYS keys and no more.
   */
  readonly #tokens = new Map<string, bigint>();
  /** Keys (base64) whose last first look found others queued: see `#queueAtOnce`. The newest RECENT_KEYS only. */
  readonly #crowded = new Set<string>();
  /** This backend's rows are named after it (see schema.ts). */
  readonly #instance = randomUUID();
  /** Per key (base64), the slot indices its acquisitions are using now. */
  readonly #slots = new Map<string, Set<number>>();
  /** Whose schema check this backend shares: the contact points of a client it made, or your client. */
  readonly #schemaScope: object | string;
  /** Acquisitions under way: `close()` lets aborted ones remove their cells first. */
  readonly #acquiring = new InFlight();
  #commandTimeoutMs = 8000;
  #lastTimestamp = 0;
  #ready: Promise<void> | undefined;
  #closed = false;

  /** @throws InvalidArgumentError for bad options (before connecting). */
  constructor(raw: CassandraBackendOptions) {
    const options = readOptions(raw, cassandraOptionRules, 'cassandraBackend');
    const algorithm = options.algorithm ?? 'queue';
    this.algorithm = algorithm;
    this.capabilities = {
      fencing: 'strict',
      fairness: algorithm === 'queue' ? 'fifo' : 'none',
      lease: 'ttl',
      wake: 'poll', // Cassandra has no notifications
      minTtlMs: 2000,
      ttlGranularityMs: 1000, // TTLs are whole seconds
      crossProcess: true,
      minToken: true,
      semaphore: true,
      readWrite: true,
    };
    let keyspace = options.keyspace ?? 'deadbolt';
    if ((options.url === undefined) === (options.client === undefined)) {
      throw new InvalidArgumentError('cassandraBackend needs a url (cassandra://host[:port][,host[:port]]/keyspace) or a client, not both');
    }
    if (options.client) {
      this.client = options.client;
      this.#ownsClient = false;
      this.#schemaScope = options.client;
    } else {
      const url = options.url!;
      if (url.path) keyspace = keyspaceRule.check(url.path, "the url's keyspace");
      const commandTimeout = options.commandTimeoutMs ?? 8000;
      const contactPoints = url.hosts.map(({ host, port }) => (port === undefined ? host : `${host}:${port}`));
      this.client = new cassandra.Client({
        contactPoints,
        localDataCenter: options.localDataCenter ?? 'datacenter1',
        ...(url.username === undefined ? {} : { authProvider: new cassandra.auth.PlainTextAuthProvider(url.username, url.password ?? '') }),
        // A connection that leaves one request unanswered for the request timeout is closed and
        // opened again: a partition or a middlebox that lost its state strands a connection silently,
        // and the driver's default (64 timeouts in a row) would send every retry of a wait into it.
        socketOptions: { connectTimeout: options.connectTimeoutMs ?? 2000, readTimeout: commandTimeout, defunctReadTimeoutThreshold: 0 },
        // After a restart, come back within half a second rather than the default's growing delays.
        policies: { reconnection: new cassandra.policies.reconnection.ConstantReconnectionPolicy(500) },
      });
      containRefreshRace(this.client);
      this.#ownsClient = true;
      this.#schemaScope = contactPoints.join(',');
      this.#commandTimeoutMs = commandTimeout;
    }
    this.keyspace = keyspace;
    this.#replication = options.replication ?? "{'class': 'SimpleStrategy', 'replication_factor': 1}";
    this.#consistency = options.consistency ?? consistencies.quorum;
    this.#serial = options.serialConsistency ?? consistencies.serial;
    this.#poll = { minDelayMs: options.poll?.minDelayMs ?? 2, maxDelayMs: options.poll?.maxDelayMs ?? 50 };
    if (this.#poll.minDelayMs > this.#poll.maxDelayMs) throw new InvalidArgumentError('poll.minDelayMs must not be above poll.maxDelayMs');
    this.#shadow = {
      ownerWaitMs: options.shadowBackoff?.ownerWaitMs ?? 1000,
      concurrentStepMs: options.shadowBackoff?.concurrentStepMs ?? 50,
    };
    this.timeService = new CassandraTimeService(this.client, keyspace, options.timeService);
  }

  /** The partition key of `key`: its UTF-8 bytes. */
  idFor(key: string): Buffer {
    return Buffer.from(key, 'utf8');
  }

  acquire(req: AcquireRequest): Promise<CassandraLease | null> {
    return this.#acquiring.track(this.#acquire(req));
  }

  async #acquire(req: AcquireRequest): Promise<CassandraLease | null> {
    await this.#connect();
    const id = this.idFor(req.key);
    switch (this.algorithm) {
      case 'queue':
        return req.wait ? this.#queueLock(req, id) : this.#queueTryLock(req, id);
      case 'shadow':
        return this.#shadowLock(req, id);
      case 'lwt':
        return req.wait ? this.#pollLease(req, () => this.#lwtAttempt(req, id)) : this.#lwtAttempt(req, id);
    }
  }

  async renew(lease: CassandraLease, ttlMs: number): Promise<boolean> {
    const l = lease;
    const ttl = ttlSeconds(ttlMs);
    if (l.shared) return this.#renewClaim(l, ttl);
    if (this.algorithm === 'lwt') {
      const result = await this.#run(
        'renew',
        `UPDATE ${this.keyspace}.lock_lwt USING TTL ? SET owner = ? WHERE lock_id = ? IF owner = ?`,
        [ttl, l.owner, l.id, l.owner],
        { lwt: true },
      );
      return result.wasApplied();
    }
    const slot = l.slot!;
    if (slot.released) return false;
    const main = this.algorithm === 'queue' ? 'lock_holders' : 'shadow_holders';
    // The write's timestamp is taken before the read: a release issued meanwhile (always later,
    // timestamps only grow) then wins over this write, so a renewal that read "still ours" just
    // before the release can never put the released cell back.
    const timestamp = this.#timestamp();
    const previous = slot.written;
    const sentAt = performance.now();
    if ((await this.#owners('renew', main, l.id)).includes(l.owner)) {
      this.#writing(slot, ttl);
      await Promise.all([
        this.#run('renew', `INSERT INTO ${this.keyspace}.${main} (lock_id, slot, owner) VALUES (?, ?, ?) USING TTL ? AND TIMESTAMP ?`, [
          l.id,
          slot.name,
          l.owner,
          ttl,
          timestamp,
        ]),
        l.entry && this.#writeQueueCell(l.id, slot, l.entry, l.owner, ttl, timestamp),
      ]);
      // Check again: had our cell expired between the read and the write (a pause), someone else
      // may hold the lock now; take ours back out rather than stand beside them. Another cell
      // beside ours is no holder, though, if ours provably never lapsed: nobody is alone in main
      // while our cell is in it. It is then a taker's that backs off at its own read (a newcomer's
      // first attempt writes main before it knows its place: see `#queueAtOnce`). Our last write
      // still stands now, so it did when this write landed.
      const owners = await this.#owners('renew', main, l.id);
      if (owners.includes(l.owner) && (owners.length === 1 || stillStands(previous))) {
        slot.written = { at: sentAt, ttlMs };
        return true;
      }
    }
    // Lost: clear our rows now (they are ours alone) and give the slot back.
    await this.release(lease);
    return false;
  }

  async release(lease: CassandraLease): Promise<void> {
    const l = lease;
    if (l.shared) {
      await this.#run(
        'release',
        `DELETE FROM ${this.keyspace}.shared_claims WHERE lock_id = ? AND seq = ? IF owner = ?`,
        [l.id, String(l.token), l.owner],
        { lwt: true },
      );
      this.#notifier.notify(`shared:${l.key}`);
      return;
    }
    if (this.algorithm === 'lwt') {
      await this.#run('release', `DELETE FROM ${this.keyspace}.lock_lwt WHERE lock_id = ? IF owner = ?`, [l.id, l.owner], { lwt: true });
    } else if (l.entry) {
      await this.#leave(l.id, l.slot!);
    } else {
      await this.#leaveShadow(l.id, l.slot!);
    }
    this.#notifier.notify(l.key);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.timeService.stop();
    // Core aborts every acquisition first; each then deletes its queue and claim cells, which
    // shutting the client down at once would cut short (the cells would block the key for a ttl).
    await this.#acquiring.settled(this.#commandTimeoutMs);
    if (this.#ownsClient) await this.client.shutdown();
  }

  // --- slots (see schema.ts) --------------------------------------------------------------------

  /** Notes a write of cells that live `ttl` seconds in `slot` (see `Slot.lastsUntil`): it may land as late as the request timeout. */
  #writing(slot: Slot, ttl: number): void {
    slot.lastsUntil = Math.max(slot.lastsUntil, performance.now() + this.#commandTimeoutMs + ttl * 1000);
  }

  /** The smallest slot index no acquisition of this backend is using on the key. */
  #takeSlot(id: Buffer): Slot {
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
  #freeSlot(id: Buffer, slot: Slot): boolean {
    if (slot.released) return false;
    slot.released = true;
    const key = id.toString('base64');
    const used = this.#slots.get(key);
    used?.delete(slot.index);
    if (used?.size === 0) this.#slots.delete(key);
    return true;
  }

  // --- the queue algorithm (the thesis' "new" one: see the README) ----------------------------------------------------

  /** GetLock: enqueue, then poll until first in the queue and alone in the main partition. */
  async #queueLock(req: AcquireRequest, id: Buffer): Promise<CassandraLease> {
    const ttl = ttlSeconds(req.ttlMs);
    const slot = this.#takeSlot(id);
    const entry = `${String(this.timeService.now()).padStart(20, '0')}/${req.owner}`;
    let queueWrittenAt = performance.now();
    /** Our place in the queue at the last look (0: first). */
    let position = Infinity;
    let firstLook = true;
    const { pollMs } = waiterCadence(req.ttlMs, this.#poll.maxDelayMs);
    // A waiter k places back is granted no sooner than k handoffs from now: it looks about every
    // k polling periods (at most the cadence rule's pollMs), and a release in this process wakes
    // only the first two. With hundreds of waiters on a key, each polling every 50 ms and every
    // one woken by each release, a handoff cost a read from each (250 waiters: 57 s to serve them).
    const cadence = {
      nextDelayMs: () => (position >= 2 ? Math.min(pollMs, this.#poll.maxDelayMs * position) : undefined),
      wakes: () => position <= 1,
    };
    try {
      if (this.#isCrowded(id)) {
        await this.#writeQueueCell(id, slot, entry, req.owner, ttl);
      } else {
        const lease = await this.#queueAtOnce(req, id, slot, entry);
        if (typeof lease === 'object') return lease;
        firstLook = false;
      }
      return await this.#pollLease(
        req,
        async () => {
          // A long wait must not let our place in the queue expire: rewrite it like a renewal would.
          if (performance.now() - queueWrittenAt > req.ttlMs / 3) {
            queueWrittenAt = performance.now();
            await this.#writeQueueCell(id, slot, entry, req.owner, ttl);
          }
          // Poll often right after moving up (first or second in line), then back off: the queue
          // reacts quickly to a handoff while a long hold costs only a few reads per second.
          const head = await this.#queueOrder(id);
          if (firstLook) this.#noteCrowd(id, head.length > 1);
          firstLook = false;
          const index = head.indexOf(req.owner);
          const now = index < 0 ? head.length : index;
          const moved = now < position;
          position = now;
          if (now > 0) return moved && now <= 1 ? POLL_SOON : NOT_YET;
          // Just became first: the one ahead has left, so main is most likely free; write at once.
          // Still first since the last look: main was taken then, so read it before writing.
          return (await this.#takeMain(req, id, slot, entry, !moved)) ?? (moved ? POLL_SOON : NOT_YET);
        },
        cadence,
      );
    } catch (error) {
      // Cancelled, timed out or failed: leave nothing behind.
      await this.#leave(id, slot).catch(() => undefined);
      throw error;
    }
  }

  /**
   * The first attempt on a key this process last found uncontended: the queue cell and the main
   * cell in one write, then the queue and main read side by side. Ours if we are first in the queue
   * and alone in main: the same two conditions as the usual path, whose main write-then-read is
   * still what excludes a second holder (the queue only orders the takers), in two round trips
   * instead of four. Otherwise our main cell goes again, and the answer is whether we were first
   * in the queue. A key found with others queued is left to the usual path until a first look
   * finds it quiet again, so a newcomer's cell does not keep spoiling the queue head's take.
   */
  async #queueAtOnce(req: AcquireRequest, id: Buffer, slot: Slot, entry: string): Promise<CassandraLease | boolean> {
    const acquiredAt = await this.#writeCells(req, id, slot, entry);
    const [queue, owners] = await Promise.all([this.#queueOrder(id), this.#owners('acquire', 'lock_holders', id)]);
    this.#noteCrowd(id, queue.length > 1);
    if (queue[0] === req.owner && owners.length === 1 && owners[0] === req.owner)
      return this.#fenceQueued(req, id, slot, entry, acquiredAt);
    await this.#dropMainCell(id, slot);
    return queue[0] === req.owner;
  }

  #isCrowded(id: Buffer): boolean {
    return this.#crowded.has(id.toString('base64'));
  }

  /** Remembers whether a first look at a key found others queued (see `#queueAtOnce`). */
  #noteCrowd(id: Buffer, crowded: boolean): void {
    const key = id.toString('base64');
    this.#crowded.delete(key);
    if (crowded) keepNewest(this.#crowded.add(key));
  }

  /** TryGetLock: never waits; on failure removes what it wrote. */
  async #queueTryLock(req: AcquireRequest, id: Buffer): Promise<CassandraLease | null> {
    if ((await this.#owners('acquire', 'lock_holders', id)).length > 0) return null;
    const ttl = ttlSeconds(req.ttlMs);
    const slot = this.#takeSlot(id);
    const entry = `${String(this.timeService.now()).padStart(20, '0')}/${req.owner}`;
    const quiet = !this.#isCrowded(id);
    try {
      if (quiet) {
        const first = await this.#queueAtOnce(req, id, slot, entry);
        if (typeof first === 'object') return first;
        if (!first) {
          await this.#leave(id, slot);
          return null;
        }
      } else {
        await this.#writeQueueCell(id, slot, entry, req.owner, ttl);
      }
      // First in the queue but not alone in main: another TryGetLock raced us; look a few times.
      for (let i = quiet ? 1 : 0; i < 3 && (await this.#queueOrder(id))[0] === req.owner; i++) {
        const lease = await this.#takeMain(req, id, slot, entry, i > 0); // main was just read empty
        if (lease) return lease;
      }
    } catch (error) {
      await this.#leave(id, slot).catch(() => undefined);
      throw error;
    }
    await this.#leave(id, slot);
    return null;
  }

  /**
   * Write our main cell; ours if it is the only one, else take it back out. `checkFirst` reads main
   * before writing, to skip the write while the holder is still in (the write-then-read alone is
   * what makes it safe).
   */
  async #takeMain(req: AcquireRequest, id: Buffer, slot: Slot, entry: string, checkFirst: boolean): Promise<CassandraLease | null> {
    if (checkFirst && (await this.#owners('acquire', 'lock_holders', id)).length > 0) return NOT_YET;
    const acquiredAt = await this.#writeCells(req, id, slot, entry);
    const owners = await this.#owners('acquire', 'lock_holders', id);
    if (owners.length !== 1 || owners[0] !== req.owner) {
      await this.#dropMainCell(id, slot);
      return NOT_YET;
    }
    return this.#fenceQueued(req, id, slot, entry, acquiredAt);
  }

  /** Writes our main cell and refreshes our queue cell in one batch; resolves when (local ms) it was sent. */
  async #writeCells(req: AcquireRequest, id: Buffer, slot: Slot, entry: string): Promise<number> {
    const ttl = ttlSeconds(req.ttlMs);
    const sentAt = performance.now();
    const timestamp = this.#timestamp();
    await this.#batch('acquire', [
      this.#mainCell(id, slot, req.owner, ttl, timestamp),
      this.#queueCell(id, slot, entry, req.owner, ttl, timestamp),
    ]);
    slot.written = { at: sentAt, ttlMs: req.ttlMs };
    return sentAt;
  }

  #fenceQueued(req: AcquireRequest, id: Buffer, slot: Slot, entry: string, acquiredAt: number): Promise<CassandraLease> {
    return this.#fence({ key: req.key, owner: req.owner, id, slot, entry, acquiredAt, token: 0n }, 'lock_holders', req);
  }

  /** The owners of every queue cell, in arrival order (the partition holds few rows: see schema.ts). */
  async #queueOrder(id: Buffer): Promise<(string | undefined)[]> {
    const result = await this.#run('acquire', `SELECT entry, owner FROM ${this.keyspace}.lock_waiters WHERE lock_id = ?`, [id]);
    const rows = result.rows.map((r) => ({ entry: r['entry'] as string, owner: r['owner'] as string }));
    return rows.sort((a, b) => (a.entry < b.entry ? -1 : a.entry > b.entry ? 1 : 0)).map((r) => r.owner);
  }

  #mainCell(id: Buffer, slot: Slot, owner: string, ttl: number, timestamp: number): Statement {
    this.#writing(slot, ttl);
    return {
      query: `INSERT INTO ${this.keyspace}.lock_holders (lock_id, slot, owner) VALUES (?, ?, ?) USING TTL ? AND TIMESTAMP ?`,
      params: [id, slot.name, owner, ttl, timestamp],
    };
  }

  /** Takes our main cell back out after a lost take (a later timestamp than its write). */
  async #dropMainCell(id: Buffer, slot: Slot): Promise<void> {
    await this.#run('acquire', `DELETE FROM ${this.keyspace}.lock_holders USING TIMESTAMP ? WHERE lock_id = ? AND slot = ?`, [
      this.#timestamp(),
      id,
      slot.name,
    ]);
  }

  #writeQueueCell(id: Buffer, slot: Slot, entry: string, owner: string, ttl: number, timestamp = this.#timestamp()) {
    const { query, params } = this.#queueCell(id, slot, entry, owner, ttl, timestamp);
    return this.#run('acquire', query, params);
  }

  #queueCell(id: Buffer, slot: Slot, entry: string, owner: string, ttl: number, timestamp: number): Statement {
    this.#writing(slot, ttl);
    return {
      query: `INSERT INTO ${this.keyspace}.lock_waiters (lock_id, slot, entry, owner) VALUES (?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?`,
      params: [id, slot.name, entry, owner, ttl, timestamp],
    };
  }

  /**
   * Removes our queue cell and main cell (release, or a waiter giving up), with one timestamp later
   * than all our writes, so a renewal still in flight cannot resurrect them. Once per slot.
   */
  async #leave(id: Buffer, slot: Slot): Promise<void> {
    if (slot.released) return;
    const timestamp = this.#timestamp();
    this.#freeSlot(id, slot); // any later write to the slot has a later timestamp than this delete
    await this.#cleanUp('release', slot, [
      {
        query: `DELETE FROM ${this.keyspace}.lock_waiters USING TIMESTAMP ? WHERE lock_id = ? AND slot = ?`,
        params: [timestamp, id, slot.name],
      },
      {
        query: `DELETE FROM ${this.keyspace}.lock_holders USING TIMESTAMP ? WHERE lock_id = ? AND slot = ?`,
        params: [timestamp, id, slot.name],
      },
    ]);
  }

  /** Sends `deletes`, which free `slot`: again later if the store is out of reach (`InFlight.cleanUp`), as long as its cells may live. */
  #cleanUp(operation: string, slot: Slot, deletes: Statement[]): Promise<void> {
    return this.#acquiring.cleanUp(() => this.#batch(operation, deletes), slot.lastsUntil);
  }

  // --- the shadow algorithm (the thesis' "old" one) ---------------------------------------------------

  /** GetLock: TryLock in a loop with the thesis' randomized waits; TryGetLock: one TryLock. */
  async #shadowLock(req: AcquireRequest, id: Buffer): Promise<CassandraLease | null> {
    const grace = new UnavailableGrace();
    const slot = this.#takeSlot(id);
    try {
      for (let attempt = 1; ; attempt++) {
        req.signal.throwIfAborted();
        let result: CassandraLease | 'owner' | 'concurrent';
        try {
          result = await this.#shadowAttempt(req, id, slot);
          grace.succeeded();
        } catch (error) {
          if (!req.wait || req.signal.aborted) throw error;
          grace.failed(error); // a reset while waiting: try again
          result = 'concurrent';
        }
        if (typeof result === 'object') {
          if (req.signal.aborted) {
            await this.release(result);
            req.signal.throwIfAborted();
          }
          return result;
        }
        if (!req.wait) {
          this.#freeSlot(id, slot);
          return null;
        }
        const wait =
          result === 'owner' ? Math.random() * this.#shadow.ownerWaitMs : Math.random() * this.#shadow.concurrentStepMs * attempt;
        let unsubscribe: (() => void) | undefined;
        await sleep(wait, req.signal, (wake) => (unsubscribe = this.#notifier.subscribe(req.key, wake))).finally(() => unsubscribe?.());
      }
    } catch (error) {
      await this.#leaveShadow(id, slot).catch(() => undefined);
      throw error;
    }
  }

  /** TryLock: Success (a lease) / AnotherThreadIsOwner / ConcurrentAttempt. */
  async #shadowAttempt(req: AcquireRequest, id: Buffer, slot: Slot): Promise<CassandraLease | 'owner' | 'concurrent'> {
    const ttl = ttlSeconds(req.ttlMs);
    if ((await this.#owners('acquire', 'shadow_holders', id)).length > 0) return 'owner';
    this.#writing(slot, ttl);
    await this.#run(
      'acquire',
      `INSERT INTO ${this.keyspace}.shadow_claims (lock_id, slot, owner) VALUES (?, ?, ?) USING TTL ? AND TIMESTAMP ?`,
      [id, slot.name, req.owner, ttl, this.#timestamp()],
    );
    let won = false;
    let acquiredAt = 0;
    try {
      const shadow = await this.#owners('acquire', 'shadow_claims', id);
      const main = await this.#owners('acquire', 'shadow_holders', id);
      if (shadow.length === 1 && main.length === 0) {
        acquiredAt = performance.now();
        await this.#run(
          'acquire',
          `INSERT INTO ${this.keyspace}.shadow_holders (lock_id, slot, owner) VALUES (?, ?, ?) USING TTL ? AND TIMESTAMP ?`,
          [id, slot.name, req.owner, ttl, this.#timestamp()],
        );
        won = true;
      }
    } finally {
      await this.#cleanUp('acquire', slot, [
        {
          query: `DELETE FROM ${this.keyspace}.shadow_claims USING TIMESTAMP ? WHERE lock_id = ? AND slot = ?`,
          params: [this.#timestamp(), id, slot.name],
        },
      ]);
    }
    if (!won) return 'concurrent';
    return this.#fence({ key: req.key, owner: req.owner, id, slot, acquiredAt, token: 0n }, 'shadow_holders', req);
  }

  /** Removes our shadow main cell, once per slot (as `#leave` does for the queue). */
  async #leaveShadow(id: Buffer, slot: Slot): Promise<void> {
    if (slot.released) return;
    const timestamp = this.#timestamp();
    this.#freeSlot(id, slot);
    await this.#cleanUp('release', slot, [
      {
        query: `DELETE FROM ${this.keyspace}.shadow_holders USING TIMESTAMP ? WHERE lock_id = ? AND slot = ?`,
        params: [timestamp, id, slot.name],
      },
    ]);
  }

  // --- lightweight transactions -----------------------------------------------------------------

  async #lwtAttempt(req: AcquireRequest, id: Buffer): Promise<CassandraLease | null> {
    const acquiredAt = performance.now();
    let result: types.ResultSet;
    try {
      result = await this.#run(
        'acquire',
        `INSERT INTO ${this.keyspace}.lock_lwt (lock_id, owner) VALUES (?, ?) IF NOT EXISTS USING TTL ?`,
        [id, req.owner, ttlSeconds(req.ttlMs)],
        { lwt: true },
      );
    } catch (error) {
      // A Paxos round that timed out may still have applied: take back whatever is ours.
      await this.#run('acquire', `DELETE FROM ${this.keyspace}.lock_lwt WHERE lock_id = ? IF owner = ?`, [id, req.owner], {
        lwt: true,
      }).catch(() => undefined);
      throw error;
    }
    if (!result.wasApplied()) return null;
    return this.#fence({ key: req.key, owner: req.owner, id, acquiredAt, token: 0n }, 'lock_lwt', req);
  }

  // --- semaphores and read-write locks -----------------------------------------------------------
  //
  // One partition per key in `shared_claims`: a row per claim, clustered by its token, which is
  // also its place in the queue (core's `SharedRequest` rule). A claim joins by one conditional
  // batch that moves the static counter from the value just read (so no claim can have joined
  // since that read) and inserts its row; it is judged by the rows of that same read. Every later
  // write to a claim is a lightweight transaction on its owner, so writes to the partition are all
  // ordered by Paxos (no client clock decides between them).

  acquireShared(req: SharedRequest): Promise<CassandraLease | null> {
    return this.#acquiring.track(this.#acquireShared(req));
  }

  async #acquireShared(req: SharedRequest): Promise<CassandraLease | null> {
    await this.#connect();
    const id = this.idFor(req.key);
    // A waiter's row lasts about a ttl past each refresh (core's waiterCadence); ttls here are whole seconds.
    const waiterTtl = ttlSeconds(waiterCadence(req.ttlMs, this.#poll.maxDelayMs).placeMs);
    /** Our row once joined: its token, and when it was last written (its ttl counts from there). */
    let claim: { token: bigint; acquiredAt: number } | undefined;
    const attempt = async (): Promise<CassandraLease | null | typeof POLL_AGAIN> => {
      const acquiredAt = performance.now();
      const rows = (
        await this.#run(
          'acquire',
          `SELECT seq, owner, exclusive, claim_counter, claim_limit FROM ${this.keyspace}.shared_claims WHERE lock_id = ?`,
          [id],
          { serialRead: true },
        )
      ).rows;
      // A claim whose mode cell is missing counts as exclusive: the reading that can never let two in.
      const queue = rows
        .filter((r) => r['seq'] !== null)
        .map((r) => ({
          token: toBigInt(r['seq']),
          owner: r['owner'] as string,
          mode: r['exclusive'] === false ? ('shared' as const) : ('exclusive' as const),
        }));
      if (!claim) {
        const statics = rows[0];
        const counter =
          statics?.['claim_counter'] === null || statics?.['claim_counter'] === undefined ? undefined : toBigInt(statics['claim_counter']);
        const stored = statics?.['claim_limit'] ?? null;
        if (queue.length > 0 && stored !== null && stored !== req.limit) throw new LimitMismatchError(req.key, stored as number, req.limit);
        const token = maxOf((counter ?? 0n) + 1n, req.minToken ?? 0n);
        const ok = grantable([...queue, { mode: req.mode }], queue.length, req.limit);
        if (!ok && !req.wait) return null; // judged by a read no claim can have joined since: leave no trace
        const joined = await this.#run(
          'acquire',
          `BEGIN BATCH
          UPDATE ${this.keyspace}.shared_claims SET claim_counter = ?, claim_limit = ? WHERE lock_id = ? IF claim_counter = ?
          INSERT INTO ${this.keyspace}.shared_claims (lock_id, seq, owner, exclusive) VALUES (?, ?, ?, ?) USING TTL ?
          APPLY BATCH`,
          [
            String(token),
            req.limit,
            id,
            counter === undefined ? null : String(counter),
            id,
            String(token),
            req.owner,
            req.mode === 'exclusive',
            ok ? ttlSeconds(req.ttlMs) : waiterTtl,
          ],
          { lwt: true },
        );
        if (!joined.wasApplied()) return POLL_AGAIN; // another claim joined first: read again
        claim = { token, acquiredAt };
        return ok ? this.#sharedLease(req, id, claim) : null;
      }
      const index = queue.findIndex((c) => c.token === claim!.token && c.owner === req.owner);
      if (index < 0)
        throw new BackendUnavailableError(this.name, 'acquire', { cause: new Error("the claim's row expired while it waited") });
      const ok = grantable(queue, index, req.limit);
      // A waiting row is rewritten (a Paxos round) only every third of its ttl, not on every look;
      // a granted one gets the lease's ttl, counted from this write.
      const sentAt = performance.now();
      if (!ok && sentAt - claim.acquiredAt < (waiterTtl * 1000) / 3) return null;
      if (!(await this.#renewClaim({ id, token: claim.token, owner: req.owner, mode: req.mode }, ok ? ttlSeconds(req.ttlMs) : waiterTtl))) {
        throw new BackendUnavailableError(this.name, 'acquire', { cause: new Error("the claim's row expired while it waited") });
      }
      claim.acquiredAt = sentAt;
      return ok ? this.#sharedLease(req, id, { token: claim.token, acquiredAt: sentAt }) : null;
    };
    const leave = async () => {
      if (claim) await this.release({ key: req.key, owner: req.owner, id, token: claim.token, acquiredAt: 0, shared: true });
    };
    try {
      for (;;) {
        if (!req.wait) {
          const lease = await attempt();
          if (lease !== POLL_AGAIN) return lease;
          continue;
        }
        return await pollForLease(
          `shared:${req.key}`,
          req.signal,
          async () => {
            const lease = await attempt();
            return lease === POLL_AGAIN ? POLL_SOON : lease;
          },
          (lease) => this.release(lease),
          {
            ...this.#pollOptions(req.ttlMs),
            notifier: this.#notifier,
          },
        );
      }
    } catch (error) {
      // A cancelled, timed-out or failed waiter removes its row before reporting.
      await leave().catch(() => undefined);
      throw error;
    }
  }

  #sharedLease(req: SharedRequest, id: Buffer, claim: { token: bigint; acquiredAt: number }): CassandraLease {
    return { key: req.key, owner: req.owner, id, token: claim.token, acquiredAt: claim.acquiredAt, shared: true, mode: req.mode };
  }

  /**
   * Rewrites a claim's row with a new TTL, if it is still ours. Every cell of the row is written
   * again: a TTL belongs to a cell, and a cell left out keeps its old one (the mode cell once did,
   * and a held write lock turned into a read lock when it expired).
   */
  async #renewClaim(l: Pick<CassandraLease, 'id' | 'token' | 'owner' | 'mode'>, ttl: number): Promise<boolean> {
    const result = await this.#run(
      'renew',
      `UPDATE ${this.keyspace}.shared_claims USING TTL ? SET owner = ?, exclusive = ? WHERE lock_id = ? AND seq = ? IF owner = ?`,
      [ttl, l.owner, l.mode === 'exclusive', l.id, String(l.token), l.owner],
      { lwt: true },
    );
    return result.wasApplied();
  }

  /** The key's static counter lifted by compare-and-set while our claim's row lives. */
  async #raiseSharedFloor(l: CassandraLease, floor: bigint): Promise<boolean> {
    for (;;) {
      const row = (
        await this.#run(
          'raise token floor',
          `SELECT claim_counter, owner FROM ${this.keyspace}.shared_claims WHERE lock_id = ? AND seq = ?`,
          [l.id, String(l.token)],
          { serialRead: true },
        )
      ).first();
      if (row?.['owner'] !== l.owner) return false;
      const counter = toBigInt(row['claim_counter']);
      if (counter >= floor) return true;
      const result = await this.#run(
        'raise token floor',
        `UPDATE ${this.keyspace}.shared_claims SET claim_counter = ? WHERE lock_id = ? IF claim_counter = ?`,
        [String(floor), l.id, String(counter)],
        { lwt: true },
      );
      if (result.wasApplied()) return true;
    }
  }

  // --- shared -----------------------------------------------------------------------------------

  /** Polls `attempt` with core's backoff, woken early by releases in this process. */
  #pollLease(
    req: AcquireRequest,
    attempt: () => Promise<CassandraLease | null | typeof POLL_SOON>,
    more: PollOptions = {},
  ): Promise<CassandraLease> {
    return pollForLease(req.key, req.signal, attempt, (lease) => this.release(lease), {
      ...this.#pollOptions(req.ttlMs),
      notifier: this.#notifier,
      ...more,
    });
  }

  /** The backoff of a waiter with a lease of `ttlMs`: ours, but never slower than core's cadence rule (a quarter of the ttl). */
  #pollOptions(ttlMs: number): { minDelayMs: number; maxDelayMs: number } {
    const { pollMs } = waiterCadence(ttlMs, this.#poll.maxDelayMs);
    return { minDelayMs: Math.min(this.#poll.minDelayMs, pollMs), maxDelayMs: pollMs };
  }

  /**
   * Gives a freshly won lease its fencing token: compare-and-set the key's token row to one more
   * than it holds, or to `least` (a migration's hint) if that is higher (one LWT, plus a SERIAL read
   * the first time this process sees the key), then check the lock is still ours, so a holder
   * paused between winning and counting can never carry a token newer than its successor's.
   */
  async #fence(lease: Omit<CassandraLease, 'token'> & { token: bigint }, table: HolderTable, req: AcquireRequest): Promise<CassandraLease> {
    try {
      const token = await this.#setToken(lease.id, (current) => maxOf((current ?? 0n) + 1n, req.minToken ?? 0n));
      // Our holder cell was written after `acquiredAt` with the full ttl and only our own release
      // deletes it: only a slow token round needs the read.
      if (!stillStands({ at: lease.acquiredAt, ttlMs: req.ttlMs }) && !(await this.#stillOurs(lease, table))) {
        throw new BackendUnavailableError(this.name, 'acquire', {
          cause: new Error('the lease expired while its fencing token was being taken'),
        });
      }
      return { ...lease, token };
    } catch (error) {
      await this.release(lease).catch(() => undefined);
      throw error;
    }
  }

  /**
   * See `LockBackend.raiseTokenFloor`: the token row is lifted by compare-and-set, then the lock
   * must still be ours. A successor that won in between either counted before the lift (and the
   * check finds it) or counts from the lifted value.
   */
  async raiseTokenFloor(lease: CassandraLease, floor: bigint): Promise<boolean> {
    const l = lease;
    if (l.shared) return this.#raiseSharedFloor(l, floor);
    await this.#setToken(l.id, (current) => (current === undefined || current < floor ? floor : undefined));
    return this.#stillOurs(l, HOLDER_TABLES[this.algorithm]);
  }

  /**
   * Moves the key's token row to `next(current)` by compare-and-set, retrying on a lost race with
   * the value the race returned; `next` returning undefined leaves it as it is. Resolves the value
   * the row then holds. Starts from this process's last sighting (a guess: a wrong one costs one
   * more round), else a SERIAL read.
   */
  async #setToken(id: Buffer, next: (current: bigint | undefined) => bigint | undefined): Promise<bigint> {
    const cacheKey = id.toString('base64');
    let current = this.#tokens.get(cacheKey);
    if (current === undefined) {
      const row = (
        await this.#run('acquire', `SELECT fencing_token FROM ${this.keyspace}.lock_token WHERE lock_id = ?`, [id], { serialRead: true })
      ).first();
      current = row ? toBigInt(row['fencing_token']) : undefined;
    }
    for (;;) {
      const value = next(current);
      if (value === undefined) return current!;
      const result =
        current === undefined
          ? await this.#run(
              'acquire',
              `INSERT INTO ${this.keyspace}.lock_token (lock_id, fencing_token) VALUES (?, ?) IF NOT EXISTS`,
              [id, String(value)],
              { lwt: true },
            )
          : await this.#run(
              'acquire',
              `UPDATE ${this.keyspace}.lock_token SET fencing_token = ? WHERE lock_id = ? IF fencing_token = ?`,
              [String(value), id, String(current)],
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

  async #stillOurs(lease: Pick<CassandraLease, 'id' | 'owner'>, table: HolderTable): Promise<boolean> {
    if (table === 'lock_lwt') {
      return (
        (
          await this.#run('acquire', `SELECT owner FROM ${this.keyspace}.lock_lwt WHERE lock_id = ?`, [lease.id], { serialRead: true })
        ).first()?.['owner'] === lease.owner
      );
    }
    return (await this.#owners('acquire', table, lease.id)).includes(lease.owner);
  }

  async #owners(operation: string, table: string, id: Buffer): Promise<string[]> {
    const result = await this.#run(operation, `SELECT owner FROM ${this.keyspace}.${table} WHERE lock_id = ? LIMIT 2`, [id]);
    return result.rows.map((r) => r['owner'] as string);
  }

  /** Client timestamps (µs), strictly increasing per backend: a release is always later than the renewals before it. */
  #timestamp(): number {
    this.#lastTimestamp = Math.max(this.#lastTimestamp + 1, wallMicros());
    return this.#lastTimestamp;
  }

  #connect(): Promise<void> {
    if (this.#closed)
      return Promise.reject(new BackendUnavailableError(this.name, 'connect', { cause: new Error('the backend is closed') }));
    this.#ready ??= (async () => {
      try {
        await this.client.connect();
        await ensureSchema(this.client, this.#schemaScope, this.keyspace, this.#replication);
        if (this.algorithm === 'queue') await this.timeService.start();
      } catch (error) {
        this.#ready = undefined;
        throw this.#error('connect', error);
      }
    })();
    return this.#ready;
  }

  /**
   * Writes in one request (an unlogged batch): the same as sending them side by side, each applied
   * on its own, for one request instead of several.
   */
  async #batch(operation: string, statements: Statement[]): Promise<void> {
    try {
      await this.client.batch(statements, { prepare: true, logged: false, consistency: this.#consistency });
    } catch (error) {
      throw this.#error(operation, error);
    }
  }

  async #run(
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
    try {
      return await this.client.execute(query, params, options);
    } catch (error) {
      throw this.#error(operation, error);
    }
  }

  #error(operation: string, error: unknown): Error {
    return backendFailure(this.name, operation, error, isUnavailable);
  }
}

/**
 * Works around cassandra-driver's NODEJS-681 (4.10.0, fix not released): after a server restart two
 * control-connection refreshes can race, and the loser calls `_setHealthListeners(null)`; when that
 * refresh was a scheduled retry, its rejection is unhandled and Node ends the process. The winning
 * refresh has already reconnected, so the loser's error is dropped, as the driver itself does for
 * refreshes it starts in the background. Applied only to clients this backend creates.
 */
function containRefreshRace(client: Client): void {
  const control = (client as unknown as { controlConnection?: { _refresh?: (...args: unknown[]) => Promise<void> } }).controlConnection;
  const refresh = control?._refresh;
  if (!control || typeof refresh !== 'function') return;
  control._refresh = (...args: unknown[]) => refresh.apply(control, args).catch(() => undefined);
}

/** Drops the oldest entry (Maps and Sets iterate in insertion order) once there are more than RECENT_KEYS. */
function keepNewest(recent: Map<string, unknown> | Set<string>): void {
  if (recent.size > RECENT_KEYS) recent.delete(recent.keys().next().value!);
}

/**
 * Whether a cell written at `written.at` (local monotonic ms, when the write was sent) with a ttl
 * of at least `written.ttlMs` from its landing is certainly still there, barring a delete: less
 * than half its ttl has passed here (half: room for any difference in clock rates).
 */
function stillStands(written: { at: number; ttlMs: number }): boolean {
  return performance.now() - written.at < written.ttlMs / 2;
}

/** Cell TTL for a lease of `ttlMs`: Cassandra may expire a cell up to a second early, so one more. */
function ttlSeconds(ttlMs: number): number {
  return ttlMs / 1000 + 1;
}

/**
 * A Cassandra backend. @throws InvalidArgumentError for bad options; store failures surface as
 * BackendUnavailableError / BackendError from the Locker's calls.
 */
export function cassandraBackend(options: CassandraBackendOptions): CassandraBackend {
  return new CassandraBackend(options);
}

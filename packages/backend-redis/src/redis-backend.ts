import { createHash, randomUUID } from 'node:crypto';
import {
  BackendError,
  BackendUnavailableError,
  InvalidArgumentError,
  type Capabilities,
  LimitMismatchError,
  type LockBackend,
} from '@deadbolt/core';
import {
  count,
  flag,
  InFlight,
  Once,
  instance,
  MAX_TIMER_MS,
  ms,
  pollForLease,
  readOptions,
  urlOrClient,
  ReleaseNotifier,
  settings,
  text,
  url,
  waiterCadence,
  type Rule,
  type Rules,
  type AcquireRequest,
  type Lease,
  type SharedRequest,
} from '@deadbolt/core/backend';
import { Cluster, Redis, ReplyError, type ClusterOptions, type RedisOptions } from 'ioredis';
import {
  ACQUIRE,
  COUNTER_TTL_MS,
  GUARDED_ACQUIRE,
  RAISE_FLOOR,
  RELEASE,
  RENEW,
  SHARED_ACQUIRE,
  SHARED_RAISE_FLOOR,
  SHARED_RELEASE,
  SHARED_RENEW,
} from './scripts.js';

export interface RedisBackendOptions {
  /** `redis://[user:pass@]host:port[/db]`. The backend creates and closes its own connections. */
  url?: string;
  /** Your own ioredis client (a `Redis` or a `Cluster`); `close()` leaves it open. Used instead of `url`. */
  client?: Redis | Cluster;
  /**
   * `url` names one node of a Redis Cluster: the backend opens an ioredis `Cluster`, which finds
   * the others. Every key one lock touches shares a hash slot, so each script runs on one node.
   * Default false.
   */
  cluster?: boolean;
  /** More ioredis `Cluster` options with `cluster` (e.g. `natMap` for nodes behind NAT). */
  clusterOptions?: Omit<ClusterOptions, 'redisOptions'>;
  /**
   * Replica sync (opt-in): after every grant and renewal, `WAIT` until this many replicas have
   * the write, so a failover to one of them keeps the lock. A shortfall within `syncTimeoutMs`
   * fails the call: an acquisition is released and rejects with `BackendError` (cause: how many
   * replicas answered), a renewal rejects with `BackendUnavailableError` (core retries it within
   * the lease and reports the lock lost if it never succeeds). It narrows the failover window, it
   * does not close it: see the README. Not with `cluster`. Default 0 (off).
   */
  syncReplicas?: number;
  /** How long a replica sync may wait for the replicas. Default 1000 ms. */
  syncTimeoutMs?: number;
  /**
   * Restart guard (opt-in): a server found without the backend's birth mark (restarted without
   * its data, or new) grants no lock for this long, checked in the grant's own script. Set it to
   * your longest ttl and no lock is ever granted twice across an empty restart, where otherwise a
   * holder that has not yet noticed the restart overlaps the next one. A new deployment waits it
   * out once. Default 0 (off); `redlockBackend` always sets it.
   */
  restartGuardMs?: number;
  /** Prefix of every key and of the release channel. Default `deadbolt:`. Must not contain `{` or `}`. */
  prefix?: string;
  /**
   * Grant waiters in arrival order through a per-key queue. Default true. `false` is a little
   * cheaper per acquisition but unfair: under contention a releasing client re-takes the lock
   * before woken waiters arrive, and waiters can starve.
   */
  fifo?: boolean;
  /**
   * Longest pause between a waiter's re-checks when no release message arrives (never more than a
   * quarter of the ttl). Default 250 ms.
   */
  maxPollDelayMs?: number;
  /** Connect timeout for connections created from `url`. Default 2000 ms. */
  connectTimeoutMs?: number;
  /**
   * The longest a command may wait for its reply on connections created from `url`; one that gets
   * none (a silent server or partition) fails with `BackendUnavailableError`, and a connection
   * that has had commands waiting this long without a byte back is closed and opened again, so a
   * connection that went silent for good is not used on. Default 5000 ms.
   */
  commandTimeoutMs?: number;
  /**
   * Accept a server that may evict keys (`maxmemory` set with a `maxmemory-policy` other than
   * `noeviction`). An evicted lock key is a lost lock that nobody is told about, so by default
   * every acquisition on such a server fails with `BackendError` saying why. Default false.
   */
  allowEviction?: boolean;
}

export interface RedisLease extends Lease {
  readonly keys: RedisKeys;
  /** A semaphore permit or read-write lock (`keys` are then the shared-claim keys). */
  readonly shared?: true;
}

/** A grant carried by a handoff message: the token, and the lease end the release set (server ms). */
interface HandedGrant {
  readonly token: string;
  readonly deadline: number;
}

/** An attempt that left a waiter queued: its send time (`performance.now()`) and the deadline it set (server ms). */
interface Placed {
  readonly sentAt: number;
  readonly deadline: number;
}

export interface RedisKeys {
  readonly lock: string;
  readonly token: string;
  readonly queue: string;
  readonly deadlines: string;
}

/** How each option of `redisBackend` is checked (see core's options.ts); the conformance suite feeds it hostile values. */
export const redisOptionRules = {
  url: url(['redis', 'rediss']),
  client: instance((v): v is Redis | Cluster => v instanceof Redis || v instanceof Cluster, 'an ioredis Redis or Cluster client'),
  cluster: flag,
  clusterOptions: settings as Rule<Omit<ClusterOptions, 'redisOptions'>>,
  syncReplicas: count(0, 100),
  syncTimeoutMs: count(1, MAX_TIMER_MS), // WAIT takes whole ms
  restartGuardMs: count(0, MAX_TIMER_MS),
  prefix: text(/^[^{}]*$/, 'a string without { or } (they would change the hash slot)', ['{x}', 'a{']),
  fifo: flag,
  maxPollDelayMs: ms(),
  connectTimeoutMs: ms(),
  commandTimeoutMs: ms(),
  allowEviction: flag,
} satisfies Rules<RedisBackendOptions>;

/** How many keys' names `keysFor` keeps (the oldest goes first). */
const KEY_NAMES_KEPT = 1024;

/** How many handoff grants `#handed` keeps for waiters that have not taken them (the oldest goes first). */
const HANDED_KEPT = 1024;

/** Sets `key` in `map`, first dropping the oldest entry when the map already holds `limit`. */
function keepNewest<K, V>(map: Map<K, V>, key: K, value: V, limit: number): void {
  if (map.size >= limit) map.delete(map.keys().next().value!);
  map.set(key, value);
}

/** The largest token a Lua number (a double) holds exactly. */
const MAX_EXACT_TOKEN = 2n ** 53n - 1n;

class Script {
  readonly sha: string;
  constructor(readonly source: string) {
    this.sha = createHash('sha1').update(source).digest('hex');
  }
}

const scripts = {
  acquire: new Script(ACQUIRE),
  guardedAcquire: new Script(GUARDED_ACQUIRE),
  renew: new Script(RENEW),
  release: new Script(RELEASE),
  raiseFloor: new Script(RAISE_FLOOR),
  sharedAcquire: new Script(SHARED_ACQUIRE),
  sharedRenew: new Script(SHARED_RENEW),
  sharedRelease: new Script(SHARED_RELEASE),
  sharedRaiseFloor: new Script(SHARED_RAISE_FLOOR),
};

/**
 * Redis backend. Acquire is one EVALSHA (`SET NX PX` plus the fencing token, or the FIFO queue
 * step); renew and release are owner-checked scripts; a release publishes on one channel, which
 * a single subscriber connection per backend turns into wake-ups for this process's waiters.
 */
export class RedisBackend implements LockBackend<RedisLease> {
  readonly name = 'redis';
  readonly capabilities: Capabilities;
  /** The command connection (yours if you passed `client`). */
  readonly client: Redis | Cluster;
  readonly #ownsClient: boolean;
  readonly #prefix: string;
  readonly #fifo: boolean;
  readonly #maxPollDelayMs: number;
  /** Shared claims' release messages (every process's subscriber receives them). */
  readonly #channel: string;
  /** Names this backend's waiters in the queue, so a release messages only their process. */
  readonly #id = randomUUID();
  readonly #notifier = new ReleaseNotifier();
  /**
   * Grants that handoff messages brought, by `<lock key>\n<owner>`, until the waiter takes them
   * (see `#handedLease`). A message can come before the answer to the attempt that queued its
   * waiter (they come on two connections), so grants are kept whether or not anyone is known to
   * wait for them yet; a waiter that gave up first leaves one behind, so only the newest
   * `HANDED_KEPT` are kept.
   */
  readonly #handed = new Map<string, HandedGrant>();
  readonly #keyNames = new Map<string, RedisKeys>();
  /** The release script's options (see `mutex` in scripts.ts): the same for every release. */
  readonly #releaseOptions: string;
  /** The subscriber is subscribed (set once its first subscription succeeded). */
  #listening = false;
  readonly #allowEviction: boolean;
  /**
   * The eviction check (`#checkEviction`), once per backend, again after a failure. A call on a
   * lease waits until a check under way has settled: Redlock gives back the part of a node that
   * has not answered yet at once, counting on the give-back following the grant on the connection,
   * so the give-back must not overtake its acquire while that still waits for the check before
   * sending (seen in CI: a release that overtook it left the part behind until its ttl ran out).
   */
  readonly #evictionChecked = new Once(() => this.#checkEviction());
  #subscriber: Redis | Cluster | undefined;
  readonly #connectTimeoutMs: number;
  /** Acquisitions under way: `close()` lets aborted ones leave the queue first. */
  readonly #acquiring: InFlight;
  readonly #syncReplicas: number;
  readonly #syncTimeoutMs: number;
  readonly #restartGuardMs: number;
  /** The subscriber (`#openSubscriber`): once, again after a failure. */
  readonly #subscribed = new Once(() => this.#openSubscriber());
  #closed = false;

  /** @throws InvalidArgumentError for bad options (before connecting). */
  constructor(raw: RedisBackendOptions) {
    const options = readOptions(raw, redisOptionRules, 'redisBackend');
    const prefix = options.prefix ?? 'deadbolt:';
    const maxPoll = options.maxPollDelayMs ?? 250;
    const connectTimeout = options.connectTimeoutMs ?? 2000;
    const commandTimeout = options.commandTimeoutMs ?? 5000;
    this.#allowEviction = options.allowEviction ?? false;
    this.#connectTimeoutMs = connectTimeout;
    this.#acquiring = new InFlight(commandTimeout);
    this.#syncReplicas = options.syncReplicas ?? 0;
    this.#syncTimeoutMs = options.syncTimeoutMs ?? 1000;
    this.#restartGuardMs = options.restartGuardMs ?? 0;
    const cluster = options.cluster ?? options.client instanceof Cluster;
    // WAIT counts the replicas of the connection it is sent on; a Cluster client sends a keyless
    // command to any node, not the one that granted.
    if (this.#syncReplicas > 0 && cluster) throw new InvalidArgumentError('syncReplicas does not work with a Redis Cluster client');
    // The guard's keys have no hash tag: beside a lock's keys in one script, they would cross slots.
    if (this.#restartGuardMs > 0 && cluster) throw new InvalidArgumentError('restartGuardMs does not work with a Redis Cluster client');
    const store = urlOrClient(options, 'redisBackend', 'redis://host:port');
    if (store.client) {
      this.client = store.client;
      this.#ownsClient = false;
    } else {
      const url = store.url;
      const connection: RedisOptions = {
        connectTimeout,
        // A reply that never comes (the connection silently dead) fails the command instead of
        // waiting for the OS to notice; TCP keep-alive probes find a peer that vanished.
        commandTimeout: commandTimeout,
        // ...and a connection that has commands out but answers nothing for as long is replaced:
        // one that went silent for good (a middlebox that lost its state) would otherwise fail
        // every command until keep-alive probes gave up on it, minutes later if ever.
        socketTimeout: commandTimeout,
        keepAlive: 10_000,
        // Fail a command after one reconnect attempt instead of queueing it while Redis is down:
        // the caller gets BackendUnavailableError, never an endless wait.
        maxRetriesPerRequest: 1,
        lazyConnect: false,
      };
      if (cluster) {
        const auth = { ...(url.username ? { username: url.username } : {}), ...(url.password ? { password: url.password } : {}) };
        this.client = new Cluster(
          url.hosts.map(({ host, port }) => ({ host: host.replace(/^\[|\]$/g, ''), port: port ?? 6379 })),
          { slotsRefreshTimeout: connectTimeout, ...options.clusterOptions, redisOptions: { ...connection, ...auth } },
        );
      } else {
        if (url.hosts.length !== 1) throw new InvalidArgumentError('url must name one Redis server (several only with cluster: true)');
        this.client = new Redis(url.href, connection);
      }
      // Errors reach callers through the failed commands; this only stops ioredis logging them.
      this.client.on('error', () => undefined);
      this.#ownsClient = true;
    }
    this.#prefix = prefix;
    this.#fifo = options.fifo ?? true;
    this.#maxPollDelayMs = maxPoll;
    this.#channel = `${prefix}released`;
    this.#releaseOptions = `-0${this.#fifo ? '1' : '0'}|${this.#id}|0|0`;
    this.capabilities = {
      fencing: 'strict',
      fairness: this.#fifo ? 'fifo' : 'none',
      lease: 'ttl',
      wake: 'push',
      minTtlMs: 1,
      ttlGranularityMs: 1,
      crossProcess: true,
      minToken: true,
      semaphore: true,
      readWrite: true,
    };
  }

  /**
   * Redis key names for a lock. The hash tag is a digest of the key (user keys may contain braces);
   * the key itself follows, so two keys never share names.
   */
  keysFor(key: string): RedisKeys {
    let keys = this.#keyNames.get(key);
    if (!keys) {
      const base = this.#base(key);
      keys = { lock: `${base}lock:${key}`, token: `${base}token:${key}`, queue: `${base}queue:${key}`, deadlines: `${base}wait:${key}` };
      // A digest per acquisition is a tenth of this process's share of an uncontended cycle, and a
      // busy key is taken again and again: keep the names of the keys last used.
      keepNewest(this.#keyNames, key, keys, KEY_NAMES_KEPT);
    }
    return keys;
  }

  /** Redis key names for a shared key (semaphore or read-write lock); see scripts.ts. `lock` names the claims. */
  sharedKeysFor(key: string): RedisKeys {
    const base = this.#base(key);
    return { lock: `${base}claims:${key}`, token: `${base}stoken:${key}`, queue: `${base}sexp:${key}`, deadlines: `${base}smeta:${key}` };
  }

  /** `<prefix>{<22-char digest of the key>}`: the hash tag every key of one lock shares. */
  #base(key: string): string {
    return `${this.#prefix}{${createHash('sha256').update(key).digest('base64url').slice(0, 22)}}`;
  }

  acquireShared(req: SharedRequest): Promise<RedisLease | null> {
    return this.#acquiring.track(this.#acquireShared(req));
  }

  async #acquireShared(req: SharedRequest): Promise<RedisLease | null> {
    await this.#checkEviction();
    const keys = this.sharedKeysFor(req.key);
    if (!req.wait) return this.#attemptShared(req, keys);
    await this.#subscribed.run();
    const { pollMs: poll } = waiterCadence(req.ttlMs, this.#maxPollDelayMs);
    try {
      return await pollForLease(
        keys.lock,
        req.signal,
        () => this.#attemptShared(req, keys),
        (lease) => this.release(lease),
        {
          notifier: this.#notifier,
          minDelayMs: Math.min(5, poll),
          maxDelayMs: poll,
        },
      );
    } catch (error) {
      // Leave the queue before reporting the abort or failure: nothing of this waiter stays behind
      // (again later if the store is out of reach: `InFlight.leave`).
      await this.#acquiring.leave(
        () => this.#run('release', scripts.sharedRelease, keys, [req.owner, this.#channel, keys.lock]),
        req.ttlMs,
      );
      throw error;
    }
  }

  acquire(req: AcquireRequest): Promise<RedisLease | null> {
    return this.#acquiring.track(this.#acquire(req));
  }

  async #acquire(req: AcquireRequest): Promise<RedisLease | null> {
    if (!this.#evictionChecked.done) await this.#evictionChecked.run();
    const keys = this.keysFor(req.key);
    /** Our place in the queue as the last attempt saw it (0: the head). */
    let place = 0;
    /** The last attempt that left us queued: when it was sent, and the deadline it set us. */
    let placed: Placed | undefined;
    const onPlace = (p: number, at: Placed) => void ((place = p), (placed = at));
    // The first attempt before any wait bookkeeping: uncontended, it is the whole acquisition.
    let first: RedisLease | null = null;
    try {
      first = await this.#attempt(req, keys, false, onPlace);
    } catch (error) {
      if (!(error instanceof BackendUnavailableError)) throw error;
      // A one-shot attempt with no answer may still have been granted: give it back in the
      // background (owner-checked), so a late grant does not block the key for its whole ttl.
      if (!req.wait) {
        void this.#releaseOwner(keys, req.owner).catch(() => undefined);
        throw error;
      }
      // A waiter rides out a reset in the wait loop below, as it would at any later attempt.
    }
    if (first || !req.wait) return first;
    // Queued now. When the subscription was not in place yet, a handoff may have come before it:
    // the loop's first attempt, at once, finds it. When it was, the loop starts by waiting, unless a
    // FIFO handoff reached us before our first attempt's answer did (kept in `#handed`: the loop's
    // first call takes it). An unordered wake-up that came that early is lost; the head's next
    // re-check, within `poll`, makes up for it.
    const handedId = `${keys.lock}\n${req.owner}`;
    let queued = true;
    let already = this.#listening;
    try {
      await this.#subscribed.run();
      // Only a release message wakes a waiter early. The head re-checks every `poll` as the safety
      // net for a lost message and for a holder that died; a waiter behind it can be handed nothing,
      // so it only keeps its place alive (a third of its place's ttl).
      const { placeMs, pollMs: poll } = waiterCadence(req.ttlMs, this.#maxPollDelayMs);
      const behind = Math.max(poll, Math.floor(placeMs / 3));
      return await pollForLease(
        keys.lock,
        req.signal,
        async () => {
          const handed = this.#handedLease(req, keys, handedId, placed);
          if (handed) return handed;
          if (already) return ((already = false), null);
          const lease = await this.#attempt(req, keys, queued, onPlace);
          queued ||= lease === null;
          return lease;
        },
        (lease) => this.release(lease),
        {
          notifier: this.#notifier,
          owner: req.owner,
          minDelayMs: poll,
          maxDelayMs: poll,
          nextDelayMs: () => (place > 0 ? behind : poll),
        },
      );
    } catch (error) {
      // Leave the queue before reporting the abort or failure: nothing of this waiter stays behind
      // (again later if the store is out of reach: `InFlight.leave`).
      if (queued) await this.#acquiring.leave(() => this.#releaseOwner(keys, req.owner), req.ttlMs);
      throw error;
    } finally {
      this.#handed.delete(handedId);
    }
  }

  /**
   * The grant a handoff message brought `req`'s waiter, as a lease, when it can be trusted without
   * asking the store; undefined otherwise (the next attempt then finds the grant, or that there is
   * none). The release that handed us the key ended our lease at our queue deadline, which the
   * attempt that last left us queued set to the server's time (in whole ms) + the waiter ttl (at
   * least our ttl). That attempt was sent no later than it ran, so a lease counted from 1 ms before
   * its send time ends no later than the store's. The message must carry that attempt's deadline:
   * an attempt of ours that ran after the handoff would have been granted, not queued, unless the
   * handed lease had already ended, and then it set a later deadline; so a match also shows the
   * message is not an old one. With replica sync the grant must be waited for on our own
   * connection, so the attempt confirms it instead.
   */
  #handedLease(req: AcquireRequest, keys: RedisKeys, id: string, placed: Placed | undefined): RedisLease | undefined {
    const grant = this.#handed.get(id);
    if (!grant || !placed) return undefined;
    this.#handed.delete(id);
    if (grant.deadline !== placed.deadline || this.#syncReplicas > 0) return undefined;
    const acquiredAt = placed.sentAt - 1;
    // With less than half the lease left, the attempt confirms instead (and renews it to a full ttl).
    if (performance.now() - acquiredAt > req.ttlMs / 2) return undefined;
    return { key: req.key, owner: req.owner, token: BigInt(grant.token), acquiredAt, keys };
  }

  async renew(lease: RedisLease, ttlMs: number): Promise<boolean> {
    const { keys } = lease;
    if (!this.#evictionChecked.done) await this.#evictionChecked.settled();
    const renewed =
      (await this.#run('renew', lease.shared ? scripts.sharedRenew : scripts.renew, keys, [lease.owner, String(ttlMs)])) === 1;
    if (renewed && this.#syncReplicas > 0) await this.#synced('renew');
    return renewed;
  }

  async release(lease: RedisLease): Promise<void> {
    const { keys } = lease;
    if (!this.#evictionChecked.done) await this.#evictionChecked.settled();
    if (lease.shared) await this.#run('release', scripts.sharedRelease, keys, [lease.owner, this.#channel, keys.lock]);
    else await this.#releaseOwner(keys, lease.owner);
  }

  /** See `LockBackend.raiseTokenFloor`. @throws BackendError for a floor above 2^53 (Redis's Lua numbers are doubles). */
  async raiseTokenFloor(lease: RedisLease, floor: bigint): Promise<boolean> {
    const { keys } = lease;
    if (floor > MAX_EXACT_TOKEN) {
      throw new BackendError(this.name, 'raise token floor', {
        cause: new Error(`a token floor of ${floor} is beyond 2^53, which Redis's Lua numbers cannot hold exactly`),
      });
    }
    if (!this.#evictionChecked.done) await this.#evictionChecked.settled();
    if (lease.shared)
      return (
        (await this.#run('raise token floor', scripts.sharedRaiseFloor, keys, [lease.owner, floor.toString(), String(COUNTER_TTL_MS)])) ===
        1
      );
    return (await this.#run('raise token floor', scripts.raiseFloor, keys, [lease.owner, floor.toString()])) === 1;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // Core aborts every acquisition first; each then leaves the queue (one script), which
    // disconnecting at once would cut short (its entry would hold the queue for a waiter's ttl).
    await this.#acquiring.settled();
    this.#subscriber?.disconnect();
    if (this.#ownsClient) this.client.disconnect();
  }

  /** One attempt; a queued waiter's place (0: the head), send time and new deadline go to `onPlace`. */
  async #attempt(
    req: AcquireRequest,
    keys: RedisKeys,
    queued: boolean,
    onPlace: (place: number, at: Placed) => void,
  ): Promise<RedisLease | null> {
    const acquiredAt = performance.now();
    const guarded = this.#restartGuardMs > 0;
    // A hint past what a Lua number holds exactly is dropped (it only ever saves a write).
    const least = req.minToken !== undefined && req.minToken <= MAX_EXACT_TOKEN ? req.minToken.toString() : '0';
    const mode = !req.wait ? '0' : queued ? '2' : '1';
    // The common case (SET NX PX) may be tried unless we are queued (our turn comes through the
    // queue) or a least token was asked for (the full step honours it).
    const fast = mode !== '2' && least === '0' ? '+' : '-';
    const options = `${fast}${mode}${this.#fifo ? '1' : '0'}|${this.#id}|${waiterCadence(req.ttlMs, this.#maxPollDelayMs).placeMs}|${least}`;
    const token = await this.#run(
      'acquire',
      guarded ? scripts.guardedAcquire : scripts.acquire,
      keys,
      guarded ? [req.owner, String(req.ttlMs), options, String(this.#restartGuardMs)] : [req.owner, String(req.ttlMs), options],
      guarded ? [`${this.#prefix}born`, `${this.#prefix}restart-guard`] : [],
    );
    if (token === null) return null;
    if (Array.isArray(token)) {
      onPlace(token[0] as number, { sentAt: acquiredAt, deadline: token[1] as number });
      return null;
    }
    const lease: RedisLease = { key: req.key, owner: req.owner, token: BigInt(token as string), acquiredAt, keys };
    if (this.#syncReplicas > 0) await this.#synced('acquire', lease);
    return lease;
  }

  /**
   * The release script for `owner` (see `mutex` in scripts.ts): gives back the lock if `owner`
   * holds it and drops its queue entry, so it also serves a waiter that leaves and an attempt whose
   * answer never came.
   */
  #releaseOwner(keys: RedisKeys, owner: string): Promise<unknown> {
    return this.#run('release', scripts.release, keys, [owner, '0', this.#releaseOptions]);
  }

  /**
   * Replica sync: resolves once `syncReplicas` replicas have every write this connection made so
   * far (so the one just made). For an acquisition (`lease` given) a shortfall gives the lease back
   * and rejects with BackendError; otherwise it rejects with BackendUnavailableError.
   */
  async #synced(operation: string, lease?: RedisLease): Promise<void> {
    let acknowledged: number;
    try {
      acknowledged = (await (this.client as Redis).wait(this.#syncReplicas, this.#syncTimeoutMs)) as number;
    } catch (error) {
      if (lease) await this.release(lease).catch(() => undefined);
      throw new BackendUnavailableError(this.name, operation, { cause: error });
    }
    if (acknowledged >= this.#syncReplicas) return;
    const cause = new Error(`${acknowledged} of ${this.#syncReplicas} replicas acknowledged the write within ${this.#syncTimeoutMs} ms`);
    if (!lease) throw new BackendUnavailableError(this.name, operation, { cause });
    await this.release(lease).catch(() => undefined);
    throw new BackendError(this.name, operation, { cause });
  }

  async #attemptShared(req: SharedRequest, keys: RedisKeys): Promise<RedisLease | null> {
    const acquiredAt = performance.now();
    const waiterTtl = waiterCadence(req.ttlMs, this.#maxPollDelayMs).placeMs;
    const reply = (await this.#run('acquire', scripts.sharedAcquire, keys, [
      req.owner,
      String(req.ttlMs),
      req.wait ? '1' : '0',
      req.mode === 'exclusive' ? 'X' : 'S',
      String(req.limit),
      String(Math.max(COUNTER_TTL_MS, req.ttlMs * 2)),
      String(waiterTtl),
      req.minToken !== undefined && req.minToken <= MAX_EXACT_TOKEN ? req.minToken.toString() : '0',
    ])) as [number, string?];
    if (reply[0] === 2) {
      // Another limit: leave no claim of ours behind (a waiter may have queued on an earlier call).
      if (req.wait) await this.#run('release', scripts.sharedRelease, keys, [req.owner, this.#channel, keys.lock]);
      throw new LimitMismatchError(req.key, Number(reply[1]), req.limit);
    }
    if (reply[0] !== 1) return null;
    const lease: RedisLease = { key: req.key, owner: req.owner, token: BigInt(reply[1]!), acquiredAt, keys, shared: true };
    if (this.#syncReplicas > 0) await this.#synced('acquire', lease);
    return lease;
  }

  /** EVALSHA, loading the script with EVAL when the server does not know it (restart, SCRIPT FLUSH). */
  async #run(operation: string, script: Script, keys: RedisKeys, args: string[], moreKeys: string[] = []): Promise<unknown> {
    const keyList = [keys.lock, keys.token, keys.queue, keys.deadlines, ...moreKeys];
    try {
      if (this.client instanceof Cluster && this.client.status !== 'ready') await this.#clusterReady(this.client);
      try {
        return await this.client.evalsha(script.sha, keyList.length, ...keyList, ...args);
      } catch (error) {
        if (!(error instanceof ReplyError) || !String((error as Error).message).startsWith('NOSCRIPT')) throw error;
        return await this.client.eval(script.source, keyList.length, ...keyList, ...args);
      }
    } catch (error) {
      if (error instanceof ReplyError) throw new BackendError(this.name, operation, { cause: error });
      throw new BackendUnavailableError(this.name, operation, { cause: error });
    }
  }

  /**
   * A Cluster client queues commands until it has found the cluster, and keeps trying for ever:
   * wait for that at most `connectTimeoutMs`, so an unreachable cluster fails the call instead.
   */
  #clusterReady(cluster: Cluster): Promise<void> {
    return new Promise((resolve, reject) => {
      const done = (error?: Error) => {
        clearTimeout(timer);
        cluster.off('ready', onReady);
        if (error) reject(error);
        else resolve();
      };
      const onReady = () => done();
      const timer = setTimeout(
        () => done(new Error(`no Redis Cluster node answered within ${this.#connectTimeoutMs} ms`)),
        this.#connectTimeoutMs,
      );
      cluster.on('ready', onReady);
      if (cluster.status === 'ready') done();
    });
  }

  /**
   * Refuses a server that may evict lock keys, unless the user accepted it. A server that does not
   * let us read its configuration (managed services often rename CONFIG) cannot be checked: that
   * is documented, not refused.
   */
  async #checkEviction(): Promise<void> {
    if (this.#allowEviction) return;
    let config: string[];
    try {
      if (this.client instanceof Cluster && this.client.status !== 'ready') await this.#clusterReady(this.client);
      config = (await this.client.config('GET', 'maxmemory*')) as string[]; // name, value, name, value, ...
    } catch (error) {
      if (error instanceof ReplyError) return; // CONFIG not allowed: cannot check
      throw new BackendUnavailableError(this.name, 'acquire', { cause: error });
    }
    const settings: Record<string, string> = {};
    for (let i = 0; i + 1 < config.length; i += 2) settings[config[i]!] = config[i + 1]!;
    const policy = settings['maxmemory-policy'];
    if (settings['maxmemory'] !== '0' && policy !== 'noeviction') {
      const cause = new Error(
        `the server may evict keys (maxmemory ${settings['maxmemory']}, maxmemory-policy ${policy}), and an evicted lock key is a lost lock nobody is told about: set maxmemory-policy noeviction, or pass allowEviction: true to accept it`,
      );
      throw new BackendError(this.name, 'acquire', { cause });
    }
  }

  /**
   * One subscriber connection per backend, opened by the first waiter: this backend's own channel
   * (mutex waiters, each message naming the waiter whose turn it is) and the shared claims' one.
   * After a reconnect every waiter re-checks at once, since messages sent meanwhile are lost.
   */
  async #openSubscriber(): Promise<void> {
    const channels = [this.#channel, `${this.#prefix}w:${this.#id}`];
    // A single-node subscriber subscribes again itself after a reconnect: ioredis's own
    // re-subscription leaves its promise unhandled, and a close before its answer (a backend
    // closed just after a reconnect) then surfaces as an unhandled rejection in the user's process.
    const subscriber =
      this.client instanceof Cluster
        ? this.client.duplicate()
        : this.client.duplicate({ maxRetriesPerRequest: 1, lazyConnect: false, autoResubscribe: false });
    subscriber.on('error', () => undefined);
    // `<lock key>\n<owner>`, and for a FIFO handoff `<lock key>\n<owner> <token> <deadline>`
    // (see hand_over in scripts.ts); a shared key's release names no owner.
    subscriber.on('message', (_channel: string, message: string) => {
      const split = message.lastIndexOf('\n');
      const [owner, token, deadline] = message.slice(split + 1).split(' ');
      const key = message.slice(0, split);
      if (token !== undefined) {
        keepNewest(this.#handed, `${key}\n${owner}`, { token, deadline: Number(deadline) }, HANDED_KEPT);
      }
      this.#notifier.notify(key, owner || undefined);
    });
    let ready = 0;
    subscriber.on('ready', () => {
      if (ready++ === 0) return;
      if (subscriber instanceof Cluster) return this.#notifier.notifyAll();
      // Once subscribed again; a failure means the connection went again, and its next 'ready' retries.
      subscriber.subscribe(...channels).then(
        () => this.#notifier.notifyAll(),
        () => undefined,
      );
    });
    this.#subscriber = subscriber;
    try {
      await subscriber.subscribe(...channels);
      this.#listening = true;
    } catch (error) {
      subscriber.disconnect();
      throw new BackendUnavailableError(this.name, 'subscribe', { cause: error });
    }
  }
}

/**
 * A Redis backend. @throws InvalidArgumentError for bad options; store failures surface later as
 * BackendUnavailableError / BackendError from the Locker's calls.
 */
export function redisBackend(options: RedisBackendOptions): RedisBackend {
  return new RedisBackend(options);
}

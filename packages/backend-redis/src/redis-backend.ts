import { BackendError, InvalidArgumentError, type Capabilities, type LockBackend } from '@deadbolt/core';
import {
  StoreBackend,
  readOptions,
  rules,
  storeClient,
  type AcquireRequest,
  type KeySpace,
  type Rule,
  type Rules,
  type StoreView,
} from '@deadbolt/core/backend';
import { TestingHooks } from '@deadbolt/core/testing';
import type { ClusterOptions, RedisOptions } from 'ioredis';
import { addressOf, closeRedis, isCluster, isRedisClient, openRedis, type RedisClient, type YourRedisClient } from './connection.js';
import { RedisClaims, type RedisLease } from './claims.js';
import { MAX_EXACT_TOKEN, RedisStore, type RedisKeys } from './store.js';

export type { RedisKeys, RedisLease };

/** Options of `redisBackend`: where the store is (a URL or a client of yours) and how to use it. Unknown names and bad values are `InvalidArgumentError` before any connection. */
export interface RedisBackendOptions {
  /** `redis://[user:pass@]host:port[/db]`. The backend creates and closes its own connections. */
  url?: string;
  /**
   * Your own client instead of `url`: ioredis's `Redis` or `Cluster`, or iovalkey's (Valkey's fork
   * of ioredis); `close()` leaves it open. Its own options stand (timeouts, retries, RESP).
   */
  client?: YourRedisClient;
  /**
   * `url` names one node of a Redis Cluster: the backend opens an ioredis `Cluster`, which finds
   * the others. Every key one lock touches shares a hash slot, so each script runs on one node.
   * Default false.
   */
  cluster?: boolean;
  /** More ioredis `Cluster` options with `cluster` (e.g. `natMap` for nodes behind NAT). */
  clusterOptions?: Omit<ClusterOptions, 'redisOptions'>;
  /**
   * Redis with Sentinel: the name of the primary the Sentinels watch (`sentinel monitor <name> …`);
   * `url` then lists the Sentinels (`redis://[user:pass@]sentinel1:26379,sentinel2:26379`, the
   * credentials the primary's; a Sentinel without a port is on 26379). The client asks them for
   * the primary, and again after a failover. Replication is asynchronous: a grant the old primary
   * had not passed on is lost in a failover, and two clients can hold the key until the first
   * one's next renewal (see `syncReplicas`, and docs/choosing-a-store.md, "What survives what"). Not with
   * `cluster`.
   */
  sentinel?: string;
  /** More ioredis options with `sentinel` (e.g. `natMap` for nodes behind NAT, `sentinelPassword`). */
  sentinelOptions?: Omit<RedisOptions, 'sentinels' | 'name'>;
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
  /**
   * What keeps this backend's locks apart from another's on the same server: the prefix of every
   * key and of the release channel. Default `deadbolt:`. Must not contain `{` or `}`.
   */
  namespace?: string;
  /** Another name for `namespace` (Redis's word for it); give one of the two. */
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

/** A key prefix: braces would change the key's hash slot on a cluster. */
const prefixRule = rules.text(/^[^{}]*$/, 'a string without { or } (they would change the hash slot)', ['{x}', 'a{']);

/** Any ioredis or iovalkey client, closed or not. */
const anyClient = rules.instance(isRedisClient, 'an ioredis or iovalkey Redis or Cluster client (node-redis clients are not accepted)');
/**
 * A client of yours: ioredis's or iovalkey's, and not closed for good (a client that was quit or
 * disconnected fails every command with "Connection is closed."; told here, before any I/O).
 */
const clientRule: Rule<RedisClient> = {
  ...anyClient,
  check(value, name) {
    const client = anyClient.check(value, name);
    if (client.status === 'end')
      throw new InvalidArgumentError(
        `${name} was closed (its status is 'end'): pass a client that is connected or connects on its first command, or a url`,
      );
    return client;
  },
};

/** How each option of `redisBackend` is checked (see core's options.ts); the conformance suite feeds it hostile values. */
export const redisOptionRules = {
  url: rules.url(['redis', 'rediss']),
  client: clientRule,
  cluster: rules.flag,
  clusterOptions: rules.settings as Rule<Omit<ClusterOptions, 'redisOptions'>>,
  sentinel: rules.text(/^[\w.-]{1,100}$/, "a Sentinel master name (letters, digits, '.', '_', '-')", ['', 'a b', 'x'.repeat(101)]),
  sentinelOptions: rules.settings as Rule<Omit<RedisOptions, 'sentinels' | 'name'>>,
  syncReplicas: rules.count(0, 100),
  syncTimeoutMs: rules.wholeMs(1), // WAIT takes whole ms
  restartGuardMs: rules.wholeMs(0),
  namespace: prefixRule,
  prefix: rules.alias('namespace', prefixRule),
  fifo: rules.flag,
  maxPollDelayMs: rules.ms(),
  connectTimeoutMs: rules.ms(),
  commandTimeoutMs: rules.ms(),
  allowEviction: rules.flag,
} satisfies Rules<RedisBackendOptions>;

/** Each backend's store, for `@deadbolt/redis/testing` (testing.ts): not part of the backend's API. */
export const storeOf = new TestingHooks<RedisBackend, RedisStore>('a RedisBackend');

/**
 * Redis backend. Acquire is one EVALSHA (`SET NX PX` plus the fencing token, or the FIFO queue
 * step); renew and release are owner-checked scripts; a release publishes on one channel, which
 * a single subscriber connection per backend turns into wake-ups for this process's waiters. Every
 * claim, a mutex's and a shared key's, goes through one engine (claims.ts: a rule per key space),
 * which reaches the server through store.ts.
 */
export class RedisBackend extends StoreBackend<RedisClient, RedisLease> implements LockBackend<RedisLease> {
  readonly capabilities: Capabilities;
  readonly #store: RedisStore;
  readonly #claims: RedisClaims;

  /** @throws InvalidArgumentError for bad options (before connecting). */
  constructor(raw: RedisBackendOptions) {
    const options = readOptions(raw, redisOptionRules, 'redisBackend');
    const prefix = options.namespace ?? 'deadbolt:';
    const maxPoll = options.maxPollDelayMs ?? 250;
    const connectTimeout = options.connectTimeoutMs ?? 2000;
    const commandTimeout = options.commandTimeoutMs ?? 5000;
    const syncReplicas = options.syncReplicas ?? 0;
    const restartGuardMs = options.restartGuardMs ?? 0;
    const cluster = options.cluster ?? (options.client !== undefined && isCluster(options.client));
    // WAIT counts the replicas of the connection it is sent on; a Cluster client sends a keyless
    // command to any node, not the one that granted.
    if (syncReplicas > 0 && cluster) throw new InvalidArgumentError('syncReplicas does not work with a Redis Cluster client');
    // The guard's keys have no hash tag: beside a lock's keys in one script, they would cross slots.
    if (restartGuardMs > 0 && cluster) throw new InvalidArgumentError('restartGuardMs does not work with a Redis Cluster client');
    if (options.sentinel !== undefined && options.client !== undefined)
      throw new InvalidArgumentError('sentinel goes with url (the Sentinels); a client of yours is already connected');
    if (options.sentinelOptions !== undefined && options.sentinel === undefined)
      throw new InvalidArgumentError('sentinelOptions needs sentinel');
    super({
      name: 'redis',
      commandTimeoutMs: commandTimeout,
      connection: storeClient(
        options,
        'redisBackend',
        'redis://host:port',
        (url) =>
          openRedis(url, {
            cluster,
            connectTimeout,
            commandTimeout,
            clusterOptions: options.clusterOptions,
            sentinel: options.sentinel,
            sentinelOptions: options.sentinelOptions,
          }),
        addressOf,
      ),
    });
    const fifo = options.fifo ?? true;
    this.#store = new RedisStore(this.client, {
      prefix,
      connectTimeoutMs: connectTimeout,
      allowEviction: options.allowEviction ?? false,
      syncReplicas,
      syncTimeoutMs: options.syncTimeoutMs ?? 1000,
    });
    storeOf.set(this, this.#store);
    this.#claims = new RedisClaims(this.#store, this.inFlight, { fifo, maxPollDelayMs: maxPoll, restartGuardMs });
    this.capabilities = {
      fairness: fifo ? 'fifo' : 'none',
      lease: 'ttl',
      wake: 'push',
      minToken: true,
      semaphore: true,
      readWrite: true,
    };
  }

  protected acquireClaim(req: AcquireRequest): Promise<RedisLease | null> {
    return this.#claims.acquire(req);
  }

  async renew(lease: RedisLease, ttlMs: number): Promise<boolean> {
    // A call on a lease waits for an eviction check under way (see `RedisStore.evictionChecked`).
    if (!this.#store.evictionChecked.done) await this.#store.evictionChecked.settled();
    const renewed = await this.#claims.renew(lease, ttlMs);
    if (renewed && this.#store.syncReplicas > 0) await this.#store.synced('renew');
    return renewed;
  }

  inspect(key: string, space: KeySpace): Promise<StoreView> {
    return this.#claims.inspect(key, space);
  }

  /** See `LockBackend.forceRelease`: the release script run for `owner`, which hands the key on. */
  async forceRelease(key: string, owner: string, space: KeySpace): Promise<boolean> {
    if (!this.#store.evictionChecked.done) await this.#store.evictionChecked.settled();
    return this.#claims.free(key, owner, space);
  }

  async release(lease: RedisLease): Promise<void> {
    if (!this.#store.evictionChecked.done) await this.#store.evictionChecked.settled();
    await this.#claims.release(lease);
  }

  /** See `LockBackend.raiseTokenFloor`. @throws BackendError for a floor above 2^53 (Redis's Lua numbers are doubles). */
  async raiseTokenFloor(lease: RedisLease, floor: bigint): Promise<boolean> {
    if (floor > MAX_EXACT_TOKEN) {
      throw new BackendError(this.name, 'raise token floor', {
        cause: new Error(`a token floor of ${floor} is beyond 2^53, which Redis's Lua numbers cannot hold exactly`),
      });
    }
    if (!this.#store.evictionChecked.done) await this.#store.evictionChecked.settled();
    return this.#claims.raiseTokenFloor(lease, floor);
  }

  /** See `LockBackend.tokenFloor`. @throws BackendError for a floor above 2^53 (Redis's Lua numbers are doubles). */
  tokenFloor(raise = 0n): Promise<bigint> {
    return this.#store.tokenFloor(raise);
  }

  /**
   * See `LockBackend.tokenCeiling`: SCANs every token counter under the prefix. A Redis that
   * restarts empty forgets counters and floors alike; its tokens then go on from its clock.
   */
  tokenCeiling(): Promise<bigint> {
    return this.#store.tokenCeiling();
  }

  /** Ends the subscriber, then the client it made. */
  protected closeStore(): Promise<void> {
    this.#store.close();
    return this.connection.end(closeRedis);
  }
}

/**
 * A Redis backend. @throws InvalidArgumentError for bad options; store failures surface later as
 * BackendUnavailableError / BackendError from the Locker's calls.
 */
export function redisBackend(options: RedisBackendOptions): RedisBackend {
  return new RedisBackend(options);
}

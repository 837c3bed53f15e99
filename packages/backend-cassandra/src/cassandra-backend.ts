import { InvalidArgumentError, type Capabilities, type LockBackend } from '@deadbolt/core';
import {
  keySpace,
  Once,
  readOptions,
  rules,
  storeClient,
  StoreBackend,
  type StoreClient,
  type AcquireRequest,
  type KeySpace,
  type Rule,
  type Rules,
  type StoreUrl,
  type StoreView,
} from '@deadbolt/core/backend';
import { TestingHooks } from '@deadbolt/core/testing';
import cassandra, { type Client, type policies, type types } from 'cassandra-driver';
import { LwtLock } from './lwt.js';
import { QueueLock } from './queue.js';
import { ensureSchema, idFor } from './schema.js';
import { ShadowLock } from './shadow.js';
import { SharedClaims } from './shared-claims.js';
import { CassandraStore, type CassandraLease, type ClaimModule, type MutexAlgorithm, type MutexLease } from './store.js';
import { CassandraTimeService, timeServiceOptionRules, type TimeServiceOptions } from './time-service.js';

export type { CassandraLease } from './store.js';

/** What `/testing` reaches of a backend: its setup (connect, schema), which it runs before reading the tables directly. */
export const setupOf = new TestingHooks<CassandraBackend, Once>('a CassandraBackend');

/**
 * - `queue` (default): the thesis' fair queue lock (FIFO by time-service order).
 * - `shadow`: the thesis' old shadow-row algorithm, unfair under contention; a benchmark baseline.
 * - `lwt`: one row per lock written with lightweight transactions (Paxos).
 */
export type CassandraAlgorithm = 'queue' | 'shadow' | 'lwt';

/** Options of `cassandraBackend`: where the store is (a URL or a client of yours) and how to use it. Unknown names and bad values are `InvalidArgumentError` before any connection. */
export interface CassandraBackendOptions {
  /** `cassandra://host[:port][,host[:port]…]/keyspace`. The backend makes and closes its client. */
  url?: string;
  /** Your own cassandra-driver client instead of `url`; `close()` leaves it open. Needs `namespace`. */
  client?: Client;
  /**
   * What keeps this backend's locks apart from another's on the same cluster: the keyspace of the
   * lock tables, with `client`, or with a `url` without a path (a url whose path names another
   * keyspace is refused). Default `deadbolt`.
   */
  namespace?: string;
  /** Another name for `namespace` (Cassandra's word for it); give one of the two. */
  keyspace?: string;
  /** Default `queue`. */
  algorithm?: CassandraAlgorithm;
  /** Data center the client routes to (with `url`). Default `datacenter1`. */
  localDataCenter?: string;
  /**
   * With `url`: the driver's address translator, for a cluster whose nodes advertise addresses this
   * client cannot reach as they are (NAT, containers, a proxy). Default none. A translated address
   * that does not answer is a node the driver counts as down.
   */
  addressTranslator?: policies.addressResolution.AddressTranslator;
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
  /** Waiters poll (Cassandra has no notifications): the longest pause between a waiter's re-checks. Default 50 ms. */
  maxPollDelayMs?: number;
  /** Waiters' delays grow ×2 from `minDelayMs` (default 2) to `maxDelayMs`, another name for `maxPollDelayMs` (give one of the two). */
  poll?: { minDelayMs?: number; maxDelayMs?: number };
  /**
   * The shadow algorithm's randomized waits: up to `ownerWaitMs` (default 1000) when another owner
   * holds the lock, up to `concurrentStepMs` × attempt (default 50) after a concurrent attempt.
   */
  shadowBackoff?: { ownerWaitMs?: number; concurrentStepMs?: number };
}

const { consistencies } = cassandra.types;

/** A keyspace: a CQL identifier that needs no quotes (it starts with a letter). */
export const keyspaceRule = rules.text(/^[A-Za-z]\w{0,47}$/, 'a plain CQL identifier (a letter, then letters, digits or _; at most 48)', [
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
      if (allowed.includes(value as types.consistencies)) return value as types.consistencies;
      return rules.refuse(name, `one of cassandra-driver's types.consistencies (${allowed.join(', ')})`, value);
    },
    hostile: [null, 'quorum', 99, -1, 1.5, true],
  };
}

/** How each option of `cassandraBackend` is checked (see core's options.ts); the conformance suite feeds it hostile values. */
export const cassandraOptionRules = {
  url: rules.url(['cassandra']),
  client: rules.instance((v): v is Client => v instanceof cassandra.Client, 'a cassandra-driver Client'),
  namespace: keyspaceRule,
  keyspace: rules.alias('namespace', keyspaceRule),
  algorithm: rules.oneOf(['queue', 'shadow', 'lwt']),
  localDataCenter: rules.text(/^[\w.-]{1,100}$/, 'a data center name'),
  addressTranslator: rules.instance(
    (v): v is policies.addressResolution.AddressTranslator =>
      typeof v === 'object' && v !== null && 'translate' in v && typeof v.translate === 'function',
    "an address translator (cassandra-driver's policies.addressResolution: an object with translate(address, port, callback))",
  ),
  // Pasted into CREATE KEYSPACE: a CQL map of plain names and numbers, nothing else.
  replication: rules.text(
    /^\{\s*'[\w.-]+'\s*:\s*(?:'[\w.-]+'|\d+)\s*(?:,\s*'[\w.-]+'\s*:\s*(?:'[\w.-]+'|\d+)\s*)*\}$/,
    "a CQL replication map such as {'class': 'NetworkTopologyStrategy', 'dc1': 3}",
    ["{'class': 'SimpleStrategy', 'replication_factor': 1} AND durable_writes = false", "{'class': 'x'}; DROP KEYSPACE x", '{}'],
  ),
  consistency: consistencyRule(Object.values(consistencies) as types.consistencies[]),
  serialConsistency: consistencyRule([consistencies.serial, consistencies.localSerial]),
  connectTimeoutMs: rules.ms(),
  commandTimeoutMs: rules.ms(),
  timeService: rules.nested(timeServiceOptionRules),
  maxPollDelayMs: rules.ms(),
  poll: rules.nested({ minDelayMs: rules.ms(), maxDelayMs: rules.ms() }),
  shadowBackoff: rules.nested({ ownerWaitMs: rules.ms(), concurrentStepMs: rules.ms() }),
} satisfies Rules<CassandraBackendOptions>;

/**
 * Apache Cassandra backend. Every algorithm keeps its cells with a TTL of ttl + 1 s (Cassandra
 * counts TTLs in whole seconds from the second the write lands, so one more second guarantees at
 * least ttl), rewritten by core's renewer every ttl/3; release deletes them with a client
 * timestamp later than any renewal's, so a late renewal never resurrects a released cell. Fencing
 * tokens come from a token row without TTL, advanced by compare-and-set after the lock is won.
 */
export class CassandraBackend extends StoreBackend<Client, CassandraLease> implements LockBackend<CassandraLease> {
  readonly capabilities: Capabilities;
  readonly algorithm: CassandraAlgorithm;
  readonly keyspace: string;
  readonly timeService: CassandraTimeService;
  readonly #replication: string;
  /** Whose schema check this backend shares: the contact points of a client it made, or your client. */
  readonly #schemaScope: object | string;
  readonly #store: CassandraStore;
  /** The mutex: the algorithm's module, chosen once. */
  readonly #mutex: MutexAlgorithm<MutexLease>;
  readonly #shared: SharedClaims;
  /** Which module gave each lease out (the mutex algorithm or the shared claims): its renewals, release and floor go back to it. */
  readonly #keepers = new WeakMap<CassandraLease, ClaimModule<CassandraLease>>();
  /** Connect, create what is missing of the schema, first read of the time service: once, again after a failure. */
  readonly #ready = new Once(async () => {
    try {
      await this.client.connect();
      await ensureSchema(this.client, this.#schemaScope, this.keyspace, this.#replication);
      if (this.algorithm === 'queue') await this.timeService.start();
    } catch (error) {
      throw this.#store.error('connect', error);
    }
  });

  /** @throws InvalidArgumentError for bad options (before connecting). */
  constructor(raw: CassandraBackendOptions) {
    const options = readOptions(raw, cassandraOptionRules, 'cassandraBackend');
    const algorithm = options.algorithm ?? 'queue';
    const keyspace = keyspaceOf(options, 'cassandraBackend');
    // The longest a request waits for its answer, with a client made from `url` (yours has its own).
    const commandTimeoutMs = options.commandTimeoutMs ?? COMMAND_TIMEOUT_MS;
    const connection = cassandraConnection(options, 'cassandraBackend');
    super({ name: 'cassandra', connection, commandTimeoutMs });
    this.algorithm = algorithm;
    this.capabilities = {
      fairness: algorithm === 'queue' ? 'fifo' : 'none',
      lease: 'ttl',
      wake: 'poll', // Cassandra has no notifications
      minTtlMs: 2000,
      ttlGranularityMs: 1000, // TTLs are whole seconds
      minToken: true,
      semaphore: true,
      readWrite: true,
    };
    this.#schemaScope = schemaScope(connection);
    this.keyspace = keyspace;
    this.#replication = options.replication ?? "{'class': 'SimpleStrategy', 'replication_factor': 1}";
    if (options.maxPollDelayMs !== undefined && options.poll?.maxDelayMs !== undefined)
      throw new InvalidArgumentError(
        'cassandraBackend: `poll.maxDelayMs` is another name for `maxPollDelayMs`: give one of them, not both',
      );
    const poll = { minDelayMs: options.poll?.minDelayMs ?? 2, maxDelayMs: options.maxPollDelayMs ?? options.poll?.maxDelayMs ?? 50 };
    if (poll.minDelayMs > poll.maxDelayMs)
      throw new InvalidArgumentError('cassandraBackend: poll.minDelayMs must not be above maxPollDelayMs (poll.maxDelayMs)');
    this.#store = new CassandraStore({
      name: this.name,
      client: this.client,
      keyspace,
      consistency: options.consistency ?? consistencies.quorum,
      serial: options.serialConsistency ?? consistencies.serial,
      poll,
      inFlight: this.inFlight,
    });
    this.timeService = new CassandraTimeService(this.client, keyspace, options.timeService);
    // One module per algorithm (each in its own file), all on the same store; shared claims have their own.
    switch (algorithm) {
      case 'queue':
        this.#mutex = new QueueLock(this.#store, this.timeService);
        break;
      case 'shadow':
        this.#mutex = new ShadowLock(this.#store, {
          ownerWaitMs: options.shadowBackoff?.ownerWaitMs ?? 1000,
          concurrentStepMs: options.shadowBackoff?.concurrentStepMs ?? 50,
        });
        break;
      case 'lwt':
        this.#mutex = new LwtLock(this.#store);
        break;
    }
    this.#shared = new SharedClaims(this.#store);
    setupOf.set(this, this.#ready);
  }

  protected async acquireClaim(req: AcquireRequest): Promise<CassandraLease | null> {
    await this.#ready.run();
    const keeper = this.#claims(keySpace(req));
    const lease = await keeper.acquire(req, idFor(req.key));
    if (lease) this.#keepers.set(lease, keeper);
    return lease;
  }

  inspect(key: string, space: KeySpace): Promise<StoreView> {
    return this.#ready.run().then(() => this.#claims(space).inspect(idFor(key)));
  }

  /** See `LockBackend.forceRelease` (each algorithm's `free` says how). */
  async forceRelease(key: string, owner: string, space: KeySpace): Promise<boolean> {
    await this.#ready.run();
    return this.#claims(space).free(idFor(key), key, owner);
  }

  /** The module that keeps the claims of `space`: the mutex algorithm, or the shared claims. */
  #claims(space: KeySpace): ClaimModule<CassandraLease> {
    return space === 'mutex' ? this.#mutex : this.#shared;
  }

  /** The module that gave `lease` out. @throws InvalidArgumentError for a lease this backend did not give (another backend's). */
  #keeperOf(lease: CassandraLease): ClaimModule<CassandraLease> {
    const keeper = this.#keepers.get(lease);
    if (!keeper) throw new InvalidArgumentError(`a lease of ${JSON.stringify(lease.key)} that this Cassandra backend did not give out`);
    return keeper;
  }

  async renew(lease: CassandraLease, ttlMs: number): Promise<boolean> {
    return this.#keeperOf(lease).renew(lease, ttlMs);
  }

  async release(lease: CassandraLease): Promise<void> {
    return this.#keeperOf(lease).release(lease);
  }

  /**
   * See `LockBackend.raiseTokenFloor`: a mutex's token row, or a shared key's counter, lifted by
   * compare-and-set while the lease still holds the key.
   */
  async raiseTokenFloor(lease: CassandraLease, floor: bigint): Promise<boolean> {
    return this.#keeperOf(lease).raiseFloor(lease, floor);
  }

  /** See `LockBackend.tokenFloor`: a token row no key has, which every algorithm's grants are asked to exceed. */
  tokenFloor(raise = 0n): Promise<bigint> {
    return this.#ready.run().then(() => this.#store.tokenFloor(raise));
  }

  /** See `LockBackend.tokenCeiling`: a scan of the token rows and the shared keys' counters. */
  tokenCeiling(): Promise<bigint> {
    return this.#ready.run().then(() => this.#store.tokenCeiling());
  }

  /** Stops the time service at once (nothing left to order), then closes as every backend does. */
  override close(): Promise<void> {
    this.timeService.stop();
    return super.close();
  }

  protected closeStore(): Promise<void> {
    return this.connection.end((client) => client.shutdown());
  }
}

/**
 * The keyspace `options` name: the url's path, or `namespace` (or `keyspace`), or `deadbolt`. @throws
 * InvalidArgumentError when the url names one and `keyspace` another: neither may silently win
 * (a check meant for its own keyspace wrote into the url's).
 */
export function keyspaceOf(
  options: { readonly url?: StoreUrl | undefined; readonly namespace?: string | undefined },
  where: string,
): string {
  const path = options.url?.path ? keyspaceRule.check(options.url.path, "the url's keyspace") : undefined;
  if (path !== undefined && options.namespace !== undefined && options.namespace !== path)
    throw new InvalidArgumentError(
      `${where}: the url names keyspace ${path} and the namespace (keyspace) option names ${options.namespace}; give one`,
    );
  return path ?? options.namespace ?? 'deadbolt';
}

/** Whose schema check a backend or fence shares: the contact points of a client it made (joined, they name a cluster), or your client. */
export function schemaScope(connection: StoreClient<Client>): object | string {
  return connection.url ? contactPointsOf(connection.url).join(',') : connection.client;
}

/** `url`'s hosts as the driver's contact points (`host` or `host:port`); joined, they name a cluster for the schema check. */
export function contactPointsOf(url: StoreUrl): string[] {
  return url.hosts.map(({ host, port }) => (port === undefined ? host : `${host}:${port}`));
}

/** The longest a request of a client made from `url` waits for its answer, unless `commandTimeoutMs` says otherwise. */
export const COMMAND_TIMEOUT_MS = 8000;

/**
 * The client a backend or fence reaches Cassandra through: yours, or one made for `url`'s contact
 * points as every client deadbolt makes (bounded connects and requests, a connection that leaves a
 * request unanswered replaced, quick reconnects). @throws InvalidArgumentError when both or neither
 * of `url` and `client` is given.
 */
export function cassandraConnection(
  options: {
    readonly url?: StoreUrl | undefined;
    readonly client?: Client | undefined;
    readonly localDataCenter?: string | undefined;
    readonly addressTranslator?: policies.addressResolution.AddressTranslator | undefined;
    readonly connectTimeoutMs?: number | undefined;
    readonly commandTimeoutMs?: number | undefined;
  },
  where: string,
): StoreClient<Client> {
  return storeClient(options, where, 'cassandra://host[:port][,host[:port]]/keyspace', (url) =>
    openCassandra(url, {
      localDataCenter: options.localDataCenter,
      addressTranslator: options.addressTranslator,
      connectTimeout: options.connectTimeoutMs ?? 2000,
      commandTimeout: options.commandTimeoutMs ?? COMMAND_TIMEOUT_MS,
    }),
  );
}

function openCassandra(
  url: StoreUrl,
  o: {
    localDataCenter?: string | undefined;
    addressTranslator?: policies.addressResolution.AddressTranslator | undefined;
    connectTimeout: number;
    commandTimeout: number;
  },
): Client {
  const client = new cassandra.Client({
    contactPoints: contactPointsOf(url),
    localDataCenter: o.localDataCenter ?? 'datacenter1',
    ...(url.username === undefined ? {} : { authProvider: new cassandra.auth.PlainTextAuthProvider(url.username, url.password ?? '') }),
    // A connection that leaves one request unanswered for the request timeout is closed and
    // opened again: a partition or a middlebox that lost its state strands a connection silently,
    // and the driver's default (64 timeouts in a row) would send every retry of a wait into it.
    socketOptions: { connectTimeout: o.connectTimeout, readTimeout: o.commandTimeout, defunctReadTimeoutThreshold: 0 },
    // After a restart, come back within half a second rather than the default's growing delays.
    policies: {
      reconnection: new cassandra.policies.reconnection.ConstantReconnectionPolicy(500),
      ...(o.addressTranslator ? { addressResolution: driverTranslator(o.addressTranslator) } : {}),
    },
  });
  containRefreshRace(client);
  return client;
}

/**
 * The driver takes only instances of its own AddressTranslator class (typed as an interface): any
 * object with its `translate` is wrapped in one.
 */
function driverTranslator(given: policies.addressResolution.AddressTranslator): policies.addressResolution.AddressTranslator {
  const Base: new () => policies.addressResolution.AddressTranslator = Reflect.get(
    cassandra.policies.addressResolution,
    'AddressTranslator',
  );
  if ((given as object) instanceof Base) return given;
  return new (class extends Base {
    override translate(address: string, port: number, callback: (endpoint: string) => void): void {
      given.translate(address, port, callback);
    }
  })();
}

/**
 * Works around cassandra-driver's NODEJS-681 (4.10.0, fix not released): after a server restart two
 * control-connection refreshes can race, and the loser calls `_setHealthListeners(null)`; when that
 * refresh was a scheduled retry, its rejection is unhandled and Node ends the process. The winning
 * refresh has already reconnected, so the loser's error is dropped, as the driver itself does for
 * refreshes it starts in the background. Applied only to clients this backend creates.
 */
function containRefreshRace(client: Client): void {
  // Driver internals, not in its types: checked at run time, left alone if a later version differs.
  const control: unknown = 'controlConnection' in client ? client.controlConnection : undefined;
  if (typeof control !== 'object' || control === null || !('_refresh' in control)) return;
  const refresh = control._refresh;
  if (typeof refresh !== 'function') return;
  control._refresh = (...args: unknown[]) => (refresh.apply(control, args) as Promise<void>).catch(() => undefined);
}

/**
 * A Cassandra backend. @throws InvalidArgumentError for bad options; store failures surface as
 * BackendUnavailableError / BackendError from the Locker's calls.
 */
export function cassandraBackend(options: CassandraBackendOptions): CassandraBackend {
  return new CassandraBackend(options);
}

import { type Capabilities, type LockBackend } from '@deadbolt/core';
import {
  answerWithin,
  StoreBackend,
  readOptions,
  rules,
  storeClient,
  type AcquireRequest,
  type KeySpace,
  type Rules,
  type StoreUrl,
  type StoreView,
} from '@deadbolt/core/backend';
import { TestingHooks } from '@deadbolt/core/testing';
import { circuitBreaker, ConsecutiveBreaker, handleWhen } from 'cockatiel';
import { Etcd3, isRecoverableError } from 'etcd3';
import { acquireClaim } from './claims.js';
import { EtcdStore, type EtcdLockLease } from './store.js';

export { LOSS_WATCH_DELAY_MS, type EtcdLockLease } from './store.js';

/** Options of `etcdBackend`: where the store is (a URL or a client of yours) and how to use it. Unknown names and bad values are `InvalidArgumentError` before any connection. */
export interface EtcdBackendOptions {
  /**
   * `etcd://[user:password@]host:port[,host:port...]` (or `http://…`, `https://…`). The backend
   * creates and closes its client; a user and password become the client's etcd authentication.
   */
  url?: string;
  /** Your own etcd3 client; `close()` leaves it open. Used instead of `url`. */
  client?: Etcd3;
  /**
   * What keeps this backend's locks apart from another's on the same cluster: the prefix of every
   * key the backend writes. Default `deadbolt/`. Must not contain `#`, which separates it from what
   * follows: two lockers with different prefixes never share a key.
   */
  namespace?: string;
  /** Another name for `namespace` (etcd's word for it); give one of the two. */
  prefix?: string;
  /** Connect timeout for a client made from `url`. Default 2000 ms. */
  connectTimeoutMs?: number;
  /**
   * Deadline of each unary call (grant, transaction, keep-alive, revoke) of a client made from
   * `url`; a call without an answer by then fails with `BackendUnavailableError`. Watch streams
   * have none (they are meant to stay open); HTTP/2 keep-alive pings find a dead connection under
   * them instead. Default 5000 ms.
   */
  commandTimeoutMs?: number;
}

/** A key prefix: `#` separates it from what follows. */
const prefixRule = rules.text(/^[^#]+$/, 'a non-empty string without # (it separates the prefix from what follows)', [
  '',
  'p#',
  'deadbolt/#s/',
]);

/** How each option of `etcdBackend` is checked (see core's options.ts); the conformance suite feeds it hostile values. */
export const etcdOptionRules = {
  url: rules.url(['etcd', 'http', 'https']),
  client: rules.instance((v): v is Etcd3 => v instanceof Etcd3, 'an etcd3 Etcd3 client'),
  namespace: prefixRule,
  prefix: rules.alias('namespace', prefixRule),
  connectTimeoutMs: rules.ms(),
  commandTimeoutMs: rules.ms(),
} satisfies Rules<EtcdBackendOptions>;

/** Each backend's store, for `@deadbolt/etcd/testing` (testing.ts): not part of the backend's API. */
export const storeOf = new TestingHooks<EtcdBackend, EtcdStore>('an EtcdBackend');

/**
 * A client for `url` (one or more members), made as every client deadbolt makes: bounded dials
 * and calls, a silent connection found by pings, a failed host retried after a second.
 */
export function openEtcd(url: StoreUrl, o: { connectTimeout: number; commandTimeout: number }): Etcd3 {
  const scheme = url.scheme === 'https' ? 'https' : 'http';
  const hosts = url.hosts.map(({ host, port }) => `${scheme}://${host}:${port ?? 2379}`);
  return new Etcd3({
    hosts,
    ...(url.username === undefined ? {} : { auth: { username: url.username, password: url.password ?? '' } }),
    dialTimeout: o.connectTimeout,
    // A deadline on a watch stream would tear down every watch of the client each time it
    // passed. (gRPC takes deadlines as wall-clock dates; only the difference matters here.)
    defaultCallOptions: (call) => (call.isStream ? {} : { deadline: Date.now() + o.commandTimeout }),
    // Ping a quiet connection so a silent peer (a partition, a middlebox that lost the
    // connection's state) is found within ~11 s, not the OS's minutes: a waiter's watch and
    // keep-alives are streams without deadlines, so nothing else would ever end them. Only while
    // calls are open, and not more often than etcd allows (5 s; more often, it hangs up).
    grpcOptions: { 'grpc.keepalive_time_ms': 6_000, 'grpc.keepalive_timeout_ms': 5_000 },
    // After three failed calls the client stops sending to a host for a while; its default 5 s
    // turned every reconnect into a 5 s outage for a client of one host (a wait on a
    // connection found dead re-queued only after it). One second still steers a pool of hosts
    // away from a dead one.
    faultHandling: {
      host: () => circuitBreaker(handleWhen(isRecoverableError), { halfOpenAfter: 1000, breaker: new ConsecutiveBreaker(3) }),
    },
  });
}

/**
 * etcd backend: the recipe of etcd's Go `concurrency.Mutex`. Every acquirer writes its own key
 * under the lock's prefix, bound to a lease of its own, in one transaction that also reads the
 * current holder (the key with the lowest create revision). A waiter watches only the nearest
 * earlier key and re-checks when it goes: FIFO by create revision, no thundering herd. The fencing
 * token is the holder key's create revision plus the lock's offset (0 unless a migration raised its
 * token floor; see `raiseTokenFloor`). Renewal is a lease keep-alive plus a check that the key
 * still exists. Semaphores and read-write locks are claims on shared keys by the same recipe
 * with core's grant rule (claims.ts: one engine, a rule per key space); every claim reaches etcd
 * through store.ts (key names, calls, etcd leases, watches).
 */
export class EtcdBackend extends StoreBackend<Etcd3, EtcdLockLease> implements LockBackend<EtcdLockLease> {
  readonly capabilities: Capabilities = {
    fairness: 'fifo',
    lease: 'ttl',
    wake: 'push',
    // etcd raises any lease TTL below its minimum (1.5 × election timeout, 2 s by default) to it.
    minTtlMs: 2000,
    ttlGranularityMs: 1000,
    semaphore: true,
    readWrite: true,
  };
  readonly #store: EtcdStore;
  readonly #commandTimeoutMs: number;

  /** @throws InvalidArgumentError for bad options (before connecting). */
  constructor(raw: EtcdBackendOptions) {
    const options = readOptions(raw, etcdOptionRules, 'etcdBackend');
    // With a client made from `url`, the deadline of each unary call; a client of yours keeps its own.
    const commandTimeoutMs = options.commandTimeoutMs ?? 5000;
    super({
      name: 'etcd',
      commandTimeoutMs,
      connection: storeClient(options, 'etcdBackend', 'etcd://host:port[,host:port]', (url) =>
        openEtcd(url, { connectTimeout: options.connectTimeoutMs ?? 2000, commandTimeout: commandTimeoutMs }),
      ),
    });
    this.#store = new EtcdStore(this.client, options.namespace ?? 'deadbolt/', this.inFlight);
    this.#commandTimeoutMs = commandTimeoutMs;
    storeOf.set(this, this.#store);
  }

  protected acquireClaim(req: AcquireRequest): Promise<EtcdLockLease | null> {
    return acquireClaim(this.#store, req);
  }

  async renew(lease: EtcdLockLease, ttlMs: number): Promise<boolean> {
    const l = lease;
    const ttlSeconds = ttlMs / 1000;
    if (ttlSeconds !== l.ttlSeconds) return this.#store.rebind(l, ttlSeconds);
    // The lease alone is not the claim: the key may have been deleted under it. Both at once.
    const [alive, owned] = await Promise.all([this.#store.keepAlive(l.etcdLease), this.#store.ownsKey(l)]);
    return alive && owned;
  }

  inspect(key: string, space: KeySpace): Promise<StoreView> {
    return this.#store.inspect(key, space);
  }

  /**
   * See `LockBackend.forceRelease`: deletes `owner`'s key (every claim's key is named by its owner).
   * Its holder's next renewal finds it gone; the waiter behind it sees the deletion and goes.
   */
  async forceRelease(key: string, owner: string, space: KeySpace): Promise<boolean> {
    const path = this.#store.prefixFor(key, space) + owner;
    const { deleted } = await this.#store.call('force release', () => this.client.delete().key(path).exec());
    return Number(deleted) > 0;
  }

  async release(lease: EtcdLockLease): Promise<void> {
    const l = lease;
    l.stopWatch();
    // Revoking the lease deletes our key with it: one write.
    await this.#store.revoke(l.etcdLease);
  }

  /**
   * See `LockBackend.raiseTokenFloor`: later holders' keys are newer than ours, so an offset of
   * `floor - our revision` puts every later token above `floor` (each key space's rule, claims.ts).
   */
  raiseTokenFloor(lease: EtcdLockLease, floor: bigint): Promise<boolean> {
    return lease.rule.raiseFloor(this.#store, lease, floor);
  }

  /** See `LockBackend.tokenFloor`. @throws BackendError for a floor of 10^20 or more. */
  tokenFloor(raise = 0n): Promise<bigint> {
    return this.#store.tokenFloor(raise);
  }

  /** See `LockBackend.tokenCeiling`: the store's revision plus the largest offset (one read of the prefix). */
  tokenCeiling(): Promise<bigint> {
    return this.#store.tokenCeiling();
  }

  protected async closeStore(): Promise<void> {
    // The watches' cancels go to etcd, which may not answer: a command's time at most.
    await answerWithin(this.#store.stopWatches(), this.#commandTimeoutMs, this.name, 'close').catch(() => undefined);
    return this.connection.end((client) => client.close());
  }
}

/**
 * An etcd backend. @throws InvalidArgumentError for bad options; store failures surface as
 * BackendUnavailableError / BackendError from the Locker's calls.
 */
export function etcdBackend(options: EtcdBackendOptions): EtcdBackend {
  return new EtcdBackend(options);
}

import { BackendError, BackendUnavailableError, LimitMismatchError, type Capabilities, type LockBackend } from '@deadbolt/core';
import {
  after,
  grantable,
  InFlight,
  instance,
  ms,
  raceSignal,
  readOptions,
  urlOrClient,
  text,
  url,
  type Rules,
  type AcquireRequest,
  type Lease,
  type SharedRequest,
  type Timer,
} from '@deadbolt/core/backend';
import { circuitBreaker, ConsecutiveBreaker, handleWhen } from 'cockatiel';
import { Etcd3, isRecoverableError, type Lease as EtcdLease, type Watcher } from 'etcd3';

export interface EtcdBackendOptions {
  /**
   * `etcd://[user:password@]host:port[,host:port...]` (or `http://…`, `https://…`). The backend
   * creates and closes its client; a user and password become the client's etcd authentication.
   */
  url?: string;
  /** Your own etcd3 client; `close()` leaves it open. Used instead of `url`. */
  client?: Etcd3;
  /**
   * Prefix of every key the backend writes. Default `deadbolt/`. Must not contain `#`, which
   * separates it from what follows: two lockers with different prefixes never share a key.
   */
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

export interface EtcdLockLease extends Lease {
  /** A semaphore permit or read-write lock: the key lives under `sharedPrefixFor`. */
  readonly shared?: true;
  /** `<prefix><base64url key>/<owner>`, the waiter's own key. */
  readonly path: string;
  /** Our key's create revision; the token is this plus the key's offset at the grant. */
  readonly revision: bigint;
  acquiredAt: number;
  etcdLease: EtcdLease;
  ttlSeconds: number;
  lost: AbortSignal;
  /**
   * Watches our own key, from the grant's revision on; its deletion (release, revocation, expiry,
   * anyone) means the lock is gone. Made `LOSS_WATCH_DELAY_MS` after the grant (see there);
   * undefined if the lease ended first or the watch could not be made.
   */
  watcher: Promise<Watcher | undefined>;
  /** Stops the loss watch (or keeps it from being made). */
  stopWatch: () => void;
}

/**
 * How long after a grant the loss watch is made. Most holds are short, and for them a watch is two
 * more messages (create, cancel) and client work on the critical path of the next lock; the watch
 * starts from the grant's revision, so a deletion in the first moments of a hold is still reported,
 * at most this much later. Renewal finds a loss within ttl / 3 in any case.
 */
export const LOSS_WATCH_DELAY_MS = 100;

/** A stored offset (decimal text), or 0 when the key has none. */
const offsetOf = (value: Buffer | string | undefined) => (value === undefined ? 0n : BigInt(value.toString()));

const noop = () => undefined;

/** How each option of `etcdBackend` is checked (see core's options.ts); the conformance suite feeds it hostile values. */
export const etcdOptionRules = {
  url: url(['etcd', 'http', 'https']),
  client: instance((v): v is Etcd3 => v instanceof Etcd3, 'an etcd3 Etcd3 client'),
  prefix: text(/^[^#]+$/, 'a non-empty string without # (it separates the prefix from what follows)', ['', 'p#', 'deadbolt/#s/']),
  connectTimeoutMs: ms(),
  commandTimeoutMs: ms(),
} satisfies Rules<EtcdBackendOptions>;

/** One claim in a shared key's queue, as read from its etcd key. */
interface QueuedClaim {
  readonly revision: bigint;
  readonly mode: SharedRequest['mode'];
  readonly limit: number;
}

/**
 * The claims that count, in queue order: those with the limit of the oldest claim not known to be
 * misconfigured. A claim with another limit is misconfigured, and remembered in `misconfigured`
 * (it stays so: it was made while an older claim with the limit in force lived, and its own join,
 * which read every claim at once, saw that claim too and withdrew), so it neither blocks nor
 * fails the others once the claim it was measured against has gone. @throws LimitMismatchError
 * when the limit in force is not `req`'s (nothing of ours may stay: the caller withdraws).
 */
function inForce(req: SharedRequest, misconfigured: Set<bigint>, queue: readonly QueuedClaim[]): QueuedClaim[] {
  const live = queue.filter((c) => !misconfigured.has(c.revision));
  const limit = live[0]?.limit ?? req.limit;
  if (limit !== req.limit) throw new LimitMismatchError(req.key, limit, req.limit);
  for (const c of live) if (c.limit !== limit) misconfigured.add(c.revision);
  return live.filter((c) => c.limit === limit);
}

/** etcd3 rejects keep-alives of a revoked or expired lease with a plain Error saying so. */
const isLeaseGone = (error: unknown) => /expired or revoked|lease not found/i.test(String((error as Error)?.message));

/**
 * An acquisition's error, typed: a lease that ran out before the acquisition could use it (a grant
 * and a transaction more than a ttl apart: an overloaded store) is the store not answering in
 * time, which a wait rides out (core tries again with a new lease), not a store error.
 */
function grantGone(backend: string, error: unknown): unknown {
  return isLeaseGone(error) ? new BackendUnavailableError(backend, 'acquire', { cause: error }) : error;
}

/**
 * etcd backend: the recipe of etcd's Go `concurrency.Mutex`. Every acquirer writes its own key
 * under the lock's prefix, bound to a lease of its own, in one transaction that also reads the
 * current holder (the key with the lowest create revision). A waiter watches only the nearest
 * earlier key and re-checks when it goes: FIFO by create revision, no thundering herd. The fencing
 * token is the holder key's create revision plus the lock's offset (0 unless a migration raised its
 * token floor; see `raiseTokenFloor`). Renewal is a lease keep-alive plus a check that the key
 * still exists.
 */
export class EtcdBackend implements LockBackend<EtcdLockLease> {
  readonly name = 'etcd';
  readonly capabilities: Capabilities = {
    fencing: 'strict',
    fairness: 'fifo',
    lease: 'ttl',
    wake: 'push',
    // etcd raises any lease TTL below its minimum (1.5 × election timeout, 2 s by default) to it.
    minTtlMs: 2000,
    ttlGranularityMs: 1000,
    crossProcess: true,
    semaphore: true,
    readWrite: true,
  };
  readonly client: Etcd3;
  readonly #ownsClient: boolean;
  readonly #prefix: string;
  /** Acquisitions under way: `close()` lets aborted ones delete their keys and leases first. */
  readonly #acquiring: InFlight;
  #closed = false;
  /**
   * Watch cancels still under way. etcd3 holds a watch made while another is being cancelled
   * (about 100 ms here), so each watch of ours is made only once they are done (`#settledWatches`);
   * nothing else waits for a cancel, a grant least of all.
   */
  readonly #cancelling = new Set<Promise<void>>();

  /** @throws InvalidArgumentError for bad options (before connecting). */
  constructor(raw: EtcdBackendOptions) {
    const options = readOptions(raw, etcdOptionRules, 'etcdBackend');
    this.#prefix = options.prefix ?? 'deadbolt/';
    // With a client made from `url`, the deadline of each unary call; a client of yours keeps its own.
    const commandTimeout = options.commandTimeoutMs ?? 5000;
    this.#acquiring = new InFlight(commandTimeout);
    const store = urlOrClient(options, 'etcdBackend', 'etcd://host:port[,host:port]');
    if (store.client) {
      this.client = store.client;
      this.#ownsClient = false;
    } else {
      const url = store.url;
      const scheme = url.scheme === 'https' ? 'https' : 'http';
      const hosts = url.hosts.map(({ host, port }) => `${scheme}://${host}:${port ?? 2379}`);
      this.client = new Etcd3({
        hosts,
        ...(url.username === undefined ? {} : { auth: { username: url.username, password: url.password ?? '' } }),
        dialTimeout: options.connectTimeoutMs ?? 2000,
        // A deadline on a watch stream would tear down every watch of the client each time it
        // passed. (gRPC takes deadlines as wall-clock dates; only the difference matters here.)
        defaultCallOptions: (call) => (call.isStream ? {} : { deadline: Date.now() + commandTimeout }),
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
      this.#ownsClient = true;
    }
  }

  /**
   * The prefix under which every waiter of `key` writes its own key: `<prefix>#m/<base64url key>/`.
   * Base64url has no `/` or `#`, so one lock's prefix never contains another's; the prefix has no
   * `#`, so every key of one prefix starts `<prefix>#`, which no key of another prefix (one that
   * extends it, or that it extends) does.
   */
  prefixFor(key: string): string {
    return `${this.#prefix}#m/${Buffer.from(key, 'utf8').toString('base64url')}/`;
  }

  /**
   * Where a lock's token offset lives: beside its prefix, never under any lock's prefix (base64url
   * has no `#`). Written only by a holder, so a holder reads the final value at any time.
   */
  offsetKeyFor(key: string): string {
    return `${this.#prefix}#m/${Buffer.from(key, 'utf8').toString('base64url')}#offset`;
  }

  /**
   * Where the claims on a shared key (semaphore, read-write lock) live: one key per claim, named by
   * its owner, valued `<S|X>:<limit>`, bound to the claim's own etcd lease. `#s/` keeps them apart
   * from every mutex (`#m/`).
   */
  sharedPrefixFor(key: string): string {
    return `${this.#prefix}#s/${Buffer.from(key, 'utf8').toString('base64url')}/`;
  }

  /**
   * A shared key's token offset (see `raiseTokenFloor`): beside its claims, never under them. Kept
   * as 20 zero-padded digits, so etcd's byte-wise value compare is a numeric one: concurrent
   * holders raise it, and a raise never lowers it.
   */
  sharedOffsetKeyFor(key: string): string {
    return `${this.#prefix}#s/${Buffer.from(key, 'utf8').toString('base64url')}#offset`;
  }

  /**
   * A shared claim, the same recipe as the mutex: our key and a read of all the key's claims in one
   * transaction; the claims in create-revision order are the queue, and the token is our key's
   * create revision (etcd's revisions only grow, also across restarts). A waiter watches the
   * prefix for deletions and re-reads. Limits travel in every claim's value, so a newcomer with
   * another limit sees it and withdraws.
   */
  acquireShared(req: SharedRequest): Promise<EtcdLockLease | null> {
    return this.#acquiring.track(this.#acquireShared(req));
  }

  async #acquireShared(req: SharedRequest): Promise<EtcdLockLease | null> {
    const prefix = this.sharedPrefixFor(req.key);
    const offsetKey = this.sharedOffsetKeyFor(req.key);
    const path = prefix + req.owner;
    const ttlSeconds = req.ttlMs / 1000;
    let acquiredAt = performance.now();
    const etcdLease = this.client.lease(ttlSeconds, { autoKeepAlive: false });
    etcdLease.on('lost', () => undefined);
    let created = false;
    let keepAlive: NodeJS.Timeout | undefined;
    try {
      const leaseId = await this.#call('grant lease', () => etcdLease.grant());
      const claims = () => this.client.getAll().prefix(prefix).sort('Create', 'Ascend');
      const result = await this.#call('acquire', () =>
        this.client
          .if(path, 'Create', '==', 0)
          .then(
            this.client
              .put(path)
              .value(`${req.mode === 'exclusive' ? 'X' : 'S'}:${req.limit}`)
              .lease(leaseId),
            claims(),
            this.client.get(offsetKey),
          )
          .else(this.client.get(path), claims(), this.client.get(offsetKey))
          .commit(),
      );
      created = true;
      const revision = BigInt(result.header.revision);
      const mine = result.succeeded ? revision : BigInt(result.responses[0]!.response_range.kvs[0]!.create_revision);
      let kvs = result.responses[1]!.response_range.kvs;
      // The offset is read by the same read that judges the claim granted.
      let offset = offsetOf(result.responses[2]!.response_range.kvs[0]?.value);
      let seenAt = revision;
      const misconfigured = new Set<bigint>();
      for (let waited = false; ; waited = true) {
        const queue = inForce(
          req,
          misconfigured,
          kvs.map((kv) => ({
            revision: BigInt(kv.create_revision),
            mode: kv.value.toString().startsWith('X') ? ('exclusive' as const) : ('shared' as const),
            limit: Number(kv.value.toString().slice(2)),
          })),
        );
        const index = queue.findIndex((c) => c.revision === mine);
        if (index < 0)
          throw new BackendUnavailableError(this.name, 'acquire', { cause: new Error("the claim's lease expired while it waited") });
        if (grantable(queue, index, req.limit)) {
          if (waited) {
            acquiredAt = performance.now();
            const alive = await this.#call('acquire', () => etcdLease.keepaliveOnce()).then(
              (r) => Number(r.TTL) > 0,
              (e: unknown) => (isLeaseGone(e) ? false : Promise.reject(e)),
            );
            if (!alive)
              throw new BackendUnavailableError(this.name, 'acquire', { cause: new Error("the claim's lease expired while it waited") });
          }
          break;
        }
        if (!req.wait) {
          await this.#call('acquire', () => this.client.delete().key(path).exec());
          await etcdLease.revoke().catch(() => undefined);
          return null;
        }
        // Waiting can outlast the ttl: keep our lease alive meanwhile.
        keepAlive ??= setInterval(() => void etcdLease.keepaliveOnce().catch(() => undefined), (ttlSeconds * 1000) / 3);
        await this.#deleted(prefix, seenAt + 1n, req.signal);
        const now = await this.#call('wait', () =>
          this.client
            .if(path, 'Create', '>', 0)
            .then(claims(), this.client.get(offsetKey))
            .else(claims(), this.client.get(offsetKey))
            .commit(),
        );
        kvs = now.responses[0]!.response_range.kvs;
        offset = offsetOf(now.responses[1]!.response_range.kvs[0]?.value);
        seenAt = BigInt(now.header.revision);
      }
      const lost = new AbortController();
      return {
        key: req.key,
        owner: req.owner,
        token: mine + offset,
        revision: mine,
        acquiredAt,
        path,
        etcdLease,
        ttlSeconds,
        lost: lost.signal,
        shared: true,
        ...this.#watchLoss(path, revision, lost),
      };
    } catch (error) {
      if (created) await this.#call('delete', () => this.client.delete().key(path).exec()).catch(noop);
      await this.#abandon(etcdLease, ttlSeconds);
      throw grantGone(this.name, error);
    } finally {
      clearInterval(keepAlive);
    }
  }

  acquire(req: AcquireRequest): Promise<EtcdLockLease | null> {
    return this.#acquiring.track(this.#acquire(req));
  }

  async #acquire(req: AcquireRequest): Promise<EtcdLockLease | null> {
    const lockPrefix = this.prefixFor(req.key);
    const offsetKey = this.offsetKeyFor(req.key);
    const path = lockPrefix + req.owner;
    const ttlSeconds = req.ttlMs / 1000;
    // When our lease was last set to its full ttl (a request's send time): the lease counts from here.
    let refreshedAt = performance.now();
    const etcdLease = this.client.lease(ttlSeconds, { autoKeepAlive: false });
    etcdLease.on('lost', () => undefined);
    let created = false;
    try {
      const leaseId = await this.#call('grant lease', () => etcdLease.grant());
      // One transaction: the newest key before ours (the one a waiter watches), our key, the holder
      // (the oldest key) and the token offset. A retried call finds its key already there.
      const result = await this.#call('acquire', () =>
        this.client
          .if(path, 'Create', '==', 0)
          .then(
            this.client.getAll().prefix(lockPrefix).sort('Create', 'Descend').limit(1),
            this.client.put(path).value(req.owner).lease(leaseId),
            this.#holderQuery(lockPrefix),
            this.client.get(offsetKey),
          )
          .else(this.client.get(path), this.client.get(path), this.#holderQuery(lockPrefix), this.client.get(offsetKey))
          .commit(),
      );
      created = true;
      const revision = BigInt(result.header.revision);
      const mine = result.succeeded ? revision : BigInt(result.responses[0]!.response_range.kvs[0]!.create_revision);
      const holder = BigInt(result.responses[2]!.response_range.kvs[0]?.create_revision ?? -1);
      let offset = offsetOf(result.responses[3]!.response_range.kvs[0]?.value);
      if (holder !== mine) {
        if (!req.wait) {
          await this.#call('acquire', () => this.client.delete().key(path).exec());
          await etcdLease.revoke().catch(noop);
          return null;
        }
        // Waiting can outlast the ttl: keep our lease alive meanwhile (each confirmed keep-alive
        // restarts its ttl from when it was sent).
        const keepAlive = setInterval(
          () => {
            const sentAt = performance.now();
            etcdLease.keepaliveOnce().then((r) => void (Number(r.TTL) > 0 && (refreshedAt = Math.max(refreshedAt, sentAt))), noop);
          },
          (ttlSeconds * 1000) / 3,
        );
        try {
          const newest = result.succeeded ? result.responses[0]!.response_range.kvs[0] : undefined;
          offset = await this.#waitForPredecessors(lockPrefix, offsetKey, path, mine, req.signal, newest?.key);
        } finally {
          clearInterval(keepAlive);
        }
      }
      const lost = new AbortController();
      return {
        key: req.key,
        owner: req.owner,
        token: mine + offset,
        revision: mine,
        acquiredAt: refreshedAt,
        path,
        etcdLease,
        ttlSeconds,
        lost: lost.signal,
        ...this.#watchLoss(path, revision, lost),
      };
    } catch (error) {
      // A cancelled, timed-out or failed waiter removes its key and lease before reporting.
      if (created) await this.#call('delete', () => this.client.delete().key(path).exec()).catch(noop);
      await this.#abandon(etcdLease, ttlSeconds);
      throw grantGone(this.name, error);
    }
  }

  /**
   * Revokes the lease of a claim given up or failed (its key goes with it), again later while the
   * store is out of reach, as long as the lease may live (`InFlight.cleanUp`): a waiter's key left
   * behind is a place in line every later waiter would wait out. Never rejects.
   */
  #abandon(etcdLease: EtcdLease, ttlSeconds: number): Promise<void> {
    return this.#acquiring.leave(() => this.#revoke(etcdLease), ttlSeconds * 1000);
  }

  /** Revokes `etcdLease`, which deletes the keys put with it; one already gone (revoked, expired) counts as done. */
  async #revoke(etcdLease: EtcdLease): Promise<void> {
    try {
      await this.#call('release', () => etcdLease.revoke());
    } catch (error) {
      const message = String((error as Error)?.message) + String((error as Error & { cause?: Error }).cause?.message);
      if (!isLeaseGone(error) && !/not found/i.test(message)) throw error;
    }
  }

  async renew(lease: EtcdLockLease, ttlMs: number): Promise<boolean> {
    const l = lease;
    const ttlSeconds = ttlMs / 1000;
    if (ttlSeconds !== l.ttlSeconds) return this.#rebind(l, ttlSeconds);
    // The lease alone is not the claim: the key may have been deleted under it. Both at once.
    const [alive, owned] = await Promise.all([
      this.#call('renew', () => l.etcdLease.keepaliveOnce()).then(
        (response) => Number(response.TTL) > 0,
        (error: unknown) => (isLeaseGone(error) ? false : Promise.reject(error)),
      ),
      this.#ownsKey(l),
    ]);
    return alive && owned;
  }

  async release(lease: EtcdLockLease): Promise<void> {
    const l = lease;
    l.stopWatch();
    // Revoking the lease deletes our key with it: one write.
    await this.#revoke(l.etcdLease);
  }

  /**
   * See `LockBackend.raiseTokenFloor`. Later holders' keys are newer than ours, so an offset of
   * `floor - our revision` puts every later token above `floor`; written only if our key (so our
   * hold: nobody is granted before it goes) still exists. Our key is written again (same value,
   * same lease) in the same step: a waiter watching it then knows the offset it read may be old
   * (see `#waitForPredecessors`).
   */
  async raiseTokenFloor(lease: EtcdLockLease, floor: bigint): Promise<boolean> {
    const l = lease;
    if (l.shared) return this.#raiseSharedFloor(l, floor);
    const leaseId = await this.#call('raise token floor', () => l.etcdLease.grant());
    const result = await this.#call('raise token floor', () =>
      this.client
        .if(l.path, 'Create', '==', l.revision.toString())
        .then(
          this.client.put(this.offsetKeyFor(l.key)).value((floor - l.revision).toString()),
          this.client.put(l.path).value(l.owner).lease(leaseId),
        )
        .commit(),
    );
    return result.succeeded;
  }

  /**
   * A shared key's floor: as the mutex's, but other holders may raise it at the same time, so the
   * write is also conditioned on the stored offset being lower (or absent); one that is already
   * higher covers our floor too.
   */
  async #raiseSharedFloor(l: EtcdLockLease, floor: bigint): Promise<boolean> {
    const offsetKey = this.sharedOffsetKeyFor(l.key);
    const value = (floor - l.revision).toString().padStart(20, '0');
    const ours = () => this.client.if(l.path, 'Create', '==', l.revision.toString());
    for (let attempt = 0; attempt < 10; attempt++) {
      const absent = await this.#call('raise token floor', () =>
        ours().and(offsetKey, 'Version', '==', 0).then(this.client.put(offsetKey).value(value)).commit(),
      );
      if (absent.succeeded) return true;
      const lower = await this.#call('raise token floor', () =>
        ours()
          .and(offsetKey, 'Value', '<', value)
          .then(this.client.put(offsetKey).value(value))
          .else(this.client.get(l.path), this.client.get(offsetKey))
          .commit(),
      );
      if (lower.succeeded) return true;
      const [mineNow, stored] = [lower.responses[0]!.response_range.kvs[0], lower.responses[1]!.response_range.kvs[0]];
      if (!mineNow || BigInt(mineNow.create_revision) !== l.revision) return false;
      if (stored && stored.value.toString() >= value) return true;
      // The offset key went away between the two transactions: try again.
    }
    throw new BackendError(this.name, 'raise token floor', { cause: new Error('the offset kept changing') });
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // Core aborts every acquisition first; each then deletes its key and revokes its lease, which
    // closing the client at once would cut short (the keys would block the lock until their ttl).
    await this.#acquiring.settled();
    if (this.#ownsClient) this.client.close();
  }

  /**
   * The loss watch of a lease (see `EtcdLockLease.watcher`): aborts `lost` when our key is deleted
   * after `fromRevision`. Made `LOSS_WATCH_DELAY_MS` from now unless stopped first.
   */
  #watchLoss(path: string, fromRevision: bigint, lost: AbortController): Pick<EtcdLockLease, 'watcher' | 'stopWatch'> {
    let timer: Timer | undefined;
    let begin: (watcher: Promise<Watcher | undefined>) => void = noop;
    const watcher = new Promise<Watcher | undefined>((resolve) => (begin = resolve));
    timer = after(LOSS_WATCH_DELAY_MS, () => begin(this.#lossWatch(path, fromRevision, lost)), true);
    const stopWatch = () => {
      timer?.cancel();
      timer = undefined;
      begin(Promise.resolve(undefined));
      void watcher.then((w) => w && this.#cancel(w));
    };
    return { watcher, stopWatch };
  }

  async #lossWatch(path: string, fromRevision: bigint, lost: AbortController): Promise<Watcher | undefined> {
    try {
      await this.#settledWatches();
      const watcher = await this.client
        .watch()
        .key(path)
        .startRevision((fromRevision + 1n).toString())
        .create();
      watcher.on('delete', () => lost.abort(new Error(`etcd key ${path} was deleted (lease revoked or expired)`)));
      watcher.on('error', noop);
      return watcher;
    } catch {
      // No push notice then; renewal still finds the loss within one period.
      return undefined;
    }
  }

  #holderQuery(lockPrefix: string) {
    return this.client.getAll().prefix(lockPrefix).sort('Create', 'Ascend').limit(1);
  }

  async #ownsKey(l: EtcdLockLease): Promise<boolean> {
    const found = await this.#call('renew', () => this.client.get(l.path).exec());
    const kv = found.kvs[0];
    return kv !== undefined && BigInt(kv.create_revision) === l.revision;
  }

  /** A new ttl needs a new lease: move our key to it (only if the key is still ours), then drop the old one. */
  async #rebind(l: EtcdLockLease, ttlSeconds: number): Promise<boolean> {
    const next = this.client.lease(ttlSeconds, { autoKeepAlive: false });
    next.on('lost', () => undefined);
    const id = await this.#call('renew', () => next.grant());
    const result = await this.#call('renew', () =>
      this.client.if(l.path, 'Create', '==', l.revision.toString()).then(this.client.put(l.path).value(l.owner).lease(id)).commit(),
    );
    if (!result.succeeded) {
      await next.revoke().catch(() => undefined);
      return false;
    }
    const old = l.etcdLease;
    l.etcdLease = next;
    l.ttlSeconds = ttlSeconds;
    await old.revoke().catch(() => undefined);
    return true;
  }

  /**
   * Wait until no key under the prefix has a create revision below ours, watching only the nearest
   * earlier key. Each look is one transaction that also checks our key is still there (so our
   * lease is alive) and reads the token offset, which is final once we hold; resolves with that
   * offset. A watch is made before the look that finds its key still there, so the key's deletion
   * comes after the watch began and is delivered at once (see `#watchDeletion`). After a deletion,
   * the next look is the grant: the handoff is one event and one transaction, the watch's cancel
   * going out beside it. Rejects with `signal.reason` on abort. `first`: the nearest earlier key as
   * the grant's transaction read it.
   *
   * When the look found that key alone ahead of ours (it is the holder's), its deletion is the
   * grant itself, with no look after it, provided the watch saw nothing else first: no write to
   * that key and nothing on ours. Why that is enough: no key can join ahead of ours (a new key gets
   * a newer revision), so with the holder's key gone none is ahead; ours was there throughout (its
   * deletion would have come first, on the same watch, which keeps revision order); and the offset
   * read by the look is still the offset, since only a holder raises it (`raiseTokenFloor` checks
   * the raiser's key), the only holder was that key's, and a raise writes that key too.
   */
  async #waitForPredecessors(
    lockPrefix: string,
    offsetKey: string,
    path: string,
    mine: bigint,
    signal: AbortSignal,
    first?: Buffer,
  ): Promise<bigint> {
    let watch = first && { key: first, ...(await this.#watchDeletion(first, path, signal)) };
    try {
      for (;;) {
        signal.throwIfAborted();
        const found = await this.#call('wait', () =>
          this.client
            .if(path, 'Create', '==', mine.toString())
            .then(
              this.client
                .getAll()
                .prefix(lockPrefix)
                .maxCreateRevision((mine - 1n).toString())
                .sort('Create', 'Descend')
                .limit(1),
              this.client.get(offsetKey),
              this.#holderQuery(lockPrefix),
            )
            .commit(),
        );
        if (!found.succeeded)
          throw new BackendUnavailableError(this.name, 'acquire', {
            cause: new Error("the waiter's key is gone: its lease expired while it waited"),
          });
        const predecessor = found.responses[0]!.response_range.kvs[0]?.key;
        const offset = offsetOf(found.responses[1]!.response_range.kvs[0]?.value);
        if (!predecessor) return offset;
        if (watch && predecessor.equals(watch.key)) {
          const alone = found.responses[2]!.response_range.kvs[0]?.key.equals(predecessor) === true;
          if ((await watch.deleted(signal)) && alone) return offset;
        } else {
          void watch?.cancel();
          watch = { key: predecessor, ...(await this.#watchDeletion(predecessor, path, signal)) };
          continue;
        }
        void watch.cancel();
        watch = undefined;
      }
    } finally {
      void watch?.cancel();
    }
  }

  /**
   * Resolves once no cancel of ours is under way (see `#cancelling`); rejects with `signal`'s reason
   * if it aborts first (a wait given up must not queue behind every other waiter's cancel: a close
   * of many waiters would take that long to let them clean up).
   */
  async #settledWatches(signal?: AbortSignal): Promise<void> {
    while (this.#cancelling.size > 0) {
      const all = Promise.all(this.#cancelling);
      await (signal ? raceSignal(all, signal) : all);
    }
  }

  /**
   * A watch made by `create`, or `signal`'s reason as soon as it aborts. etcd3 makes a client's
   * watches one after another (each waits for the answer to the one before), so a hundred waiters
   * starting watches take a hundred round trips; a waiter given up must not wait its turn to clean
   * up (a close of many waiters would outlast its deadline). A watch made after all is cancelled.
   */
  #watchUnlessAborted(create: () => Promise<Watcher>, signal: AbortSignal): Promise<Watcher> {
    return raceSignal(this.#call('watch', create), signal, (late) => void this.#cancel(late));
  }

  /** Cancels `watcher` in the background, where `#settledWatches` finds it; never rejects. */
  #cancel(watcher: Watcher): Promise<void> {
    const done: Promise<void> = watcher
      .cancel()
      .then(noop, noop)
      .finally(() => this.#cancelling.delete(done));
    this.#cancelling.add(done);
    return done;
  }

  /**
   * A watch for the deletion of `key` from now on. Not from an earlier revision: etcd hands a watch
   * that starts behind its current revision to a catch-up loop that runs every 100 ms, which held
   * handoffs up to that long (p50 86 ms with two clients). One watch over the byte range from
   * `key` to `own` (our own key) sees both in revision order (other waiters' keys in between are
   * ignored). `deleted(signal)` resolves once `key` or our own key is deleted (or the watch failed: look again)
   * with whether that deletion was all that happened to the two keys since the watch began (see
   * `#waitForPredecessors`); rejects with the abort reason.
   */
  async #watchDeletion(
    key: Buffer,
    own: string,
    signal: AbortSignal,
  ): Promise<{ deleted: (signal: AbortSignal) => Promise<boolean>; cancel: () => Promise<void> }> {
    const ours = Buffer.from(own);
    const [low, high] = Buffer.compare(key, ours) < 0 ? [key, ours] : [ours, key];
    await this.#settledWatches(signal);
    const watcher = await this.#watchUnlessAborted(
      () =>
        this.client
          .watch()
          .inRange({ start: low, end: Buffer.concat([high, Buffer.from([0])]) })
          .create(),
      signal,
    );
    let quiet = true;
    /** Set when `key` went (or the watch failed): whether all was quiet until then. */
    let outcome: boolean | undefined;
    let wake: () => void = noop;
    const done = (quietUntilNow: boolean) => {
      if (outcome !== undefined) return;
      outcome = quietUntilNow;
      wake();
    };
    watcher.on('put', (kv) => {
      if (kv.key.equals(key) || kv.key.equals(ours)) quiet = false;
    });
    watcher.on('delete', (kv) => {
      // Our own key gone: look at once (the look then finds it gone and fails the wait).
      if (kv.key.equals(ours)) done((quiet = false));
      else if (kv.key.equals(key)) done(quiet);
    });
    watcher.on('error', () => done(false));
    return {
      deleted: (signal) =>
        new Promise<boolean>((resolve, reject) => {
          if (outcome !== undefined) return resolve(outcome);
          const onAbort = () => reject(signal.reason);
          if (signal.aborted) return onAbort();
          signal.addEventListener('abort', onAbort, { once: true });
          wake = () => {
            signal.removeEventListener('abort', onAbort);
            resolve(outcome!);
          };
        }),
      cancel: () => this.#cancel(watcher),
    };
  }

  /** Resolves when any key under `prefix` is deleted at or after `fromRevision`; rejects with the abort reason. */
  async #deleted(prefix: string, fromRevision: bigint, signal: AbortSignal): Promise<void> {
    const watcher = await this.#watchUnlessAborted(
      () => this.client.watch().prefix(prefix).startRevision(fromRevision.toString()).create(),
      signal,
    );
    try {
      await new Promise<void>((resolve, reject) => {
        const onAbort = () => reject(signal.reason);
        if (signal.aborted) return onAbort();
        signal.addEventListener('abort', onAbort, { once: true });
        const done = () => {
          signal.removeEventListener('abort', onAbort);
          resolve();
        };
        watcher.on('delete', done);
        // A compacted start revision means the key is long gone: look again.
        watcher.on('error', done);
      });
    } finally {
      await watcher.cancel().catch(noop);
    }
  }

  async #call<T>(operation: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (error) {
      if (isLeaseGone(error)) throw error;
      const kind = `${(error as Error)?.constructor?.name} ${(error as Error)?.message}`;
      if (/Unavailable|DeadlineExceeded|ConnectFailed|ClientClosed|ECONNREFUSED|BrokenCircuit/.test(kind)) {
        throw new BackendUnavailableError(this.name, operation, { cause: error });
      }
      throw new BackendError(this.name, operation, { cause: error });
    }
  }
}

/**
 * An etcd backend. @throws InvalidArgumentError for bad options; store failures surface as
 * BackendUnavailableError / BackendError from the Locker's calls.
 */
export function etcdBackend(options: EtcdBackendOptions): EtcdBackend {
  return new EtcdBackend(options);
}

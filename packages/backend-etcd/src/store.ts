// The server as every claim sees it (claims.ts): key names, one call with its error mapping,
// claims' etcd leases (revoked when given up, moved to a new ttl), and the watches (made one at a
// time after any cancel under way, cancelled in the background). Long because each of those is
// etcd3 client behaviour worked around in one place, which claims.ts would otherwise repeat.
import { BackendError, BackendUnavailableError } from '@deadbolt/core';
import {
  after,
  LeaseKeeper,
  raceSignal,
  sharedView,
  type InFlight,
  type KeySpace,
  type Lease,
  type StoreView,
  type Timer,
} from '@deadbolt/core/backend';
import type { Etcd3, Lease as EtcdLease, Watcher } from 'etcd3';

/** What a lease's key space does for its holder (the rest of its rule is claims.ts'). */
export interface LeaseRule {
  /** `LockBackend.raiseTokenFloor` for a lease of this key space. */
  raiseFloor(store: EtcdStore, lease: EtcdLockLease, floor: bigint): Promise<boolean>;
}

export interface EtcdLockLease extends Lease {
  /** The rule of the claim's key space: a holder's floor raise follows it. */
  readonly rule: LeaseRule;
  /** `<prefix><base64url key>/<owner>`, the waiter's own key. */
  readonly path: string;
  /** What our key holds (its owner, or a shared claim's mode and limit): a rewrite of the key keeps it. */
  readonly value: string;
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
export const offsetOf = (value: Buffer | string | undefined) => (value === undefined ? 0n : BigInt(value.toString()));

export const noop = () => undefined;

const maxOf = (a: bigint, b: bigint) => (a > b ? a : b);

/** etcd3 rejects keep-alives of a revoked or expired lease with a plain Error saying so. */
export const isLeaseGone = (error: unknown) => /expired or revoked|lease not found/i.test(String((error as Error)?.message));

/**
 * An acquisition's error, typed: a lease that ran out before the acquisition could use it (a grant
 * and a transaction more than a ttl apart: an overloaded store) is the store not answering in
 * time, which a wait rides out (core tries again with a new lease), not a store error.
 */
function grantGone(backend: string, error: unknown): unknown {
  return isLeaseGone(error) ? new BackendUnavailableError(backend, 'acquire', { cause: error }) : error;
}

/**
 * A waiter on a watch's events: `until(ready, signal)` resolves once `ready()` holds, checked now
 * and on each `wake()` (the watch's event handlers call it), or rejects with `signal`'s reason when
 * it aborts first. One wait at a time.
 */
function eventWaiter(): { wake: () => void; until: (ready: () => boolean, signal: AbortSignal) => Promise<void> } {
  let check: () => void = noop;
  return {
    wake: () => check(),
    until: (ready, signal) =>
      new Promise<void>((resolve, reject) => {
        if (ready()) return resolve();
        const onAbort = () => reject(signal.reason);
        if (signal.aborted) return onAbort();
        signal.addEventListener('abort', onAbort, { once: true });
        check = () => {
          if (!ready()) return;
          check = noop;
          signal.removeEventListener('abort', onAbort);
          resolve();
        };
      }),
  };
}

export class EtcdStore {
  readonly name = 'etcd';
  readonly client: Etcd3;
  readonly #prefix: string;
  /** Acquisitions under way (the backend's): a claim given up is revoked through it (`abandon`). */
  readonly #acquiring: InFlight;
  /**
   * Watch cancels still under way. etcd3 holds a watch made while another is being cancelled
   * (about 100 ms here), so each watch of ours is made only once they are done (`settledWatches`);
   * nothing else waits for a cancel, a grant least of all.
   */
  readonly #cancelling = new Set<Promise<void>>();
  /**
   * The loss watches not stopped yet, each by its `stopWatch`. A lease the locker forgot without a
   * release (a `runOnce` window left to expire) keeps its watch, and etcd3 keeps a client with a
   * live watch connected after `close()`: so the backend's close stops them first (`stopWatches`).
   */
  readonly #lossWatches = new Set<() => Promise<void>>();

  constructor(client: Etcd3, prefix: string, acquiring: InFlight) {
    this.client = client;
    this.#prefix = prefix;
    this.#acquiring = acquiring;
  }

  /**
   * The lease of a granted claim: its token is our key's create revision (`mine`) plus the offset
   * read with the grant; its loss watch starts after `revision`, the grant's.
   */
  granted(
    rule: LeaseRule,
    req: { readonly key: string; readonly owner: string },
    claim: {
      mine: bigint;
      offset: bigint;
      revision: bigint;
      acquiredAt: number;
      path: string;
      value: string;
      etcdLease: EtcdLease;
      ttlSeconds: number;
    },
  ): EtcdLockLease {
    const lost = new AbortController();
    const { mine, offset, revision, acquiredAt, path, value, etcdLease, ttlSeconds } = claim;
    return {
      rule,
      value,
      key: req.key,
      owner: req.owner,
      token: mine + offset,
      revision: mine,
      acquiredAt,
      path,
      etcdLease,
      ttlSeconds,
      lost: lost.signal,
      ...this.watchLoss(path, revision, lost),
    };
  }

  /**
   * A claim given up (aborted, timed out) or failed: deletes its key if it was made and revokes its
   * etcd lease (again later while etcd is out of reach, `abandon`), so no place in line stays
   * behind. Returns `error`, typed, for the caller to throw.
   */
  async giveUp(made: boolean, path: string, etcdLease: EtcdLease, ttlSeconds: number, error: unknown): Promise<unknown> {
    if (made) await this.call('delete', () => this.client.delete().key(path).exec()).catch(noop);
    await this.abandon(etcdLease, ttlSeconds);
    return grantGone(this.name, error);
  }

  /** One keep-alive of `etcdLease`: whether etcd still has it (false once expired or revoked). */
  keepAlive(etcdLease: EtcdLease): Promise<boolean> {
    return this.call('renew', () => etcdLease.keepaliveOnce()).then(
      (response) => Number(response.TTL) > 0,
      (error: unknown) => (isLeaseGone(error) ? false : Promise.reject(error)),
    );
  }

  /**
   * Keeps a waiter's etcd lease alive while it waits, which can outlast the ttl (core's
   * `LeaseKeeper`: a confirmed keep-alive restarts the ttl from its send time). Its signal aborts
   * the wait when `wait` does, or once the lease is lost, so the wait ends rather than outliving the
   * key that queued it; `keptError` says what such a wait reports.
   */
  keepWaiting(etcdLease: EtcdLease, ttlSeconds: number, since: number, wait: AbortSignal): LeaseKeeper {
    return new LeaseKeeper(() => this.keepAlive(etcdLease), ttlSeconds * 1000, since, wait);
  }

  /**
   * What a wait kept by `keeper` reports when it ends with `error`, or with no error after the lease
   * was lost: the caller's abort as it is; a lost lease as the store not answering in time, which
   * core's wait rides out with a new lease.
   */
  keptError(keeper: LeaseKeeper, wait: AbortSignal, error?: unknown): unknown {
    if (wait.aborted) return error ?? wait.reason;
    if (!keeper.lost) return error;
    return this.waiterGone(error ?? keeper.signal.reason);
  }

  /**
   * A waiter whose key is gone, or whose lease was lost, while it waited: the store did not answer
   * in time (a lease runs out only then), which core's wait rides out with a new lease.
   */
  waiterGone(cause: unknown = new Error("the waiter's lease expired while it waited")): BackendUnavailableError {
    return new BackendUnavailableError(this.name, 'acquire', { cause });
  }

  /** A new etcd lease of `ttlSeconds` for one claim, not kept alive by the client (renewal does it). */
  newLease(ttlSeconds: number): EtcdLease {
    const etcdLease = this.client.lease(ttlSeconds, { autoKeepAlive: false });
    etcdLease.on('lost', () => undefined);
    return etcdLease;
  }

  /**
   * The prefix under which every claimant of `key` in `space` writes its own key (named by its
   * owner): `<prefix>#m/<base64url key>/` for a mutex, `#s/` for a shared key (semaphore,
   * read-write lock), which keeps the two spaces apart. Base64url has no `/` or `#`, so one key's
   * prefix never contains another's; the prefix has no `#`, so every key of one prefix starts
   * `<prefix>#`, which no key of another prefix (one that extends it, or that it extends) does.
   */
  prefixFor(key: string, space: KeySpace): string {
    return `${this.#prefix}${space === 'mutex' ? '#m/' : '#s/'}${Buffer.from(key, 'utf8').toString('base64url')}/`;
  }

  /**
   * Where a key's token offset lives: beside its prefix, never under any key's prefix (base64url
   * has no `#`). A mutex's is written only by its holder, so a holder reads the final value at any
   * time; a shared key's holders raise theirs side by side (see `raiseTokenFloor`), so it is kept as
   * 20 zero-padded digits, and etcd's byte-wise value compare is a numeric one.
   */
  offsetKeyFor(key: string, space: KeySpace): string {
    return `${this.#prefix}${space === 'mutex' ? '#m/' : '#s/'}${Buffer.from(key, 'utf8').toString('base64url')}#offset`;
  }

  /**
   * `LockBackend.tokenFloor`: kept in `<prefix>#floor` (beside every lock's `#m/` and `#s/`, under
   * none), as 20 zero-padded digits so that etcd's byte-wise value compare is a numeric one.
   * @throws BackendError for a floor of 10^20 or more; typed errors.
   */
  async tokenFloor(raise: bigint): Promise<bigint> {
    const key = `${this.#prefix}#floor`;
    if (raise >= 10n ** 20n)
      throw new BackendError(this.name, 'token floor', { cause: new Error(`a token floor of ${raise} has more than 20 digits`) });
    if (raise > 0n) {
      const value = raise.toString().padStart(20, '0');
      const made = await this.call('token floor', () =>
        this.client.if(key, 'Create', '==', 0).then(this.client.put(key).value(value)).commit(),
      );
      if (!made.succeeded)
        await this.call('token floor', () => this.client.if(key, 'Value', '<', value).then(this.client.put(key).value(value)).commit());
    }
    const floor = await this.call('token floor', () => this.client.get(key).string());
    return floor === null ? 0n : BigInt(floor);
  }

  /**
   * `LockBackend.tokenCeiling`: a token is a create revision plus its key's offset, so the store's
   * revision now plus the largest offset (mutex and shared), or the floor if that is higher. One
   * read of every key under the prefix.
   */
  async tokenCeiling(): Promise<bigint> {
    const all = await this.call('token ceiling', () => this.client.getAll().prefix(this.#prefix).exec());
    let offset = 0n;
    let floor = 0n;
    for (const kv of all.kvs) {
      const name = kv.key.toString();
      if (name.endsWith('#offset')) offset = maxOf(offset, offsetOf(kv.value));
      else if (name === `${this.#prefix}#floor`) floor = offsetOf(kv.value);
    }
    return maxOf(BigInt(all.header.revision) + offset, floor);
  }

  /**
   * Revokes the lease of a claim given up or failed (its key goes with it), again later while the
   * store is out of reach, as long as the lease may live (`InFlight.cleanUp`): a waiter's key left
   * behind is a place in line every later waiter would wait out. Never rejects.
   */
  abandon(etcdLease: EtcdLease, ttlSeconds: number): Promise<void> {
    return this.#acquiring.leave(() => this.revoke(etcdLease), ttlSeconds * 1000);
  }

  /** Revokes `etcdLease`, which deletes the keys put with it; one already gone (revoked, expired) counts as done. */
  async revoke(etcdLease: EtcdLease): Promise<void> {
    try {
      await this.call('release', () => etcdLease.revoke());
    } catch (error) {
      const message = String((error as Error)?.message) + String((error as Error & { cause?: Error }).cause?.message);
      if (!isLeaseGone(error) && !/not found/i.test(message)) throw error;
    }
  }

  /**
   * The loss watch of a lease (see `EtcdLockLease.watcher`): aborts `lost` when our key is deleted
   * after `fromRevision`. Made `LOSS_WATCH_DELAY_MS` from now unless stopped first.
   */
  watchLoss(path: string, fromRevision: bigint, lost: AbortController): Pick<EtcdLockLease, 'watcher' | 'stopWatch'> {
    let timer: Timer | undefined;
    let begin: (watcher: Promise<Watcher | undefined>) => void = noop;
    const watcher = new Promise<Watcher | undefined>((resolve) => (begin = resolve));
    timer = after(LOSS_WATCH_DELAY_MS, () => begin(this.lossWatch(path, fromRevision, lost)), true);
    const stop = async () => {
      this.#lossWatches.delete(stop);
      timer?.cancel();
      timer = undefined;
      begin(Promise.resolve(undefined));
      const w = await watcher;
      if (w) await this.cancel(w);
    };
    this.#lossWatches.add(stop);
    // Once the key is gone the watch has said all it can: a lease left to expire (a runOnce window)
    // would otherwise keep one watch for every run until the backend closes.
    lost.signal.addEventListener('abort', () => void stop(), { once: true });
    return { watcher, stopWatch: () => void stop() };
  }

  /** Stops every loss watch still running (for the backend's close). */
  stopWatches(): Promise<unknown> {
    return Promise.all([...this.#lossWatches].map((stop) => stop()));
  }

  async lossWatch(path: string, fromRevision: bigint, lost: AbortController): Promise<Watcher | undefined> {
    try {
      await this.settledWatches();
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

  holderQuery(lockPrefix: string) {
    return this.client.getAll().prefix(lockPrefix).sort('Create', 'Ascend').limit(1);
  }

  async ownsKey(l: EtcdLockLease): Promise<boolean> {
    const found = await this.call('renew', () => this.client.get(l.path).exec());
    const kv = found.kvs[0];
    return kv !== undefined && BigInt(kv.create_revision) === l.revision;
  }

  /** A new ttl needs a new lease: move our key to it (only if the key is still ours), then drop the old one. */
  async rebind(l: EtcdLockLease, ttlSeconds: number): Promise<boolean> {
    const next = this.client.lease(ttlSeconds, { autoKeepAlive: false });
    next.on('lost', () => undefined);
    const id = await this.call('renew', () => next.grant());
    const result = await this.call('renew', () =>
      this.client.if(l.path, 'Create', '==', l.revision.toString()).then(this.client.put(l.path).value(l.value).lease(id)).commit(),
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
   * Resolves once no cancel of ours is under way (see `#cancelling`); rejects with `signal`'s reason
   * if it aborts first (a wait given up must not queue behind every other waiter's cancel: a close
   * of many waiters would take that long to let them clean up).
   */
  async settledWatches(signal?: AbortSignal): Promise<void> {
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
  watchUnlessAborted(create: () => Promise<Watcher>, signal: AbortSignal): Promise<Watcher> {
    return raceSignal(this.call('watch', create), signal, (late) => void this.cancel(late));
  }

  /** Cancels `watcher` in the background, where `settledWatches` finds it; never rejects. */
  cancel(watcher: Watcher): Promise<void> {
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
   * `waitForPredecessors` in claims.ts); rejects with the abort reason.
   */
  async watchDeletion(
    key: Buffer,
    own: string,
    signal: AbortSignal,
  ): Promise<{ deleted: (signal: AbortSignal) => Promise<boolean>; cancel: () => Promise<void> }> {
    const ours = Buffer.from(own);
    const [low, high] = Buffer.compare(key, ours) < 0 ? [key, ours] : [ours, key];
    await this.settledWatches(signal);
    const watcher = await this.watchUnlessAborted(
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
    const events = eventWaiter();
    const done = (quietUntilNow: boolean) => {
      if (outcome !== undefined) return;
      outcome = quietUntilNow;
      events.wake();
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
      deleted: async (signal) => {
        await events.until(() => outcome !== undefined, signal);
        return outcome!;
      },
      cancel: () => this.cancel(watcher),
    };
  }

  /**
   * A watch for deletions under `prefix` from now on, made once for a whole wait (a shared waiter
   * re-reads the queue after each). From now, not from the revision of the waiter's last read:
   * etcd serves a watch that starts behind its current revision from a catch-up loop that runs every
   * 100 ms (see `watchDeletion`), and under contention the revision has always moved on, so each
   * wake-up cost up to that long. The watch is made before the read it follows (the caller's job),
   * so a deletion after that read is never missed. `after(revision, signal)` resolves once a key
   * was deleted at a later revision than `revision` (the read's), or the watch failed (look again,
   * with a new watch: `failed`); rejects with the abort reason. `cancel` ends it in the background.
   */
  async prefixDeletions(
    prefix: string,
    signal: AbortSignal,
  ): Promise<{ after: (revision: bigint, signal: AbortSignal) => Promise<void>; readonly failed: boolean; cancel: () => void }> {
    await this.settledWatches(signal);
    const watcher = await this.watchUnlessAborted(() => this.client.watch().prefix(prefix).create(), signal);
    let latest = -1n;
    let failed = false;
    const events = eventWaiter();
    watcher.on('delete', (kv) => {
      const at = BigInt(kv.mod_revision);
      if (at > latest) latest = at;
      events.wake();
    });
    watcher.on('error', () => {
      failed = true;
      events.wake();
    });
    return {
      after: (revision, signal) => events.until(() => failed || latest > revision, signal),
      get failed() {
        return failed;
      },
      cancel: () => void this.cancel(watcher),
    };
  }

  /** `fn`, its failure typed: `BackendUnavailableError` when etcd could not be reached or answer in time, else `BackendError` (a lease gone stays as it is: callers tell it apart). */
  /**
   * `LockBackend.inspect`: the key's claims, oldest first, with the offset their tokens add, and
   * each claim's lease time left. Keys exist only while their leases live, so every one read is
   * live unless its lease ran out between the two reads (etcd then answers a TTL of -1). etcd
   * counts the time left in whole seconds, rounded down: a TTL of 0 is up to 999 ms left, still
   * live, so the time shown is the most it can be (one second more, at most the granted ttl). A
   * waiter's token is its key's revision plus the offset read at its grant, which a holder may
   * raise meanwhile: `null` here.
   */
  async inspect(key: string, space: KeySpace): Promise<StoreView> {
    const prefix = this.prefixFor(key, space);
    const [claims, offsetKv] = await this.call('inspect', () =>
      Promise.all([
        this.client.getAll().prefix(prefix).sort('Create', 'Ascend').exec(),
        this.client.get(this.offsetKeyFor(key, space)).exec(),
      ]),
    );
    const offset = offsetOf(offsetKv.kvs[0]?.value);
    const found = await Promise.all(
      claims.kvs.map(async (kv) => {
        const { TTL, grantedTTL } = await this.call('inspect', () => this.client.leaseClient.leaseTimeToLive({ ID: kv.lease }));
        const seconds = Number(TTL);
        return {
          owner: kv.key.toString().slice(prefix.length),
          token: BigInt(kv.create_revision) + offset,
          ttlLeftMs: seconds < 0 ? 0 : Math.min(seconds + 1, Number(grantedTTL)) * 1000,
          value: kv.value.toString(),
        };
      }),
    );
    // A lease that ran out between the two reads: its key is gone too.
    const live = found.filter((c) => c.ttlLeftMs > 0);
    if (space === 'mutex') {
      const [holder, ...waiting] = live;
      const claim = ({ owner, ttlLeftMs }: (typeof live)[number], token: bigint | null) => ({ owner, token, ttlLeftMs });
      return { holders: holder ? [claim(holder, holder.token)] : [], waiters: waiting.map((w) => claim(w, null)) };
    }
    // Claims made with another limit than the oldest's withdraw on their next look (claims.ts).
    const limit = live[0] ? Number(live[0].value.slice(2)) : undefined;
    return sharedView(
      live
        .filter((c) => Number(c.value.slice(2)) === limit)
        .map(({ owner, token, ttlLeftMs, value }) => ({
          owner,
          token,
          ttlLeftMs,
          mode: value.startsWith('X') ? ('exclusive' as const) : ('shared' as const),
        })),
      limit,
      false,
    );
  }

  /** The last call's failure to reach etcd: what a call refused by the client's circuit breaker reports. */
  #lastUnavailable: unknown;

  async call<T>(operation: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (error) {
      if (isLeaseGone(error)) throw error;
      const kind = `${(error as Error)?.constructor?.name} ${(error as Error)?.message}`;
      if (/BrokenCircuit/.test(kind)) {
        // The client stopped sending to the host after failures ("the circuit breaker is open"):
        // the reason is the failure that opened it, which an operator needs, not the breaker.
        throw new BackendUnavailableError(this.name, operation, { cause: this.#lastUnavailable ?? error });
      }
      if (/Unavailable|DeadlineExceeded|ConnectFailed|ClientClosed|ECONNREFUSED/.test(kind)) {
        this.#lastUnavailable = error;
        throw new BackendUnavailableError(this.name, operation, { cause: error });
      }
      throw new BackendError(this.name, operation, { cause: error });
    }
  }
}

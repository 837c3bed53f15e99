// The server as the mutex and the shared claims both see it: key names, one script call with its
// error mapping, the eviction check, replica sync, and the one subscriber connection whose release
// messages wake this process's waiters.
import { createHash, randomUUID } from 'node:crypto';
import { BackendError, BackendUnavailableError } from '@deadbolt/core';
import { Once, ReleaseNotifier, stillStands } from '@deadbolt/core/backend';
import { Command, type Cluster, type Redis } from 'ioredis';
import { closeRedis, isCluster, isReplyError, keepConnected, watchLike, withConnectionError } from './connection.js';
import {
  ACQUIRE,
  GUARDED_ACQUIRE,
  INSPECT,
  RAISE_FLOOR,
  RELEASE,
  RENEW,
  SHARED_ACQUIRE,
  SHARED_INSPECT,
  SHARED_RAISE_FLOOR,
  SHARED_RELEASE,
  SHARED_RENEW,
  TOKEN_FLOOR,
} from './scripts.js';

/** The Redis keys of one lock (a `RedisLease`'s `keys`): its holder, its fencing-token counter, its FIFO queue and the queue's deadlines. */
export interface RedisKeys {
  readonly lock: string;
  readonly token: string;
  readonly queue: string;
  readonly deadlines: string;
}

/** A grant carried by a handoff message: the token, and the lease end the release set (server ms). */
export interface HandedGrant {
  readonly token: string;
  readonly deadline: number;
}

/** An attempt that left a waiter queued: its send time (`performance.now()`) and the deadline it set (server ms). */
export interface Placed {
  readonly sentAt: number;
  readonly deadline: number;
}

/** The largest token a Lua number (a double) holds exactly. */
export const MAX_EXACT_TOKEN = 2n ** 53n - 1n;

/** The four keys' kinds in their names (see `#names`): a mutex's, and a shared key's. */
type KeyKinds = readonly [lock: string, token: string, queue: string, deadlines: string];
const MUTEX_KINDS: KeyKinds = ['lock', 'token', 'queue', 'wait'];
const SHARED_KINDS: KeyKinds = ['claims', 'stoken', 'sexp', 'smeta'];
/** How many keys' names `keysFor` and `sharedKeysFor` each keep (the oldest goes first). */
const KEY_NAMES_KEPT = 1024;

/** How many handoff grants `handed` keeps for waiters that have not taken them (the oldest goes first). */
const HANDED_KEPT = 1024;

/** What `RedisStore.#evalsha` makes its commands with: no arguments (they are given after), replies as text (as `evalsha` has them). */
const NO_ARGS: string[] = [];
const AS_TEXT = { replyEncoding: 'utf8' } as const;

const maxOf = (a: bigint, b: bigint) => (a > b ? a : b);
const escapeRegExp = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** Sets `key` in `map`, first dropping the oldest entry when the map already holds `limit`. */
function keepNewest<K, V>(map: Map<K, V>, key: K, value: V, limit: number): void {
  if (map.size >= limit) map.delete(map.keys().next().value!);
  map.set(key, value);
}

export class Script {
  readonly sha: string;
  constructor(readonly source: string) {
    this.sha = createHash('sha1').update(source).digest('hex');
  }
}

export const scripts = {
  acquire: new Script(ACQUIRE),
  guardedAcquire: new Script(GUARDED_ACQUIRE),
  renew: new Script(RENEW),
  release: new Script(RELEASE),
  raiseFloor: new Script(RAISE_FLOOR),
  sharedAcquire: new Script(SHARED_ACQUIRE),
  sharedRenew: new Script(SHARED_RENEW),
  sharedRelease: new Script(SHARED_RELEASE),
  sharedRaiseFloor: new Script(SHARED_RAISE_FLOOR),
  inspect: new Script(INSPECT),
  sharedInspect: new Script(SHARED_INSPECT),
  tokenFloor: new Script(TOKEN_FLOOR),
};

export interface RedisStoreOptions {
  readonly prefix: string;
  readonly connectTimeoutMs: number;
  readonly allowEviction: boolean;
  readonly syncReplicas: number;
  readonly syncTimeoutMs: number;
}

export class RedisStore {
  readonly name = 'redis';
  readonly client: Redis | Cluster;
  readonly prefix: string;
  /** Shared claims' release messages (every process's subscriber receives them). */
  readonly channel: string;
  /** Names this backend's waiters in the queue, so a release messages only their process. */
  readonly id = randomUUID();
  readonly notifier = new ReleaseNotifier();
  readonly syncReplicas: number;
  /**
   * Grants that handoff messages brought, by `<lock key>\n<owner>`, until the waiter takes them
   * (`takeHanded`). A message can come before the answer to the attempt that queued its waiter
   * (they come on two connections), so a mutex's grants are kept whether or not anyone is known to
   * wait for them yet; a shared key's (every process hears those) only while this process waits
   * for that key. A waiter that gave up first leaves one behind, so only the newest `HANDED_KEPT`
   * are kept.
   */
  readonly handed = new Map<string, HandedGrant>();
  /** The subscriber is subscribed (set once its first subscription succeeded). */
  listening = false;
  /**
   * The eviction check (`#checkEviction`), once per backend, again after a failure. A call on a
   * lease waits until a check under way has settled (`settled`): Redlock gives back the part of a
   * node that has not answered yet at once, counting on the give-back following the grant on the
   * connection, so the give-back must not overtake its acquire while that still waits for the
   * check before sending (seen in CI: a release that overtook it left the part behind until its
   * ttl ran out).
   */
  readonly evictionChecked = new Once(() => this.#checkEviction());
  /** The subscriber (`#openSubscriber`): once, again after a failure. */
  readonly subscribed = new Once(() => this.#openSubscriber());
  readonly #options: RedisStoreOptions;
  /** The client's commands may be made without ioredis's command methods (see `#evalsha`). */
  readonly #plainClient: boolean;
  readonly #keyNames = new Map<string, RedisKeys>();
  readonly #sharedKeyNames = new Map<string, RedisKeys>();
  #subscriber: Redis | Cluster | undefined;

  constructor(client: Redis | Cluster, options: RedisStoreOptions) {
    this.client = client;
    this.#options = options;
    this.prefix = options.prefix;
    this.channel = `${options.prefix}released`;
    this.syncReplicas = options.syncReplicas;
    const { keyPrefix, showFriendlyErrorStack, enableAutoPipelining } = client.options;
    this.#plainClient = !keyPrefix && !showFriendlyErrorStack && !enableAutoPipelining;
  }

  /**
   * The grant a handoff message brought `owner`'s waiter of `lockKey` (taken: the next call finds
   * none), when it can be trusted without asking the store: its token and the lease's start;
   * undefined otherwise (the waiter's next attempt then finds the grant, or that there is none). A
   * handed grant ends at the waiter's queue deadline, which the attempt that last left it queued
   * (`placed`) set to the server's time (in whole ms) + the waiter ttl (at least the lease's ttl).
   * That attempt was sent no later than it ran, so a lease counted from 1 ms before its send time
   * ends no later than the store's. The message must carry that attempt's deadline: an attempt of
   * ours that ran after the handoff would have been granted, not queued, unless the handed grant
   * had already ended, and then it set a later deadline; so a match also shows the message is not
   * an old one. With less than half the lease left, the attempt confirms instead (and renews it to
   * a full ttl); with replica sync the grant must be waited for on our own connection, so the
   * attempt confirms it too.
   */
  takeHanded(lockKey: string, owner: string, placed: Placed | undefined, ttlMs: number): { token: bigint; acquiredAt: number } | undefined {
    const grant = this.handed.get(`${lockKey}\n${owner}`);
    if (!grant || !placed) return undefined;
    this.dropHanded(lockKey, owner);
    if (grant.deadline !== placed.deadline || this.syncReplicas > 0) return undefined;
    const acquiredAt = placed.sentAt - 1;
    if (!stillStands({ at: acquiredAt, ttlMs })) return undefined;
    return { token: BigInt(grant.token), acquiredAt };
  }

  /** Forgets a grant `owner`'s waiter of `lockKey` did not take (it was granted by an attempt, or gave up). */
  dropHanded(lockKey: string, owner: string): void {
    this.handed.delete(`${lockKey}\n${owner}`);
  }

  /**
   * Redis key names for a lock. The hash tag is a digest of the key (user keys may contain braces);
   * the key itself follows, so two keys never share names.
   */
  keysFor(key: string): RedisKeys {
    return this.#names(this.#keyNames, key, MUTEX_KINDS);
  }

  /** Redis key names for a shared key (semaphore or read-write lock); see scripts.ts. `lock` names the claims. */
  sharedKeysFor(key: string): RedisKeys {
    return this.#names(this.#sharedKeyNames, key, SHARED_KINDS);
  }

  /**
   * `<prefix>{<22-char digest of the key>}<kind>:<key>` for each of the four kinds. A digest per
   * acquisition is a tenth of this process's share of an uncontended cycle, and a busy key is taken
   * again and again: the names of the keys last used are kept in `kept`.
   */
  #names(kept: Map<string, RedisKeys>, key: string, [lock, token, queue, deadlines]: KeyKinds): RedisKeys {
    let keys = kept.get(key);
    if (!keys) {
      const base = `${this.prefix}{${createHash('sha256').update(key).digest('base64url').slice(0, 22)}}`;
      keys = {
        lock: `${base}${lock}:${key}`,
        token: `${base}${token}:${key}`,
        queue: `${base}${queue}:${key}`,
        deadlines: `${base}${deadlines}:${key}`,
      };
      keepNewest(kept, key, keys, KEY_NAMES_KEPT);
    }
    return keys;
  }

  /**
   * `LockBackend.tokenFloor`: the store-wide floor, kept in `<prefix>token-floor` (no lock's key has
   * that form: they all go on with `{`). @throws BackendError for a floor beyond 2^53 (Redis's Lua
   * numbers are doubles); typed errors.
   */
  async tokenFloor(raise: bigint): Promise<bigint> {
    if (raise > MAX_EXACT_TOKEN) {
      throw new BackendError(this.name, 'token floor', {
        cause: new Error(`a token floor of ${raise} is beyond 2^53, which Redis's Lua numbers cannot hold exactly`),
      });
    }
    return BigInt((await this.eval('token floor', scripts.tokenFloor, [`${this.prefix}token-floor`], [raise.toString()])) as string);
  }

  /**
   * `LockBackend.tokenCeiling`: the largest of every primary's clock (in µs: tokens are never
   * below it), the store's floor, and every token counter under the prefix, mutex and shared (a
   * SCAN of the primaries: a lifted counter can stand above the clock). @throws typed errors
   */
  async tokenCeiling(): Promise<bigint> {
    const counter = new RegExp(`^${escapeRegExp(this.prefix)}\\{[A-Za-z0-9_-]{22}\\}s?token:`);
    let ceiling = await this.tokenFloor(0n);
    try {
      if (isCluster(this.client) && this.client.status !== 'ready') await this.#clusterReady(this.client);
      const primaries = isCluster(this.client) ? this.client.nodes('master') : [this.client];
      for (const node of primaries) {
        const [seconds, micros] = (await node.time()).map(String);
        ceiling = maxOf(ceiling, BigInt(seconds!) * 1_000_000n + BigInt(micros!));
        let cursor = '0';
        do {
          const [next, keys] = await node.scan(cursor, 'MATCH', `${this.prefix.replace(/[*?[\]\\]/g, '\\$&')}{*`, 'COUNT', 1000);
          cursor = next;
          const counters = keys.filter((k) => counter.test(k));
          if (counters.length === 0) continue;
          const pipeline = node.pipeline();
          for (const k of counters) pipeline.get(k);
          for (const [error, value] of (await pipeline.exec()) ?? []) {
            if (error) throw error;
            if (typeof value === 'string' && /^\d+$/.test(value)) ceiling = maxOf(ceiling, BigInt(value));
          }
        } while (cursor !== '0');
      }
    } catch (error) {
      throw this.failure('token ceiling', error);
    }
    return ceiling;
  }

  /** EVALSHA of `script` on a lock's four keys, then `moreKeys` (see `eval`). @throws typed errors */
  run(operation: string, script: Script, keys: RedisKeys, args: string[], moreKeys?: string[]): Promise<unknown> {
    const { lock, token, queue, deadlines } = keys;
    // One argument list, no spread into a call: every lock cycle sends two of these.
    return moreKeys
      ? this.#send(operation, script, 4 + moreKeys.length, [lock, token, queue, deadlines, ...moreKeys, ...args])
      : this.#send(operation, script, 4, [lock, token, queue, deadlines, ...args]);
  }

  /** EVALSHA of `script` on `keys`, loading it with EVAL when the server does not know it (restart, SCRIPT FLUSH). @throws typed errors */
  eval(operation: string, script: Script, keys: string[], args: string[]): Promise<unknown> {
    return this.#send(operation, script, keys.length, [...keys, ...args]);
  }

  /** `eval` with the keys (`numKeys` of them) and the arguments in one list. */
  async #send(operation: string, script: Script, numKeys: number, argv: string[]): Promise<unknown> {
    try {
      if (isCluster(this.client) && this.client.status !== 'ready') await this.#clusterReady(this.client);
      try {
        return await this.#evalsha(script.sha, numKeys, argv);
      } catch (error) {
        if (!isReplyError(error) || !String((error as Error).message).startsWith('NOSCRIPT')) throw error;
        return await this.client.eval(script.source, numKeys, argv);
      }
    } catch (error) {
      throw this.failure(operation, error);
    }
  }

  /**
   * `client.evalsha(sha, numKeys, argv)`, for less: ioredis's `Command` flattens the arguments it
   * is made with (`Array.prototype.flat`, about 2 µs for a script call's ten on Node 20), and a
   * command made with none and given its arguments before it is sent costs a tenth of that; an
   * uncontended lock cycle runs about 47k instructions in this process instead of 76k. A client
   * whose options the command methods apply (a key prefix, friendly error stacks,
   * auto-pipelining) takes ioredis's own way.
   */
  #evalsha(sha: string, numKeys: number, argv: string[]): Promise<unknown> {
    if (!this.#plainClient) return this.client.evalsha(sha, numKeys, argv);
    const command = new Command('evalsha', NO_ARGS, AS_TEXT);
    command.args = [sha, String(numKeys), ...argv];
    return this.client.sendCommand(command) as Promise<unknown>;
  }

  /** The typed error for a failed command: the server's refusal (a reply error), or no answer. */
  failure(operation: string, error: unknown): BackendError | BackendUnavailableError {
    if (isReplyError(error)) return new BackendError(this.name, operation, { cause: error });
    return new BackendUnavailableError(this.name, operation, { cause: withConnectionError(this.client, error) });
  }

  /**
   * Replica sync: resolves once `syncReplicas` replicas have every write this connection made so
   * far (so the one just made). For an acquisition (`giveBack` given) a shortfall gives the lease
   * back and rejects with BackendError; otherwise it rejects with BackendUnavailableError.
   */
  async synced(operation: string, giveBack?: () => Promise<unknown>): Promise<void> {
    const { syncReplicas, syncTimeoutMs } = this.#options;
    let acknowledged: number;
    try {
      acknowledged = (await (this.client as Redis).wait(syncReplicas, syncTimeoutMs)) as number;
    } catch (error) {
      if (giveBack) await giveBack().catch(() => undefined);
      throw new BackendUnavailableError(this.name, operation, { cause: withConnectionError(this.client, error) });
    }
    if (acknowledged >= syncReplicas) return;
    const cause = new Error(`${acknowledged} of ${syncReplicas} replicas acknowledged the write within ${syncTimeoutMs} ms`);
    if (!giveBack) throw new BackendUnavailableError(this.name, operation, { cause });
    await giveBack().catch(() => undefined);
    throw new BackendError(this.name, operation, { cause });
  }

  /** Closes the subscriber connection (the command connection is the backend's to close). */
  close(): void {
    if (this.#subscriber) closeRedis(this.#subscriber);
  }

  /**
   * A Cluster client queues commands until it has found the cluster, and keeps trying for ever:
   * wait for that at most `connectTimeoutMs`, so an unreachable cluster fails the call instead.
   */
  #clusterReady(cluster: Cluster): Promise<void> {
    const { connectTimeoutMs } = this.#options;
    return new Promise((resolve, reject) => {
      const done = (error?: Error) => {
        clearTimeout(timer);
        cluster.off('ready', onReady);
        cluster.off('error', onError);
        if (error) reject(error);
        else resolve();
      };
      const onReady = () => done();
      // The client could reach no node to learn the slots from (ioredis tries again by itself, and
      // keeps failing while none is there): fail now, with its reason, rather than at the timeout.
      const onError = (error: Error & { lastNodeError?: Error }) => {
        const node = error.lastNodeError ? ` (${error.lastNodeError.message})` : '';
        done(new Error(`no Redis Cluster node could be reached: ${error.message}${node}`, { cause: error }));
      };
      const timer = setTimeout(() => done(new Error(`no Redis Cluster node answered within ${connectTimeoutMs} ms`)), connectTimeoutMs);
      cluster.on('ready', onReady);
      cluster.on('error', onError);
      if (cluster.status === 'ready') done();
      // A lazy client (ours are) finds the cluster when asked to; a failure shows as no 'ready' in time.
      else if (cluster.status === 'wait') cluster.connect().catch(() => undefined);
    });
  }

  /**
   * Refuses a server that may evict lock keys, unless the user accepted it. A server that does not
   * let us read its configuration (managed services often rename CONFIG) cannot be checked: that
   * is documented, not refused.
   */
  async #checkEviction(): Promise<void> {
    if (this.#options.allowEviction) return;
    let config: string[];
    try {
      if (isCluster(this.client) && this.client.status !== 'ready') await this.#clusterReady(this.client);
      config = (await this.client.config('GET', 'maxmemory*')) as string[]; // name, value, name, value, ...
    } catch (error) {
      if (isReplyError(error)) return; // CONFIG not allowed: cannot check
      throw this.failure('acquire', error);
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
    const channels = [this.channel, `${this.prefix}w:${this.id}`];
    // A single-node subscriber subscribes again itself after a reconnect: ioredis's own
    // re-subscription leaves its promise unhandled, and a close before its answer (a backend
    // closed just after a reconnect) then surfaces as an unhandled rejection in the user's process.
    const subscriber = isCluster(this.client)
      ? this.client.duplicate()
      : this.client.duplicate({ maxRetriesPerRequest: 1, lazyConnect: false, autoResubscribe: false });
    subscriber.on('error', () => undefined);
    keepConnected(subscriber);
    watchLike(this.client, subscriber);
    // `<lock key>\n<owner>`, and for a FIFO handoff `<lock key>\n<owner> <token> <deadline>`
    // (see hand_over in scripts.ts); a shared key's release names nobody, or the claim a
    // semaphore's permit was handed to in the same form (see SHARED_RELEASE).
    subscriber.on('message', (channel: string, message: string) => {
      const split = message.lastIndexOf('\n');
      const [owner, token, deadline] = message.slice(split + 1).split(' ');
      const key = message.slice(0, split);
      if (token !== undefined && (channel !== this.channel || this.notifier.listens(key))) {
        keepNewest(this.handed, `${key}\n${owner}`, { token, deadline: Number(deadline) }, HANDED_KEPT);
      }
      this.notifier.notify(key, owner || undefined);
    });
    let ready = 0;
    subscriber.on('ready', () => {
      if (ready++ === 0) return;
      if (isCluster(subscriber)) return this.notifier.notifyAll();
      // Once subscribed again; a failure means the connection went again, and its next 'ready' retries.
      subscriber.subscribe(...channels).then(
        () => this.notifier.notifyAll(),
        () => undefined,
      );
    });
    this.#subscriber = subscriber;
    try {
      await subscriber.subscribe(...channels);
      this.listening = true;
    } catch (error) {
      closeRedis(subscriber);
      throw new BackendUnavailableError(this.name, 'subscribe', { cause: error });
    }
  }
}

import { createHash, randomUUID } from 'node:crypto';
import {
  BackendError,
  BackendUnavailableError,
  InvalidArgumentError,
  pollForLease,
  ReleaseNotifier,
  type AcquireRequest,
  type Capabilities,
  type Lease,
  LimitMismatchError,
  type LockBackend,
  type SharedRequest,
} from '@deadbolt/core';
import { Redis, ReplyError } from 'ioredis';
import { ACQUIRE, RAISE_FLOOR, RELEASE, RENEW, SHARED_ACQUIRE, SHARED_RAISE_FLOOR, SHARED_RELEASE, SHARED_RENEW } from './scripts.js';

export interface RedisBackendOptions {
  /** `redis://[user:pass@]host:port[/db]`. The backend creates and closes its own connections. */
  url?: string;
  /** Your own ioredis client; `close()` leaves it open. Used instead of `url`. */
  client?: Redis;
  /** Prefix of every key and of the release channel. Default `deadbolt:`. Must not contain `{` or `}`. */
  prefix?: string;
  /**
   * Grant waiters in arrival order through a per-key queue. Default true. `false` is a little
   * cheaper per acquisition but unfair: under contention a releasing client re-takes the lock
   * before woken waiters arrive, and waiters can starve.
   */
  fifo?: boolean;
  /** Longest pause between a waiter's re-checks when no release message arrives. Default 250 ms. */
  maxPollDelayMs?: number;
  /** Connect timeout for connections created from `url`. Default 2000 ms. */
  connectTimeoutMs?: number;
  /**
   * The longest a command may wait for its reply on connections created from `url`; one that gets
   * none (a silent server or partition) fails with `BackendUnavailableError`. Default 5000 ms.
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

interface RedisKeys {
  readonly lock: string;
  readonly token: string;
  readonly queue: string;
  readonly deadlines: string;
}

/** The token counter (fence stream) lives this long; after that tokens start again from the server clock. */
const COUNTER_TTL_MS = 24 * 60 * 60 * 1000;
/** The largest token a Lua number (a double) holds exactly (shared claims count in Lua numbers). */
const MAX_EXACT_TOKEN = 2n ** 53n - 1n;
/** The largest mutex token floor: what every other store's token column holds (a signed 64-bit integer). */
const MAX_FENCE_TOKEN = 2n ** 63n - 1n;

/** A token as a fence stream id (`<ms>-<seq>`, token = ms × 1000 + seq); '' for none. */
function fenceId(token: bigint | undefined): string {
  return token === undefined || token <= 0n || token > MAX_FENCE_TOKEN ? '' : `${token / 1000n}-${token % 1000n}`;
}

class Script {
  readonly sha: string;
  constructor(readonly source: string) {
    this.sha = createHash('sha1').update(source).digest('hex');
  }
}

const scripts = {
  acquire: new Script(ACQUIRE),
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
  readonly client: Redis;
  readonly #ownsClient: boolean;
  readonly #prefix: string;
  readonly #fifo: boolean;
  readonly #maxPollDelayMs: number;
  /** Shared claims' release messages (every process's subscriber receives them). */
  readonly #channel: string;
  /** Mutex messages go to one backend's channel: this prefix plus the backend's id. */
  readonly #channelPrefix: string;
  /** Names this backend's waiters in the queue, so a release messages only their process. */
  readonly #id = randomUUID();
  readonly #notifier = new ReleaseNotifier();
  readonly #allowEviction: boolean;
  /** The eviction check, once per backend (a failed check is retried). */
  #evictionChecked: Promise<void> | undefined;
  #subscriber: Redis | undefined;
  #subscribed: Promise<void> | undefined;
  #closed = false;

  /** @throws InvalidArgumentError for bad options (before connecting). */
  constructor(options: RedisBackendOptions) {
    const prefix = options.prefix ?? 'deadbolt:';
    if (typeof prefix !== 'string' || /[{}]/.test(prefix)) {
      throw new InvalidArgumentError('prefix must be a string without { or } (they would change the hash slot)');
    }
    const maxPoll = options.maxPollDelayMs ?? 250;
    if (!Number.isFinite(maxPoll) || maxPoll < 1) throw new InvalidArgumentError('maxPollDelayMs must be a number ≥ 1');
    const connectTimeout = options.connectTimeoutMs ?? 2000;
    if (!Number.isFinite(connectTimeout) || connectTimeout < 1) throw new InvalidArgumentError('connectTimeoutMs must be a number ≥ 1');
    const commandTimeout = options.commandTimeoutMs ?? 5000;
    if (!Number.isFinite(commandTimeout) || commandTimeout < 1) throw new InvalidArgumentError('commandTimeoutMs must be a number ≥ 1');
    this.#allowEviction = options.allowEviction ?? false;
    if (options.client) {
      this.client = options.client;
      this.#ownsClient = false;
    } else {
      if (typeof options.url !== 'string' || !/^rediss?:\/\//.test(options.url)) {
        throw new InvalidArgumentError('redisBackend needs a url (redis://host:port) or a client');
      }
      this.client = new Redis(options.url, {
        connectTimeout,
        // A reply that never comes (the connection silently dead) fails the command instead of
        // waiting for the OS to notice; TCP keep-alive probes find a peer that vanished.
        commandTimeout: commandTimeout,
        keepAlive: 10_000,
        // Fail a command after one reconnect attempt instead of queueing it while Redis is down:
        // the caller gets BackendUnavailableError, never an endless wait.
        maxRetriesPerRequest: 1,
        lazyConnect: false,
      });
      // Errors reach callers through the failed commands; this only stops ioredis logging them.
      this.client.on('error', () => undefined);
      this.#ownsClient = true;
    }
    this.#prefix = prefix;
    this.#fifo = options.fifo ?? true;
    this.#maxPollDelayMs = maxPoll;
    this.#channel = `${prefix}released`;
    this.#channelPrefix = `${prefix}w:`;
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
    const tag = createHash('sha256').update(key).digest('base64url').slice(0, 22);
    const base = `${this.#prefix}{${tag}}`;
    return { lock: `${base}lock:${key}`, token: `${base}fence:${key}`, queue: `${base}queue:${key}`, deadlines: `${base}wait:${key}` };
  }

  /** Redis key names for a shared key (semaphore or read-write lock); see scripts.ts. `lock` names the claims. */
  sharedKeysFor(key: string): RedisKeys {
    const tag = createHash('sha256').update(key).digest('base64url').slice(0, 22);
    const base = `${this.#prefix}{${tag}}`;
    return { lock: `${base}claims:${key}`, token: `${base}stoken:${key}`, queue: `${base}sexp:${key}`, deadlines: `${base}smeta:${key}` };
  }

  async acquireShared(req: SharedRequest): Promise<RedisLease | null> {
    await this.#checkEviction();
    const keys = this.sharedKeysFor(req.key);
    if (!req.wait) return this.#attemptShared(req, keys);
    await this.#subscribe();
    const poll = Math.min(this.#maxPollDelayMs, Math.max(1, Math.floor(req.ttlMs / 4)));
    try {
      return await pollForLease(keys.lock, req.signal, () => this.#attemptShared(req, keys), (lease) => this.release(lease), {
        notifier: this.#notifier,
        minDelayMs: Math.min(5, poll),
        maxDelayMs: poll,
      });
    } catch (error) {
      // Leave the queue before reporting the abort or failure: nothing of this waiter stays behind.
      await this.#run('release', scripts.sharedRelease, keys, [req.owner, this.#channel, keys.lock]).catch(() => undefined);
      throw error;
    }
  }

  async acquire(req: AcquireRequest): Promise<RedisLease | null> {
    await this.#checkEviction();
    const keys = this.keysFor(req.key);
    if (!req.wait) return this.#attempt(req, keys, false);
    await this.#subscribe();
    // Only a release message wakes a waiter early; the poll is the safety net for a lost message
    // (and refreshes the waiter's deadline), so it does not start short and grow.
    const poll = Math.min(this.#maxPollDelayMs, Math.max(1, Math.floor(req.ttlMs / 4)));
    let queued = false;
    try {
      return await pollForLease(
        keys.lock,
        req.signal,
        async () => {
          const lease = await this.#attempt(req, keys, queued);
          queued ||= lease === null;
          return lease;
        },
        (lease) => this.release(lease),
        { notifier: this.#notifier, owner: req.owner, minDelayMs: poll, maxDelayMs: poll },
      );
    } catch (error) {
      // Leave the queue before reporting the abort or failure: nothing of this waiter stays behind.
      if (queued) await this.#run('release', scripts.release, keys, this.#mutexArgs(req.owner, keys)).catch(() => undefined);
      throw error;
    }
  }

  async renew(lease: RedisLease, ttlMs: number): Promise<boolean> {
    const { keys } = lease;
    if (lease.shared) return (await this.#run('renew', scripts.sharedRenew, keys, [lease.owner, String(ttlMs)])) === 1;
    return (await this.#run('renew', scripts.renew, keys, this.#mutexArgs(lease.owner, keys, { ttlMs }))) === 1;
  }

  async release(lease: RedisLease): Promise<void> {
    const { keys } = lease;
    if (lease.shared) await this.#run('release', scripts.sharedRelease, keys, [lease.owner, this.#channel, keys.lock]);
    else await this.#run('release', scripts.release, keys, this.#mutexArgs(lease.owner, keys));
  }

  /**
   * See `LockBackend.raiseTokenFloor`. @throws BackendError for a floor beyond 2^63 − 1 (mutex) or
   * 2^53 (shared claims, counted in Lua numbers).
   */
  async raiseTokenFloor(lease: RedisLease, floor: bigint): Promise<boolean> {
    const { keys } = lease;
    const max = lease.shared ? MAX_EXACT_TOKEN : MAX_FENCE_TOKEN;
    if (floor > max) {
      throw new BackendError(this.name, 'raise token floor', { cause: new Error(`a token floor of ${floor} is beyond ${max}, the largest this store's tokens hold`) });
    }
    if (lease.shared) return (await this.#run('raise token floor', scripts.sharedRaiseFloor, keys, [lease.owner, floor.toString(), String(COUNTER_TTL_MS)])) === 1;
    return (await this.#run('raise token floor', scripts.raiseFloor, keys, this.#mutexArgs(lease.owner, keys, { minToken: floor }))) === 1;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#subscriber?.disconnect();
    if (this.#ownsClient) this.client.disconnect();
  }

  async #attempt(req: AcquireRequest, keys: RedisKeys, queued: boolean): Promise<RedisLease | null> {
    const acquiredAt = performance.now();
    const args = this.#mutexArgs(req.owner, keys, { ttlMs: req.ttlMs, wait: req.wait, minToken: req.minToken });
    const token = await this.#run('acquire', scripts.acquire, keys, [...args, queued ? '1' : '0']);
    if (token === null) return null;
    return { key: req.key, owner: req.owner, token: BigInt(token as string), acquiredAt, keys };
  }

  /** The mutex scripts' ARGV (see `mutex` in scripts.ts). */
  #mutexArgs(owner: string, keys: RedisKeys, options: { ttlMs?: number; wait?: boolean; minToken?: bigint } = {}): string[] {
    const ttlMs = options.ttlMs ?? 0;
    // A queued waiter is dropped if it stays silent for a ttl (or 4 poll periods, if longer).
    const waiterTtl = Math.max(ttlMs, 4 * this.#maxPollDelayMs);
    return [
      owner,
      String(ttlMs),
      options.wait ? '1' : '0',
      this.#fifo ? '1' : '0',
      `${owner}|${this.#id}`,
      String(waiterTtl),
      fenceId(options.minToken),
      String(COUNTER_TTL_MS),
      this.#channelPrefix,
      keys.lock,
    ];
  }

  async #attemptShared(req: SharedRequest, keys: RedisKeys): Promise<RedisLease | null> {
    const acquiredAt = performance.now();
    const waiterTtl = Math.max(req.ttlMs, 4 * this.#maxPollDelayMs);
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
    return { key: req.key, owner: req.owner, token: BigInt(reply[1]!), acquiredAt, keys, shared: true };
  }

  /** EVALSHA, loading the script with EVAL when the server does not know it (restart, SCRIPT FLUSH). */
  async #run(operation: string, script: Script, keys: RedisKeys, args: string[]): Promise<unknown> {
    const keyList = [keys.lock, keys.token, keys.queue, keys.deadlines];
    try {
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
   * Refuses a server that may evict lock keys, unless the user accepted it. A server that does not
   * let us read its configuration (managed services often rename CONFIG) cannot be checked: that
   * is documented, not refused.
   */
  #checkEviction(): Promise<void> {
    this.#evictionChecked ??= (async () => {
      if (this.#allowEviction) return;
      let config: string[];
      try {
        config = (await this.client.config('GET', 'maxmemory*')) as string[]; // name, value, name, value, ...
      } catch (error) {
        if (error instanceof ReplyError) return; // CONFIG not allowed: cannot check
        this.#evictionChecked = undefined;
        throw new BackendUnavailableError(this.name, 'acquire', { cause: error });
      }
      const settings: Record<string, string> = {};
      for (let i = 0; i + 1 < config.length; i += 2) settings[config[i]!] = config[i + 1]!;
      const policy = settings['maxmemory-policy'];
      if (settings['maxmemory'] !== '0' && policy !== 'noeviction') {
        const cause = new Error(
          `the server may evict keys (maxmemory ${settings['maxmemory']}, maxmemory-policy ${policy}), and an evicted lock key is a lost lock nobody is told about: set maxmemory-policy noeviction, or pass allowEviction: true to accept it`,
        );
        this.#evictionChecked = undefined;
        throw new BackendError(this.name, 'acquire', { cause });
      }
    })();
    return this.#evictionChecked;
  }

  /**
   * One subscriber connection per backend, opened by the first waiter: this backend's own channel
   * (mutex waiters, each message naming the waiter whose turn it is) and the shared claims' one.
   * After a reconnect every waiter re-checks at once, since messages sent meanwhile are lost.
   */
  #subscribe(): Promise<void> {
    this.#subscribed ??= (async () => {
      const subscriber = this.client.duplicate({ maxRetriesPerRequest: 1, lazyConnect: false });
      subscriber.on('error', () => undefined);
      subscriber.on('message', (_channel: string, message: string) => {
        const split = message.lastIndexOf('\n');
        this.#notifier.notify(message.slice(0, split), message.slice(split + 1) || undefined);
      });
      let ready = 0;
      subscriber.on('ready', () => {
        if (ready++ > 0) this.#notifier.notifyAll();
      });
      this.#subscriber = subscriber;
      try {
        await subscriber.subscribe(this.#channel, this.#channelPrefix + this.#id);
      } catch (error) {
        this.#subscribed = undefined;
        subscriber.disconnect();
        throw new BackendUnavailableError(this.name, 'subscribe', { cause: error });
      }
    })();
    return this.#subscribed;
  }
}

/**
 * A Redis backend. @throws InvalidArgumentError for bad options; store failures surface later as
 * BackendUnavailableError / BackendError from the Locker's calls.
 */
export function redisBackend(options: RedisBackendOptions): RedisBackend {
  return new RedisBackend(options);
}

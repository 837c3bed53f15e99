// A whole backend in one file: a Redis mutex by SET NX PX, with a fencing counter. The README's
// "Writing a backend" walks through it; `pnpm build` compiles it and test/example-backend.test.ts
// runs the whole conformance suite on it against the test-matrix Redis.
import type { Capabilities, LockBackend } from '@deadbolt/core';
import {
  backendFailure,
  pollForLease,
  readOptions,
  rules,
  storeClient,
  StoreBackend,
  type AcquireRequest,
  type Lease,
  type StoreView,
} from '@deadbolt/core/backend';
import { Redis, ReplyError } from 'ioredis';

// Every check and write of a call is one script, so no other client acts between them. The counter
// rises only on a grant: tokens strictly increase. Renew and release act only for the owner.
const ACQUIRE = `if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return redis.call('INCR', KEYS[2]) end return 0`;
const RENEW = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0`;
const RELEASE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`;
// Reads only: the holder, the ms its key has left, and the counter (the holder's token: only a grant moves it).
const INSPECT = `return {redis.call('GET', KEYS[1]) or '', redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) or ''}`;

/** How the options are checked, before any I/O (a bad one is `InvalidArgumentError`); the suite feeds each rule's hostile values. */
export const setNxOptionRules = {
  url: rules.url(['redis']),
  client: rules.instance((v): v is Redis => v instanceof Redis, 'an ioredis client'),
  namespace: rules.text(/^[^{}]*$/, 'a string without { or }'),
  maxPollDelayMs: rules.ms(),
  connectTimeoutMs: rules.ms(),
};

export interface SetNxOptions {
  /** `redis://host:port`: the backend makes its own client, and closes it in `close()`. */
  url?: string;
  /** Or your own ioredis client, left open. */
  client?: Redis;
  /** What keeps this backend's locks apart from another's on the same server: the prefix of its keys (the name every deadbolt backend uses). Default `set-nx:`. */
  namespace?: string;
  /** The longest pause between a waiter's tries (the name every deadbolt backend that polls uses). Default 50 ms. */
  maxPollDelayMs?: number;
  /** For a client made from `url`. Default 2000 ms. */
  connectTimeoutMs?: number;
}

/**
 * A mutex on Redis. Core's `StoreBackend` keeps the skeleton every backend shares: the client (one
 * made from `url` is closed by `close()`, yours is left open), its address for events, and the
 * calls in flight (`close()` lets an aborted wait finish first; a closed backend refuses new
 * acquisitions). @throws InvalidArgumentError for bad options.
 */
export class SetNxBackend extends StoreBackend<Redis> implements LockBackend {
  readonly capabilities: Capabilities = {
    fairness: 'none', // waiters poll: whoever asks first after a release wins
    lease: 'ttl', // the store expires the key: a dead holder frees it after its ttl
    wake: 'poll',
    minTtlMs: 10,
  };
  readonly #maxPollDelayMs: number;
  /** A key's lock and token counter names. */
  readonly #keys: (key: string) => [lock: string, token: string];
  /** Why our client's connection last failed (cleared when it is ready again). */
  readonly #health: { lastError?: Error | undefined };

  constructor(raw: SetNxOptions) {
    const options = readOptions(raw, setNxOptionRules, 'setNxBackend');
    const health: { lastError?: Error | undefined } = {};
    // Your client (left open) or one of ours, made from `url` (closed in `close()`).
    const connection = storeClient(options, 'setNxBackend', 'redis://host:port', (url) => {
      // One try per command: a failed call is the caller's to retry (core does, within its deadlines).
      const client = new Redis(url.href, {
        maxRetriesPerRequest: 1,
        commandTimeout: 2000,
        connectTimeout: options.connectTimeoutMs ?? 2000,
        lazyConnect: true,
      });
      // Why the connection failed, for the error of a command that never reached the server (ioredis
      // names its `maxRetriesPerRequest` option there instead). Listening also stops ioredis logging it.
      client.on('error', (error: Error) => (health.lastError = error));
      client.on('ready', () => (health.lastError = undefined));
      return client;
    });
    super({ name: 'set-nx', connection, commandTimeoutMs: 2000 });
    this.#health = health;
    this.#maxPollDelayMs = options.maxPollDelayMs ?? 50;
    const namespace = options.namespace ?? 'set-nx:';
    this.#keys = (key) => [`${namespace}lock:${key}`, `${namespace}token:${key}`];
  }

  /** `acquire`, which `StoreBackend` tracks (so close() lets a wait finish, and refuses new ones). */
  protected acquireClaim(req: AcquireRequest): Promise<Lease | null> {
    // Core's wait loop tries again until granted, rides out a reset, rejects when `req.signal`
    // aborts (a grant won meanwhile is released, so nothing of the waiter stays behind).
    return req.wait
      ? pollForLease(
          req.key,
          req.signal,
          () => this.#attempt(req),
          (lease) => this.release(lease),
          { maxDelayMs: this.#maxPollDelayMs },
        )
      : this.#attempt(req);
  }

  async #attempt(req: AcquireRequest): Promise<Lease | null> {
    const acquiredAt = performance.now(); // before the send: the store's ttl starts no earlier
    const token = await this.#eval('acquire', ACQUIRE, this.#keys(req.key), [req.owner, String(req.ttlMs)]);
    return token === 0 ? null : { key: req.key, owner: req.owner, token: BigInt(token), acquiredAt };
  }

  async renew(lease: Lease, ttlMs: number): Promise<boolean> {
    return (await this.#eval('renew', RENEW, [this.#keys(lease.key)[0]], [lease.owner, String(ttlMs)])) === 1;
  }

  async release(lease: Lease): Promise<void> {
    await this.#eval('release', RELEASE, [this.#keys(lease.key)[0]], [lease.owner]);
  }

  /** Optional (`Locker.forceRelease`): the release script, run for the owner an operator names. */
  async forceRelease(key: string, owner: string): Promise<boolean> {
    return (await this.#eval('force release', RELEASE, [this.#keys(key)[0]], [owner])) === 1;
  }

  /** Optional (`Locker.inspect`). Waiters poll and leave no trace in the store: `null` waiters. */
  async inspect(key: string): Promise<StoreView> {
    const [owner, left, token] = (await this.#run('inspect', INSPECT, this.#keys(key), [])) as [string, number, string];
    return { holders: owner && left > 0 ? [{ owner, token: token ? BigInt(token) : null, ttlLeftMs: left }] : [], waiters: null };
  }

  /** Closes the client if the backend made it (yours stays open); `StoreBackend.close` calls it once. */
  protected closeStore(): Promise<void> {
    return this.connection.end((client) => client.disconnect());
  }

  /** One script, its reply as a number. */
  async #eval(operation: string, script: string, keys: string[], args: string[]): Promise<number> {
    return Number(await this.#run(operation, script, keys, args));
  }

  /** One script; a reply error is `BackendError`, anything else (no connection, a timeout) `BackendUnavailableError`. */
  async #run(operation: string, script: string, keys: string[], args: string[]): Promise<unknown> {
    try {
      return await this.client.eval(script, keys.length, ...keys, ...args);
    } catch (error) {
      // A command that timed out may have met a connection gone silent for good (a partition, a
      // middlebox that lost its state: nothing is closed). Every retry would meet it too: open a
      // new one. (Only our own client: yours is yours to manage.)
      if (this.connection.url && error instanceof Error && /timed out/i.test(error.message)) this.client.disconnect(true);
      const lastError = this.#health.lastError;
      const cause = (error as Error).name === 'MaxRetriesPerRequestError' && lastError ? lastError : error;
      throw backendFailure(this.name, operation, cause, (e) => !(e instanceof ReplyError));
    }
  }
}

/** The factory the suite's child processes call. @throws InvalidArgumentError for bad options. */
export function setNxBackend(options: SetNxOptions): SetNxBackend {
  return new SetNxBackend(options);
}

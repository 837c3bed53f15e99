// Fenced writes in Redis: each resource is a hash holding the highest token it accepted and the
// last value, and a write is one script that compares and sets, so nothing runs between the check
// and the write. Tokens are compared as decimal text (length first), exactly at any size: a Lua
// number would round above 2^53.
import { StaleTokenError, type FencedValue } from '@deadbolt/core';
import { readOptions, rules, storeClient, StoreFence, type Rules } from '@deadbolt/core/backend';
import type { Cluster, Redis } from 'ioredis';
import { addressOf, closeRedis, openRedis, type YourRedisClient } from './connection.js';
import { redisOptionRules } from './redis-backend.js';
import { RedisStore, Script } from './store.js';

/** Options of `redisFence`: where the fenced resources are kept. Unknown names and bad values are `InvalidArgumentError` before any connection. */
export interface RedisFenceOptions {
  /** `redis://[user:password@]host:port[/db]`: the fence makes (and closes) a client of its own. */
  url?: string;
  /** Your own ioredis or iovalkey client (`Redis` or `Cluster`); `close()` leaves it open. Used instead of `url`. */
  client?: YourRedisClient;
  /** With `url`: the URL's hosts are a Redis Cluster's seed nodes. Default false. */
  cluster?: boolean;
  /** What keeps these fences apart from others on the same server: the prefix of their key names (`<namespace>fence:<resource>`). Default `deadbolt:`. */
  namespace?: string;
  /** Another name for `namespace` (Redis's word for it); give one of the two. */
  prefix?: string;
  /** With `url`: connect timeout. Default 2000 ms. */
  connectTimeoutMs?: number;
  /** With `url`: the longest one command waits for its answer. Default 5000 ms. */
  commandTimeoutMs?: number;
}

/** How each option of `redisFence` is checked. */
export const redisFenceOptionRules = {
  url: rules.url(['redis', 'rediss']),
  client: redisOptionRules.client,
  cluster: rules.flag,
  namespace: redisOptionRules.namespace,
  prefix: redisOptionRules.prefix,
  connectTimeoutMs: rules.ms(),
  commandTimeoutMs: rules.ms(),
} satisfies Rules<RedisFenceOptions>;

/** KEYS[1] the resource's hash; ARGV[1] the token (decimal), ARGV[2] the value. Nil when written, else the token that refuses it. */
const FENCED_WRITE = new Script(`
local held = redis.call('HGET', KEYS[1], 't')
if held and (#held > #ARGV[1] or (#held == #ARGV[1] and held > ARGV[1])) then return held end
redis.call('HSET', KEYS[1], 't', ARGV[1], 'v', ARGV[2])
return false
`);

/**
 * Values in Redis guarded by fencing tokens (see core's `Fence`). What Redis acknowledged can be
 * lost in a failover to a replica that had not received it (replication is asynchronous): a
 * fence that lost its highest token accepts an older one again. Keep fenced resources on a
 * server without failover, or on a store that does not lose acknowledged writes.
 */
export class RedisFence extends StoreFence {
  readonly client: Redis | Cluster;
  readonly #store: RedisStore;
  readonly #prefix: string;

  /** @throws InvalidArgumentError for bad options (before connecting). */
  constructor(raw: RedisFenceOptions) {
    super('redis');
    const options = readOptions(raw, redisFenceOptionRules, 'redisFence');
    const connectTimeout = options.connectTimeoutMs ?? 2000;
    const connection = storeClient(
      options,
      'redisFence',
      'redis://host:port',
      (url) => openRedis(url, { cluster: options.cluster ?? false, connectTimeout, commandTimeout: options.commandTimeoutMs ?? 5000 }),
      addressOf,
    );
    this.client = connection.client;
    this.closes(() => connection.end(closeRedis));
    this.#prefix = `${options.namespace ?? 'deadbolt:'}fence:`;
    this.#store = new RedisStore(this.client, {
      prefix: this.#prefix,
      connectTimeoutMs: connectTimeout,
      allowEviction: true,
      syncReplicas: 0,
      syncTimeoutMs: 1,
    });
  }

  protected async writeValue(resource: string, token: bigint, value: string): Promise<void> {
    const held = await this.#store.eval('fenced write', FENCED_WRITE, [this.#prefix + resource], [token.toString(), value]);
    if (held !== null) throw new StaleTokenError(resource, token, BigInt(held as string));
  }

  protected async readValue(resource: string): Promise<FencedValue | null> {
    let found: (string | null)[];
    try {
      found = await this.client.hmget(this.#prefix + resource, 't', 'v');
    } catch (error) {
      throw this.#store.failure('fenced read', error);
    }
    const [token, value] = found;
    return token == null ? null : { value: value ?? '', token: BigInt(token) };
  }
}

/** A Redis fence. @throws InvalidArgumentError for bad options; store failures surface from its calls. */
export function redisFence(options: RedisFenceOptions): RedisFence {
  return new RedisFence(options);
}

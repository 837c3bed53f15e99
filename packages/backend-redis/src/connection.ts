// The connections deadbolt opens to Redis itself (the backend's, the fence's, the subscriber):
// how each is made, kept connected, and closed.
import { InvalidArgumentError } from '@deadbolt/core';
import type { StoreUrl } from '@deadbolt/core/backend';
import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';

/**
 * A client of yours the backend accepts. Named, so that declarations say `Redis | Cluster` as
 * written: inferred, they print ioredis 6's generic `Redis<"legacy">`, which ioredis 5's types
 * (still in the peer range) do not have.
 */
export type RedisClient = Redis | Cluster;

/**
 * A client for `url` (one server, or a cluster's seed nodes), made as every client deadbolt makes:
 * bounded connects and commands, a silent connection replaced, no command queued while the server
 * is down. Its errors reach callers through their commands. @throws InvalidArgumentError when the
 * URL names several servers without `cluster`.
 */
export function openRedis(
  url: StoreUrl,
  o: {
    cluster: boolean;
    connectTimeout: number;
    commandTimeout: number;
    clusterOptions?: Omit<ClusterOptions, 'redisOptions'> | undefined;
    sentinel?: string | undefined;
    sentinelOptions?: Omit<RedisOptions, 'sentinels' | 'name'> | undefined;
  },
): Redis | Cluster {
  const connection: RedisOptions = {
    connectTimeout: o.connectTimeout,
    // A reply that never comes (the connection silently dead) fails the command instead of
    // waiting for the OS to notice; TCP keep-alive probes find a peer that vanished.
    commandTimeout: o.commandTimeout,
    // ...and a connection that has commands out but answers nothing for as long is replaced:
    // one that went silent for good (a middlebox that lost its state) would otherwise fail
    // every command until keep-alive probes gave up on it, minutes later if ever.
    socketTimeout: o.commandTimeout,
    keepAlive: 10_000,
    // Fail a command after one reconnect attempt instead of queueing it while Redis is down:
    // the caller gets BackendUnavailableError, never an endless wait.
    maxRetriesPerRequest: 1,
    lazyConnect: false,
  };
  let client: Redis | Cluster;
  const nodes = (defaultPort: number) =>
    url.hosts.map(({ host, port }) => ({ host: host.replace(/^\[|\]$/g, ''), port: port ?? defaultPort }));
  const auth = { ...(url.username ? { username: url.username } : {}), ...(url.password ? { password: url.password } : {}) };
  if (o.sentinel !== undefined) {
    if (o.cluster) throw new InvalidArgumentError('sentinel and cluster exclude each other');
    client = new Redis({
      ...connection,
      ...o.sentinelOptions,
      sentinels: nodes(26379),
      name: o.sentinel,
      ...auth,
      // A Sentinel announcing a new primary moves the connection at once, rather than after the old
      // primary (a replica now, or gone) has refused or dropped a command.
      failoverDetector: true,
    });
  } else if (o.cluster) {
    client = new Cluster(nodes(6379), {
      slotsRefreshTimeout: o.connectTimeout,
      ...o.clusterOptions,
      redisOptions: { ...connection, ...auth },
    });
  } else {
    if (url.hosts.length !== 1) throw new InvalidArgumentError('url must name one Redis server (several only with cluster: true)');
    client = new Redis(url.href, connection);
  }
  // Errors reach callers through the failed commands (see `withConnectionError`); listening only
  // stops ioredis logging them.
  client.on('error', (error: Error) => lastError.set(client, error));
  client.on('ready', () => lastError.delete(client));
  keepConnected(client);
  return client;
}

/** Each client of ours' latest connection error, until it is ready again. */
const lastError = new WeakMap<Redis | Cluster, Error>();

/**
 * The error to report for a command of `client`'s that failed: when it never reached a server
 * (ioredis gives up after `maxRetriesPerRequest` reconnects, naming that option, which the user
 * never set), why the connection failed, with ioredis' error as its cause.
 */
export function withConnectionError(client: Redis | Cluster, error: unknown): unknown {
  if (!(error instanceof Error) || error.name !== 'MaxRetriesPerRequestError') return error;
  const why = lastError.get(client);
  return new Error(why ? `not connected: ${why.message}` : 'not connected', { cause: error });
}

/** Clients of ours that we are closing: their end is the last. */
const closing = new WeakSet<Redis | Cluster>();

/**
 * Keeps a client of ours connected through an ioredis flaw: a reconnection cut short by another
 * disconnect while it is still asking the Sentinels for the primary (a failover notice arriving
 * then, or a socket timeout) ends the client for good, and every later command fails with
 * "Connection is closed.". Found staging a Sentinel failover; a client we did not close is
 * connected again, after a pause that doubles (to 2 s) while it keeps ending. A Cluster client
 * reconnects its nodes itself.
 */
export function keepConnected(client: Redis | Cluster): void {
  if (!(client instanceof Redis)) return;
  let ended = 0;
  client.on('ready', () => (ended = 0));
  client.on('end', () => {
    if (closing.has(client)) return;
    const again = () => void (!closing.has(client) && client.status === 'end' && client.connect().catch(() => undefined));
    setTimeout(again, Math.min(2000, 100 * 2 ** ended++)).unref();
  });
}

/** Closes a client of ours for good (see `keepConnected`). */
export function closeRedis(client: Redis | Cluster): void {
  closing.add(client);
  client.disconnect();
}

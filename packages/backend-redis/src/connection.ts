// The connections deadbolt opens to Redis itself (the backend's, the fence's, the subscriber):
// how each is made, kept connected, and closed.
import { InvalidArgumentError } from '@deadbolt/core';
import { answerDeadline, type StoreUrl, type Timer } from '@deadbolt/core/backend';
import { Cluster, Redis, ReplyError, type ClusterOptions, type Command, type RedisOptions } from 'ioredis';

/**
 * A client the backend works with, as it types it inside. Named, so that declarations say `Redis |
 * Cluster` as written: inferred, they print ioredis 6's generic `Redis<"legacy">`, which ioredis 5's
 * types (still in the peer range) do not have.
 */
export type RedisClient = Redis | Cluster;

/**
 * An iovalkey client (`Redis` or `Cluster`, Valkey's fork of ioredis). It has ioredis's API and
 * the internals the backend uses, but other classes, which TypeScript does not take for ioredis's:
 * so it is typed by the members the backend checks, and iovalkey, an optional peer, is never
 * imported.
 */
export interface ValkeyClient {
  /** True for a `Cluster`. */
  readonly isCluster: boolean;
  /** `'end'` once quit or disconnected for good: such a client is refused. */
  readonly status: string;
  /** Makes the subscriber the backend listens for releases on. */
  duplicate(...args: never[]): unknown;
  /** How the backend sends its scripts. */
  sendCommand(...args: never[]): unknown;
}

/** A client of yours the backend accepts: ioredis's `Redis` or `Cluster`, or iovalkey's. */
export type YourRedisClient = RedisClient | ValkeyClient;

/**
 * Whether `v` is a client the backend can use: an ioredis `Redis` or `Cluster`, or iovalkey's,
 * told by its shape (iovalkey is not imported for the check; its classes, like ioredis's, are
 * named EventEmitter at run time): a server's client has the command queue the reply deadlines
 * read, a Cluster's its nodes.
 */
export function isRedisClient(v: unknown): v is RedisClient {
  if (v instanceof Redis || v instanceof Cluster) return true;
  if (typeof v !== 'object' || v === null) return false;
  const c = v as Partial<ValkeyClient> & { nodes?: unknown; options?: unknown };
  return (
    typeof c.isCluster === 'boolean' &&
    typeof c.duplicate === 'function' &&
    typeof c.sendCommand === 'function' &&
    typeof c.options === 'object' &&
    (c.isCluster ? typeof c.nodes === 'function' : 'commandQueue' in c)
  );
}

/**
 * The servers a client of yours was given (`LockBackend.address`): a Cluster's startup nodes, a
 * Sentinel client's Sentinels, or the one server's `host:port` (a Unix socket's path).
 */
export function addressOf(client: RedisClient): string | undefined {
  const hostPort = (n: { host?: string | undefined; port?: number | undefined }) => `${n.host ?? 'localhost'}:${n.port ?? 6379}`;
  if (isCluster(client)) {
    // The nodes it was made with: a field ioredis's types keep private.
    const nodes: unknown = Reflect.get(client, 'startupNodes');
    return Array.isArray(nodes)
      ? nodes.map((n) => (typeof n === 'string' ? n : hostPort(n as { host?: string; port?: number }))).join(',')
      : undefined;
  }
  const { sentinels, path } = client.options;
  if (sentinels?.length) return sentinels.map((s) => hostPort({ host: s.host, port: s.port ?? 26379 })).join(',');
  return path ?? hostPort(client.options);
}

/**
 * Whether `error` is an error reply of the server's: redis-errors' `ReplyError`, which ioredis and
 * iovalkey both throw; told by name too, should two copies of redis-errors be installed.
 */
export function isReplyError(error: unknown): boolean {
  return error instanceof ReplyError || (error instanceof Error && error.name === 'ReplyError');
}

/** Whether `client` is a Cluster client (ioredis's or iovalkey's: each sets `isCluster`). */
export function isCluster(client: RedisClient | ValkeyClient): client is Cluster {
  return client.isCluster;
}

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
    // Every command's deadline and the silent connection's replacement come from `watchReplies`
    // (below), not from ioredis's commandTimeout and socketTimeout; TCP keep-alive probes find a
    // peer that vanished.
    keepAlive: 10_000,
    // Fail a command after one reconnect attempt instead of queueing it while Redis is down:
    // the caller gets BackendUnavailableError, never an endless wait.
    maxRetriesPerRequest: 1,
    // Nothing is opened until the first command: a backend made and never used, or made for a
    // locker that refused its options, must not keep the process alive.
    lazyConnect: true,
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
      lazyConnect: true,
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
  watchReplies(client, o.commandTimeout);
  return client;
}

/** Each client of ours' command timeout (`watchReplies`), which a duplicate of it inherits (`watchLike`). */
const replyTimeouts = new WeakMap<Redis | Cluster, number>();

/** When `command` was first sent (`performance.now()`), or `FAILED` once its deadline failed it. */
const SENT = Symbol('deadbolt sent at');
const FAILED = -1;
type Stamped = Command & { [SENT]?: number };

/**
 * What `watchReplies` reads of an ioredis client beyond its public API: the queues a command waits
 * in until its answer, each in the order the commands were sent (the same from ioredis 5.4 to 6).
 */
interface CommandQueue {
  readonly length: number;
  peekAt(index: number): { readonly command: Stamped } | undefined;
}
interface WatchedClient {
  /** Sent, awaiting their replies on the current connection (Redis answers in order). */
  readonly commandQueue: CommandQueue;
  /** Not sent yet: no connection was ready. */
  readonly offlineQueue?: CommandQueue;
  /** Sent on a connection that closed, to be sent again on the next. */
  readonly prevCommandQueue?: CommandQueue | null;
  readonly stream?: { readonly bytesRead: number; destroy(error: Error): void };
  sendCommand(command: Command, stream?: unknown): unknown;
}

/**
 * The ioredis internals `watchReplies` works on, which its types keep private: checked, so an
 * ioredis that has renamed them fails our client's creation with a plain message rather than
 * every command later. @throws Error when `client` lacks them.
 */
function internalsOf(client: Redis): WatchedClient {
  const internals: object = client;
  if (!('commandQueue' in internals) || !('sendCommand' in internals) || typeof internals.sendCommand !== 'function')
    throw new Error(
      "this ioredis client has no commandQueue/sendCommand, which the reply deadlines use: install an ioredis of @deadbolt/redis's peer range",
    );
  return internals as WatchedClient;
}

/**
 * Deadlines for every command of a client of ours: a command without a reply `timeoutMs` after it
 * was first sent fails ("Command timed out", which the store reports as BackendUnavailableError),
 * and a connection that has had commands waiting for as long without a byte back is destroyed, so
 * that ioredis opens a new one: a connection gone silent for good (a middlebox that lost its
 * state) would otherwise fail every command until keep-alive probes gave up on it, minutes later
 * if ever. ioredis's own `commandTimeout` and `socketTimeout` do the same with two Node timers and
 * a listener per command, which measured a tenth of an uncontended lock cycle's client CPU; here a
 * command gets a time stamp, and one check per connection runs when the oldest deadline is due
 * (about once per `timeoutMs` on a busy connection), judging every waiting command. The verdict
 * waits for the I/O already received (core's `answerDeadline`), so a stalled process does not
 * fail an answer that sits in the socket. A Cluster's node clients are watched as ioredis makes them.
 */
function watchReplies(client: Redis | Cluster, timeoutMs: number): void {
  replyTimeouts.set(client, timeoutMs);
  if (isCluster(client)) {
    client.on('+node', (node: Redis) => watchReplies(node, timeoutMs));
    return;
  }
  const watched = internalsOf(client);
  const send = watched.sendCommand;
  let check: Timer | undefined;
  // The connection's last sign of life while commands waited: its bytes read then, and when (three
  // variables, not an object: they are set on most commands).
  let seenStream: WatchedClient['stream'];
  let seenBytes = 0;
  let seenAt = 0;
  // Unref'd: a closed client's last check must not hold the process open.
  const arm = (ms: number) => (check = answerDeadline(ms, verdict, true));
  const verdict = () => {
    check = undefined;
    const now = performance.now();
    let next = Infinity;
    for (const queue of [watched.offlineQueue, watched.prevCommandQueue, watched.commandQueue]) {
      for (let i = 0; queue && i < queue.length; i++) {
        const command = queue.peekAt(i)!.command;
        const sentAt = command[SENT];
        if (sentAt === undefined || sentAt === FAILED) continue;
        // In send order: the first one not yet due is the next deadline of its queue.
        if (now - sentAt < timeoutMs) {
          next = Math.min(next, sentAt + timeoutMs);
          break;
        }
        command[SENT] = FAILED;
        command.reject(new Error('Command timed out'));
      }
    }
    const { stream } = watched;
    if (watched.commandQueue.length > 0 && stream) {
      const bytes = stream.bytesRead;
      if (seenStream !== stream || seenBytes !== bytes) {
        seenStream = stream;
        seenBytes = bytes;
        seenAt = now;
      } else if (now - seenAt >= timeoutMs) {
        // After what the failed commands' callers send next (a give-back of a grant whose answer
        // never came): a connection whose replies are lost may still carry requests.
        setImmediate(() => stream.destroy(new Error(`Socket timeout: commands waited ${timeoutMs} ms without a byte back`)));
        seenStream = undefined;
      }
      if (seenStream) next = Math.min(next, seenAt + timeoutMs);
    }
    if (next !== Infinity) arm(next - now);
  };
  watched.sendCommand = function (this: WatchedClient, command: Stamped, stream?: unknown) {
    const now = performance.now();
    // A command sent again after a reconnect keeps its first deadline.
    command[SENT] ??= now;
    // Commands begin to wait on an idle connection: its silence counts from now.
    if (this.commandQueue.length === 0 && this.stream) {
      seenStream = this.stream;
      seenBytes = this.stream.bytesRead;
      seenAt = now;
    }
    check ??= arm(timeoutMs);
    return send.call(this, command, stream);
  };
}

/** Gives `copy`, a duplicate of `original`, the same reply deadlines, if `original` is a client of ours. */
export function watchLike(original: Redis | Cluster, copy: Redis | Cluster): void {
  const timeoutMs = replyTimeouts.get(original);
  if (timeoutMs !== undefined) watchReplies(copy, timeoutMs);
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
  if (isCluster(client)) return;
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

// What the bench runs: every deadbolt backend and every peer library, each as a `Subject` with the
// same client shape, and each store's floor (the raw round trips). Long: one entry per
// subject, side by side so that they stay comparable.
import { matrixUrl } from '@deadbolt/conformance/test-matrix';
import { createLocker, memoryBackend, MemoryLockStore, migratingBackend, type Lock, type LockBackend, type Locker } from '@deadbolt/core';
import { sleep } from '@deadbolt/core/backend';
import { fullCapabilities } from '@deadbolt/core/testing';
import { etcdBackend } from '@deadbolt/etcd';
import { mysqlBackend } from '@deadbolt/mysql';
import { postgresBackend } from '@deadbolt/postgres';
import pg from 'pg';
import { redisBackend, redlockBackend } from '@deadbolt/redis';
import { valkeyBackend } from '@deadbolt/redis/testing';
import { zookeeperBackend } from '@deadbolt/zookeeper';
import { cassandraBackend, type CassandraAlgorithm } from '@deadbolt/cassandra';
import cassandra from 'cassandra-driver';
import { createRequire } from 'node:module';
import { Etcd3, EtcdLockFailedError } from 'etcd3';
import { createPool, type ResultSetHeader } from 'mysql2/promise';
import { Redlock } from '@sesamecare-oss/redlock';
import { Redis } from 'ioredis';
import { Mutex, Semaphore } from 'redis-semaphore';
import { instrumentDeadbolt } from '@deadbolt/otel';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider } from '@opentelemetry/sdk-trace-base';

export type Store = 'memory' | 'redis' | 'redlock' | 'mysql' | 'postgres' | 'etcd' | 'zookeeper' | 'cassandra';

/** Where each store listens (test-matrix's URLs unless DEADBOLT_<STORE>_URL says otherwise). */
export const urls = {
  redis: matrixUrl('redis'),
  mysql: matrixUrl('mysql'),
  postgres: matrixUrl('postgres'),
  etcd: matrixUrl('etcd'),
  zookeeper: matrixUrl('zookeeper'),
  cassandra: matrixUrl('cassandra'),
  redlock: matrixUrl('redis-redlock'),
};

/** The three independent Redis nodes Redlock runs on (test-matrix's first three, consecutive ports). */
export const redlockNodes = [0, 1, 2].map((i) => {
  const url = new URL(urls.redlock);
  return `redis://${url.hostname}:${Number(url.port) + i}`;
});

/** A lock as the benchmark holds it: how to give it back, and its fencing token where it has one. */
export interface Held {
  release(): Promise<void>;
  token?: bigint;
}

/** Something that takes and gives back one lock, the way its library's user would write it. */
export interface Client {
  /**
   * Waits until granted. A subject that retries in a loop of its own checks `signal` before each
   * attempt and, once it has aborted, rejects with its reason (an attempt under way may still be
   * granted first); subjects whose waits end by themselves ignore it. A store failure rejects
   * with the library's own error, except in a loop that retries every error, as its user would.
   */
  acquire(key: string, signal?: AbortSignal): Promise<Held>;
  close(): Promise<void>;
  /**
   * Optional: set up process-wide state the client needs only while it is timed (a diagnostics
   * subscriber), returning how to undo it. Scenario 1 calls it around each of the client's blocks,
   * so the subjects interleaved with it run without it.
   */
  scope?(): () => void;
}

/** One contender in a benchmark: how to make a client with its own connection. */
export interface Subject {
  name: string;
  store: Store;
  client(): Promise<Client>;
  /** deadbolt subjects only: a new backend with its own connection (scenario 5 drives a Locker on it). */
  backend?: () => LockBackend;
  /** Scenario 1: the floor this subject's overhead is counted against, where it is not its store's (another client library's). */
  floor?: Floor;
  /**
   * A subject that cannot finish in a bounded time with more than `clients` contenders (a livelock):
   * scenario 3 runs it only up to that many clients and scenario 4 (200 workers) not at all, and the
   * summary says why.
   */
  livelocksAbove?: { clients: number; reason: string };
}

const TTL_MS = 10_000;

/**
 * A user's loop around a library call that gives up when busy: `attempt` until it grants, sleeping
 * `pauseMs` after each failure that `busy` accepts (any other error rejects). Checks `signal`
 * before each attempt and rejects with its reason once it has aborted (see `Client.acquire`).
 */
async function retried(
  attempt: () => Promise<Held>,
  signal: AbortSignal | undefined,
  busy: (error: unknown) => boolean = () => true,
  pauseMs = 0,
): Promise<Held> {
  for (;;) {
    signal?.throwIfAborted();
    try {
      return await attempt();
    } catch (error) {
      if (!busy(error)) throw error;
    }
    if (pauseMs > 0) await sleep(pauseMs);
  }
}

/** Redlock's `acquire` as the benchmark holds it (its own retries, then an error when busy or failing). */
async function redlockHeld(redlock: Redlock, key: string): Promise<Held> {
  const lock = await redlock.acquire([key], TTL_MS);
  return { release: async () => void (await lock.release()) };
}

/** redis-semaphore's `Mutex` with its defaults on `redis`. */
const semaphoreMutex =
  (redis: Redis): Client['acquire'] =>
  async (key) => {
    const mutex = new Mutex(redis, key, { lockTimeout: TTL_MS });
    await mutex.acquire();
    return { release: () => mutex.release() };
  };

/** `@sesamecare-oss/redlock` with its defaults over `nodes`; any error is retried, as a user would. */
const sesameRedlock = (nodes: Redis[]): Client['acquire'] => {
  const redlock = new Redlock(nodes);
  return (key, signal) => retried(() => redlockHeld(redlock, key), signal);
};

function deadbolt(name: string, store: Subject['store'], make: () => LockBackend): Subject {
  return {
    name,
    store,
    backend: make,
    async client() {
      const locker = createLocker(make(), { ttlMs: TTL_MS });
      // A Lock is already what the benchmark holds (release, token): no wrapper to time. The
      // give-up signal is not passed: our waits end by themselves (every store operation is bounded
      // by the locker), and a signal would add its listener to every timed wait.
      return { acquire: (key) => locker.lock(key), close: () => locker.close() };
    },
  };
}

/**
 * Scenarios 7 and 8: deadbolt's semaphores (`limit` permits) and read-write locks (a read with
 * probability `readShare`) on every store whose backend has them (one subject per store: the
 * variants of a backend share one shared-claim protocol), and redis-semaphore's `Semaphore`.
 */
export function sharedSubjects(limit: number, readShare: number): { semaphores: Subject[]; readWrite: Subject[] } {
  const variants = new Set(['deadbolt redis unordered', 'deadbolt cassandra lwt', 'deadbolt cassandra shadow']);
  const ours = subjects().filter((s) => s.backend && !variants.has(s.name));
  const over = (
    base: Subject,
    suffix: string,
    capability: 'semaphore' | 'readWrite',
    take: (locker: Locker, key: string) => Promise<Lock>,
  ): Subject[] => {
    const probe = base.backend!();
    const has = fullCapabilities(probe.capabilities)[capability];
    void probe.close().catch(() => undefined);
    if (!has) return [];
    return [
      {
        name: `${base.name} ${suffix}`,
        store: base.store,
        async client() {
          const locker = createLocker(base.backend!(), { ttlMs: TTL_MS });
          return { acquire: (key) => take(locker, key), close: () => locker.close() };
        },
      },
    ];
  };
  const semaphores = ours.flatMap((s) =>
    over(s, `semaphore (${limit})`, 'semaphore', (locker, key) => locker.semaphore(key, { limit }).acquire()),
  );
  const readWrite = ours.flatMap((s) =>
    over(s, `read-write (${Math.round(readShare * 100)} % reads)`, 'readWrite', (locker, key) =>
      Math.random() < readShare ? locker.readWriteLock(key).read() : locker.readWriteLock(key).write(),
    ),
  );
  semaphores.push({
    name: `redis-semaphore Semaphore (${limit}, defaults)`,
    store: 'redis',
    async client() {
      const redis = new Redis(urls.redis);
      return {
        async acquire(key) {
          const semaphore = new Semaphore(redis, key, limit, { lockTimeout: TTL_MS, acquireTimeout: 60_000 });
          await semaphore.acquire();
          return { release: () => semaphore.release() };
        },
        close: async () => void redis.disconnect(),
      };
    },
  });
  return { semaphores, readWrite };
}

/**
 * Scenario 1's traced rows: a deadbolt subject with `@deadbolt/otel` recording every call (spans
 * from the OpenTelemetry SDK's tracer, metrics into its meter, nothing exported) while it runs,
 * beside the same subject without a subscriber: what tracing costs, and that it costs nothing
 * when off. Memory (where any cost shows against a floor of microseconds) and Redis.
 */
export function tracedSubjects(): Subject[] {
  return subjects()
    .filter((s) => s.name === 'deadbolt memory' || s.name === 'deadbolt redis')
    .map((base) => ({
      name: `${base.name} + @deadbolt/otel`,
      store: base.store,
      async client() {
        const client = await base.client();
        const tracerProvider = new BasicTracerProvider();
        const meterProvider = new MeterProvider();
        return {
          ...client,
          scope() {
            const instrumentation = instrumentDeadbolt({ tracerProvider, meterProvider });
            return () => instrumentation.disable();
          },
        };
      },
    }));
}

/**
 * Scenario 1's client rows: a backend on a client library other than its store's default, each
 * beside a floor on that same library, so that what the client choice costs shows apart from what
 * deadbolt costs: Redis on iovalkey (Valkey's fork of ioredis).
 */
export function clientSubjects(): Subject[] {
  const Valkey = createRequire(import.meta.url)('iovalkey') as typeof Redis;
  return [
    {
      ...deadbolt('deadbolt redis on iovalkey', 'redis', () => valkeyBackend({ url: urls.redis })),
      floor: { name: 'redis floor on iovalkey (SET NX PX + DEL)', client: () => redisFloor(new Valkey(urls.redis)) },
    },
  ];
}

/**
 * Scenario 1's deadline rows: a peer on the connections deadbolt opens for itself (a backend's own
 * ioredis clients: every command fails after the command timeout, and a connection silent that
 * long is replaced; each command arms two timers for it), beside the same peer on plain clients,
 * which wait for ever on a store gone silent. Every deadbolt row pays for these deadlines; the
 * peers' default rows do not.
 */
export function deadlineSubjects(): Subject[] {
  return [
    {
      name: "redis-semaphore Mutex (defaults) on deadbolt's connection",
      store: 'redis',
      async client() {
        const backend = redisBackend({ url: urls.redis });
        return { acquire: semaphoreMutex(backend.client as Redis), close: () => backend.close() };
      },
    },
    {
      name: "@sesamecare-oss/redlock (3 nodes, defaults, retried by caller) on deadbolt's connections",
      store: 'redlock',
      async client() {
        const backend = redlockBackend({ nodes: redlockNodes });
        return { acquire: sesameRedlock(backend.nodes.map((node) => node.client as Redis)), close: () => backend.close() };
      },
    },
  ];
}

export function subjects(): Subject[] {
  const redisUrl = urls.redis;
  const memoryStore = new MemoryLockStore();
  const redisClient = async (make: (redis: Redis) => Client['acquire']): Promise<Client> => {
    const redis = new Redis(redisUrl);
    return { acquire: make(redis), close: async () => void redis.disconnect() };
  };
  return [
    deadbolt('deadbolt memory', 'memory', () => memoryBackend({ store: memoryStore })),
    deadbolt('deadbolt redis', 'redis', () => redisBackend({ url: redisUrl })),
    deadbolt('deadbolt redis unordered', 'redis', () => redisBackend({ url: redisUrl, fifo: false })),
    deadbolt('deadbolt mysql', 'mysql', () => mysqlBackend({ url: urls.mysql, connectionLimit: 1 })), // one connection per client, like every other store
    // Session mode holds a connection per held lock and per waiter: at most one or two per client here.
    deadbolt('deadbolt mysql session', 'mysql', () => mysqlBackend({ url: urls.mysql, mode: 'session' })),
    deadbolt('deadbolt postgres', 'postgres', () => postgresBackend({ url: urls.postgres, connectionLimit: 1 })),
    deadbolt('deadbolt postgres session', 'postgres', () => postgresBackend({ url: urls.postgres, mode: 'session' })),
    deadbolt('deadbolt etcd', 'etcd', () => etcdBackend({ url: urls.etcd })),
    deadbolt('deadbolt zookeeper', 'zookeeper', () => zookeeperBackend({ url: urls.zookeeper })),
    ...(['queue', 'lwt', 'shadow'] as CassandraAlgorithm[]).map((algorithm) =>
      deadbolt(`deadbolt cassandra ${algorithm}`, 'cassandra', () => cassandraBackend({ url: urls.cassandra, algorithm })),
    ),
    // A new node guards itself for maxTtlMs before its first grant: kept short here.
    deadbolt('deadbolt redlock (3 nodes)', 'redlock', () => redlockBackend({ nodes: redlockNodes, maxTtlMs: 15_000 })),
    {
      name: '@sesamecare-oss/redlock (3 nodes, defaults, retried by caller)',
      store: 'redlock',
      livelocksAbove: {
        clients: 8,
        reason:
          "contenders' rounds split the nodes between them, so nobody wins a majority for long: at 200 workers one run measured 9 acquisitions/s and a 265 s max wait, and 32 clients did not finish in 5 minutes",
      },
      async client() {
        const clients = redlockNodes.map((url) => new Redis(url));
        return { acquire: sesameRedlock(clients), close: async () => clients.forEach((c) => c.disconnect()) };
      },
    },
    ...[100, 5].map((retryMs): Subject => ({
      name: `etcd3 Lock (retry every ${retryMs} ms)`,
      store: 'etcd',
      async client() {
        const etcd = new Etcd3({ hosts: urls.etcd.replace(/^etcd:/, 'http:') });
        return {
          // etcd3's Lock only try-locks; a user retries it.
          acquire: (key, signal) =>
            retried(
              async () => {
                const lock = etcd.lock(key).ttl(TTL_MS / 1000);
                await lock.acquire();
                return { release: async () => void (await lock.release()) };
              },
              signal,
              (error) => error instanceof EtcdLockFailedError,
              retryMs,
            ),
          close: async () => etcd.close(),
        };
      },
    })),
    {
      name: 'redis-semaphore Mutex (defaults)',
      store: 'redis',
      client: () => redisClient(semaphoreMutex),
    },
    {
      name: 'redis-semaphore Mutex (retryInterval 1)',
      store: 'redis',
      client: () =>
        redisClient((redis) => async (key) => {
          const mutex = new Mutex(redis, key, { lockTimeout: TTL_MS, retryInterval: 1, acquireTimeout: 60_000 });
          await mutex.acquire();
          return { release: () => mutex.release() };
        }),
    },
    {
      name: 'redlock (defaults, retried by caller)',
      store: 'redis',
      client: () =>
        redisClient((redis) => {
          const redlock = new Redlock([redis]);
          // Default settings give up after 10 retries; a user wraps that in a loop.
          return (key, signal) => retried(() => redlockHeld(redlock, key), signal);
        }),
    },
    {
      name: 'redlock (retryDelay 1)',
      store: 'redis',
      client: () =>
        redisClient((redis) => {
          const redlock = new Redlock([redis], { retryCount: -1, retryDelay: 1, retryJitter: 1 });
          return (key) => redlockHeld(redlock, key);
        }),
    },
  ];
}

/** A floor: a store's minimal acquire and release round trips, by one client library. */
export interface Floor {
  name: string;
  client(): Promise<Client>;
}

/** The floors: each store's minimal acquire and release round trips, by the same client library. */
export const floors: Partial<Record<Store, Floor>> = {
  // In this process the "store" is a Map: a key taken is an entry with the next token, a release
  // deletes it, and each call answers with a settled promise, the least the async API allows.
  memory: {
    name: 'memory floor (Map set + delete, settled promises)',
    async client() {
      const held = new Map<string, bigint>();
      let last = 0n;
      const done = Promise.resolve();
      return {
        acquire(key) {
          if (held.has(key)) return Promise.reject(new Error('floor key was busy'));
          const token = ++last;
          held.set(key, token);
          return Promise.resolve({ release: () => (held.delete(key), done), token });
        },
        close: async () => undefined,
      };
    },
  },
  redis: { name: 'redis floor (SET NX PX + DEL)', client: () => redisFloor(new Redis(urls.redis)) },
  redlock: {
    name: 'redlock floor (SET NX PX + DEL on 3 nodes at once)',
    async client() {
      const nodes = await Promise.all(redlockNodes.map((url) => redisFloor(new Redis(url))));
      return {
        async acquire(key) {
          const held = await Promise.all(nodes.map((node) => node.acquire(key)));
          return { release: async () => void (await Promise.all(held.map((h) => h.release()))) };
        },
        close: async () => void (await Promise.all(nodes.map((node) => node.close()))),
      };
    },
  },
  mysql: {
    name: 'mysql floor (the same two UPDATEs, raw)',
    async client() {
      const pool = createPool({ uri: urls.mysql, connectionLimit: 1 });
      await pool.query(
        'CREATE TABLE IF NOT EXISTS bench_floor (k VARCHAR(64) PRIMARY KEY, owner CHAR(36) NULL, expires_at DATETIME(6) NULL, token BIGINT UNSIGNED NOT NULL)',
      );
      const seen = new Set<string>();
      return {
        async acquire(key) {
          const k = key.slice(-64);
          if (!seen.has(k)) await pool.execute('INSERT IGNORE INTO bench_floor VALUES (?, NULL, NULL, 0)', [k]);
          seen.add(k);
          const [r] = await pool.execute<ResultSetHeader>(
            'UPDATE bench_floor SET token = LAST_INSERT_ID(token + 1), owner = ?, expires_at = NOW(6) + INTERVAL 10 SECOND WHERE k = ? AND (owner IS NULL OR expires_at <= NOW(6))',
            ['o', k],
          );
          if (r.affectedRows !== 1) throw new Error('floor key was busy');
          return {
            release: async () =>
              void (await pool.execute('UPDATE bench_floor SET owner = NULL, expires_at = NULL WHERE k = ? AND owner = ?', [k, 'o'])),
          };
        },
        close: () => pool.end(),
      };
    },
  },
  postgres: {
    name: 'postgres floor (upsert-if-free + UPDATE, prepared, raw)',
    async client() {
      // A pool of one, like the MySQL floor and the backend: the same client library path.
      const client = new pg.Pool({ connectionString: urls.postgres, max: 1 });
      await client.query(
        'CREATE TABLE IF NOT EXISTS bench_floor (k text PRIMARY KEY, owner text, expires_at timestamptz, token bigint NOT NULL)',
      );
      return {
        async acquire(key) {
          // Named, so prepared once per connection, as the backend's statements are.
          const r = await client.query({
            name: 'bench_floor_acquire',
            text: `INSERT INTO bench_floor AS f VALUES ($1, 'o', clock_timestamp() + interval '10 seconds', 1)
             ON CONFLICT (k) DO UPDATE SET owner = 'o', expires_at = EXCLUDED.expires_at, token = f.token + 1
             WHERE f.owner IS NULL OR f.expires_at <= clock_timestamp() RETURNING token`,
            values: [key],
          });
          if (r.rowCount !== 1) throw new Error('floor key was busy');
          return {
            release: async () =>
              void (await client.query({
                name: 'bench_floor_release',
                text: "UPDATE bench_floor SET owner = NULL, expires_at = NULL WHERE k = $1 AND owner = 'o'",
                values: [key],
              })),
          };
        },
        close: () => client.end(),
      };
    },
  },
  cassandra: { name: 'cassandra floor (QUORUM insert with TTL, read back, delete)', client: cassandraFloor },
  zookeeper: { name: 'zookeeper floor (create ephemeral sequential, getChildren, delete)', client: zookeeperFloor },
  etcd: {
    name: 'etcd floor (lease grant, put-if-absent txn, delete, revoke)',
    async client() {
      const etcd = new Etcd3({ hosts: urls.etcd.replace(/^etcd:/, 'http:') });
      return {
        async acquire(key) {
          const lease = etcd.lease(10, { autoKeepAlive: false });
          const id = await lease.grant();
          const r = await etcd.if(key, 'Create', '==', 0).then(etcd.put(key).value('o').lease(id)).commit();
          if (!r.succeeded) throw new Error('floor key was busy');
          return {
            async release() {
              await etcd.delete().key(key).exec();
              await lease.revoke();
            },
          };
        },
        close: async () => etcd.close(),
      };
    },
  },
};

interface ZkClient {
  connect(): void;
  close(): void;
  once(event: 'connected', listener: () => void): void;
  create(path: string, data: Buffer, mode: number, cb: (error: Error | null, path: string) => void): void;
  getChildren(path: string, cb: (error: Error | null, children: string[]) => void): void;
  remove(path: string, version: number, cb: (error: Error | null) => void): void;
}
const zookeeper = createRequire(import.meta.url)('node-zookeeper-client') as {
  createClient(hosts: string, options: object): ZkClient;
  CreateMode: { PERSISTENT: number; EPHEMERAL_SEQUENTIAL: number };
};

/** A Cassandra lock step without tokens or queue: QUORUM write of a TTL cell, read it back, delete. */
async function cassandraFloor(): Promise<Client> {
  const [, hosts, keyspace] = /^cassandra:\/\/([^/]+)\/(\w+)/.exec(urls.cassandra)!;
  const client = new cassandra.Client({ contactPoints: hosts!.split(','), localDataCenter: 'datacenter1' });
  await client.connect();
  await client.execute(`CREATE TABLE IF NOT EXISTS ${keyspace}.bench_floor (lock_id text, owner text, PRIMARY KEY (lock_id, owner))`);
  const options = { prepare: true, consistency: cassandra.types.consistencies.quorum };
  return {
    async acquire(key) {
      await client.execute(`INSERT INTO ${keyspace}.bench_floor (lock_id, owner) VALUES (?, 'o') USING TTL 10`, [key], options);
      const rows = (await client.execute(`SELECT owner FROM ${keyspace}.bench_floor WHERE lock_id = ? LIMIT 2`, [key], options)).rowLength;
      if (rows !== 1) throw new Error('floor key was busy');
      return {
        release: async () =>
          void (await client.execute(`DELETE FROM ${keyspace}.bench_floor WHERE lock_id = ? AND owner = 'o'`, [key], options)),
      };
    },
    close: () => client.shutdown(),
  };
}

/** The fewest round trips a sequential-node lock can make: create, list the queue, delete. */
async function zookeeperFloor(): Promise<Client> {
  const zk = zookeeper.createClient(urls.zookeeper.replace(/^zookeeper:\/\//, ''), { sessionTimeout: TTL_MS });
  await new Promise<void>((resolve) => (zk.once('connected', resolve), zk.connect()));
  const call = <T>(start: (cb: (error: Error | null, result?: T) => void) => void) =>
    new Promise<T>((resolve, reject) => start((error, result) => (error ? reject(error) : resolve(result as T))));
  await call((cb) => zk.create('/bench-floor', Buffer.alloc(0), zookeeper.CreateMode.PERSISTENT, cb)).catch(() => undefined);
  return {
    async acquire() {
      const path = await call<string>((cb) =>
        zk.create('/bench-floor/lock-', Buffer.alloc(0), zookeeper.CreateMode.EPHEMERAL_SEQUENTIAL, cb),
      );
      const children = await call<string[]>((cb) => zk.getChildren('/bench-floor', cb));
      if (children.length !== 1) throw new Error('floor key was busy');
      return { release: () => call((cb) => zk.remove(path, -1, cb)) };
    },
    close: async () => zk.close(),
  };
}

async function redisFloor(redis: Pick<Redis, 'set' | 'del' | 'disconnect'>): Promise<Client> {
  let n = 0;
  return {
    async acquire(key) {
      const owner = `floor-${n++}`;
      const ok = await redis.set(key, owner, 'PX', TTL_MS, 'NX');
      if (ok !== 'OK') throw new Error('floor key was busy');
      return { release: async () => void (await redis.del(key)) };
    },
    close: async () => void redis.disconnect(),
  };
}

/**
 * A migration pair in scenario 6, timed interleaved: each store alone, both held one after the
 * other by two plain lockers (`from` then `to`, released in reverse: what `dual` does, without the
 * migration), and the two in `dual`.
 */
export interface MigrationPair {
  from: Subject;
  to: Subject;
  nested: Subject;
  dual: Subject;
}

/**
 * The pairs whose `dual` cost scenario 6 measures: two memory tables, and the three pairs the
 * conformance suite runs in `dual` (one of them onto a revision-token store).
 */
export function migrationPairs(): MigrationPair[] {
  const make: Record<string, [Store, () => LockBackend]> = {
    'memory A': [
      'memory',
      (
        (store) => () =>
          memoryBackend({ store })
      )(new MemoryLockStore()),
    ],
    'memory B': [
      'memory',
      (
        (store) => () =>
          memoryBackend({ store })
      )(new MemoryLockStore()),
    ],
    redis: ['redis', () => redisBackend({ url: urls.redis })],
    etcd: ['etcd', () => etcdBackend({ url: urls.etcd })],
    mysql: ['mysql', () => mysqlBackend({ url: urls.mysql, connectionLimit: 1 })],
    zookeeper: ['zookeeper', () => zookeeperBackend({ url: urls.zookeeper })],
    'cassandra queue': ['cassandra', () => cassandraBackend({ url: urls.cassandra, algorithm: 'queue' })],
  };
  const pairs: [string, string][] = [
    ['memory A', 'memory B'],
    ['redis', 'etcd'],
    ['mysql', 'zookeeper'],
    ['cassandra queue', 'redis'],
  ];
  return pairs.map(([from, to]) => {
    const [[fromStore, fromMake], [toStore, toMake]] = [make[from]!, make[to]!];
    const [fromSubject, toSubject] = [deadbolt(`deadbolt ${from}`, fromStore, fromMake), deadbolt(`deadbolt ${to}`, toStore, toMake)];
    const nested: Subject = {
      name: `deadbolt ${from} then ${to} (no migration)`,
      store: toStore,
      async client() {
        const [outer, inner] = await Promise.all([fromSubject.client(), toSubject.client()]);
        return {
          async acquire(key) {
            const a = await outer.acquire(key);
            const b = await inner.acquire(key);
            return { release: async () => (await b.release(), await a.release()) };
          },
          close: async () => void (await Promise.all([outer.close(), inner.close()])),
        };
      },
    };
    return {
      from: fromSubject,
      to: toSubject,
      nested,
      dual: deadbolt(`deadbolt ${from} -> ${to} (dual)`, toStore, () =>
        migratingBackend({ from: fromMake(), to: toMake(), phase: 'dual' }),
      ),
    };
  });
}

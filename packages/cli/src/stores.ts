// The store a URL names, as a backend: the scheme picks the package, the query's `name=value`
// pairs are that backend's options (checked by the package's own option rules), the rest of the
// URL is its `url`. Each package is loaded only when its scheme is used.
import { InvalidArgumentError, type Fence, type LockBackend } from '@deadbolt/core';
import { sleep, type Rule } from '@deadbolt/core/backend';
import type { Redis, Cluster } from 'ioredis';

/** A factory of the package and the rules of its options. */
interface Factory<T> {
  create: (options: Record<string, unknown>) => T;
  rules: Readonly<Record<string, Rule<unknown>>>;
}

interface Store {
  /** The backend's factory and option rules, from its package. */
  load(): Promise<Factory<LockBackend>>;
  /** The package's fence (elections publish their leader's value in it); none for Redlock's independent nodes. */
  fence?(): Promise<Factory<Fence>>;
  /** The factory's options for the URL without its query (`base`, in the package's own scheme). */
  options(base: string): Record<string, unknown>;
  /**
   * `deadbolt check`'s namespace, apart from every lock of the user's: `url(url, id)` is the user's
   * URL pointed there (a key prefix, tables, a root node, a keyspace named after `id`: whatever the
   * URL named instead is replaced, never kept beside it); `purge` removes it through `backend`
   * (made from that URL) and says what it removed.
   */
  scratch: {
    url(url: string, id: string): string;
    purge(backend: LockBackend, id: string, url: string): Promise<string>;
  };
}

/** Deletes every key under `prefix` on each primary of `client` (SCAN, then UNLINK in batches); how many. */
async function unlinkUnder(client: Redis | Cluster, prefix: string): Promise<number> {
  const primaries = 'nodes' in client && typeof client.nodes === 'function' ? (client as Cluster).nodes('master') : [client as Redis];
  let removed = 0;
  for (const node of primaries) {
    let cursor = '0';
    do {
      const [next, keys] = await node.scan(cursor, 'MATCH', `${prefix.replace(/[*?[\]\\]/g, '\\$&')}*`, 'COUNT', 1000);
      cursor = next;
      // One key per command: in a cluster, keys of several hash slots may not share one.
      for (const key of keys) removed += await node.unlink(key);
    } while (cursor !== '0');
  }
  return removed;
}

const redisPrefix = (id: string) => `deadbolt-check:${id}:`;
/**
 * The SQL stores' scratch: the lock table `deadbolt_check_<id>`, and on purge every table (and, on
 * PostgreSQL, function) whose name starts so (the backend names the others after the lock table),
 * listed and dropped by `tables`.
 */
function sqlScratch(
  tables: (backend: LockBackend, prefix: string) => Promise<{ tables: string[]; drop: (table: string) => Promise<unknown> }>,
): Store['scratch'] {
  const table = (id: string) => `deadbolt_check_${id}`;
  return {
    url: (url, id) => withOptions(url, { namespace: table(id), table: undefined }),
    async purge(backend, id) {
      const found = await tables(backend, table(id));
      for (const name of found.tables) await found.drop(name);
      return `${found.tables.join(', ') || 'no tables'}`;
    },
  };
}

const redisScratch: Store['scratch'] = {
  url: (url, id) => withOptions(url, { namespace: redisPrefix(id), prefix: undefined }),
  async purge(backend, id) {
    const { RedisBackend } = await import('@deadbolt/redis');
    if (!(backend instanceof RedisBackend)) throw new Error('not a Redis backend');
    return `${await unlinkUnder(backend.client, redisPrefix(id))} keys under ${redisPrefix(id)}`;
  },
};

/**
 * A SQL store's fence options from its URL's: the URL's `namespace` (or `table`) names the lock
 * table, so the fence takes `<that>_fences` beside it (its own table, apart from another
 * namespace's), not the lock table itself.
 */
function fenceTable(options: Record<string, unknown>): Record<string, unknown> {
  const { namespace, table, ...rest } = options;
  const locks = namespace ?? table;
  return locks === undefined ? rest : { ...rest, namespace: `${String(locks)}_fences` };
}

const withUrl = (scheme?: string) => (base: string) => ({ url: scheme ? base.replace(/^[a-z]+:/i, `${scheme}:`) : base });

const redis: Store = {
  load: async () => {
    const { redisBackend, redisOptionRules } = await import('@deadbolt/redis');
    return { create: (o) => redisBackend(o), rules: redisOptionRules };
  },
  fence: async () => {
    const { redisFence, redisFenceOptionRules } = await import('@deadbolt/redis');
    return { create: (o) => redisFence(o), rules: redisFenceOptionRules };
  },
  options: withUrl(),
  scratch: redisScratch,
};
const mysql: Store = {
  load: async () => {
    const { mysqlBackend, mysqlOptionRules } = await import('@deadbolt/mysql');
    return { create: (o) => mysqlBackend(o), rules: mysqlOptionRules };
  },
  fence: async () => {
    const { mysqlFence, mysqlFenceOptionRules } = await import('@deadbolt/mysql');
    return { create: (o) => mysqlFence(fenceTable(o)), rules: mysqlFenceOptionRules };
  },
  options: withUrl('mysql'),
  scratch: sqlScratch(async (backend, prefix) => {
    const { MysqlBackend } = await import('@deadbolt/mysql');
    if (!(backend instanceof MysqlBackend)) throw new Error('not a MySQL backend');
    const [rows] = await backend.client.query(
      'SELECT table_name AS t FROM information_schema.tables WHERE table_schema = DATABASE() AND LEFT(table_name, ?) = ?',
      [prefix.length, prefix],
    );
    return {
      tables: (rows as { t: string }[]).map((r) => `table ${r.t}`),
      drop: (name) => backend.client.query('DROP TABLE IF EXISTS ??', [name.replace(/^table /, '')]),
    };
  }),
};
const postgres: Store = {
  load: async () => {
    const { postgresBackend, postgresOptionRules } = await import('@deadbolt/postgres');
    return { create: (o) => postgresBackend(o), rules: postgresOptionRules };
  },
  fence: async () => {
    const { postgresFence, postgresFenceOptionRules } = await import('@deadbolt/postgres');
    return { create: (o) => postgresFence(fenceTable(o)), rules: postgresFenceOptionRules };
  },
  options: withUrl('postgres'),
  scratch: sqlScratch(async (backend, prefix) => {
    const { PostgresBackend } = await import('@deadbolt/postgres');
    if (!(backend instanceof PostgresBackend)) throw new Error('not a PostgreSQL backend');
    const tables = await backend.client.query<{ t: string }>(
      'SELECT tablename AS t FROM pg_tables WHERE schemaname = current_schema() AND starts_with(tablename, $1)',
      [prefix],
    );
    // Its functions too (the queue's wake-up, the shared claims' attempt), named after the table.
    const functions = await backend.client.query<{ f: string }>(
      'SELECT p.proname AS f FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = current_schema() AND starts_with(p.proname, $1)',
      [prefix],
    );
    return {
      tables: [...tables.rows.map((r) => `table ${r.t}`), ...functions.rows.map((r) => `function ${r.f}`)],
      drop: (name) =>
        backend.client.query(`DROP ${name.startsWith('table ') ? 'TABLE' : 'FUNCTION'} IF EXISTS "${name.replace(/^\w+ /, '')}"`),
    };
  }),
};

/** Every scheme the command line knows. */
export const STORES: Readonly<Record<string, Store>> = {
  redis,
  rediss: redis,
  // Independent Redis nodes (not a cluster): redlock://host1:6379,host2:6379,host3:6379
  redlock: {
    load: async () => {
      const { redlockBackend, redlockOptionRules } = await import('@deadbolt/redis');
      return { create: (o) => redlockBackend(o as never), rules: redlockOptionRules };
    },
    options: (base) => ({ nodes: redlockNodes(base) }),
    scratch: {
      // A namespace new to every node looks like a node that lost its data: it grants nothing for
      // maxTtlMs (default 60 s). The check's leases are short, so its guard is too.
      url: (url, id) => withOptions(redisScratch.url(url, id), { maxTtlMs: '10000' }),
      async purge(_backend, id, url) {
        // The nodes are the backend's own; each is purged through a connection of its own.
        const removed: string[] = [];
        for (const node of redlockNodes(url.split('?')[0]!)) {
          const one = await backendFor(node);
          try {
            removed.push(await redisScratch.purge(one, id, node));
          } finally {
            await one.close();
          }
        }
        return removed.join('; ');
      },
    },
  },
  mysql,
  mariadb: mysql,
  postgres,
  postgresql: postgres,
  zookeeper: {
    load: async () => {
      const { zookeeperBackend, zookeeperOptionRules } = await import('@deadbolt/zookeeper');
      return { create: (o) => zookeeperBackend(o as never), rules: zookeeperOptionRules };
    },
    fence: async () => {
      const { zookeeperFence, zookeeperFenceOptionRules } = await import('@deadbolt/zookeeper');
      return { create: (o) => zookeeperFence(o as never), rules: zookeeperFenceOptionRules };
    },
    options: withUrl(),
    scratch: {
      url: (url, id) => withOptions(url, { namespace: `/deadbolt-check-${id}`, root: undefined }),
      async purge(backend, id) {
        const { ZooKeeperBackend } = await import('@deadbolt/zookeeper');
        const { session } = await import('@deadbolt/zookeeper/testing');
        if (!(backend instanceof ZooKeeperBackend)) throw new Error('not a ZooKeeper backend');
        // A session of 10 s: ZooKeeper's default bounds take it, and the purge needs far less.
        const { client } = await session(backend, 10_000);
        const root = `/deadbolt-check-${id}`;
        const call = <T>(start: (cb: (error: { getCode(): number } | null, value: T) => void) => void) =>
          new Promise<T | undefined>((resolve, reject) =>
            // -101: no such node (never written, or gone already).
            start((error, value) => (error && error.getCode() !== -101 ? reject(error) : resolve(error ? undefined : value))),
          );
        // A node can gain a child between its listing and its removal (-111, not empty): a request
        // of a session still open, a waiter's node, arriving late. Listed and removed again then.
        const remove = async (path: string, again = 20): Promise<number> => {
          const children = await call<string[]>((cb) => client.getChildren(path, undefined, cb));
          if (children === undefined) return 0;
          let removed = 0;
          for (const child of children) removed += await remove(`${path}/${child}`);
          try {
            await call<void>((cb) => client.remove(path, -1, (error) => cb(error, undefined)));
          } catch (error) {
            if ((error as { getCode(): number }).getCode() !== -111 || again === 0) throw error;
            await sleep(50);
            return removed + (await remove(path, again - 1));
          }
          return removed + 1;
        };
        return `${await remove(root)} nodes under ${root}`;
      },
    },
  },
  etcd: {
    load: async () => {
      const { etcdBackend, etcdOptionRules } = await import('@deadbolt/etcd');
      return { create: (o) => etcdBackend(o), rules: etcdOptionRules };
    },
    fence: async () => {
      const { etcdFence, etcdFenceOptionRules } = await import('@deadbolt/etcd');
      return { create: (o) => etcdFence(o), rules: etcdFenceOptionRules };
    },
    options: withUrl(),
    scratch: {
      url: (url, id) => withOptions(url, { namespace: `deadbolt-check/${id}/`, prefix: undefined }),
      async purge(backend, id) {
        const { EtcdBackend } = await import('@deadbolt/etcd');
        if (!(backend instanceof EtcdBackend)) throw new Error('not an etcd backend');
        const { deleted } = await backend.client.delete().prefix(`deadbolt-check/${id}/`).exec();
        return `${deleted} keys under deadbolt-check/${id}/`;
      },
    },
  },
  cassandra: {
    load: async () => {
      const { cassandraBackend, cassandraOptionRules } = await import('@deadbolt/cassandra');
      return { create: (o) => cassandraBackend(o), rules: cassandraOptionRules };
    },
    fence: async () => {
      const { cassandraFence, cassandraFenceOptionRules } = await import('@deadbolt/cassandra');
      return { create: (o) => cassandraFence(o), rules: cassandraFenceOptionRules };
    },
    options: withUrl(),
    scratch: {
      // The keyspace is the URL's path: the check's takes its place (an option beside a path that
      // names another keyspace is refused by the backend, so it cannot silently lose to the path).
      url: (url, id) => withOptions(withPath(url, `deadbolt_check_${id}`), { namespace: undefined, keyspace: undefined }),
      async purge(backend, id) {
        const { CassandraBackend, dropSchema } = await import('@deadbolt/cassandra');
        if (!(backend instanceof CassandraBackend)) throw new Error('not a Cassandra backend');
        await dropSchema(backend.client, `deadbolt_check_${id}`);
        return `keyspace deadbolt_check_${id}`;
      },
    },
  },
};

/** A redlock URL's nodes as redis URLs, each with the URL's credentials and path. @throws InvalidArgumentError when it lists none. */
function redlockNodes(base: string): string[] {
  const m = /^redlock:\/\/(?:([^@/]*)@)?([^/]*)(\/.*)?$/i.exec(base);
  if (!m || !m[2]) throw new InvalidArgumentError('a redlock URL lists its nodes: redlock://host:port,host:port,host:port');
  return m[2].split(',').map((node) => `redis://${m[1] ? `${m[1]}@` : ''}${node}${m[3] ?? ''}`);
}

/** The store entry for `url`'s scheme. @throws InvalidArgumentError for an unknown scheme. */
export function storeOf(url: string): Store {
  const scheme = schemeOf(url);
  const store = scheme === undefined ? undefined : STORES[scheme];
  if (!store) throw new InvalidArgumentError(`the store URL must start with one of ${Object.keys(STORES).join(', ')} (scheme://…)`);
  return store;
}

const schemeOf = (url: string) => /^([a-z][a-z0-9+.-]*):\/\//i.exec(url)?.[1]?.toLowerCase();

/** `url` with `path` (no leading `/`) in place of the path it has, its query kept. */
function withPath(url: string, path: string): string {
  const m = /^([a-z][a-z0-9+.-]*:\/\/[^/?#]*)(\/[^?#]*)?(.*)$/i.exec(url)!;
  return `${m[1]}/${path}${m[3]}`;
}

/**
 * `url` with the query options `set` in place of any it has of the same names (`undefined`: none).
 */
export function withOptions(url: string, set: Readonly<Record<string, string | undefined>>): string {
  const query = url.indexOf('?');
  const params = new URLSearchParams(query < 0 ? '' : url.slice(query + 1));
  for (const [name, value] of Object.entries(set)) {
    if (value === undefined) params.delete(name);
    else params.set(name, value);
  }
  const base = query < 0 ? url : url.slice(0, query);
  return params.size > 0 ? `${base}?${params}` : base;
}

/**
 * The backend for `url`. A query value is given to the option's rule as text, else as a number,
 * else as `true`/`false`, whichever the rule takes. @throws InvalidArgumentError for an unknown
 * scheme, an option the backend does not have or cannot take from a URL, or a value it refuses
 * (before any I/O).
 */
export async function backendFor(url: string): Promise<LockBackend> {
  const store = storeOf(url);
  return made(url, store, await store.load(), false);
}

/**
 * The fence of the store at `url` (where `deadbolt elect` publishes the leader's value): its
 * options from the query, those of the backend's it has (the namespace, timeouts); the backend's
 * own (a mode, an algorithm) are not its. @throws InvalidArgumentError for a store without one
 * (Redlock's independent nodes) or a value it refuses (before any I/O).
 */
export async function fenceFor(url: string): Promise<Fence> {
  const store = storeOf(url);
  if (!store.fence)
    throw new InvalidArgumentError(`the ${schemeOf(url)} store has no fence: elections need one store to publish their leader in`);
  const backend = await store.load();
  const fence = await store.fence();
  // An option of the backend's that the fence does not have is the backend's business.
  const known = (name: string) => Object.hasOwn(fence.rules, name) || !Object.hasOwn(backend.rules, name);
  return made(url, store, fence, known);
}

/** `factory`'s product for `url`: its options from the URL's base and query (`keep`: which query options are its). */
function made<T>(url: string, store: Store, factory: Factory<T>, keep: ((name: string) => boolean) | false): T {
  const scheme = schemeOf(url);
  const query = url.indexOf('?');
  const base = query < 0 ? url : url.slice(0, query);
  const { create, rules } = factory;
  const options: Record<string, unknown> = store.options(base);
  for (const [name, text] of new URLSearchParams(query < 0 ? '' : url.slice(query + 1))) {
    if (keep && !keep(name)) continue;
    const rule = Object.hasOwn(rules, name) ? rules[name] : undefined;
    if (!rule || Object.hasOwn(options, name) || name === 'client')
      throw new InvalidArgumentError(`the ${scheme} store has no option "${name}" that a URL can set`);
    options[name] = fromText(rule, name, text);
  }
  return create(options);
}

/** `text` as the value `rule` takes: the text itself, a number, or a boolean. @throws the rule's InvalidArgumentError for the text. */
function fromText(rule: Rule<unknown>, name: string, text: string): unknown {
  const candidates: unknown[] = [text];
  if (text.trim() !== '' && Number.isFinite(Number(text))) candidates.push(Number(text));
  if (text === 'true' || text === 'false') candidates.push(text === 'true');
  for (const value of candidates.slice(1)) {
    try {
      return rule.check(value, name);
    } catch {
      // not this type: the next one
    }
  }
  return rule.check(text, name);
}

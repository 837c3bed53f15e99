// The store a URL names, as a backend: the scheme picks the package, the query's `name=value`
// pairs are that backend's options (checked by the package's own option rules), the rest of the
// URL is its `url`. Each package is loaded only when its scheme is used.
import { InvalidArgumentError, type LockBackend } from '@deadbolt/core';
import type { Rule } from '@deadbolt/core/backend';

interface Store {
  /** The backend's factory and option rules, from its package. */
  load(): Promise<{ create: (options: Record<string, unknown>) => LockBackend; rules: Readonly<Record<string, Rule<unknown>>> }>;
  /** The factory's options for the URL without its query (`base`, in the package's own scheme). */
  options(base: string): Record<string, unknown>;
}

const withUrl = (scheme?: string) => (base: string) => ({ url: scheme ? base.replace(/^[a-z]+:/i, `${scheme}:`) : base });

const redis: Store = {
  load: async () => {
    const { redisBackend, redisOptionRules } = await import('@deadbolt/redis');
    return { create: (o) => redisBackend(o), rules: redisOptionRules };
  },
  options: withUrl(),
};
const mysql: Store = {
  load: async () => {
    const { mysqlBackend, mysqlOptionRules } = await import('@deadbolt/mysql');
    return { create: (o) => mysqlBackend(o), rules: mysqlOptionRules };
  },
  options: withUrl('mysql'),
};
const postgres: Store = {
  load: async () => {
    const { postgresBackend, postgresOptionRules } = await import('@deadbolt/postgres');
    return { create: (o) => postgresBackend(o), rules: postgresOptionRules };
  },
  options: withUrl('postgres'),
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
    options: (base) => {
      const m = /^redlock:\/\/(?:([^@/]*)@)?([^/]*)(\/.*)?$/i.exec(base);
      if (!m || !m[2]) throw new InvalidArgumentError('a redlock URL lists its nodes: redlock://host:port,host:port,host:port');
      return { nodes: m[2].split(',').map((node) => `redis://${m[1] ? `${m[1]}@` : ''}${node}${m[3] ?? ''}`) };
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
    options: withUrl(),
  },
  etcd: {
    load: async () => {
      const { etcdBackend, etcdOptionRules } = await import('@deadbolt/etcd');
      return { create: (o) => etcdBackend(o), rules: etcdOptionRules };
    },
    options: withUrl(),
  },
  cassandra: {
    load: async () => {
      const { cassandraBackend, cassandraOptionRules } = await import('@deadbolt/cassandra');
      return { create: (o) => cassandraBackend(o), rules: cassandraOptionRules };
    },
    options: withUrl(),
  },
};

/**
 * The backend for `url`. A query value is given to the option's rule as text, else as a number,
 * else as `true`/`false`, whichever the rule takes. @throws InvalidArgumentError for an unknown
 * scheme, an option the backend does not have or cannot take from a URL, or a value it refuses
 * (before any I/O).
 */
export async function backendFor(url: string): Promise<LockBackend> {
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(url)?.[1]?.toLowerCase();
  const store = scheme === undefined ? undefined : STORES[scheme];
  if (!store) throw new InvalidArgumentError(`the store URL must start with one of ${Object.keys(STORES).join(', ')} (scheme://…)`);
  const query = url.indexOf('?');
  const base = query < 0 ? url : url.slice(0, query);
  const { create, rules } = await store.load();
  const options: Record<string, unknown> = store.options(base);
  for (const [name, text] of new URLSearchParams(query < 0 ? '' : url.slice(query + 1))) {
    const rule = Object.hasOwn(rules, name) ? rules[name] : undefined;
    if (!rule || name in options || name === 'client')
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

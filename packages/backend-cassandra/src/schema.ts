import type { Client } from 'cassandra-driver';

/** The partition key of `key` in every lock table: its UTF-8 bytes. */
export function idFor(key: string): Buffer {
  return Buffer.from(key, 'utf8');
}

/** The tables that hold claims (holders and waiters of every algorithm); `lock_token` and `global_time` are metadata. */
export const CLAIM_TABLES = ['lock_waiters', 'lock_holders', 'shadow_holders', 'shadow_claims', 'lock_lwt'] as const;

/**
 * The tables, in CQL. Every lock table is keyed by the lock's UTF-8 bytes (`blob`), so any key of
 * up to 1024 bytes is its own partition and no two keys collide.
 *
 * Within a partition, the queue and shadow tables key their rows by `slot`, not by the owner or
 * the arrival time: a slot is `<backend instance id>/<n>`, n the smallest index that backend is
 * not using on the key at the moment. Concurrent writers still write distinct rows (the "ours if
 * alone" checks need that), but a backend reuses its rows from one acquisition to the next, so a
 * partition holds at most (clients × their concurrency) rows, live or deleted, however often the
 * key is taken. Keyed by owner or arrival time, every acquisition left a tombstone behind that
 * every later read of the key scanned: a hot key slowed down with use and would reach the
 * tombstone failure threshold.
 */
export function schemaStatements(keyspace: string, replication: string): string[] {
  const t = (name: string, columns: string, options = ' WITH gc_grace_seconds = 10800') =>
    `CREATE TABLE IF NOT EXISTS ${keyspace}.${name} (${columns})${options}`;
  return [
    `CREATE KEYSPACE IF NOT EXISTS ${keyspace} WITH replication = ${replication}`,
    // queue algorithm: the queue partition (arrival order in `entry`) and the main (holder) partition
    t('lock_waiters', 'lock_id blob, slot text, entry text, owner text, PRIMARY KEY (lock_id, slot)'),
    t('lock_holders', 'lock_id blob, slot text, owner text, PRIMARY KEY (lock_id, slot)'),
    // shadow algorithm: its own main partition and the shadow partition
    t('shadow_holders', 'lock_id blob, slot text, owner text, PRIMARY KEY (lock_id, slot)'),
    t('shadow_claims', 'lock_id blob, slot text, owner text, PRIMARY KEY (lock_id, slot)'),
    // lightweight-transaction algorithm: one row per lock
    t('lock_lwt', 'lock_id blob PRIMARY KEY, owner text'),
    // semaphores and read-write locks: one row per claim, in arrival order (`seq`, also its token); the key's
    // counter and the limit its live claims use are static cells, which never expire
    t(
      'shared_claims',
      'lock_id blob, seq bigint, owner text, exclusive boolean, claim_counter bigint static, claim_limit int static, PRIMARY KEY (lock_id, seq)',
    ),
    // fencing tokens (never expire) and the time service's GlobalTime cell
    t('lock_token', 'lock_id blob PRIMARY KEY, fencing_token bigint', ''),
    t('global_time', 'id text PRIMARY KEY, micros bigint', ''),
    // fenced writes (fence.ts): per resource the highest token accepted and the last value
    t('fences', 'resource blob PRIMARY KEY, fence_token varint, value text', ''),
  ];
}

/**
 * How long one schema change may take: a new table is agreed on by every node before the reply,
 * which on a loaded host took far longer than a row's read (the client's command timeout). A
 * caller's own deadline still bounds its call; the change goes on, and the next call joins it.
 */
const SCHEMA_TIMEOUT_MS = 60_000;

/**
 * Per scope, per keyspace: the one check in flight or done. A user's client is held weakly (its
 * entry goes with it); contact points are strings, one per cluster the process talks to.
 */
const createdByClient = new WeakMap<object, Map<string, Promise<void>>>();
const createdByCluster = new Map<string, Map<string, Promise<void>>>();

/**
 * Creates the keyspace and tables that are missing, once per process, scope and keyspace. Schema
 * changes are made one at a time and only when something is missing, so many lockers starting
 * together do not race each other's DDL. @throws the driver's error.
 */
export function ensureSchema(client: Client, scope: object | string, keyspace: string, replication: string): Promise<void> {
  let cache = typeof scope === 'string' ? createdByCluster.get(scope) : createdByClient.get(scope);
  if (!cache) {
    cache = new Map();
    if (typeof scope === 'string') createdByCluster.set(scope, cache);
    else createdByClient.set(scope, cache);
  }
  let done = cache.get(keyspace);
  if (!done) {
    done = (async () => {
      const existing = await client.execute('SELECT table_name FROM system_schema.tables WHERE keyspace_name = ?', [keyspace], {
        prepare: true,
      });
      const have = new Set(existing.rows.map((r) => r['table_name'] as string));
      for (const statement of schemaStatements(keyspace, replication)) {
        const table = /TABLE IF NOT EXISTS \w+\.(\w+)/.exec(statement)?.[1];
        if (table && have.has(table)) continue;
        if (!table && existing.rowLength > 0) continue;
        await client.execute(statement, [], { readTimeout: SCHEMA_TIMEOUT_MS });
      }
    })();
    cache.set(keyspace, done);
    done.catch(() => cache.delete(keyspace));
  }
  return done;
}

/**
 * Drops `keyspace` and every lock, claim and fence in it, with the schema change's deadline (a
 * drop, like a create, waits for every node to agree; on a loaded host that took longer than a
 * read's 8 s), and forgets that this process made it, so a later use makes it again.
 * For scratch keyspaces (`deadbolt check`, tests); never while a locker uses it.
 * @throws the driver's error.
 */
export async function dropSchema(client: Client, keyspace: string): Promise<void> {
  await client.execute(`DROP KEYSPACE IF EXISTS ${keyspace}`, [], { readTimeout: SCHEMA_TIMEOUT_MS });
  createdByClient.get(client)?.delete(keyspace);
  for (const cache of createdByCluster.values()) cache.delete(keyspace);
}

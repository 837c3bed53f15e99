import type { Client } from 'cassandra-driver';

/**
 * The tables, in CQL. Every lock table is keyed by the lock's UTF-8 bytes (`blob`), so any key of
 * up to 1024 bytes is its own partition and no two keys collide.
 *
 * Queue and shadow partitions collect a tombstone per acquisition; `gc_grace_seconds` is set to
 * three hours (the default hint window) so a hot key's tombstones are purged by compaction within
 * hours rather than the default ten days. Lower it only with regular repairs in place.
 */
export function schemaStatements(keyspace: string, replication: string): string[] {
  const t = (name: string, columns: string, options = ' WITH gc_grace_seconds = 10800') =>
    `CREATE TABLE IF NOT EXISTS ${keyspace}.${name} (${columns})${options}`;
  return [
    `CREATE KEYSPACE IF NOT EXISTS ${keyspace} WITH replication = ${replication}`,
    // queue algorithm: arrival-ordered queue partition and the main (owner) partition
    t('lock_queue', 'lock_id blob, entry text, owner text, PRIMARY KEY (lock_id, entry)'),
    t('lock_main', 'lock_id blob, owner text, PRIMARY KEY (lock_id, owner)'),
    // shadow algorithm: its own main partition and the shadow partition
    t('shadow_main', 'lock_id blob, owner text, PRIMARY KEY (lock_id, owner)'),
    t('shadow_row', 'lock_id blob, owner text, PRIMARY KEY (lock_id, owner)'),
    // lightweight-transaction algorithm: one row per lock
    t('lock_lwt', 'lock_id blob PRIMARY KEY, owner text'),
    // fencing tokens (never expire) and the time service's GlobalTime cell
    t('lock_token', 'lock_id blob PRIMARY KEY, fencing_token bigint', ''),
    t('global_time', 'id text PRIMARY KEY, micros bigint', ''),
  ];
}

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
      const existing = await client.execute('SELECT table_name FROM system_schema.tables WHERE keyspace_name = ?', [keyspace], { prepare: true });
      const have = new Set(existing.rows.map((r) => r['table_name'] as string));
      for (const statement of schemaStatements(keyspace, replication)) {
        const table = /TABLE IF NOT EXISTS \w+\.(\w+)/.exec(statement)?.[1];
        if (table && have.has(table)) continue;
        if (!table && existing.rowLength > 0) continue;
        await client.execute(statement);
      }
    })();
    cache.set(keyspace, done);
    done.catch(() => cache.delete(keyspace));
  }
  return done;
}

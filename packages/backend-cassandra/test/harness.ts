import { cassandraBackend, type CassandraBackend } from '@deadbolt/cassandra';
import type { ConformanceHarness } from '@deadbolt/conformance';
import { restartMatrixServer } from '@deadbolt/conformance';

const TABLES = ['lock_waiters', 'lock_holders', 'shadow_holders', 'shadow_claims', 'lock_lwt'];

/** Reads and breaks the lock cells directly (every algorithm's tables). */
export function cassandraHarness(url: string): ConformanceHarness & { admin: CassandraBackend } {
  const admin = cassandraBackend({ url });
  const ready = async () => {
    // The first acquisition creates the schema; a tryLock on a private key does that for the harness.
    await admin.acquire({ key: 'harness', owner: 'harness', ttlMs: 2000, wait: false, signal: new AbortController().signal }).then((l) => l && admin.release(l));
    return admin.client;
  };
  return {
    admin,
    async inspect(key) {
      const client = await ready();
      const owners = new Set<string>();
      for (const table of TABLES) {
        const result = await client.execute(`SELECT owner FROM ${admin.keyspace}.${table} WHERE lock_id = ?`, [admin.idFor(key)], { prepare: true });
        for (const row of result.rows) if (row['owner'] !== null) owners.add(row['owner'] as string);
      }
      return [...owners];
    },
    async loseClaim(key) {
      const client = await ready();
      for (const table of TABLES) await client.execute(`DELETE FROM ${admin.keyspace}.${table} WHERE lock_id = ?`, [admin.idFor(key)], { prepare: true });
    },
    async dropConnection(backend) {
      // Cassandra has no server-side "kill client": cut the driver's sockets, as a network fault would.
      for (const host of (backend as CassandraBackend).client.hosts.values()) {
        const pool = (host as unknown as { pool: { connections: { netClient?: { destroy(): void } }[] } }).pool;
        for (const connection of pool.connections) connection.netClient?.destroy();
      }
    },
    restartServer: () => restartMatrixServer('cassandra'),
    async scanCost(key) {
      // Cassandra's own account of a read, from its query trace: "Read N live rows and M tombstone cells".
      const client = await ready();
      let scanned = 0;
      for (const table of TABLES) {
        const result = await client.execute(`SELECT * FROM ${admin.keyspace}.${table} WHERE lock_id = ?`, [admin.idFor(key)], { prepare: true, traceQuery: true });
        const trace = await client.metadata.getTrace(result.info.traceId);
        for (const event of trace.events as { activity: string }[]) {
          const read = /Read (\d+) live rows? and (\d+) tombstone/.exec(event.activity);
          if (read) scanned += Number(read[1]) + Number(read[2]);
        }
      }
      return scanned;
    },
    async clearAll() {
      const client = await ready();
      for (const table of TABLES) await client.execute(`TRUNCATE ${admin.keyspace}.${table}`);
    },
  };
}

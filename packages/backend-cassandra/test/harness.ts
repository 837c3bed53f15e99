import { cassandraBackend, cassandraOptionRules, type CassandraAlgorithm, type CassandraBackend } from '@deadbolt/cassandra';
import { CLAIM_TABLES as TABLES, claimsOf, idFor } from '@deadbolt/cassandra/testing';
import type { ConformanceHarness, ConformanceOptions } from '@deadbolt/conformance';
import { matrixUrl, matrixRestartHook, storeAddress, viaUrl, withCredentials } from '@deadbolt/conformance';

/** Reads and breaks the lock cells directly (every algorithm's tables). */
export function cassandraHarness(url: string): ConformanceHarness & { admin: CassandraBackend } {
  const admin = cassandraBackend({ url });
  const claims = claimsOf(admin);
  /** The client, once the server answers (the first read also creates the schema). */
  const ready = async () => (await claims.inspect('harness'), admin.client);
  return {
    admin,
    ...claims,
    async dropConnection(backend) {
      // Cassandra has no server-side "kill client": cut the driver's sockets, as a network fault would.
      for (const host of (backend as CassandraBackend).client.hosts.values()) {
        const pool = (host as unknown as { pool: { connections: { netClient?: { destroy(): void } }[] } }).pool;
        for (const connection of pool.connections) connection.netClient?.destroy();
      }
    },
    ...matrixRestartHook('cassandra', ready),
    async scanCost(key) {
      // Cassandra's own account of a read, from its query trace: "Read N live rows and M tombstone cells".
      const client = await ready();
      let scanned = 0;
      for (const table of TABLES) {
        const result = await client.execute(`SELECT * FROM ${admin.keyspace}.${table} WHERE lock_id = ?`, [idFor(key)], {
          prepare: true,
          traceQuery: true,
        });
        const trace = await client.metadata.getTrace(result.info.traceId);
        for (const event of trace.events as { activity: string }[]) {
          const read = /Read (\d+) live rows? and (\d+) tombstone/.exec(event.activity);
          if (read) scanned += Number(read[1]) + Number(read[2]);
        }
      }
      return scanned;
    },
  };
}

/** The shared suite's options for the test-matrix Cassandra (also one side of the migration suites). */
export function cassandraSuiteOptions(algorithm: CassandraAlgorithm = 'queue'): ConformanceOptions {
  const url = matrixUrl('cassandra');
  // The shadow algorithm's thesis waits (up to 1 s) scaled down, so its suite runs in minutes.
  const options = { url, algorithm, ...(algorithm === 'shadow' ? { shadowBackoff: { ownerWaitMs: 100, concurrentStepMs: 10 } } : {}) };
  const child = (more: object = {}) => ({
    module: import.meta.resolve('@deadbolt/cassandra'),
    export: 'cassandraBackend',
    options: { ...options, ...more },
  });
  return {
    name: `cassandra ${algorithm}`,
    createBackend: () => cassandraBackend(options),
    createUnreachableBackend: () => cassandraBackend({ ...options, url: 'cassandra://127.0.0.1:1/deadbolt' }),
    network: {
      store: storeAddress(url),
      createBackend: (via, _all, extra) => cassandraBackend({ ...options, url: viaUrl(url, via), ...extra }),
    },
    factory: {
      create: (more) => cassandraBackend(more as never),
      rules: cassandraOptionRules,
      valid: (address) => ({ ...options, url: viaUrl(url, address) }),
    },
    createBackendInOtherNamespace: () => cassandraBackend({ ...options, url: url.replace(/\/deadbolt$/, '/deadbolt_other') }),
    createBackendWithCredentials: (user, password, address) =>
      cassandraBackend({ ...options, url: withCredentials(url, user, password, address) }),
    slowPollChild: (ms) => child({ poll: { maxDelayMs: ms } }),
    child: child(),
    fence: { module: import.meta.resolve('@deadbolt/cassandra'), export: 'cassandraFence', options: { url } },
    harness: cassandraHarness(url),
    // Whole seconds, polled over QUORUM reads on a two-core machine: 3 s keeps the tests about leases.
    ttlMs: 3000,
  };
}

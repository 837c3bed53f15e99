import { cassandraBackend, type CassandraAlgorithm } from '@deadbolt/cassandra';
import { defineConformanceSuite, matrixUrl, storeAddress, viaUrl } from '@deadbolt/conformance';
import { cassandraHarness } from './harness.js';

const url = matrixUrl('cassandra');
const algorithms: CassandraAlgorithm[] = (process.env.DEADBOLT_CASSANDRA_ALGORITHMS?.split(',') as CassandraAlgorithm[]) ?? ['queue', 'lwt', 'shadow'];

for (const algorithm of algorithms) {
  // The shadow algorithm's thesis waits (up to 1 s) scaled down, so its suite runs in minutes.
  const options = { url, algorithm, ...(algorithm === 'shadow' ? { shadowBackoff: { ownerWaitMs: 100, concurrentStepMs: 10 } } : {}) };
  defineConformanceSuite({
    name: `cassandra ${algorithm}`,
    createBackend: () => cassandraBackend(options),
    createUnreachableBackend: () => cassandraBackend({ ...options, url: 'cassandra://127.0.0.1:1/deadbolt' }),
    network: { store: storeAddress(url), createBackend: (via) => cassandraBackend({ ...options, url: viaUrl(url, via) }) },
    child: { module: import.meta.resolve('@deadbolt/cassandra'), export: 'cassandraBackend', options },
    harness: cassandraHarness(url),
    // Whole seconds, polled over QUORUM reads on a two-core machine: 3 s keeps the tests about leases.
    ttlMs: 3000,
  });
}

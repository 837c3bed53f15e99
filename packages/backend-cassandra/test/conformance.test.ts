import type { CassandraAlgorithm } from '@deadbolt/cassandra';
import { defineConformanceSuite } from '@deadbolt/conformance';
import { cassandraSuiteOptions } from './harness.js';

const algorithms: CassandraAlgorithm[] = (process.env.DEADBOLT_CASSANDRA_ALGORITHMS?.split(',') as CassandraAlgorithm[]) ?? ['queue', 'lwt', 'shadow'];

for (const algorithm of algorithms) defineConformanceSuite(cassandraSuiteOptions(algorithm));

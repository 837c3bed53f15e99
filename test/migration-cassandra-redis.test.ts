import { defineConformanceSuite, migrationSuiteOptions } from '@deadbolt/conformance';
import { cassandraSuiteOptions } from '../packages/backend-cassandra/test/harness.js';
import { redisSuiteOptions } from '../packages/backend-redis/test/harness.js';

// The whole shared suite against migratingBackend in its dual phase: cassandra -> redis.
defineConformanceSuite(migrationSuiteOptions(cassandraSuiteOptions(), redisSuiteOptions()));

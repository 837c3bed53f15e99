import { defineConformanceSuite, migrationSuiteOptions } from '@deadbolt/conformance';
import { redisSuiteOptions } from '../packages/backend-redis/test/harness.js';
import { etcdSuiteOptions } from '../packages/backend-etcd/test/harness.js';

// The whole shared suite against migratingBackend in its dual phase: redis -> etcd.
defineConformanceSuite(migrationSuiteOptions(redisSuiteOptions(), etcdSuiteOptions()));

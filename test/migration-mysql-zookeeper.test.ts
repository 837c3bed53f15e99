import { defineConformanceSuite, migrationSuiteOptions } from '@deadbolt/conformance';
import { mysqlSuiteOptions } from '../packages/backend-mysql/test/harness.js';
import { zookeeperSuiteOptions } from '../packages/backend-zookeeper/test/harness.js';

// The whole shared suite against migratingBackend in its dual phase: mysql -> zookeeper.
defineConformanceSuite(migrationSuiteOptions(mysqlSuiteOptions(), zookeeperSuiteOptions()));

import { defineConformanceSuite, migrationSuiteOptions } from '@deadbolt/conformance';
import { mysqlSuiteOptions } from '../packages/backend-mysql/test/harness.js';
import { postgresSuiteOptions } from '../packages/backend-postgres/test/harness.js';

// The whole shared suite against migratingBackend in its dual phase: mysql -> postgres.
defineConformanceSuite(migrationSuiteOptions(mysqlSuiteOptions(), postgresSuiteOptions()));

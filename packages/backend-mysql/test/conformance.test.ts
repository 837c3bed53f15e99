import { defineConformanceSuite } from '@deadbolt/conformance';
import { mysqlSuiteOptions } from './harness.js';

for (const mode of ['lease', 'session'] as const) defineConformanceSuite(mysqlSuiteOptions(mode));

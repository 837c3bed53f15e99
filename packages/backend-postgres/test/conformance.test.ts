import { defineConformanceSuite } from '@deadbolt/conformance';
import { postgresSuiteOptions } from './harness.js';

for (const mode of ['lease', 'session'] as const) defineConformanceSuite(postgresSuiteOptions(mode));

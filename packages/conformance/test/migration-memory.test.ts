import { defineConformanceSuite, migrationSuiteOptions } from '@deadbolt/conformance';
import { memorySuiteOptions } from './memory-harness.js';

// Two memory lock tables as the two stores of a migration, in its dual phase.
defineConformanceSuite(migrationSuiteOptions(memorySuiteOptions('memory A'), memorySuiteOptions('memory B')));

import { defineConformanceSuite } from '@deadbolt/conformance';
import { cassandraSuiteOptions } from './harness.js';

// The queue algorithm (the default); the other two have a file each, so the test command can run
// the three side by side (see scripts/run-tests.mjs).
defineConformanceSuite(cassandraSuiteOptions('queue'));

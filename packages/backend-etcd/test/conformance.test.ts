import { defineConformanceSuite } from '@deadbolt/conformance';
import { etcdSuiteOptions } from './harness.js';

defineConformanceSuite(etcdSuiteOptions());

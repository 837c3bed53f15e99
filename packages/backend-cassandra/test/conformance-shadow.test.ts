import { defineConformanceSuite } from '@deadbolt/conformance';
import { cassandraSuiteOptions } from './harness.js';

defineConformanceSuite(cassandraSuiteOptions('shadow'));

import { defineConformanceSuite } from '@deadbolt/conformance';
import { zookeeperSuiteOptions } from './harness.js';

defineConformanceSuite(zookeeperSuiteOptions());

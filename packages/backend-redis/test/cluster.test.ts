import { defineConformanceSuite } from '@deadbolt/conformance';
import { redisClusterSuiteOptions } from './harness.js';

// The whole shared suite against test-matrix's three-master Redis Cluster.
defineConformanceSuite(redisClusterSuiteOptions());

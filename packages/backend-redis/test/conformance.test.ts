import { defineConformanceSuite } from '@deadbolt/conformance';
import { redisSuiteOptions } from './harness.js';

for (const fifo of [false, true]) defineConformanceSuite(redisSuiteOptions(fifo));

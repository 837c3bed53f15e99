/**
 * The shared suite on an iovalkey client (Valkey's fork of ioredis), against the same Redis as
 * conformance.test.ts, which runs every group on ioredis clients the backend makes from its URL.
 * Here the groups where the client is what differs: its commands (core, lease), the waiters' wake-up
 * on the subscriber the backend duplicates from it (order), the fence and elections on it, and
 * inspect (about 40 s). Every group passed on it on 2026-12-07 (104 behaviours, 6 n/a, 143 s):
 * `DEADBOLT_VALKEY_ALL=1` runs them all.
 */
import { defineConformanceSuite, type ConformanceGroup } from '@deadbolt/conformance';
import { valkeySuiteOptions } from './harness.js';

const groups: ConformanceGroup[] = ['core', 'lease', 'order', 'fence', 'election', 'inspect'];
defineConformanceSuite(valkeySuiteOptions(), process.env['DEADBOLT_VALKEY_ALL'] === '1' ? {} : { groups });

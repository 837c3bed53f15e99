// The shared conformance suite as `deadbolt check` runs it: a suite file, which check.ts runs on
// the suite's own runner (@deadbolt/conformance/runner). The store is the user's, from DEADBOLT_CHECK_URL, already pointed at the
// check's own namespace (check.ts). Only what is safe on a live deployment is given to the suite:
// no server restarts, no connections killed server-side, no claims deleted behind a holder, no
// schema of the user's; the behaviours that need them are listed as n/a. The harness reads the
// store through the backend's own `inspect`, so it needs nothing store-specific.
import type { LockBackend } from '@deadbolt/core';
import type { KeySpace } from '@deadbolt/core/backend';
import { defineConformanceSuite } from '@deadbolt/conformance';
import { afterAll } from '@deadbolt/conformance/runner';
import { backendFor } from './stores.js';

const url = process.env['DEADBOLT_CHECK_URL'];
if (!url) throw new Error('DEADBOLT_CHECK_URL is not set (deadbolt check sets it)');

let reader: Promise<LockBackend> | undefined;
/** The owners with a claim on `key` (holders, then the waiters where the store lists them). */
async function owners(key: string, space: KeySpace): Promise<string[]> {
  reader ??= backendFor(url!);
  const seen = await (await reader).inspect!(key, space);
  return [...seen.holders, ...(seen.waiters ?? [])].map((claim) => claim.owner ?? '?');
}
afterAll(async () => {
  if (reader) await (await reader).close();
});

defineConformanceSuite({
  name: 'check',
  keyPrefix: 'deadbolt-check',
  createBackend: () => backendFor(url),
  // The same store options on a port nothing listens on: the client's side of behaviour 15.
  createUnreachableBackend: () => backendFor(url.replace(/^([a-z][a-z0-9+.-]*:\/\/)(?:[^@/?]*@)?[^/?]*/i, '$1127.0.0.1:1')),
  child: { module: import.meta.resolve('./stores.js'), export: 'backendFor', options: url },
  // No proxy is put in front of your store, and the factories' hostile options are the project's own tests'.
  network: null,
  factory: null,
  harness: { inspect: (key) => owners(key, 'mutex'), inspectShared: (key) => owners(key, 'shared') },
});

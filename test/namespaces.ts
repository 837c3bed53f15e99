/**
 * Scratch namespaces on the test-matrix stores: a key prefix, tables, a root node or a keyspace of
 * a test's own, removed afterwards (the same ones `deadbolt check` writes to, made and removed the
 * same way). For tests whose writes must meet no other test's, now or in a later run on the same
 * servers: a store-wide token floor, say, which would otherwise lift every test's tokens.
 */
import { randomBytes } from 'node:crypto';
import { matrixUrl, retryFor, type ChildBackendConfig } from '@deadbolt/conformance';
import { BackendUnavailableError, memoryBackend, MemoryLockStore, type LockBackend } from '@deadbolt/core';
import { backendFor, storeOf } from '../packages/cli/src/stores.js';

/** One main variant of every store the test matrix runs, and memory. */
export const STORE_KINDS = ['memory', 'redis', 'mysql', 'postgres', 'zookeeper', 'etcd', 'cassandra'] as const;
export type StoreKind = (typeof STORE_KINDS)[number];

export interface Namespace {
  readonly kind: StoreKind;
  /** A new backend in the namespace, with connections of its own. */
  backend(): Promise<LockBackend>;
  /**
   * Reaches the store once and makes what the namespace's first use makes (Cassandra's keyspace
   * and tables, the SQL stores' tables), so a test makes them in a hook's time, not in its first
   * lock: on a loaded machine Cassandra took more than 40 s to create a keyspace's tables, beyond
   * a lock's timeout. (Making a backend connects to nothing; its first call does.)
   */
  ready(): Promise<void>;
  /** Removes everything written in the namespace. */
  purge(): Promise<void>;
  /** How a child process (`ChildHolder`, the migration child) makes a backend in the namespace; none for memory. */
  readonly child?: ChildBackendConfig;
}

/** The CLI's URL reader, built (a child process runs plain Node): it sets a URL's options, the namespace's among them. */
const STORES_MODULE = new URL('../packages/cli/dist/stores.js', import.meta.url).href;

/** A namespace of its own on `kind`'s test-matrix store (memory: a lock table of its own). */
export function scratchNamespace(kind: StoreKind): Namespace {
  if (kind === 'memory') {
    const store = new MemoryLockStore();
    return { kind, backend: async () => memoryBackend({ store }), ready: async () => undefined, purge: async () => undefined };
  }
  // `test` first: `deadbolt check`'s own ids are hex, and its tests, side by side with the ones
  // that use these namespaces, tell theirs apart by that (check.test.ts).
  const id = `test${randomBytes(4).toString('hex')}`;
  const base = matrixUrl(kind);
  const store = storeOf(base);
  const url = store.scratch.url(base, id);
  return {
    kind,
    backend: () => backendFor(url),
    child: { module: STORES_MODULE, export: 'backendFor', options: url },
    async ready() {
      // A store that is up may still time out the first read after making the tables: on a
      // loaded machine Cassandra's first SERIAL read of a new keyspace once found no replica in
      // time. Such a failure (unavailable, not refused) is tried again for up to two minutes; a
      // store that is down still fails the hook.
      await retryFor(
        120_000,
        async () => {
          const backend = await backendFor(url);
          try {
            await backend.tokenFloor!();
          } finally {
            await backend.close();
          }
        },
        (error) => error instanceof BackendUnavailableError,
      );
    },
    async purge() {
      const backend = await backendFor(url);
      try {
        await store.scratch.purge(backend, id, url);
      } finally {
        await backend.close();
      }
    },
  };
}

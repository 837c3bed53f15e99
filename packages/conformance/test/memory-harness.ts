import { memoryBackend, MemoryLockStore } from '@deadbolt/core';
import type { ConformanceOptions } from '@deadbolt/conformance';

/**
 * The suite's options for memory backends over one lock table of their own (so two such are two
 * stores, as a migration needs), as lockers in one process share one.
 */
export function memorySuiteOptions(name = 'memory'): ConformanceOptions {
  const store = new MemoryLockStore();
  const other = new MemoryLockStore();
  return {
    name,
    createBackend: () => memoryBackend({ store }),
    createBackendInOtherNamespace: () => memoryBackend({ store: other }),
    ttlMs: 300,
    // In this process: no store to be down, no network to fault, no factory of a store behind one.
    createUnreachableBackend: null,
    network: null,
    factory: null,
    fence: { module: import.meta.resolve('@deadbolt/core'), export: 'memoryFence' },
    harness: {
      inspect: async (key) => {
        const entry = store.inspect(key);
        return entry ? [...(entry.holder ? [entry.holder] : []), ...entry.waiters] : [];
      },
      loseClaim: async () => store.evictAll(),
      inspectShared: async (key) => store.inspectShared(key),
      loseSharedClaim: async (key, owner) => store.forgetClaim(key, owner),
      // The table keeps an entry only while a key is held or awaited.
      retained: () => store.size,
    },
  };
}

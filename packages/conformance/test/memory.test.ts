import { memoryBackend, MemoryLockStore } from '@deadbolt/core';
import { defineConformanceSuite } from '@deadbolt/conformance';

// One lock table shared by every locker of this suite, as lockers in one process share one.
const store = new MemoryLockStore();

defineConformanceSuite({
  name: 'memory',
  createBackend: () => memoryBackend({ store }),
  ttlMs: 300,
  // Exercises close-and-exit in a child; memory locks do not cross processes, so no exclusion there.
  child: { module: import.meta.resolve('@deadbolt/core'), export: 'memoryBackend' },
  harness: {
    inspect: async (key) => {
      const entry = store.inspect(key);
      return entry ? [...(entry.holder ? [entry.holder] : []), ...entry.waiters] : [];
    },
    loseClaim: async () => store.evictAll(),
    // The table keeps an entry only while a key is held or awaited.
    retained: () => store.size,
  },
});

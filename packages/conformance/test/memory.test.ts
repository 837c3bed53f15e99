import { defineConformanceSuite } from '@deadbolt/conformance';
import { memorySuiteOptions } from './memory-harness.js';

defineConformanceSuite({
  ...memorySuiteOptions(),
  // Exercises close-and-exit in a child; memory locks do not cross processes, so no exclusion there.
  child: { module: import.meta.resolve('@deadbolt/core'), export: 'memoryBackend' },
});

import { conformanceGroups, defineConformanceSuite } from '@deadbolt/conformance';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { memorySuiteOptions } from './memory-harness.js';

// vitest's own functions as the runner, given as a user of another runner would give theirs: the
// suite registers and asserts through them alone.
const runner = { describe, it, expect, beforeEach, afterEach };

defineConformanceSuite(
  {
    ...memorySuiteOptions(),
    // Exercises close-and-exit in a child; memory locks do not cross processes, so no exclusion there.
    child: { module: import.meta.resolve('@deadbolt/core'), export: 'memoryBackend' },
  },
  { runner },
);

describe('defineConformanceSuite settings', () => {
  it('refuses a group it does not know before registering anything, naming the groups it knows', () => {
    expect(() => defineConformanceSuite(memorySuiteOptions(), { runner, groups: ['core', 'nope' as never] })).toThrow(
      `unknown conformance groups: nope (known: ${Object.keys(conformanceGroups).join(', ')})`,
    );
  });
});

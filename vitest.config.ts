import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    // The examples' own tests too: they show an application testing itself with @deadbolt/core/testing.
    include: ['packages/*/test/**/*.test.ts', 'test/**/*.test.ts', 'examples/*/src/**/*.test.ts'],
    // One file at a time in each vitest process: the test command runs several processes side by
    // side (scripts/run-tests.mjs says which files may share the stores at once, and when the
    // tests that restart a server run).
    fileParallelism: false,
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // The files whose tests run side by side (the fleet's seven, the four clusters) run them all at
    // once: at vitest's default of five, the fleet's last two waited for the first five to end.
    maxConcurrency: 8,
  },
});

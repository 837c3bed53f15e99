import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ["packages/*/test/**/*.test.ts", "test/**/*.test.ts"],
    // Store-backed suites share one server per store; run files one at a time so fault tests
    // (restarts, dropped connections) never hit a neighbour's locks.
    fileParallelism: false,
    testTimeout: 60_000,
    hookTimeout: 120_000,
  },
});

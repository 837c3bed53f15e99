/** @module @deadbolt/conformance/runner */
// For a program that runs the suite itself, as `deadbolt check` does: the suite's own runner, and
// what a suite file registers with and asserts through, under that runner or under vitest alike
// (see own-runner.ts and harness.ts).
export { runSuiteFile, type RunOptions, type SuiteRun, type TestResult } from './own-runner.js';
export { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from './harness.js';
export { ExpectationError, type AsymmetricMatcher, type Assertion, type Expect, type Matchers } from './expect.js';

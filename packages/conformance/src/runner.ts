/** @module @deadbolt/conformance/runner */
// The test runner the suite registers its behaviours with, as this package resolves it. A program
// that runs the suite itself (`deadbolt check`) starts its run and adds its hooks through here: a
// copy of vitest of its own would be another runner, with which no behaviour registers, and the run
// would find nothing to run (as it did from a global install of every package's tarball, where each
// package has its own copy).
import type { startVitest as StartVitest } from 'vitest/node';

export { afterAll } from 'vitest';

/** Vitest's `startVitest`, from the copy the suite uses. @throws what vitest's throws. */
export const startVitest: typeof StartVitest = async (...args) => (await import('vitest/node')).startVitest(...args);

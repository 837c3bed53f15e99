// What the behaviours register with and assert through: vitest's functions when vitest runs the
// suite (this project's tests, a user's test file), the suite's own runner and `expect` while that
// runner runs it (`deadbolt check`, runner.ts). Each call picks at the moment it is made, so one
// suite file serves both, and an install without vitest (the CLI's) never loads it.
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { expect as ownExpect, type AsymmetricMatcher, type Expect, type Matchers } from './expect.js';
import { ownDescribe, ownHook, ownIt, ownRunnerActive, type HookKind } from './own-runner.js';
import type { TestRunner } from './context.js';

type Vitest = typeof import('vitest');
/** Vitest, once looked for: undefined where it is not installed beside this package (the CLI's install). */
let vitest: Vitest | undefined | null = null;

/**
 * Vitest, loaded at the first call that needs it, with `require` (Node loads an ES module from
 * `require` since 20.19): an `await import()` at the top of this module would make every module
 * that imports it, the package's entry among them, impossible to `require()`.
 */
function vi(): Vitest {
  if (vitest === null) {
    try {
      vitest = createRequire(import.meta.url)(fileURLToPath(import.meta.resolve('vitest'))) as Vitest;
    } catch (error) {
      if ((error as { code?: string }).code !== 'ERR_MODULE_NOT_FOUND') throw error;
      vitest = undefined;
    }
  }
  if (!vitest) throw new Error('the conformance suite runs under vitest (install it) or through `deadbolt check`');
  return vitest;
}

/** A body of tests; may be async (its `it` calls after an await still belong to it). */
export function describe(name: string, fn: () => unknown): void {
  if (ownRunnerActive()) ownDescribe(name, fn);
  else vi().describe(name, fn as () => void);
}

/** A test, with an optional timeout in ms; `it.skip` lists one as skipped. */
export const it = Object.assign(
  (name: string, fn: () => unknown, timeout?: number): void => {
    if (ownRunnerActive()) ownIt(name, fn, timeout);
    else vi().it(name, fn as () => void, timeout);
  },
  {
    /** Lists a test as skipped without running it (the suite names a behaviour that does not apply this way). */
    skip(name: string, fn: () => unknown): void {
      if (ownRunnerActive()) ownIt(name, fn, undefined, true);
      else vi().it.skip(name, fn as () => void);
    },
  },
);

const hook =
  (kind: HookKind) =>
  (fn: () => unknown, timeout?: number): void => {
    if (ownRunnerActive()) ownHook(kind, fn, timeout);
    else vi()[kind](fn as () => void, timeout);
  };
/** Runs once before the tests of the describe it is in (a file's, at the top); an error fails them all. */
export const beforeAll = hook('beforeAll');
/** Runs once after the tests of the describe it is in; an error is reported as a failure of its own. */
export const afterAll = hook('afterAll');
/** Runs before each test of the describe it is in, outermost describe's first; an error fails the test. */
export const beforeEach = hook('beforeEach');
/** Runs after each test of the describe it is in, innermost first, even after a failure; an error fails the test. */
export const afterEach = hook('afterEach');

const current = (): Expect => (ownRunnerActive() ? ownExpect : (vi().expect as Expect));

/** `expect`, vitest's or the suite's own (see the top of this file). */
export const expect: Expect = Object.assign((actual: unknown, message?: string) => current()(actual, message), {
  fail: (message?: string): never => current().fail(message),
  objectContaining: (sample: object): AsymmetricMatcher => current().objectContaining(sample),
  stringMatching: (pattern: RegExp | string): AsymmetricMatcher => current().stringMatching(pattern),
  poll: (read: () => unknown, options?: { timeout?: number; interval?: number }): Matchers<Promise<void>> => current().poll(read, options),
});

/** The runner the suite uses unless given another: each call goes to vitest, or to the suite's own runner while that runs it. */
export const defaultRunner: TestRunner = { describe, it, expect, beforeEach, afterEach };

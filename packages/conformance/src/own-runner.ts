// The suite's own small runner, for a program that runs the suite itself (`deadbolt check`): it
// collects what a suite file registers (describe, it, the hooks) and runs it in this process, so a
// check needs no test runner's toolchain (vitest and its bundler were most of the CLI's install).
// Under vitest the same registrations go to vitest (harness.ts). What it keeps of vitest's meaning:
// async describe bodies collected in order; beforeAll/afterAll per describe; beforeEach outermost
// first, afterEach innermost first and always; a timeout per test and per hook; `it.skip`; a name
// filter on the full name (describe titles and the test's, joined by spaces); an error no test
// caught (an unhandled rejection) fails the test that was running.
import { pathToFileURL } from 'node:url';

interface Hook {
  readonly fn: () => unknown;
  readonly timeout: number | undefined;
}
interface Test {
  readonly kind: 'test';
  readonly name: string;
  readonly fn: () => unknown;
  readonly timeout: number | undefined;
  readonly skip: boolean;
}
interface Suite {
  readonly kind: 'suite';
  readonly name: string;
  readonly fn: (() => unknown) | undefined;
  readonly items: (Suite | Test)[];
  readonly hooks: Record<HookKind, Hook[]>;
}
/** The four hooks, as vitest names them. */
export type HookKind = 'beforeAll' | 'afterAll' | 'beforeEach' | 'afterEach';

/** One test's outcome. `name` is the test's own title, `fullName` with the describe titles before it. */
export interface TestResult {
  readonly name: string;
  readonly fullName: string;
  readonly state: 'passed' | 'failed' | 'skipped';
  readonly error?: unknown;
  readonly ms: number;
}

/** How `runSuiteFile` runs. */
export interface RunOptions {
  /** Only tests whose full name it matches run (`it.skip` ones are reported whatever it says). */
  readonly namePattern?: RegExp;
  /** A test's timeout when its `it` gives none. */
  readonly testTimeoutMs: number;
  /** A hook's timeout when it gives none. */
  readonly hookTimeoutMs: number;
  /** Called as each test ends (or is skipped), in the suite's order. */
  readonly onResult: (result: TestResult) => void;
}

/** A run under way. */
export interface SuiteRun {
  /** Resolves when the run has ended (cancelled or not). Never rejects: a failure is a test's result. */
  readonly done: Promise<void>;
  /** Stops the run: the running test is abandoned (its afterEach hooks still run), the rest do not run. */
  cancel(): void;
}

const newSuite = (name: string, fn?: () => unknown): Suite => ({
  kind: 'suite',
  name,
  fn,
  items: [],
  hooks: { beforeAll: [], afterAll: [], beforeEach: [], afterEach: [] },
});

/** The suite being collected while a run of this runner is under way; undefined otherwise (registrations go to vitest then). */
let collecting: Suite | undefined;
let running = false;
let runs = 0;

/** Whether registrations and `expect` go to this runner (a run of it is under way in this process). */
export const ownRunnerActive = (): boolean => running;

function target(what: string): Suite {
  if (!collecting) throw new Error(`${what} called outside a describe body or a suite file being collected`);
  return collecting;
}

/** This runner's `describe`. @throws Error outside a collection. */
export function ownDescribe(name: string, fn: () => unknown): void {
  target('describe').items.push(newSuite(name, fn));
}

/** This runner's `it` (`skip`: listed as skipped, never run). @throws Error outside a collection. */
export function ownIt(name: string, fn: () => unknown, timeout?: number, skip = false): void {
  target('it').items.push({ kind: 'test', name, fn, timeout, skip });
}

/** This runner's hooks. @throws Error outside a collection. */
export function ownHook(kind: HookKind, fn: () => unknown, timeout?: number): void {
  target(kind).hooks[kind].push({ fn, timeout });
}

class Cancelled extends Error {}

/**
 * Imports `entry` (a path or URL of an ES module that registers tests through this package's
 * harness, as the suite does; a new instance of it each run) and runs what it registered. One
 * run at a time per process.
 * @throws Error if a run is already under way.
 */
export function runSuiteFile(entry: string, options: RunOptions): SuiteRun {
  if (running) throw new Error('a run of the conformance runner is already under way in this process');
  running = true;
  let cancel!: () => void;
  const cancelled = new Promise<never>((_, reject) => (cancel = () => reject(new Cancelled('cancelled'))));
  cancelled.catch(() => undefined);
  let stopped = false;
  // An error no test awaited (an unhandled rejection, an exception in a timer) fails the test that
  // was running, as under vitest, rather than ending the process.
  let stray: unknown[] = [];
  const onStray = (error: unknown) => void stray.push(error);

  // A test, a beforeAll or a beforeEach is abandoned on cancel; the after-hooks run to the end.
  const timed = async (fn: () => unknown, ms: number, what: string) => {
    const cancellable = what.startsWith('before') || what === 'test';
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        Promise.resolve().then(fn),
        new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} timed out in ${ms}ms`)), ms))),
        ...(cancellable ? [cancelled] : []),
      ]);
    } finally {
      clearTimeout(timer);
    }
  };

  const selected = (suite: Suite, path: string[]): boolean =>
    suite.items.some((item) =>
      item.kind === 'suite'
        ? selected(item, [...path, item.name])
        : item.skip || !options.namePattern || options.namePattern.test([...path, item.name].join(' ')),
    );

  async function collect(suite: Suite): Promise<void> {
    for (const item of suite.items) {
      if (item.kind !== 'suite' || !item.fn) continue;
      const outer = collecting;
      collecting = item;
      try {
        await item.fn();
      } catch (error) {
        item.items.splice(0, item.items.length, {
          kind: 'test',
          name: '(collecting this describe)',
          fn: () => Promise.reject(error),
          timeout: undefined,
          skip: false,
        });
      } finally {
        collecting = outer;
      }
      await collect(item);
    }
  }

  async function runTest(test: Test, chain: Suite[], path: string[], failedHook: unknown): Promise<void> {
    const fullName = [...path, test.name].join(' ');
    if (test.skip) return options.onResult({ name: test.name, fullName, state: 'skipped', ms: 0 });
    if (options.namePattern && !options.namePattern.test(fullName)) return;
    const started = performance.now();
    stray = [];
    let error: unknown = failedHook;
    if (error === undefined) {
      try {
        for (const suite of chain)
          for (const hook of suite.hooks.beforeEach) await timed(hook.fn, hook.timeout ?? options.hookTimeoutMs, 'beforeEach');
        await timed(test.fn, test.timeout ?? options.testTimeoutMs, 'test');
      } catch (e) {
        error = e;
      }
      // The afterEach hooks always run (they close what the test opened), even after a cancel.
      for (const suite of [...chain].reverse())
        for (const hook of [...suite.hooks.afterEach].reverse())
          await timed(hook.fn, hook.timeout ?? options.hookTimeoutMs, 'afterEach').catch((e: unknown) => (error ??= e));
      if (error instanceof Cancelled) return;
      error ??= stray[0];
    }
    options.onResult({
      name: test.name,
      fullName,
      state: error === undefined ? 'passed' : 'failed',
      ...(error === undefined ? {} : { error }),
      ms: performance.now() - started,
    });
  }

  async function runSuite(suite: Suite, chain: Suite[], path: string[]): Promise<void> {
    if (!selected(suite, path)) return;
    let failedHook: unknown;
    for (const hook of suite.hooks.beforeAll)
      try {
        await timed(hook.fn, hook.timeout ?? options.hookTimeoutMs, 'beforeAll');
      } catch (error) {
        failedHook = error;
        break;
      }
    for (const item of suite.items) {
      if (stopped) break;
      if (item.kind === 'suite') await runSuite(item, [...chain, item], [...path, item.name]);
      else await runTest(item, chain, path, failedHook);
    }
    for (const hook of [...suite.hooks.afterAll].reverse())
      await timed(hook.fn, hook.timeout ?? options.hookTimeoutMs, 'afterAll').catch((error: unknown) =>
        options.onResult({
          name: `afterAll of ${suite.name || 'the file'}`,
          fullName: [...path, 'afterAll'].join(' '),
          state: 'failed',
          error,
          ms: 0,
        }),
      );
  }

  const root = newSuite('');
  const done = (async () => {
    process.on('unhandledRejection', onStray);
    process.on('uncaughtException', onStray);
    try {
      collecting = root;
      try {
        // A new instance of the module each run, so that it registers again.
        const url = new URL(entry.startsWith('file:') ? entry : pathToFileURL(entry).href);
        url.searchParams.set('deadbolt-run', String(++runs));
        await import(url.href);
        await collect(root);
      } catch (error) {
        options.onResult({ name: '(collecting the suite)', fullName: '(collecting the suite)', state: 'failed', error, ms: 0 });
        return;
      } finally {
        collecting = undefined;
      }
      await runSuite(root, [root], []);
    } finally {
      process.off('unhandledRejection', onStray);
      process.off('uncaughtException', onStray);
      running = false;
    }
  })();
  return {
    done,
    cancel() {
      stopped = true;
      cancel();
    },
  };
}

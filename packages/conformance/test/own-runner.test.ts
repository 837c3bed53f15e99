/**
 * The suite's own runner and `expect` (what `deadbolt check` runs the suite on): each matcher
 * passes and fails where vitest's does, on the values the behaviours give it, and the runner keeps
 * vitest's meaning of hooks, timeouts, skips, filters, stray errors and cancels. No store; a second.
 */
import { runSuiteFile, type TestResult } from '@deadbolt/conformance/runner';
// The implementation itself: the package's `expect` is vitest's here, under vitest (harness.ts).
import { expect as ours, type Expect } from '../src/expect.js';

/** Vitest's expect, seen through the interface of ours (the matchers the behaviours use). */
const theirs = expect as unknown as Expect;
import { describe, expect, it } from 'vitest';

class Refusal extends Error {
  readonly code = 'INVALID_ARGUMENT';
}
const refusal = new Refusal('bad ttl');

/** [what, actual, the matcher call]: each is run on both expects; both must pass or both fail. */
type Case = [string, unknown, (e: Expect, actual: unknown) => unknown];
const m =
  (name: string, ...args: unknown[]) =>
  (e: Expect, actual: unknown) =>
    (e(actual) as unknown as Record<string, (...a: unknown[]) => unknown>)[name]!(...args);
const not =
  (name: string, ...args: unknown[]) =>
  (e: Expect, actual: unknown) =>
    (e(actual).not as unknown as Record<string, (...a: unknown[]) => unknown>)[name]!(...args);

const CASES: Case[] = [
  ['toBe same', 1, m('toBe', 1)],
  ['toBe other', 1, m('toBe', 2)],
  ['toBe objects', { a: 1 }, m('toBe', { a: 1 })],
  ['toBe bigint', 5n, m('toBe', 5n)],
  ['toBe -0', -0, m('toBe', 0)],
  ['toEqual deep', { a: [1, { b: 2n }] }, m('toEqual', { a: [1, { b: 2n }] })],
  ['toEqual deep differs', { a: [1, { b: 2n }] }, m('toEqual', { a: [1, { b: 3n }] })],
  ['toEqual extra key', { a: 1, b: 2 }, m('toEqual', { a: 1 })],
  ['toEqual undefined key', { a: 1, b: undefined }, m('toEqual', { a: 1 })],
  ['toEqual array length', [1, 2], m('toEqual', [1, 2, 3])],
  ['toEqual empty', [], m('toEqual', [])],
  ['toEqual bigint vs number', 1n, m('toEqual', 1)],
  ['toEqual objectContaining', { a: 1, b: 2 }, (e, a) => e(a).toEqual(e.objectContaining({ a: 1 }))],
  ['toEqual objectContaining miss', { a: 1, b: 2 }, (e, a) => e(a).toEqual(e.objectContaining({ c: 1 }))],
  ['toMatchObject subset', { a: 1, b: { c: 2, d: 3 } }, m('toMatchObject', { b: { c: 2 } })],
  ['toMatchObject differs', { a: 1, b: { c: 2 } }, m('toMatchObject', { b: { c: 3 } })],
  ['toMatchObject missing', { a: 1 }, m('toMatchObject', { z: undefined })],
  ['toMatchObject array', { list: [{ a: 1, b: 2 }] }, m('toMatchObject', { list: [{ a: 1 }] })],
  ['toMatchObject array length', { list: [{ a: 1 }, { a: 2 }] }, m('toMatchObject', { list: [{ a: 1 }] })],
  ['toMatchObject error', refusal, m('toMatchObject', { code: 'INVALID_ARGUMENT', message: 'bad ttl' })],
  ['toMatchObject error name', refusal, m('toMatchObject', { name: 'Error' })],
  ['toMatchObject error wrong', refusal, m('toMatchObject', { code: 'BACKEND_ERROR' })],
  [
    'toMatchObject stringMatching',
    { message: 'a timeout of 5 ms' },
    (e, a) => e(a).toMatchObject({ message: e.stringMatching(/timeout/) }),
  ],
  ['toMatchObject stringMatching miss', { message: 'a b' }, (e, a) => e(a).toMatchObject({ message: e.stringMatching(/timeout/) })],
  ['toBeNull', null, m('toBeNull')],
  ['toBeNull undefined', undefined, m('toBeNull')],
  ['not.toBeNull', 0, not('toBeNull')],
  ['not.toBeNull null', null, not('toBeNull')],
  ['toBeUndefined', undefined, m('toBeUndefined')],
  ['toBeUndefined null', null, m('toBeUndefined')],
  ['toBeDefined', null, m('toBeDefined')],
  ['toBeDefined undefined', undefined, m('toBeDefined')],
  ['toBeTruthy', '', m('toBeTruthy')],
  ['toBeTruthy 1', 1, m('toBeTruthy')],
  ['toBeGreaterThan', 2, m('toBeGreaterThan', 1)],
  ['toBeGreaterThan equal', 1, m('toBeGreaterThan', 1)],
  ['toBeGreaterThan bigint', 3n, m('toBeGreaterThan', 2n)],
  ['toBeGreaterThan bigint no', 2n, m('toBeGreaterThan', 2n)],
  ['toBeGreaterThanOrEqual', 1, m('toBeGreaterThanOrEqual', 1)],
  ['toBeGreaterThanOrEqual no', 0.5, m('toBeGreaterThanOrEqual', 1)],
  ['toBeLessThan', 1, m('toBeLessThan', 2)],
  ['toBeLessThan equal', 2, m('toBeLessThan', 2)],
  ['toBeLessThanOrEqual', 2, m('toBeLessThanOrEqual', 2)],
  ['toBeLessThanOrEqual no', 3, m('toBeLessThanOrEqual', 2)],
  ['toBeLessThanOrEqual NaN', Number.NaN, m('toBeLessThanOrEqual', 2)],
  ['toContain array', ['fifo', 'none'], m('toContain', 'fifo')],
  ['toContain array miss', ['fifo', 'none'], m('toContain', 'lifo')],
  ['toContain string', 'deadbolt: no behaviour ran', m('toContain', 'no behaviour')],
  ['not.toContain', ['a'], not('toContain', 'a')],
  ['toHaveLength', [1, 2], m('toHaveLength', 2)],
  ['toHaveLength no', 'abc', m('toHaveLength', 2)],
  ['toMatch', 'BACKEND_ERROR', m('toMatch', /^BACKEND_/)],
  ['toMatch no', 'LOCK_TIMEOUT', m('toMatch', /^BACKEND_/)],
  ['toMatch string', 'abc', m('toMatch', 'b')],
  ['not.toMatch', 'abc', not('toMatch', /b/)],
  ['toBeInstanceOf', refusal, m('toBeInstanceOf', Error)],
  ['toBeInstanceOf no', new Error('x'), m('toBeInstanceOf', Refusal)],
  ['toBeTypeOf', () => 1, m('toBeTypeOf', 'function')],
  ['toBeTypeOf no', 1, m('toBeTypeOf', 'function')],
  [
    'toThrow',
    () => {
      throw refusal;
    },
    m('toThrow'),
  ],
  ['toThrow none', () => 1, m('toThrow')],
  [
    'toThrow message',
    () => {
      throw new Error('the body failed here');
    },
    m('toThrow', 'body failed'),
  ],
  [
    'toThrow message no',
    () => {
      throw new Error('stop');
    },
    m('toThrow', 'body failed'),
  ],
  [
    'toThrow class',
    () => {
      throw refusal;
    },
    m('toThrow', Refusal),
  ],
  [
    'toThrow objectContaining',
    () => {
      throw refusal;
    },
    (e, a) => e(a).toThrow(e.objectContaining({ code: 'INVALID_ARGUMENT' })),
  ],
  [
    'toThrow objectContaining no',
    () => {
      throw refusal;
    },
    (e, a) => e(a).toThrow(e.objectContaining({ code: 'X' })),
  ],
];

const PROMISE_CASES: [string, () => Promise<unknown>, (e: Expect, p: Promise<unknown>) => Promise<unknown>][] = [
  ['rejects.toMatchObject', () => Promise.reject(refusal), (e, p) => e(p).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' })],
  ['rejects.toMatchObject no', () => Promise.reject(refusal), (e, p) => e(p).rejects.toMatchObject({ code: 'X' })],
  ['rejects on a resolve', () => Promise.resolve(1), (e, p) => e(p).rejects.toMatchObject({})],
  ['rejects.toBe', () => Promise.reject(refusal), (e, p) => e(p).rejects.toBe(refusal)],
  ['rejects.toBeInstanceOf', () => Promise.reject(refusal), (e, p) => e(p).rejects.toBeInstanceOf(Refusal)],
  ['rejects.toThrow', () => Promise.reject(new Error('stop')), (e, p) => e(p).rejects.toThrow('stop')],
  ['rejects.toThrow no', () => Promise.reject(new Error('go')), (e, p) => e(p).rejects.toThrow('stop')],
  [
    'rejects.toThrow objectContaining',
    () => Promise.reject(refusal),
    (e, p) => e(p).rejects.toThrow(e.objectContaining({ code: 'INVALID_ARGUMENT' })),
  ],
  ['resolves.toBeUndefined', () => Promise.resolve(undefined), (e, p) => e(p).resolves.toBeUndefined()],
  ['resolves.toBeUndefined no', () => Promise.resolve(1), (e, p) => e(p).resolves.toBeUndefined()],
  ['resolves on a reject', () => Promise.reject(refusal), (e, p) => e(p).resolves.toBeUndefined()],
];

const outcome = (run: () => unknown) => {
  try {
    run();
    return 'pass';
  } catch {
    return 'fail';
  }
};
const settled = (run: () => Promise<unknown>) =>
  run().then(
    () => 'pass',
    () => 'fail',
  );

describe("the suite's own expect", () => {
  it('passes and fails where vitest does, for every matcher the behaviours use', async () => {
    const differ: string[] = [];
    for (const [what, actual, call] of CASES) {
      const vitests = outcome(() => call(theirs, actual));
      if (outcome(() => call(ours, actual)) !== vitests) differ.push(`${what} (vitest: ${vitests})`);
    }
    for (const [what, make, call] of PROMISE_CASES) {
      const vitests = await settled(() => call(theirs, make()));
      if ((await settled(() => call(ours, make()))) !== vitests) differ.push(`${what} (vitest: ${vitests})`);
    }
    expect(differ).toEqual([]);
    // Both outcomes are met (the table is no list of passes only).
    const passes = CASES.filter(([, a, call]) => outcome(() => call(theirs, a)) === 'pass').length;
    expect(passes).toBeGreaterThan(10);
    expect(CASES.length - passes).toBeGreaterThan(10);
  });

  it('says what it expected and the message given', () => {
    expect(() => ours([1, 2], 'the list').toEqual([1, 3])).toThrow(/the list: expected \[ 1, 2 \] to equal \[ 1, 3 \]/);
    expect(() => ours(1).not.toBe(1)).toThrow('expected 1 not to be 1');
    expect(() => ours.fail('stop here')).toThrow('stop here');
  });

  it('poll: reads until the matcher passes, and fails with the last error after its timeout', async () => {
    let n = 0;
    await ours.poll(() => ++n, { timeout: 1000, interval: 5 }).toBe(3);
    expect(n).toBe(3);
    const started = performance.now();
    await expect(ours.poll(() => 1, { timeout: 100, interval: 10 }).toBe(2)).rejects.toThrow('expected 1 to be 2');
    expect(performance.now() - started).toBeGreaterThanOrEqual(80);
  });
});

describe("the suite's own runner", () => {
  const fixture = (name: string) => new URL(`fixtures/${name}`, import.meta.url).href;
  const log = () => ((globalThis as { ownRunnerLog?: string[] }).ownRunnerLog ??= []);

  async function run(name: string, pattern?: RegExp): Promise<TestResult[]> {
    log().length = 0;
    const results: TestResult[] = [];
    const suite = runSuiteFile(fixture(name), {
      testTimeoutMs: 5000,
      hookTimeoutMs: 5000,
      ...(pattern ? { namePattern: pattern } : {}),
      onResult: (r) => results.push(r),
    });
    await suite.done;
    return results;
  }

  it('runs hooks in vitest order, times out, skips, fails on stray rejections and failed beforeAll', async () => {
    const results = await run('runner-suite.mjs');
    expect(results.map((r) => [r.fullName, r.state])).toEqual([
      ['outer passes', 'passed'],
      ['outer fails an expectation', 'failed'],
      ['outer times out', 'failed'],
      ['outer is skipped [n/a: a reason]', 'skipped'],
      ['outer fails on a rejection nobody awaited', 'failed'],
      ['outer inner runs inside', 'passed'],
      ['a beforeAll that fails is failed by it', 'failed'],
    ]);
    const error = (name: string) => String((results.find((r) => r.name === name)?.error as Error | undefined)?.message);
    expect(error('fails an expectation')).toContain('the list: expected [ 1, 2 ] to equal [ 1, 3 ]');
    expect(error('times out')).toBe('test timed out in 50ms');
    expect(error('fails on a rejection nobody awaited')).toBe('stray');
    expect(error('is failed by it')).toBe('setup broke');
    expect(log()).toEqual([
      'beforeAll outer',
      ...['beforeEach outer', 'test passes', 'afterEach outer'],
      ...['beforeEach outer', 'afterEach outer'],
      ...['beforeEach outer', 'afterEach outer'],
      ...['beforeEach outer', 'afterEach outer'],
      ...['beforeEach outer', 'beforeEach inner', 'test inside', 'afterEach inner', 'afterEach outer'],
      'afterAll outer',
    ]);
  });

  it('a name filter runs only what it matches, and reports skipped tests whatever it says', async () => {
    const results = await run('runner-suite.mjs', /(^| )passes$/);
    expect(results.map((r) => [r.name, r.state])).toEqual([
      ['passes', 'passed'],
      ['is skipped [n/a: a reason]', 'skipped'],
    ]);
    expect(log()).toEqual(['beforeAll outer', 'beforeEach outer', 'test passes', 'afterEach outer', 'afterAll outer']);
  });

  it('cancel abandons the running test (its afterEach still runs) and runs no other', async () => {
    log().length = 0;
    const results: TestResult[] = [];
    const suite = runSuiteFile(fixture('cancel-suite.mjs'), {
      testTimeoutMs: 60_000,
      hookTimeoutMs: 5000,
      onResult: (r) => results.push(r),
    });
    while (!log().includes('started')) await new Promise((resolve) => setTimeout(resolve, 5));
    const started = performance.now();
    suite.cancel();
    await suite.done;
    expect(performance.now() - started).toBeLessThan(1000);
    expect(log()).toEqual(['started', 'afterEach']);
    expect(results).toEqual([]);
  });
});

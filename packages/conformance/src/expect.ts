// The assertions the suite's behaviours make, for a run on the suite's own runner (`deadbolt
// check`, see runner.ts): the part of vitest's `expect` the behaviours use, with its meaning, so
// that a check needs no test runner's toolchain. Under vitest the behaviours use vitest's own
// (harness.ts). test/expect.test.ts checks that each matcher fails where vitest's fails.
import { inspect } from 'node:util';

/** A value in an expected object that matches by a rule rather than by equality (`expect.objectContaining`). */
export interface AsymmetricMatcher {
  /** Whether `actual` matches. */
  asymmetricMatch(actual: unknown): boolean;
  /** What it matches, for messages. */
  toString(): string;
}

/** The matchers; each throws `ExpectationError` when its check fails (negated by `not`). */
export interface Matchers<R> {
  /** Passes when the value is `expected` (`Object.is`). */
  toBe(expected: unknown): R;
  /** Passes when the value equals `expected` deeply (own enumerable properties; an undefined one counts as absent; asymmetric matchers inside). */
  toEqual(expected: unknown): R;
  /** Passes when every property of `expected` is on the value (own or inherited) and matches, recursively; arrays element by element, at the same length. */
  toMatchObject(expected: object): R;
  /** Passes on `null`. */
  toBeNull(): R;
  /** Passes on `undefined`. */
  toBeUndefined(): R;
  /** Passes on anything but `undefined`. */
  toBeDefined(): R;
  /** Passes on a truthy value. */
  toBeTruthy(): R;
  /** Passes on a number or bigint above `n`; fails on anything else. */
  toBeGreaterThan(n: number | bigint): R;
  /** Passes on a number or bigint at or above `n`; fails on anything else. */
  toBeGreaterThanOrEqual(n: number | bigint): R;
  /** Passes on a number or bigint below `n`; fails on anything else. */
  toBeLessThan(n: number | bigint): R;
  /** Passes on a number or bigint at or below `n`; fails on anything else. */
  toBeLessThanOrEqual(n: number | bigint): R;
  /** Passes on an array that has `item` (`===`) or a string that contains it. */
  toContain(item: unknown): R;
  /** Passes when the value's `length` is `length`. */
  toHaveLength(length: number): R;
  /** Passes on a string the pattern matches (a string pattern: one that contains it). */
  toMatch(pattern: RegExp | string): R;
  /** Passes on an instance of `type`. */
  toBeInstanceOf(type: abstract new (...args: never[]) => unknown): R;
  /** Passes when `typeof` the value is `type`. */
  toBeTypeOf(type: 'bigint' | 'boolean' | 'function' | 'number' | 'object' | 'string' | 'symbol' | 'undefined'): R;
  /** Passes when the function throws (after `rejects`: on the reason) an error matching `expected`: a message containing the string, a message the pattern matches, the asymmetric matcher, or an instance of the class. */
  toThrow(expected?: string | RegExp | AsymmetricMatcher | (abstract new (...args: never[]) => unknown)): R;
}

/** What `expect(value)` returns. */
export interface Assertion extends Matchers<void> {
  readonly not: Matchers<void>;
  /** The matcher applied to what the promise rejects with; fails if it resolves. */
  readonly rejects: Matchers<Promise<void>> & { readonly not: Matchers<Promise<void>> };
  /** The matcher applied to what the promise resolves to; fails if it rejects. */
  readonly resolves: Matchers<Promise<void>> & { readonly not: Matchers<Promise<void>> };
}

/** `expect`: the assertion, and the helpers beside it. */
export interface Expect {
  (actual: unknown, message?: string): Assertion;
  /** Throws at once with `message`. */
  fail(message?: string): never;
  /** Matches an object that has (at least) these properties, each equal by `toEqual`'s rule. */
  objectContaining(sample: object): AsymmetricMatcher;
  /** Matches a string that the pattern matches (a string: one that contains it). */
  stringMatching(pattern: RegExp | string): AsymmetricMatcher;
  /** Calls `read` every `interval` ms until the matcher passes, failing with its last error after `timeout` ms. */
  poll(read: () => unknown, options?: { timeout?: number; interval?: number }): Matchers<Promise<void>>;
}

/** A failed expectation. */
export class ExpectationError extends Error {
  override readonly name = 'ExpectationError';
}

/** What a failure's message starts with: the message given to `expect`, if any. */
const lead = (message: string | undefined) => (message ? `${message}: ` : '');

const show = (value: unknown) => inspect(value, { depth: 6, breakLength: Infinity, maxArrayLength: 20, maxStringLength: 200 });

const isAsymmetric = (value: unknown): value is AsymmetricMatcher =>
  typeof value === 'object' && value !== null && typeof (value as AsymmetricMatcher).asymmetricMatch === 'function';

const isObject = (value: unknown): value is Record<PropertyKey, unknown> => typeof value === 'object' && value !== null;

/** `toEqual`'s rule: recursive, own enumerable properties, a property that is undefined counts as absent. */
export function equals(actual: unknown, expected: unknown): boolean {
  if (isAsymmetric(expected)) return expected.asymmetricMatch(actual);
  if (Object.is(actual, expected)) return true;
  if (!isObject(actual) || !isObject(expected)) return false;
  if (Array.isArray(actual) !== Array.isArray(expected)) return false;
  if (Array.isArray(actual) && Array.isArray(expected))
    return actual.length === expected.length && actual.every((item, i) => equals(item, expected[i]));
  if (actual instanceof Date || expected instanceof Date)
    return actual instanceof Date && expected instanceof Date && actual.getTime() === expected.getTime();
  if (actual instanceof RegExp || expected instanceof RegExp) return String(actual) === String(expected);
  if (actual instanceof Map || actual instanceof Set || expected instanceof Map || expected instanceof Set) {
    if (actual.constructor !== expected.constructor) return false;
    const items = (v: unknown): unknown[] => (v instanceof Map || v instanceof Set ? [...v] : []);
    const [a, e] = [items(actual), items(expected)];
    return a.length === e.length && e.every((item) => a.some((other) => equals(other, item)));
  }
  if (actual instanceof Error && expected instanceof Error && actual.message !== expected.message) return false;
  const keys = (o: object) => Object.keys(o).filter((k) => (o as Record<string, unknown>)[k] !== undefined);
  const a = keys(actual);
  const e = keys(expected);
  return a.length === e.length && e.every((k) => Object.hasOwn(actual, k) && equals(actual[k], expected[k]));
}

/** `toMatchObject`'s rule: every property of `expected` is in `actual` (own or inherited), recursively; arrays match element by element, at the same length. */
function matchesObject(actual: unknown, expected: unknown): boolean {
  if (isAsymmetric(expected)) return expected.asymmetricMatch(actual);
  if (Array.isArray(expected))
    return Array.isArray(actual) && actual.length === expected.length && expected.every((item, i) => matchesObject(actual[i], item));
  if (!isObject(expected) || expected instanceof Date || expected instanceof RegExp) return equals(actual, expected);
  if (!isObject(actual)) return false;
  return Object.keys(expected).every((k) => k in actual && matchesObject(actual[k], expected[k]));
}

function thrownMatches(error: unknown, expected: Parameters<Matchers<void>['toThrow']>[0]): boolean {
  if (expected === undefined) return true;
  const message = isObject(error) && typeof error['message'] === 'string' ? error['message'] : String(error);
  if (typeof expected === 'string') return message.includes(expected);
  if (expected instanceof RegExp) return expected.test(message);
  if (isAsymmetric(expected)) return expected.asymmetricMatch(error);
  return error instanceof expected;
}

function compare(actual: unknown, bound: number | bigint): number {
  if ((typeof actual !== 'number' && typeof actual !== 'bigint') || Number.isNaN(actual))
    throw new ExpectationError(`expected a number or bigint, got ${show(actual)}`);
  return actual < bound ? -1 : actual > bound ? 1 : 0;
}

type Check = (actual: unknown, ...args: never[]) => [pass: boolean, says: string];

/** Each matcher: whether it passed, and what it expected, in words that read after "expected <actual> ". */
const CHECKS: Record<keyof Matchers<void>, Check> = {
  toBe: (a, e: unknown) => [Object.is(a, e), `to be ${show(e)}`],
  toEqual: (a, e: unknown) => [equals(a, e), `to equal ${show(e)}`],
  toMatchObject: (a, e: object) => [isObject(a) && matchesObject(a, e), `to match object ${show(e)}`],
  toBeNull: (a) => [a === null, 'to be null'],
  toBeUndefined: (a) => [a === undefined, 'to be undefined'],
  toBeDefined: (a) => [a !== undefined, 'to be defined'],
  toBeTruthy: (a) => [Boolean(a), 'to be truthy'],
  toBeGreaterThan: (a, n: number | bigint) => [compare(a, n) > 0, `to be greater than ${show(n)}`],
  toBeGreaterThanOrEqual: (a, n: number | bigint) => [compare(a, n) >= 0, `to be greater than or equal to ${show(n)}`],
  toBeLessThan: (a, n: number | bigint) => [compare(a, n) < 0, `to be less than ${show(n)}`],
  toBeLessThanOrEqual: (a, n: number | bigint) => [compare(a, n) <= 0, `to be less than or equal to ${show(n)}`],
  toContain: (a, item: unknown) => [
    typeof a === 'string' ? typeof item === 'string' && a.includes(item) : Array.isArray(a) && a.includes(item),
    `to contain ${show(item)}`,
  ],
  toHaveLength: (a, n: number) => [
    isObject(a) || typeof a === 'string' ? (a as { length?: unknown }).length === n : false,
    `to have length ${n}`,
  ],
  toMatch: (a, p: RegExp | string) => [
    typeof a === 'string' && (typeof p === 'string' ? a.includes(p) : p.test(a)),
    `to match ${typeof p === 'string' ? show(p) : String(p)}`,
  ],
  toBeInstanceOf: (a, type: abstract new (...args: never[]) => unknown) => [a instanceof type, `to be an instance of ${type.name}`],
  toBeTypeOf: (a, type: string) => [typeof a === type, `to be of type ${type}`],
  toThrow: () => {
    throw new Error('toThrow is checked by its own path');
  },
};

/** Every matcher, each made by `make` from its name: the async forms (`rejects`, `poll`) wrap the plain one. */
function everyMatcher<R>(make: (name: keyof Matchers<void>) => (...args: never[]) => R): Matchers<R> {
  const matchers = {} as Record<keyof Matchers<void>, (...args: never[]) => R>;
  for (const name of Object.keys(CHECKS) as (keyof Matchers<void>)[]) matchers[name] = make(name);
  return matchers as Matchers<R>;
}

/** Runs matcher `name` of `matchers(...)` with `args`. */
const apply = (m: Matchers<void>, name: keyof Matchers<void>, args: never[]) => (m[name] as (...a: never[]) => void)(...args);

/** The matchers over a value; `negate` for `not`; `thrown` when the value is a rejection's reason (for `toThrow`). */
function matchers(actual: unknown, negate: boolean, message: string | undefined, thrown: boolean): Matchers<void> {
  const fail = (says: string) => {
    throw new ExpectationError(`${lead(message)}expected ${show(actual)} ${negate ? 'not ' : ''}${says}`);
  };
  return everyMatcher((name) => (...args: never[]) => {
    if (name === 'toThrow') {
      const expected = args[0] as Parameters<Matchers<void>['toThrow']>[0];
      let error: unknown;
      let threw = thrown;
      if (thrown) error = actual;
      else {
        if (typeof actual !== 'function') throw new ExpectationError(`${lead(message)}toThrow needs a function, got ${show(actual)}`);
        try {
          (actual as () => unknown)();
        } catch (e) {
          threw = true;
          error = e;
        }
      }
      const pass = threw && thrownMatches(error, expected);
      if (pass === negate) {
        const wanted = expected === undefined ? '' : ` matching ${typeof expected === 'function' ? expected.name : show(expected)}`;
        const got = threw ? `it threw ${show(error)}` : 'it did not throw';
        throw new ExpectationError(`${lead(message)}expected ${negate ? 'no ' : 'a '}throw${wanted}; ${got}`);
      }
      return;
    }
    const [pass, says] = CHECKS[name](actual, ...args);
    if (pass === negate) fail(says);
  });
}

/** The matchers, each run on what `settle` gives (a promise's outcome). */
function settled(settle: () => Promise<unknown>, negate: boolean, message: string | undefined, thrown: boolean): Matchers<Promise<void>> {
  return everyMatcher(
    (name) =>
      async (...args: never[]) =>
        apply(matchers(await settle(), negate, message, thrown), name, args),
  );
}

function outcome(actual: unknown, want: 'rejects' | 'resolves', message: string | undefined): () => Promise<unknown> {
  return async () => {
    let value: unknown;
    try {
      value = await actual;
    } catch (error) {
      if (want === 'rejects') return error;
      throw new ExpectationError(`${lead(message)}the promise rejected with ${show(error)}, expected it to resolve`);
    }
    if (want === 'resolves') return value;
    throw new ExpectationError(`${lead(message)}the promise resolved to ${show(value)}, expected it to reject`);
  };
}

const asymmetric = (describe: string, match: (actual: unknown) => boolean): AsymmetricMatcher =>
  Object.assign({ asymmetricMatch: match, toString: () => describe }, { [inspect.custom]: () => describe });

/** The suite's own `expect` (see the top of this file). @throws ExpectationError from each matcher that fails. */
export const expect: Expect = Object.assign(
  (actual: unknown, message?: string): Assertion => {
    const rejects = outcome(actual, 'rejects', message);
    const resolves = outcome(actual, 'resolves', message);
    return Object.assign(matchers(actual, false, message, false), {
      not: matchers(actual, true, message, false),
      rejects: Object.assign(settled(rejects, false, message, true), { not: settled(rejects, true, message, true) }),
      resolves: Object.assign(settled(resolves, false, message, false), { not: settled(resolves, true, message, false) }),
    });
  },
  {
    fail(message = 'failed'): never {
      throw new ExpectationError(message);
    },
    objectContaining: (sample: object) =>
      asymmetric(`ObjectContaining ${show(sample)}`, (actual) => {
        if (!isObject(actual)) return false;
        return Object.entries(sample).every(([k, v]) => k in actual && equals(actual[k], v));
      }),
    stringMatching: (pattern: RegExp | string) =>
      asymmetric(
        `StringMatching ${String(pattern)}`,
        (actual) => typeof actual === 'string' && (typeof pattern === 'string' ? actual.includes(pattern) : pattern.test(actual)),
      ),
    poll(read: () => unknown, options: { timeout?: number; interval?: number } = {}): Matchers<Promise<void>> {
      const { timeout = 1000, interval = 50 } = options;
      return everyMatcher((name) => async (...args: never[]) => {
        const deadline = performance.now() + timeout;
        for (;;) {
          try {
            return apply(matchers(await read(), false, undefined, false), name, args);
          } catch (error) {
            if (!(error instanceof ExpectationError) || performance.now() + interval > deadline) throw error;
          }
          await new Promise((resolve) => setTimeout(resolve, interval));
        }
      });
    },
  },
);

import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../src/api/errors.js';
import { TestingHooks } from '../src/kit/testing-hooks.js';

describe('TestingHooks: what a /testing subpath reads of its backends', () => {
  it("returns a registered backend's hooks and refuses anything else with InvalidArgumentError", () => {
    const hooks = new TestingHooks<object, { name: string }>('an ExampleBackend');
    const backend = {};
    hooks.set(backend, { name: 'store' });
    expect(hooks.of(backend).name).toBe('store');
    for (const other of [{}, null, undefined, 'x', 5])
      expect(() => hooks.of(other as object)).toThrow(new InvalidArgumentError('backend must be an ExampleBackend'));
  });
});

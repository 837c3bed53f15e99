import { InvalidArgumentError } from '../api/errors.js';

/**
 * What a backend package's `/testing` subpath reads of its backends (their store: key names,
 * server connections, sessions), kept off the backend's API. The backend registers itself in its
 * constructor; the subpath's functions look it up. Written once here so that every package's
 * `testing.ts` is only its functions.
 */
export class TestingHooks<B extends object, H> {
  readonly #hooks = new WeakMap<B, H>();
  readonly #kind: string;

  /** `kind`: what the backend must be, for the error ("a RedisBackend"). */
  constructor(kind: string) {
    this.#kind = kind;
  }

  /** Registers `backend`'s hooks (its constructor calls this). */
  set(backend: B, hooks: H): void {
    this.#hooks.set(backend, hooks);
  }

  /** `backend`'s hooks. @throws InvalidArgumentError when `backend` is not a backend of this kind. */
  of(backend: B): H {
    const hooks = typeof backend === 'object' && backend !== null ? this.#hooks.get(backend) : undefined;
    if (hooks === undefined) throw new InvalidArgumentError(`backend must be ${this.#kind}`);
    return hooks;
  }
}

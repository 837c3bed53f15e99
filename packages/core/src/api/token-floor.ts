// A store's token floor as a locker keeps it (`LockBackend.tokenFloor`): a migration lifts the new
// store's floor above every token the old one gave, and from then on every grant in that store,
// through any locker, must come out above it, whichever keys the migration never saw.
import type { Lease, LockBackend } from '../kit/backend.js';
import { BackendError } from './errors.js';
import { Once } from '../kit/once.js';
import { noop } from '../kit/time.js';
import { DONE } from '../kit/wait.js';

/**
 * The floor, read from the store once (before the locker's first acquisition; again after a read
 * that failed), and the two ways a grant gets above it: asked for in the grant's own step
 * (`minToken`, which counter and clock stores honour), or, for a store that cannot (its tokens are
 * revisions), lifted afterwards: reported as the floor plus one once the store's own floor for the
 * key was raised to that (`raiseTokenFloor`), so that every later grant of the key counts on from
 * there. (Plus one, not plus its own token: a lift that added the two would double the scale of
 * tokens at every store a migration passes through.) Claims of a shared key lifted at the same
 * moment carry the same token: holders at once, never one after another, which is what fencing
 * orders. A floor read at one moment and raised later by another process is still safe: each
 * grant below it raises the key's own floor, which every process's later grants then exceed.
 */
export class StoreFloor {
  readonly #backend: LockBackend;
  readonly #read: Once | undefined;
  #floor = 0n;

  constructor(backend: LockBackend) {
    this.#backend = backend;
    const read = backend.tokenFloor;
    this.#read =
      typeof read === 'function'
        ? new Once(async () => {
            this.#floor = await read.call(backend);
          })
        : undefined;
  }

  /** Whether the floor has been read (or the backend has none). */
  get known(): boolean {
    return !this.#read || this.#read.done;
  }

  /** Resolves once the floor is known. @throws what the backend's `tokenFloor` throws (the next call reads again). */
  ready(): Promise<void> {
    return this.#read ? this.#read.run() : DONE;
  }

  /** The least token a grant should carry (`AcquireRequest.minToken`); none while there is no floor. */
  get minToken(): bigint | undefined {
    return this.#floor > 0n ? this.#floor + 1n : undefined;
  }

  /** Whether `lease` must be lifted before it is reported (its token is at or below the floor). */
  below(lease: Lease): boolean {
    return lease.token <= this.#floor;
  }

  /**
   * The token to report for a grant at or below the floor: the floor plus one, once the key's
   * floor in the store was raised to that. Null, with the lease given back, when the store granted
   * the key to someone else meanwhile (the raise refused). @throws the raise's error (the lease
   * given back), or BackendError when the backend has a floor but cannot raise one.
   */
  async lift(lease: Lease): Promise<bigint | null> {
    const backend = this.#backend;
    const lifted = this.#floor + 1n;
    try {
      if (typeof backend.raiseTokenFloor !== 'function') {
        throw new BackendError(backend.name, 'acquire', {
          cause: new Error('a grant at or below the store token floor, and no raiseTokenFloor to lift it'),
        });
      }
      if (await backend.raiseTokenFloor(lease, lifted)) return lifted;
    } catch (error) {
      await backend.release(lease).catch(noop);
      throw error;
    }
    await backend.release(lease).catch(noop);
    return null;
  }
}

import { AsyncLocalStorage } from 'node:async_hooks';
import { NotOwnerError } from './errors.js';
import type { Lock } from './types.js';

/**
 * What the current async context holds through the callback helpers (`withLock`, `withLockAll`,
 * `withRead`, `withWrite`, `withPermit`): "the same logical caller" for reentrancy, self-deadlock
 * and upgrade checks. Node has
 * no other sound notion of a caller: a scope is opened by `AsyncLocalStorage.run` around the
 * helper's function, so it covers everything that function awaits or starts, and nothing started
 * beside it (two concurrent requests, or two branches of one `Promise.all` outside the function,
 * have scopes of their own). A bare handle from `lock()` opens no scope.
 */
export interface HeldEntry {
  /** The locker that took it: two lockers never share holds. */
  readonly locker: object;
  readonly key: string;
  readonly kind: HeldKind;
  readonly lock: Lock;
}

/** How a key is held: a mutex lock, a read or write lock, or a semaphore permit. */
export type HeldKind = 'lock' | 'read' | 'write' | 'permit';

/** Which holds a take of each kind would wait behind (read and write locks of a key wait for each other). */
const MEETS: Record<HeldKind, readonly HeldKind[]> = {
  lock: ['lock'],
  read: ['read', 'write'],
  write: ['read', 'write'],
  permit: ['permit'],
};

const scope = new AsyncLocalStorage<readonly HeldEntry[]>();

/** What the current context holds of `key` through `locker` that a take as `want` would wait behind. */
export function heldInScope(locker: object, key: string, want: HeldKind): HeldEntry | undefined {
  const held = scope.getStore();
  if (!held) return undefined;
  const kinds = MEETS[want];
  return held.find((e) => e.locker === locker && e.key === key && kinds.includes(e.kind));
}

/** Run `fn` in a scope that also holds `entries`. */
export function runHolding<T>(entries: readonly HeldEntry[], fn: () => T): T {
  return scope.run([...(scope.getStore() ?? []), ...entries], fn);
}

/**
 * A reentrant hold: the same lease, token and signal as the hold it nests in. Its release only
 * ends this hold; the lease is given up when the outermost holder (the helper that took it)
 * releases.
 */
export class ReentrantLock implements Lock {
  readonly key: string;
  readonly owner: string;
  readonly token: bigint;
  readonly #outer: Lock;
  #released = false;

  constructor(outer: Lock) {
    this.#outer = outer;
    this.key = outer.key;
    this.owner = outer.owner;
    this.token = outer.token;
  }

  get signal(): AbortSignal {
    return this.#outer.signal;
  }

  get held(): boolean {
    return !this.#released && this.#outer.held;
  }

  async extend(ttlMs?: number): Promise<void> {
    if (this.#released) throw new NotOwnerError(`lock ${JSON.stringify(this.key)} was released already`);
    await this.#outer.extend(ttlMs);
  }

  async release(): Promise<void> {
    this.#released = true;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}

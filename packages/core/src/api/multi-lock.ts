import type { Lock, MultiLock } from './types.js';

/**
 * - `signal` aborts (with that member's `LockLostError`) as soon as any member is lost; `held` is
 *   true while every member is.
 * - `extend(ttl)` extends every member (rejects with the first failure); `release()` releases
 *   every member, last taken first, and rejects with the first failure after trying them all.
 */
export class MultiLockHandle implements MultiLock {
  readonly keys: readonly string[];
  readonly locks: readonly Lock[];
  readonly tokens: ReadonlyMap<string, bigint>;
  readonly #controller = new AbortController();
  #released: Promise<void> | undefined;

  constructor(keys: readonly string[], locks: readonly Lock[]) {
    this.keys = keys;
    this.locks = locks;
    this.tokens = new Map(locks.map((l) => [l.key, l.token]));
    for (const lock of locks) {
      const signal = lock.signal;
      if (signal.aborted) this.#controller.abort(signal.reason);
      else signal.addEventListener('abort', () => this.#controller.abort(signal.reason), { once: true });
    }
  }

  get signal(): AbortSignal {
    // Reading each member's signal also checks its lease estimate, which may abort it (and so ours).
    for (const lock of this.locks) void lock.signal;
    return this.#controller.signal;
  }

  get held(): boolean {
    return this.locks.every((l) => l.held);
  }

  async extend(ttlMs?: number): Promise<void> {
    await Promise.all(this.locks.map((l) => l.extend(ttlMs)));
  }

  release(): Promise<void> {
    this.#released ??= releaseAll(this.locks);
    return this.#released;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}

/** Releases every lock, last taken first; rejects with the first failure once all were tried. */
export async function releaseAll(locks: readonly Lock[]): Promise<void> {
  let failure: { error: unknown } | undefined;
  for (const lock of [...locks].reverse()) {
    try {
      await lock.release();
    } catch (error) {
      failure ??= { error };
    }
  }
  if (failure) throw failure.error;
}

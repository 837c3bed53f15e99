/**
 * A lock workload that logs what it does and sees into a history (history.ts): a worker takes the
 * key, and while it holds it checks before each step that it still does and writes to a resource
 * with its token, then releases. Fault runs start several, break things around them, heal, and
 * check the history. Pure TypeScript without the test runner.
 */
import type { Fence, Lock, Locker } from '@deadbolt/core';
import { sleep } from '@deadbolt/core/backend';
import type { HistoryWorker } from './history.js';

/** Where a worker writes while it holds: a store's `Fence`, or anything with the same `write`. */
export type Resource = Pick<Fence, 'write'>;

/** Options of `runWorker`: the key, the resource it writes under the lock, and the pace of its holds. */
export interface WorkerOptions {
  readonly key: string;
  /** The resource written under the lock (with `resource` as its name), twice per hold. */
  readonly resource?: { readonly name: string; readonly target: Resource };
  /** How long each hold lasts, in ms. */
  readonly holdMs: number;
  /** Checks (and writes) per hold, spread over it. Default 2. */
  readonly steps?: number;
  /** A pause after each hold before the next acquire (a worker with other things to do). Default 0. */
  readonly restMs?: number;
  /** Each acquire's timeout. */
  readonly timeoutMs: number;
  /** The worker stops taking the key once this aborts. */
  readonly stop: AbortSignal;
  /**
   * How to take the key (default `locker.lock`): a permit or a read or write lock for the other
   * families, or a term of an election (a `Leadership` whose `release` resigns).
   */
  readonly take?: (locker: Locker, key: string, timeoutMs: number) => Promise<Pick<Lock, 'held' | 'token' | 'release'>>;
  /** Logged with each grant: `shared` for a read lock. */
  readonly mode?: 'exclusive' | 'shared';
}

/** The stable code of an error (`LOCK_TIMEOUT`, `STALE_TOKEN`, …), or its name. */
const codeOf = (error: unknown): string => String((error as { code?: unknown })?.code ?? (error as Error)?.name ?? error);

/**
 * Outcome of a call that failed: `fail` when the error says it did not happen (a timeout of the
 * wait, a stale token, bad input), `unknown` when the store may have done it (unavailable).
 */
const failure = (error: unknown): 'fail' | 'unknown' => (/UNAVAILABLE|BACKEND_ERROR/.test(codeOf(error)) ? 'unknown' : 'fail');

/** Runs one worker until `stop` aborts, logging every step. Never throws. */
export async function runWorker(worker: HistoryWorker, locker: Locker, options: WorkerOptions): Promise<void> {
  const { key, resource, holdMs, timeoutMs, stop } = options;
  const take = options.take ?? ((l: Locker, k: string, t: number) => l.lock(k, { timeoutMs: t }));
  let step = 0;
  while (!stop.aborted) {
    const asked = worker.invoke('acquire', key);
    let lock: Pick<Lock, 'held' | 'token' | 'release'>;
    try {
      lock = await take(locker, key, timeoutMs);
    } catch (error) {
      worker.complete(asked, 'acquire', key, failure(error), { code: codeOf(error) });
      if (failure(error) === 'unknown') await sleep(50); // a store out of reach: do not spin
      continue;
    }
    worker.complete(asked, 'acquire', key, 'ok', { token: lock.token, ...(options.mode ? { mode: options.mode } : {}) });
    const steps = options.steps ?? 2;
    for (let i = 0; i < steps; i++) {
      // Check, then act: a paused worker finds its loss here when it runs again.
      if (!lock.held) break;
      worker.held(key, lock.token);
      if (resource) {
        const sent = worker.invoke('write', key, { token: lock.token, resource: resource.name });
        await resource.target.write(resource.name, lock.token, `${worker.process} ${step++}`).then(
          () => worker.complete(sent, 'write', key, 'ok', { token: lock.token, resource: resource.name }),
          (error: unknown) =>
            worker.complete(sent, 'write', key, failure(error), { token: lock.token, resource: resource.name, code: codeOf(error) }),
        );
      }
      await sleep(holdMs / steps);
    }
    if (!lock.held) {
      worker.lost(key, lock.token);
      await lock.release().catch(() => undefined);
      continue;
    }
    const released = worker.invoke('release', key, { token: lock.token });
    await lock.release().then(
      () => worker.complete(released, 'release', key, 'ok', { token: lock.token }),
      (error: unknown) => worker.complete(released, 'release', key, failure(error), { token: lock.token, code: codeOf(error) }),
    );
    if (options.restMs) await sleep(options.restMs);
  }
}

// A queue worker of an application: each job is processed under a lock of its own, so that two
// workers never process one job at once. The work is handed the lock's signal and stops when the
// lock is lost; the result is stored with the lock's fencing token. worker.test.ts tests it on
// `createTestLocker` from @deadbolt/core/testing.
import type { Fence, Locker } from '@deadbolt/core';

/** A job from the application's queue. */
export interface Job {
  readonly id: string;
  readonly input: string;
}

/** What one call of `processJob` did. */
export type Outcome = 'done' | 'busy' | 'lost';

/**
 * Processes `job` under the lock `job:<id>`: 'busy' when another worker holds it, 'lost' when the
 * lock was lost before the result was stored (the work was aborted through its signal and nothing
 * was written), 'done' once the result is stored. Rethrows what the work or the store throws.
 */
export async function processJob(
  locker: Locker,
  results: Fence,
  job: Job,
  work: (input: string, signal: AbortSignal) => Promise<string>,
): Promise<Outcome> {
  const lock = await locker.tryLock(`job:${job.id}`);
  if (!lock) return 'busy';
  try {
    const output = await work(job.input, lock.signal);
    // The token makes a late write harmless: a worker that took the job over wrote with a higher one.
    await results.write(`result:${job.id}`, lock.token, output, { signal: lock.signal });
    return 'done';
  } catch (error) {
    if (lock.signal.aborted) return 'lost';
    throw error;
  } finally {
    // A lost lock's release rejects with LockLostError: the loss was handled above.
    await lock.release().catch(() => undefined);
  }
}

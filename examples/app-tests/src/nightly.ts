// A scheduled job that every instance of an application fires at the same time (a cron entry in
// each pod): `runOnce` lets one of them run it per window. nightly.test.ts fires it from several
// "instances" on `createTestLocker`'s clock.
import type { Locker, RunOnceResult } from '@deadbolt/core';

/** The window: a run claims the job for at least 10 minutes, so an instance that fires late skips. */
export const NIGHTLY = { lockAtMostForMs: 30 * 60_000, lockAtLeastForMs: 10 * 60_000 } as const;

/**
 * Fires the nightly report on this instance: it runs here unless another instance ran it within
 * the window. `send` gets the run's fencing token (to write with) and its signal (aborted if the
 * run's claim is lost). Rejects as `Locker.runOnce` does, or with what `send` throws.
 */
export function fireNightly(locker: Locker, send: (token: bigint, signal: AbortSignal) => Promise<number>): Promise<RunOnceResult<number>> {
  return locker.runOnce('nightly-report', ({ token, signal }) => send(token, signal), NIGHTLY);
}

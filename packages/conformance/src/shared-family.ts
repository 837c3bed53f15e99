import type { Lock, Locker, LockOptions } from '@deadbolt/core';

/** Which member of the shared family a test takes: a semaphore permit, or a read or write lock. */
export type SharedFamily = { readonly limit: number } | 'read' | 'write';

/** Take `family` on `key` through `locker` (waiting, as `lock()`). */
export function takeShared(locker: Locker, key: string, family: SharedFamily, options: LockOptions): Promise<Lock> {
  if (family === 'read') return locker.readWriteLock(key).read(options);
  if (family === 'write') return locker.readWriteLock(key).write(options);
  return locker.semaphore(key, family).acquire(options);
}

/**
 * How long a shared-claim workload holds (between half of `holdMs` and all of it): claims granted
 * together reach their clients a few ms apart on a loaded machine (a migration's two stores, a
 * child process), and holds of 0–`holdMs` let two readers granted together miss each other, so a
 * check that readers or permits were held at once failed by chance.
 */
export function sharedHoldMs(holdMs: number): number {
  return holdMs * (0.5 + Math.random() / 2);
}

import type { Lock, Locker, LockOptions } from '@deadbolt/core';

/** Which member of the shared family a test takes: a semaphore permit, or a read or write lock. */
export type SharedFamily = { readonly limit: number } | 'read' | 'write';

/** Take `family` on `key` through `locker` (waiting, as `lock()`). */
export function takeShared(locker: Locker, key: string, family: SharedFamily, options: LockOptions): Promise<Lock> {
  if (family === 'read') return locker.readWriteLock(key).read(options);
  if (family === 'write') return locker.readWriteLock(key).write(options);
  return locker.semaphore(key, family).acquire(options);
}

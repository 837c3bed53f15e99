import type { LockBackend } from '@deadbolt/core';
import { observeBackend } from '@deadbolt/core/backend';

/**
 * `inner` with every store call recorded by name, for the "bad input before any I/O" checks. An
 * answer on the spot (`acquireNow`, `releaseNow`) counts as the call it stands for, so the
 * behaviours read the same on stores with and without it.
 */
export function countingBackend(inner: LockBackend): { backend: LockBackend; calls: string[] } {
  const calls: string[] = [];
  return { backend: observeBackend(inner, (method) => calls.push(method.replace(/Now$/, ''))), calls };
}

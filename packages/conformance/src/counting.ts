import type { LockBackend } from '@deadbolt/core';
import { observeBackend } from '@deadbolt/core/testing';

/**
 * `inner` with every store call recorded by name, for the "bad input before any I/O" checks. An
 * answer on the spot (`acquireNow`, `releaseNow`) counts as the call it stands for, so the
 * behaviours read the same on stores with and without it.
 */
export function countingBackend(inner: LockBackend): { backend: LockBackend; calls: string[] } {
  const calls: string[] = [];
  return { backend: observeBackend(inner, (method) => calls.push(method.replace(/Now$/, ''))), calls };
}

/**
 * `calls` without the store token floor's read that a locker makes once, before its first
 * acquisition (`LockBackend.tokenFloor`), checked to come first and at most once: the calls a
 * test's own locks made.
 */
export function withoutFloorRead(calls: readonly string[]): string[] {
  const reads = calls.filter((c) => c === 'tokenFloor').length;
  if (reads > 1 || (reads === 1 && calls[0] !== 'tokenFloor'))
    throw new Error(`the store's token floor was read ${reads} times, or after the first acquisition: ${calls.join(', ')}`);
  return calls.filter((c) => c !== 'tokenFloor');
}

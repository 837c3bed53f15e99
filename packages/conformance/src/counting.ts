import type { LockBackend } from '@deadbolt/core';
import type { Lease } from '@deadbolt/core/backend';

/** `inner` with every store call recorded by name, for the "bad input before any I/O" checks. */
export function countingBackend(inner: LockBackend): { backend: LockBackend; calls: string[] } {
  const calls: string[] = [];
  const backend: LockBackend = {
    name: inner.name,
    capabilities: inner.capabilities,
    acquire: (req) => (calls.push('acquire'), inner.acquire(req)),
    ...(inner.acquireShared ? { acquireShared: (req) => (calls.push('acquireShared'), inner.acquireShared!(req)) } : {}),
    renew: (lease: Lease, ms: number) => (calls.push('renew'), inner.renew(lease, ms)),
    release: (lease: Lease) => (calls.push('release'), inner.release(lease)),
    close: () => inner.close(),
  };
  return { backend, calls };
}

// @deadbolt/etcd/testing: what tests, the benchmark and fault drills read of a backend that is not
// its API: where a lock's keys live in etcd, to read or delete them directly.
import { InvalidArgumentError } from '@deadbolt/core';
import { EtcdBackend, storeOf } from './etcd-backend.js';

function store(backend: EtcdBackend) {
  const found = backend instanceof EtcdBackend ? storeOf.get(backend) : undefined;
  if (!found) throw new InvalidArgumentError('backend must be an EtcdBackend');
  return found;
}

/**
 * The prefix under which every claimant of `key`'s mutex writes its own key (holder and waiters).
 * @throws InvalidArgumentError when `backend` is not an etcd backend.
 */
export function prefixFor(backend: EtcdBackend, key: string): string {
  return store(backend).prefixFor(key);
}

/**
 * The prefix under which the claims on a shared key (semaphore, read-write lock) live.
 * @throws InvalidArgumentError when `backend` is not an etcd backend.
 */
export function sharedPrefixFor(backend: EtcdBackend, key: string): string {
  return store(backend).sharedPrefixFor(key);
}

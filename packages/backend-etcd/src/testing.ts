/** @module @deadbolt/etcd/testing */
// @deadbolt/etcd/testing: what tests, the benchmark and fault drills read of a backend that is not
// its API: where a lock's keys live in etcd, to read or delete them directly.
import { storeOf, type EtcdBackend } from './etcd-backend.js';

const store = (backend: EtcdBackend) => storeOf.of(backend);

/**
 * The prefix under which every claimant of `key`'s mutex writes its own key (holder and waiters).
 * @throws InvalidArgumentError when `backend` is not an etcd backend.
 */
export function prefixFor(backend: EtcdBackend, key: string): string {
  return store(backend).prefixFor(key, 'mutex');
}

/**
 * The prefix under which the claims on a shared key (semaphore, read-write lock) live.
 * @throws InvalidArgumentError when `backend` is not an etcd backend.
 */
export function sharedPrefixFor(backend: EtcdBackend, key: string): string {
  return store(backend).prefixFor(key, 'shared');
}

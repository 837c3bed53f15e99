/** @module @deadbolt/etcd/testing */
// @deadbolt/etcd/testing: what tests, the benchmark and fault drills read of a backend that is not
// its API: where a lock's keys live in etcd, to read or delete them directly.
import type { StoreClaims } from '@deadbolt/core/testing';
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

/**
 * `key`'s claims as `backend`'s keys in etcd, read and deleted through its client (holder and
 * waiters alike: each claimant's key is named by its owner id, in creation order).
 * @throws InvalidArgumentError when `backend` is not an etcd backend; its methods reject with the
 * client's error.
 */
export function claimsOf(backend: EtcdBackend): StoreClaims {
  const owners = async (prefix: string) =>
    (await backend.client.getAll().prefix(prefix).sort('Create', 'Ascend').keys()).map((k) => k.slice(prefix.length));
  store(backend); // a backend of another kind is refused here, not at the first call
  return {
    inspect: (key) => owners(prefixFor(backend, key)),
    async loseClaim(key) {
      await backend.client.delete().prefix(prefixFor(backend, key)).exec();
    },
    inspectShared: (key) => owners(sharedPrefixFor(backend, key)),
    async loseSharedClaim(key, owner) {
      await backend.client
        .delete()
        .key(sharedPrefixFor(backend, key) + owner)
        .exec();
    },
  };
}

// The mutex: the recipe of etcd's Go `concurrency.Mutex`. Every acquirer writes its own key under
// the lock's prefix, bound to an etcd lease of its own, in one transaction that also reads the
// current holder (the key with the lowest create revision). A waiter watches only the nearest
// earlier key and re-checks when it goes: FIFO by create revision, no thundering herd.
import type { AcquireRequest } from '@deadbolt/core/backend';
import { noop, offsetOf, type EtcdLockLease, type EtcdStore } from './store.js';

/** A mutex acquisition (see `LockBackend.acquire`). */
export async function acquireMutex(store: EtcdStore, req: AcquireRequest): Promise<EtcdLockLease | null> {
  const lockPrefix = store.prefixFor(req.key);
  const offsetKey = store.offsetKeyFor(req.key);
  const path = lockPrefix + req.owner;
  const ttlSeconds = req.ttlMs / 1000;
  // When our lease was last set to its full ttl (a request's send time): the lease counts from here.
  let refreshedAt = performance.now();
  const etcdLease = store.newLease(ttlSeconds);
  let created = false;
  try {
    const leaseId = await store.call('grant lease', () => etcdLease.grant());
    // One transaction: the newest key before ours (the one a waiter watches), our key, the holder
    // (the oldest key) and the token offset. A retried call finds its key already there.
    const result = await store.call('acquire', () =>
      store.client
        .if(path, 'Create', '==', 0)
        .then(
          store.client.getAll().prefix(lockPrefix).sort('Create', 'Descend').limit(1),
          store.client.put(path).value(req.owner).lease(leaseId),
          store.holderQuery(lockPrefix),
          store.client.get(offsetKey),
        )
        .else(store.client.get(path), store.client.get(path), store.holderQuery(lockPrefix), store.client.get(offsetKey))
        .commit(),
    );
    created = true;
    const revision = BigInt(result.header.revision);
    const mine = result.succeeded ? revision : BigInt(result.responses[0]!.response_range.kvs[0]!.create_revision);
    const holder = BigInt(result.responses[2]!.response_range.kvs[0]?.create_revision ?? -1);
    let offset = offsetOf(result.responses[3]!.response_range.kvs[0]?.value);
    if (holder !== mine) {
      if (!req.wait) {
        await store.call('acquire', () => store.client.delete().key(path).exec());
        await etcdLease.revoke().catch(noop);
        return null;
      }
      // Waiting can outlast the ttl: our lease is kept alive meanwhile.
      const keeper = store.keepWaiting(etcdLease, ttlSeconds, refreshedAt, req.signal);
      try {
        const newest = result.succeeded ? result.responses[0]!.response_range.kvs[0] : undefined;
        offset = await waitForPredecessors(store, lockPrefix, offsetKey, path, mine, keeper.signal, newest?.key);
      } catch (error) {
        throw store.keptError(keeper, req.signal, error);
      } finally {
        await keeper.stop();
      }
      if (keeper.lost) throw store.keptError(keeper, req.signal);
      refreshedAt = keeper.since;
    }
    return store.granted('mutex', req, { mine, offset, revision, acquiredAt: refreshedAt, path, etcdLease, ttlSeconds });
  } catch (error) {
    // A cancelled, timed-out or failed waiter removes its key and lease before reporting.
    throw await store.giveUp(created, path, etcdLease, ttlSeconds, error);
  }
}

/**
 * Wait until no key under the prefix has a create revision below ours, watching only the nearest
 * earlier key. Each look is one transaction that also checks our key is still there (so our
 * lease is alive) and reads the token offset, which is final once we hold; resolves with that
 * offset. A watch is made before the look that finds its key still there, so the key's deletion
 * comes after the watch began and is delivered at once (see `EtcdStore.watchDeletion`). After a deletion,
 * the next look is the grant: the handoff is one event and one transaction, the watch's cancel
 * going out beside it. Rejects with `signal.reason` on abort. `first`: the nearest earlier key as
 * the grant's transaction read it.
 *
 * When the look found that key alone ahead of ours (it is the holder's), its deletion is the
 * grant itself, with no look after it, provided the watch saw nothing else first: no write to
 * that key and nothing on ours. Why that is enough: no key can join ahead of ours (a new key gets
 * a newer revision), so with the holder's key gone none is ahead; ours was there throughout (its
 * deletion would have come first, on the same watch, which keeps revision order); and the offset
 * read by the look is still the offset, since only a holder raises it (`raiseTokenFloor` checks
 * the raiser's key), the only holder was that key's, and a raise writes that key too.
 */
async function waitForPredecessors(
  store: EtcdStore,
  lockPrefix: string,
  offsetKey: string,
  path: string,
  mine: bigint,
  signal: AbortSignal,
  first?: Buffer,
): Promise<bigint> {
  let watch = first && { key: first, ...(await store.watchDeletion(first, path, signal)) };
  try {
    for (;;) {
      signal.throwIfAborted();
      const found = await store.call('wait', () =>
        store.client
          .if(path, 'Create', '==', mine.toString())
          .then(
            store.client
              .getAll()
              .prefix(lockPrefix)
              .maxCreateRevision((mine - 1n).toString())
              .sort('Create', 'Descend')
              .limit(1),
            store.client.get(offsetKey),
            store.holderQuery(lockPrefix),
          )
          .commit(),
      );
      if (!found.succeeded) throw store.waiterGone(new Error("the waiter's key is gone: its lease expired while it waited"));
      const predecessor = found.responses[0]!.response_range.kvs[0]?.key;
      const offset = offsetOf(found.responses[1]!.response_range.kvs[0]?.value);
      if (!predecessor) return offset;
      if (watch && predecessor.equals(watch.key)) {
        const alone = found.responses[2]!.response_range.kvs[0]?.key.equals(predecessor) === true;
        if ((await watch.deleted(signal)) && alone) return offset;
      } else {
        void watch?.cancel();
        watch = { key: predecessor, ...(await store.watchDeletion(predecessor, path, signal)) };
        continue;
      }
      void watch.cancel();
      watch = undefined;
    }
  } finally {
    void watch?.cancel();
  }
}

/**
 * A mutex's token floor (see `LockBackend.raiseTokenFloor`). Later holders' keys are newer than ours, so an offset of
 * `floor - our revision` puts every later token above `floor`; written only if our key (so our
 * hold: nobody is granted before it goes) still exists. Our key is written again (same value,
 * same lease) in the same step: a waiter watching it then knows the offset it read may be old
 * (see `waitForPredecessors`).
 */
export async function raiseMutexFloor(store: EtcdStore, l: EtcdLockLease, floor: bigint): Promise<boolean> {
  const leaseId = await store.call('raise token floor', () => l.etcdLease.grant());
  const result = await store.call('raise token floor', () =>
    store.client
      .if(l.path, 'Create', '==', l.revision.toString())
      .then(
        store.client.put(store.offsetKeyFor(l.key)).value((floor - l.revision).toString()),
        store.client.put(l.path).value(l.owner).lease(leaseId),
      )
      .commit(),
  );
  return result.succeeded;
}

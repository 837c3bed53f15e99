// Shared claims (semaphore permits, read and write locks), the same recipe as the mutex: our key
// and a read of all the key's claims in one transaction; the claims in create-revision order are
// the queue, judged by core's rule, and the token is our key's create revision (etcd's revisions
// only grow, also across restarts). A waiter watches the prefix for deletions (one watch for the
// whole wait) and re-reads after each.
// Limits travel in every claim's value, so a newcomer with another limit sees it and withdraws.
import { BackendError, LimitMismatchError } from '@deadbolt/core';
import { grantable, type AcquireRequest, type LeaseKeeper } from '@deadbolt/core/backend';
import { offsetOf, type EtcdLockLease, type EtcdStore } from './store.js';

/** One claim in a shared key's queue, as read from its etcd key. */
interface QueuedClaim {
  readonly revision: bigint;
  readonly mode: AcquireRequest['mode'];
  readonly limit: number;
}

/**
 * The claims that count, in queue order: those with the limit of the oldest claim not known to be
 * misconfigured. A claim with another limit is misconfigured, and remembered in `misconfigured`
 * (it stays so: it was made while an older claim with the limit in force lived, and its own join,
 * which read every claim at once, saw that claim too and withdrew), so it neither blocks nor
 * fails the others once the claim it was measured against has gone. @throws LimitMismatchError
 * when the limit in force is not `req`'s (nothing of ours may stay: the caller withdraws).
 */
function inForce(req: AcquireRequest, misconfigured: Set<bigint>, queue: readonly QueuedClaim[]): QueuedClaim[] {
  const live = queue.filter((c) => !misconfigured.has(c.revision));
  const limit = live[0]?.limit ?? req.limit;
  if (limit !== req.limit) throw new LimitMismatchError(req.key, limit, req.limit);
  for (const c of live) if (c.limit !== limit) misconfigured.add(c.revision);
  return live.filter((c) => c.limit === limit);
}

/** A shared claim (see `LockBackend.acquireShared`). */
export async function acquireSharedClaim(store: EtcdStore, req: AcquireRequest): Promise<EtcdLockLease | null> {
  const prefix = store.sharedPrefixFor(req.key);
  const offsetKey = store.sharedOffsetKeyFor(req.key);
  const path = prefix + req.owner;
  const ttlSeconds = req.ttlMs / 1000;
  let acquiredAt = performance.now();
  const etcdLease = store.newLease(ttlSeconds);
  let created = false;
  /** Keeps our lease alive once we wait, which can outlast the ttl. */
  let keeper: LeaseKeeper | undefined;
  /** Deletions under the prefix, watched once we wait. */
  let deletions: Awaited<ReturnType<EtcdStore['prefixDeletions']>> | undefined;
  try {
    const leaseId = await store.call('grant lease', () => etcdLease.grant());
    const claims = () => store.client.getAll().prefix(prefix).sort('Create', 'Ascend');
    const result = await store.call('acquire', () =>
      store.client
        .if(path, 'Create', '==', 0)
        .then(
          store.client
            .put(path)
            .value(`${req.mode === 'exclusive' ? 'X' : 'S'}:${req.limit}`)
            .lease(leaseId),
          claims(),
          store.client.get(offsetKey),
        )
        .else(store.client.get(path), claims(), store.client.get(offsetKey))
        .commit(),
    );
    created = true;
    const revision = BigInt(result.header.revision);
    const mine = result.succeeded ? revision : BigInt(result.responses[0]!.response_range.kvs[0]!.create_revision);
    let kvs = result.responses[1]!.response_range.kvs;
    // The offset is read by the same read that judges the claim granted.
    let offset = offsetOf(result.responses[2]!.response_range.kvs[0]?.value);
    let seenAt = revision;
    const misconfigured = new Set<bigint>();
    for (;;) {
      const queue = inForce(
        req,
        misconfigured,
        kvs.map((kv) => ({
          revision: BigInt(kv.create_revision),
          mode: kv.value.toString().startsWith('X') ? ('exclusive' as const) : ('shared' as const),
          limit: Number(kv.value.toString().slice(2)),
        })),
      );
      const index = queue.findIndex((c) => c.revision === mine);
      if (index < 0) throw store.waiterGone(new Error("the claim's key is gone: its lease expired while it waited"));
      if (grantable(queue, index, req.limit)) {
        if (keeper) {
          // The lease counts from its last confirmed keep-alive.
          await keeper.stop();
          if (keeper.lost) throw store.keptError(keeper, req.signal);
          acquiredAt = keeper.since;
        }
        break;
      }
      if (!req.wait) {
        await store.call('acquire', () => store.client.delete().key(path).exec());
        await etcdLease.revoke().catch(() => undefined);
        return null;
      }
      keeper ??= store.keepWaiting(etcdLease, ttlSeconds, acquiredAt, req.signal);
      if (!deletions || deletions.failed) {
        // A new watch is followed by a new read, so nothing deleted in between goes unseen.
        deletions?.cancel();
        deletions = await store.prefixDeletions(prefix, keeper.signal);
      } else await deletions.after(seenAt, keeper.signal);
      const now = await store.call('wait', () =>
        store.client
          .if(path, 'Create', '>', 0)
          .then(claims(), store.client.get(offsetKey))
          .else(claims(), store.client.get(offsetKey))
          .commit(),
      );
      kvs = now.responses[0]!.response_range.kvs;
      offset = offsetOf(now.responses[1]!.response_range.kvs[0]?.value);
      seenAt = BigInt(now.header.revision);
    }
    deletions?.cancel();
    return store.granted('shared', req, { mine, offset, revision, acquiredAt, path, etcdLease, ttlSeconds });
  } catch (error) {
    deletions?.cancel();
    await keeper?.stop();
    throw await store.giveUp(created, path, etcdLease, ttlSeconds, keeper ? store.keptError(keeper, req.signal, error) : error);
  }
}

/**
 * A shared key's floor: as the mutex's, but other holders may raise it at the same time, so the
 * write is also conditioned on the stored offset being lower (or absent); one that is already
 * higher covers our floor too.
 */
export async function raiseSharedFloor(store: EtcdStore, l: EtcdLockLease, floor: bigint): Promise<boolean> {
  const offsetKey = store.sharedOffsetKeyFor(l.key);
  const value = (floor - l.revision).toString().padStart(20, '0');
  const ours = () => store.client.if(l.path, 'Create', '==', l.revision.toString());
  for (let attempt = 0; attempt < 10; attempt++) {
    const absent = await store.call('raise token floor', () =>
      ours().and(offsetKey, 'Version', '==', 0).then(store.client.put(offsetKey).value(value)).commit(),
    );
    if (absent.succeeded) return true;
    const lower = await store.call('raise token floor', () =>
      ours()
        .and(offsetKey, 'Value', '<', value)
        .then(store.client.put(offsetKey).value(value))
        .else(store.client.get(l.path), store.client.get(offsetKey))
        .commit(),
    );
    if (lower.succeeded) return true;
    const [mineNow, stored] = [lower.responses[0]!.response_range.kvs[0], lower.responses[1]!.response_range.kvs[0]];
    if (!mineNow || BigInt(mineNow.create_revision) !== l.revision) return false;
    if (stored && stored.value.toString() >= value) return true;
    // The offset key went away between the two transactions: try again.
  }
  throw new BackendError(store.name, 'raise token floor', { cause: new Error('the offset kept changing') });
}

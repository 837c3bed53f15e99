// Every claim, a mutex's and a shared key's (semaphore permits, read and write locks), by one recipe,
// etcd's Go `concurrency.Mutex`: the acquirer writes its own key under the key's prefix, bound to
// an etcd lease of its own, in one transaction that also reads what decides its grant and the key's
// token offset. The token is our key's create revision plus that offset (etcd's revisions only
// grow, also across restarts). A claim not granted withdraws (one attempt) or waits with its lease
// kept alive, and one that fails or is given up removes its key. What differs between the two key
// spaces is a strategy, `ClaimRule`: what the join reads, when it is granted, how it waits, how a
// holder raises the key's token floor. The lease carries its rule.
import { BackendError, LimitMismatchError } from '@deadbolt/core';
import { grantable, keySpace, type AcquireRequest, type Claim, type KeySpace, type LeaseKeeper } from '@deadbolt/core/backend';
import type { IKeyValue, IOperation, IRangeResponse } from 'etcd3';
import { noop, offsetOf, type EtcdLockLease, type EtcdStore, type LeaseRule } from './store.js';

/** What a claim's join read and wrote: our key, its create revision, the transaction's revision and reads. */
interface Joined {
  readonly req: AcquireRequest;
  readonly prefix: string;
  readonly offsetKey: string;
  readonly path: string;
  /** Our key's create revision: its place in the key's queue. */
  readonly mine: bigint;
  /** The join's revision. */
  readonly revision: bigint;
  /** The rule's `before` reads (only when the join made our key; empty when it found it). */
  readonly before: readonly IRangeResponse[];
  /** The rule's `after` reads. */
  readonly after: readonly IRangeResponse[];
}

/** A claim's course after its join: granted on the join's reads, or a wait that resolves the offset read with the grant. */
interface Course {
  readonly granted: boolean;
  /** Waits until the claim is granted; rejects with `signal.reason` on abort, or with the store's error. */
  wait(signal: AbortSignal): Promise<bigint>;
}

/** What one key space's claims do differently (see the top of this file). */
interface ClaimRule extends LeaseRule {
  /** What our key holds. */
  value(req: AcquireRequest): string;
  /** The join's reads besides the offset: `before` our key is written (when the join writes it), `after`. */
  reads(store: EtcdStore, prefix: string): { before: IOperation[]; after: IOperation[] };
  /** The claim's course after its join. @throws LimitMismatchError (shared keys). */
  course(store: EtcdStore, joined: Joined): Course;
}

/** A claim (see `LockBackend.acquire`), by the rule of its key space. */
export async function acquireClaim(store: EtcdStore, req: AcquireRequest): Promise<EtcdLockLease | null> {
  const space = keySpace(req);
  const rule = RULES[space];
  const prefix = store.prefixFor(req.key, space);
  const offsetKey = store.offsetKeyFor(req.key, space);
  const path = prefix + req.owner;
  const value = rule.value(req);
  const ttlSeconds = req.ttlMs / 1000;
  // When our lease was last set to its full ttl (a request's send time): the lease counts from here.
  let acquiredAt = performance.now();
  const etcdLease = store.newLease(ttlSeconds);
  let created = false;
  try {
    const leaseId = await store.call('grant lease', () => etcdLease.grant());
    const { before, after } = rule.reads(store, prefix);
    // One transaction: our key and the reads; a retried call finds its key already there.
    const result = await store.call('acquire', () =>
      store.client
        .if(path, 'Create', '==', 0)
        .then(...before, store.client.put(path).value(value).lease(leaseId), ...after, store.client.get(offsetKey))
        .else(store.client.get(path), ...after, store.client.get(offsetKey))
        .commit(),
    );
    created = true;
    const ranges = result.responses.map((r) => r.response_range);
    const revision = BigInt(result.header.revision);
    const mine = result.succeeded ? revision : BigInt(ranges[0]!.kvs[0]!.create_revision);
    const read = ranges.slice(result.succeeded ? before.length + 1 : 1);
    let offset = offsetOf(read.at(-1)!.kvs[0]?.value);
    const course = rule.course(store, {
      req,
      prefix,
      offsetKey,
      path,
      mine,
      revision,
      before: result.succeeded ? ranges.slice(0, before.length) : [],
      after: read.slice(0, -1),
    });
    if (!course.granted) {
      if (!req.wait) {
        await store.call('acquire', () => store.client.delete().key(path).exec());
        await etcdLease.revoke().catch(noop);
        return null;
      }
      // Waiting can outlast the ttl: our lease is kept alive meanwhile.
      const keeper: LeaseKeeper = store.keepWaiting(etcdLease, ttlSeconds, acquiredAt, req.signal);
      try {
        offset = await course.wait(keeper.signal);
      } catch (error) {
        throw store.keptError(keeper, req.signal, error);
      } finally {
        await keeper.stop();
      }
      if (keeper.lost) throw store.keptError(keeper, req.signal);
      // The lease counts from its last confirmed keep-alive.
      acquiredAt = keeper.since;
    }
    return store.granted(rule, req, { mine, offset, revision, acquiredAt, path, value, etcdLease, ttlSeconds });
  } catch (error) {
    // A cancelled, timed-out or failed claim removes its key and lease before reporting.
    throw await store.giveUp(created, path, etcdLease, ttlSeconds, error);
  }
}

/**
 * The mutex: granted when our key is the oldest (the holder's). A waiter watches only the nearest
 * earlier key and re-checks when it goes: FIFO by create revision, no thundering herd.
 */
const MUTEX_RULE: ClaimRule = {
  value: (req) => req.owner,
  // Before our key: the newest key, the one a waiter watches first. After: the holder (the oldest).
  reads: (store, prefix) => ({
    before: [store.client.getAll().prefix(prefix).sort('Create', 'Descend').limit(1)],
    after: [store.holderQuery(prefix)],
  }),
  course: (store, j) => ({
    granted: BigInt(j.after[0]!.kvs[0]?.create_revision ?? -1) === j.mine,
    wait: (signal) => waitForPredecessors(store, j, signal, j.before[0]?.kvs[0]?.key),
  }),
  raiseFloor: raiseMutexFloor,
};

/**
 * Wait until no key under the prefix has a create revision below ours, watching only the nearest
 * earlier key. Each look is one transaction that also checks our key is still there (so our
 * lease is alive) and reads the token offset, which is final once we hold; resolves with that
 * offset. A watch is made before the look that finds its key still there, so the key's deletion
 * comes after the watch began and is delivered at once (see `EtcdStore.watchDeletion`). After a deletion,
 * the next look is the grant: the handoff is one event and one transaction, the watch's cancel
 * going out beside it. Rejects with `signal.reason` on abort. `first`: the nearest earlier key as
 * the join's transaction read it.
 *
 * When the look found that key alone ahead of ours (it is the holder's), its deletion is the
 * grant itself, with no look after it, provided the watch saw nothing else first: no write to
 * that key and nothing on ours. Why that is enough: no key can join ahead of ours (a new key gets
 * a newer revision), so with the holder's key gone none is ahead; ours was there throughout (its
 * deletion would have come first, on the same watch, which keeps revision order); and the offset
 * read by the look is still the offset, since only a holder raises it (`raiseTokenFloor` checks
 * the raiser's key), the only holder was that key's, and a raise writes that key too.
 */
async function waitForPredecessors(store: EtcdStore, j: Joined, signal: AbortSignal, first?: Buffer): Promise<bigint> {
  const { prefix, offsetKey, path, mine } = j;
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
              .prefix(prefix)
              .maxCreateRevision((mine - 1n).toString())
              .sort('Create', 'Descend')
              .limit(1),
            store.client.get(offsetKey),
            store.holderQuery(prefix),
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
 * A mutex's token floor (see `LockBackend.raiseTokenFloor`). Later holders' keys are newer than
 * ours, so an offset of `floor - our revision` puts every later token above `floor`; written only if
 * our key (so our hold: nobody is granted before it goes) still exists. Our key is written again
 * (same value, same lease) in the same step: a waiter watching it then knows the offset it read may
 * be old (see `waitForPredecessors`).
 */
async function raiseMutexFloor(store: EtcdStore, l: EtcdLockLease, floor: bigint): Promise<boolean> {
  const leaseId = await store.call('raise token floor', () => l.etcdLease.grant());
  const result = await store.call('raise token floor', () =>
    store.client
      .if(l.path, 'Create', '==', l.revision.toString())
      .then(
        store.client.put(store.offsetKeyFor(l.key, 'mutex')).value((floor - l.revision).toString()),
        store.client.put(l.path).value(l.value).lease(leaseId),
      )
      .commit(),
  );
  return result.succeeded;
}

/** One claim in a shared key's queue, as read from its etcd key (valued `<S|X>:<limit>`). */
interface QueuedClaim {
  readonly revision: bigint;
  readonly mode: Claim['mode'];
  readonly limit: number;
}

const queuedClaim = (kv: IKeyValue): QueuedClaim => ({
  revision: BigInt(kv.create_revision),
  mode: kv.value.toString().startsWith('X') ? 'exclusive' : 'shared',
  limit: Number(kv.value.toString().slice(2)),
});

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

/**
 * A shared key: the claims in create-revision order are the queue, judged by core's rule
 * (`grantable`). Limits travel in every claim's value, so a newcomer with another limit sees it and
 * withdraws. A blocked claim may be let in by the departure of any claim ahead of it, so a waiter
 * watches the prefix for deletions (one watch for the whole wait) and re-reads after each.
 */
const SHARED_RULE: ClaimRule = {
  value: (req) => `${req.mode === 'exclusive' ? 'X' : 'S'}:${req.limit}`,
  reads: (store, prefix) => ({ before: [], after: [store.client.getAll().prefix(prefix).sort('Create', 'Ascend')] }),
  course(store, j) {
    const { req, prefix, offsetKey, path, mine } = j;
    const misconfigured = new Set<bigint>();
    const granted = (claims: readonly IKeyValue[]) => {
      const queue = inForce(req, misconfigured, claims.map(queuedClaim));
      const index = queue.findIndex((c) => c.revision === mine);
      if (index < 0) throw store.waiterGone(new Error("the claim's key is gone: its lease expired while it waited"));
      return grantable(queue, index, req.limit);
    };
    return {
      granted: granted(j.after[0]!.kvs),
      async wait(signal) {
        let seenAt = j.revision;
        let deletions: Awaited<ReturnType<EtcdStore['prefixDeletions']>> | undefined;
        try {
          for (;;) {
            if (!deletions || deletions.failed) {
              // A new watch is followed by a new read, so nothing deleted in between goes unseen.
              deletions?.cancel();
              deletions = await store.prefixDeletions(prefix, signal);
            } else await deletions.after(seenAt, signal);
            // The offset is read by the same read that judges the claim granted.
            const claims = () => store.client.getAll().prefix(prefix).sort('Create', 'Ascend');
            const now = await store.call('wait', () =>
              store.client
                .if(path, 'Create', '>', 0)
                .then(claims(), store.client.get(offsetKey))
                .else(claims(), store.client.get(offsetKey))
                .commit(),
            );
            seenAt = BigInt(now.header.revision);
            if (granted(now.responses[0]!.response_range.kvs)) return offsetOf(now.responses[1]!.response_range.kvs[0]?.value);
          }
        } finally {
          deletions?.cancel();
        }
      },
    };
  },
  raiseFloor: raiseSharedFloor,
};

/**
 * A shared key's floor: as the mutex's, but other holders may raise it at the same time, so the
 * write is also conditioned on the stored offset being lower (or absent); one that is already
 * higher covers our floor too.
 */
async function raiseSharedFloor(store: EtcdStore, l: EtcdLockLease, floor: bigint): Promise<boolean> {
  const offsetKey = store.offsetKeyFor(l.key, 'shared');
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

/** Each key space's rule. */
const RULES: Record<KeySpace, ClaimRule> = { mutex: MUTEX_RULE, shared: SHARED_RULE };

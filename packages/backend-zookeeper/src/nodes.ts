// The znodes of a key's queue, and the requests that make, read, watch and remove them: each bounded
// (a request unanswered within a ttl ends its session), each failure typed.
import { BackendError, BackendUnavailableError, LimitMismatchError } from '@deadbolt/core';
import { answerWithin, backendFailure, type Claim } from '@deadbolt/core/backend';
import { NAME, type Session } from './sessions.js';
import { Code, CreateMode, codeOf, isUnavailable, zk, type Stat } from './zookeeper-client.js';

export const NODE_PREFIX = 'lock-';

/** A shared claim's mode and limit, from its node's name `lock-<S|X><limit>-<owner>-<sequence>`. */
export function claimOf(name: string): { mode: Claim['mode']; limit: number } {
  return { mode: name[NODE_PREFIX.length] === 'X' ? 'exclusive' : 'shared', limit: parseInt(name.slice(NODE_PREFIX.length + 1), 10) };
}
/** The owner id in a claim node's name (`lock-<owner>-<sequence>`, or a shared claim's `lock-<S|X><limit>-<owner>-<sequence>`). */
export function ownerOf(name: string): string {
  return /^lock-(?:[SX]\d+-)?(.+?)-(-?\d+)$/.exec(name)![1]!;
}
/**
 * A key's token offset is the name of a persistent child `floor-<offset>` (absent = 0), set only by
 * a holder (`raiseTokenFloor`). Being a child, it comes with the same listing that finds the holder,
 * so it is read in one step with the grant at no extra request.
 */
export const FLOOR_PREFIX = 'floor-';
/**
 * A sequential node's sequence: the signed 32-bit number ZooKeeper appends to its name (the
 * parent's child version, `%010d`: `-000000005` once it has wrapped past 2^31 − 1).
 */
export function sequenceOf(name: string): number {
  const m = /-(-?\d+)$/.exec(name);
  return m ? Number(m[1]) : NaN;
}

/**
 * Queue order of two sequential nodes of one parent, as ZooKeeper counts: the sequence wraps from
 * 2^31 − 1 to −2^31 (a key busy for ~10^9 cycles gets there), so it is compared as a serial number
 * (RFC 1982): `a` is before `b` when `b` is less than 2^31 steps ahead of it. The live nodes of one
 * parent are never that far apart, so the order survives the wrap. A plain numeric or text sort
 * would put a newcomer after the wrap first in the queue, beside the holder.
 */
export function bySequence(a: string, b: string): number {
  return (sequenceOf(a) - sequenceOf(b)) | 0;
}
export const EMPTY = Buffer.alloc(0);
const REAP_DELAY_MS = 1000;
/** Creates our sequential node `<name>-<sequence>`, creating the key's node first when it is missing. */
export async function createNode(session: Session, parent: string, name: string): Promise<string> {
  const data = Buffer.from(name);
  for (let attempt = 0; ; attempt++) {
    try {
      return (await request<string>(session, (cb) =>
        session.client.create(`${parent}/${name}-`, data, CreateMode.EPHEMERAL_SEQUENTIAL, cb),
      ))!;
    } catch (error) {
      if (codeOf(error) !== Code.NO_NODE || attempt > 20) throw zkError('acquire', error);
    }
    // The key's node is missing (first use, or reaped by a release since): create it, racing others.
    await ensurePath(session, parent);
  }
}

/**
 * Joins a shared key's queue with our claim `<name>-<sequence>`, or throws LimitMismatchError
 * when live claims were made with another limit. Every live claim has the same limit, because
 * each is created by a multi-op that makes sure of it:
 * - beside live claims (whose names carry their limit), with a check that one of them still
 *   exists: a node with children cannot be removed, so it is the same key node and the limit
 *   still holds;
 * - when the key node has no claim, with a write of its data at the version read with the
 *   listing (so any claim made since, which writes it too, fails this one), or, when it has no
 *   child at all, by removing it at that version and making it anew (which fails if anything was
 *   added since, whatever happened to it meanwhile).
 * Without this, a newcomer with another limit joined first and withdrew later: waiters that saw
 * it in between failed with its limit, and ones granted after the claims it was measured
 * against left could not tell which limit held.
 */
export async function joinShared(session: Session, parent: string, name: string, shared: { key: string; limit: number }): Promise<string> {
  const data = Buffer.from(String(shared.limit));
  for (let attempt = 0; attempt < 100; attempt++) {
    const listing = await call<[string[], Stat | undefined]>(
      session,
      'acquire',
      (cb) => session.client.getChildren(parent, undefined, (error, children, stat) => cb(error, [children, stat])),
      [Code.NO_NODE],
    );
    const multi = session.client.transaction();
    if (!listing) {
      await ensurePath(session, parent.slice(0, parent.lastIndexOf('/')));
      multi.create(parent, data, CreateMode.PERSISTENT);
    } else {
      const [children, stat] = listing;
      const claims = children.filter((n) => n.startsWith(NODE_PREFIX)).sort(bySequence);
      const newest = claims.at(-1);
      if (newest) {
        const { limit } = claimOf(newest);
        if (limit !== shared.limit) throw new LimitMismatchError(shared.key, limit, shared.limit);
        multi.check(`${parent}/${newest}`, -1);
      } else if (children.length === 0) {
        multi.remove(parent, stat!.version).create(parent, data, CreateMode.PERSISTENT);
      } else {
        multi.setData(parent, data, stat!.version);
      }
    }
    multi.create(`${parent}/${name}-`, Buffer.from(name), CreateMode.EPHEMERAL_SEQUENTIAL);
    const results = await call<unknown[]>(session, 'acquire', (cb) => multi.commit(cb), [
      Code.NO_NODE,
      Code.NODE_EXISTS,
      Code.NOT_EMPTY,
      Code.BAD_VERSION,
    ]);
    const created = results?.at(-1) as { path?: string } | undefined;
    if (created?.path) return created.path;
  }
  throw new BackendError(NAME, 'acquire', {
    cause: new Error(`the queue of ${parent} kept changing under 100 attempts to join it`),
  });
}

/** Creates `path` and any missing ancestors (persistent, empty); an existing node is fine. */
export async function ensurePath(session: Session, path: string): Promise<void> {
  const create = () => request(session, (cb) => session.client.create(path, EMPTY, CreateMode.PERSISTENT, cb), [Code.NODE_EXISTS]);
  try {
    await create();
  } catch (error) {
    if (codeOf(error) !== Code.NO_NODE) throw zkError('acquire', error);
    await ensurePath(session, path.slice(0, path.lastIndexOf('/')));
    await create().catch((again: unknown) => {
      throw zkError('acquire', again);
    });
  }
}

/** The key's queue in order, and its token offset (the largest `floor-` child, normally the only one). */
export async function children(session: Session, parent: string, operation = 'acquire'): Promise<{ queue: string[]; offset: bigint }> {
  const children =
    (await call<string[]>(session, operation, (cb) => session.client.getChildren(parent, undefined, cb), [Code.NO_NODE])) ?? [];
  let offset = 0n;
  for (const name of children) {
    if (!name.startsWith(FLOOR_PREFIX)) continue;
    const value = BigInt(name.slice(FLOOR_PREFIX.length));
    if (value > offset) offset = value;
  }
  return { queue: children.filter((n) => n.startsWith(NODE_PREFIX)).sort(bySequence), offset };
}

/** Resolves when `path` no longer exists; rejects with `signal.reason`, or when the session is lost. */
export function gone(session: Session, path: string, signal: AbortSignal): Promise<void> {
  // Any event on the watch means the predecessor changed: look at the queue again.
  return watching(session, signal, (settle) =>
    session.client.exists(
      path,
      () => settle(),
      (error, stat) => {
        if (error) settle(zkError('acquire', error));
        else if (!stat) settle();
      },
    ),
  );
}

/** A wait on a watch that `start` sets: settles when it calls `settle`, the signal aborts or the session is lost. */
export function watching(session: Session, signal: AbortSignal, start: (settle: (error?: unknown) => void) => void): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const settle = (error?: unknown) => {
      signal.removeEventListener('abort', onAbort);
      session.lost.removeEventListener('abort', onLost);
      if (error === undefined) resolve();
      else reject(error);
    };
    const onAbort = () => settle(signal.reason);
    const onLost = () => settle(new BackendUnavailableError(NAME, 'acquire', { cause: session.lost.reason }));
    if (signal.aborted) return onAbort();
    if (session.lost.aborted) return onLost();
    signal.addEventListener('abort', onAbort, { once: true });
    session.lost.addEventListener('abort', onLost, { once: true });
    start(settle);
  });
}

export async function remove(session: Session, path: string): Promise<void> {
  await call(session, 'release', (cb) => session.client.remove(path, -1, cb), [Code.NO_NODE]);
}

/** A create whose reply never came may still have made our node: find it by its name (which holds our owner id). */
export async function removeOwn(session: Session, parent: string, name: string): Promise<void> {
  for (const child of (await children(session, parent)).queue) {
    if (child.startsWith(`${name}-`)) await remove(session, `${parent}/${child}`);
  }
}

/**
 * Resolves when the key's claims differ from `seen` (at once if they already do), as read by the
 * same request that sets the watch; rejects with `signal.reason`, or when the session is lost.
 */
export function childrenChanged(session: Session, parent: string, seen: readonly string[], signal: AbortSignal): Promise<void> {
  return watching(session, signal, (settle) =>
    session.client.getChildren(
      parent,
      () => settle(),
      (error, children) => {
        if (error) return settle(codeOf(error) === Code.NO_NODE ? undefined : zkError('acquire', error));
        const now = children.filter((n) => n.startsWith(NODE_PREFIX)).sort(bySequence);
        if (now.length !== seen.length || now.some((n, i) => n !== seen[i])) settle();
      },
    ),
  );
}

/** One request on the session, bounded (`request`), its failure typed; a lost session fails at once. */
export async function call<T>(
  session: Session,
  operation: string,
  start: (cb: (error: Error | null, result?: T) => void) => void,
  accept: readonly number[] = [],
): Promise<T | undefined> {
  if (session.lost.aborted) throw new BackendUnavailableError(NAME, operation, { cause: session.lost.reason });
  try {
    return await request(session, start as Parameters<typeof zk<T>>[0], accept);
  } catch (error) {
    throw zkError(operation, error);
  }
}

/**
 * One request on the session, bounded. node-zookeeper-client never declares a silent connection
 * dead (it only sends another ping), so a request would wait as long as the partition lasts. A
 * request without an answer within a ttl (at least 2 s) means the session can no longer be
 * counted on: it is ended (the standard policy), which fails everything waiting on it.
 */
export function request<T>(session: Session, start: Parameters<typeof zk<T>>[0], accept: readonly number[] = []): Promise<T | undefined> {
  const ms = Math.max(2000, session.ttlMs);
  return answerWithin(zk(start, accept), ms, NAME, 'request', { onSilent: (error) => session.end(error) });
}

/** The typed error for a failed request. */
export function zkError(operation: string, error: unknown): Error {
  return backendFailure(NAME, operation, error, isUnavailable);
}

/** Key nodes to remove once no lock of ours has used them for REAP_DELAY_MS. */
export class Reaper {
  readonly #reaps = new Map<string, { timer: NodeJS.Timeout; run: () => Promise<void> }>();

  /**
   * Removes the key's node if it is still empty a little later. Deferred so that a key taken again
   * and again (the common case) is not deleted and re-created on every cycle, at two writes each;
   * a concurrent acquirer that finds it gone re-creates it.
   */
  later(session: Session, parent: string): void {
    this.cancel(parent);
    const run = async () => {
      if (this.#reaps.get(parent)?.run === run) this.#reaps.delete(parent);
      if (session.lost.aborted) return;
      await request(session, (cb) => session.client.remove(parent, -1, cb), [Code.NO_NODE, Code.NOT_EMPTY]).catch(() => undefined);
    };
    const timer = setTimeout(() => void run(), REAP_DELAY_MS);
    timer.unref();
    this.#reaps.set(parent, { timer, run });
  }

  /** Keeps `parent` (a lock of ours uses it again). */
  cancel(parent: string): void {
    const reap = this.#reaps.get(parent);
    if (!reap) return;
    clearTimeout(reap.timer);
    this.#reaps.delete(parent);
  }

  /** Runs every pending removal now (the backend is closing). */
  async flush(): Promise<void> {
    const pending = [...this.#reaps.values()];
    this.#reaps.clear();
    for (const reap of pending) clearTimeout(reap.timer);
    await Promise.allSettled(pending.map((reap) => reap.run()));
  }
}

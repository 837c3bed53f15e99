/** @module @deadbolt/zookeeper/testing */
// @deadbolt/zookeeper/testing: what tests, the benchmark and fault drills read of a backend that is
// not its API: its sessions (to expire one) and where a lock's nodes live.
import type { StoreClaims } from '@deadbolt/core/testing';
import { children, ownerOf, remove } from './nodes.js';
import type { ZooKeeperSession } from './sessions.js';
import { internalsOf, type ZooKeeperBackend } from './zookeeper-backend.js';

const internals = (backend: ZooKeeperBackend) => internalsOf.of(backend);

/** The backend's open sessions (force one to expire, and its locks are lost as a crashed client's would be). @throws InvalidArgumentError when `backend` is not a ZooKeeper backend. */
export function sessions(backend: ZooKeeperBackend): ZooKeeperSession[] {
  return internals(backend).sessions.open();
}

/**
 * The backend's session whose timeout is `ttlMs`, connected (every lock with that ttl shares it):
 * its client reads and writes the nodes directly.
 * @throws LockerClosedError once the backend is closed; BackendUnavailableError when no session
 * connects in time; BackendError when the server will not grant that timeout; InvalidArgumentError
 * when `backend` is not a ZooKeeper backend.
 */
export function session(backend: ZooKeeperBackend, ttlMs: number): Promise<ZooKeeperSession> {
  return internals(backend).sessions.session(ttlMs);
}

/** The node under which `key`'s mutex queues its claimants. @throws InvalidArgumentError when `backend` is not a ZooKeeper backend. */
export function pathFor(backend: ZooKeeperBackend, key: string): string {
  return internals(backend).parentOf(key, 'mutex');
}

/** The node under which a shared key's (semaphore, read-write lock) claims queue. @throws InvalidArgumentError when `backend` is not a ZooKeeper backend. */
export function sharedPathFor(backend: ZooKeeperBackend, key: string): string {
  return internals(backend).parentOf(key, 'shared');
}

/** The timeout of the session `claimsOf` reads and removes nodes on: long, so a loaded machine does not end it. */
const READER_TTL_MS = 10_000;

/**
 * `key`'s claims as `backend`'s lock nodes, read and removed on a session of its own (opened on
 * first use; the backend's `close()` closes it): each claimant's node names its owner, in sequence
 * order. @throws InvalidArgumentError when `backend` is not a ZooKeeper backend; its methods reject
 * with LockerClosedError, BackendUnavailableError or BackendError.
 */
export function claimsOf(backend: ZooKeeperBackend): StoreClaims {
  internals(backend); // a backend of another kind is refused here, not at the first call
  const line = async (parent: string) => {
    const on = await internals(backend).sessions.session(READER_TTL_MS);
    return { on, queue: (await children(on, parent, 'inspect')).queue };
  };
  const owners = async (parent: string) => (await line(parent)).queue.map(ownerOf);
  return {
    inspect: (key) => owners(pathFor(backend, key)),
    async loseClaim(key) {
      const parent = pathFor(backend, key);
      const { on, queue } = await line(parent);
      for (const node of queue) await remove(on, `${parent}/${node}`);
    },
    inspectShared: (key) => owners(sharedPathFor(backend, key)),
    async loseSharedClaim(key, owner) {
      const parent = sharedPathFor(backend, key);
      const { on, queue } = await line(parent);
      for (const node of queue) if (ownerOf(node) === owner) await remove(on, `${parent}/${node}`);
    },
  };
}

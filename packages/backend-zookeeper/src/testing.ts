/** @module @deadbolt/zookeeper/testing */
// @deadbolt/zookeeper/testing: what tests, the benchmark and fault drills read of a backend that is
// not its API: its sessions (to expire one) and where a lock's nodes live.
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

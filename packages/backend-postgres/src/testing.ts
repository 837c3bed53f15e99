/** @module @deadbolt/postgres/testing */
// @deadbolt/postgres/testing: what tests, the benchmark and fault drills read of a backend that is
// not its API: the server processes of its connections.
import { storeOf, type PostgresBackend } from './postgres-backend.js';

/**
 * Server process ids of the backend's open connections (`pg_terminate_backend` one and it fails as
 * a crashed connection would). A live set: it changes as connections open and close.
 * @throws InvalidArgumentError when `backend` is not a PostgreSQL backend.
 */
export function pids(backend: PostgresBackend): ReadonlySet<number> {
  return storeOf.of(backend).pids;
}

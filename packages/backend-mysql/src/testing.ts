/** @module @deadbolt/mysql/testing */
// @deadbolt/mysql/testing: what tests, the benchmark and fault drills read of a backend that is not
// its API: its server threads, and where a session-mode lock lives on the server.
import type { RowDataPacket } from 'mysql2/promise';
import { storeOf, type MysqlBackend } from './mysql-backend.js';

const store = (backend: MysqlBackend) => storeOf.of(backend);

/**
 * Server thread ids of the backend's open connections (`KILL` one and it fails as a crashed
 * connection would). A live set: it changes as the pool opens and closes connections.
 * @throws InvalidArgumentError when `backend` is not a MySQL backend.
 */
export function threadIds(backend: MysqlBackend): ReadonlySet<number> {
  return store(backend).threadIds;
}

/**
 * The `GET_LOCK` name of a key in session mode: a digest of the backend's database, table and the
 * key (the server caps names at 64 characters, and they are server-wide). After the backend's first
 * acquisition (which reads the database) only. @throws BackendError before that;
 * InvalidArgumentError when `backend` is not a MySQL backend.
 */
export function lockName(backend: MysqlBackend, key: string): string {
  return store(backend).lockName(key);
}

/**
 * Session mode: the server thread (connection id) that holds `key`'s named lock, or null. `KILL` it
 * and the holder loses its lock as a crashed one would.
 * @throws BackendUnavailableError / BackendError when the server fails; InvalidArgumentError when
 * `backend` is not a MySQL backend.
 */
export async function holderThread(backend: MysqlBackend, key: string): Promise<number | null> {
  const s = store(backend);
  await s.tables.run();
  const rows = await s.run<RowDataPacket[]>('holder', s.sql.holderThread, [s.lockName(key)]);
  return (rows[0]?.['thread'] as number | null | undefined) ?? null;
}

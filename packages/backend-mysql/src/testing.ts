/** @module @deadbolt/mysql/testing */
// @deadbolt/mysql/testing: what tests, the benchmark and fault drills read of a backend that is not
// its API: its server threads, and where a session-mode lock lives on the server.
import type { StoreClaims } from '@deadbolt/core/testing';
import { escapeId, type RowDataPacket } from 'mysql2/promise';
import { MysqlBackend, storeOf } from './mysql-backend.js';

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

/**
 * `key`'s claims in `backend`'s tables, read and broken through its pool. Lease mode: the key's row
 * (its owner while its lease runs) and its shared claims' rows. Session mode: the named lock; its
 * holder's owner id is read from the key's row, and it is lost by `KILL`ing the holder's
 * connection (session mode has no shared claims). @throws InvalidArgumentError when `backend` is
 * not a MySQL backend; its methods reject with BackendUnavailableError / BackendError.
 */
export function claimsOf(backend: MysqlBackend): StoreClaims {
  const s = store(backend);
  const hash = (key: string) => MysqlBackend.hash(key);
  const query = async (statement: string, params: unknown[]) => {
    await s.tables.run();
    return s.run<RowDataPacket[]>('inspect', statement, params);
  };
  const owners = (rows: RowDataPacket[]) => rows.map((r) => String(r['owner']));
  // Statements are prepared (no `??` placeholders): the table names go in escaped.
  const [locks, shared] = [escapeId(s.table), escapeId(`${s.table}_shared`)];
  if (backend.mode === 'session')
    return {
      async inspect(key) {
        if ((await holderThread(backend, key)) === null) return [];
        return owners(await query(`SELECT owner FROM ${locks} WHERE key_hash = ?`, [hash(key)]));
      },
      async loseClaim(key) {
        const thread = await holderThread(backend, key);
        if (thread !== null) await query('KILL ?', [thread]);
      },
    };
  return {
    async inspect(key) {
      const live = `SELECT owner FROM ${locks} WHERE key_hash = ? AND owner IS NOT NULL AND expires_at > UTC_TIMESTAMP(6)`;
      return owners(await query(live, [hash(key)]));
    },
    async loseClaim(key) {
      await query(`UPDATE ${locks} SET owner = NULL, expires_at = NULL WHERE key_hash = ?`, [hash(key)]);
    },
    async inspectShared(key) {
      const live = `SELECT owner FROM ${shared} WHERE key_hash = ? AND expires_at > UTC_TIMESTAMP(6) ORDER BY token`;
      return owners(await query(live, [hash(key)]));
    },
    async loseSharedClaim(key, owner) {
      await query(`DELETE FROM ${shared} WHERE key_hash = ? AND owner = ?`, [hash(key), owner]);
    },
  };
}

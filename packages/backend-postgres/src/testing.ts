/** @module @deadbolt/postgres/testing */
// @deadbolt/postgres/testing: what tests, the benchmark and fault drills read of a backend that is
// not its API: the server processes of its connections, and where a lock lives on the server.
import type { StoreClaims } from '@deadbolt/core/testing';
import { storeOf, type PostgresBackend } from './postgres-backend.js';

/**
 * Server process ids of the backend's open connections (`pg_terminate_backend` one and it fails as
 * a crashed connection would). A live set: it changes as connections open and close.
 * @throws InvalidArgumentError when `backend` is not a PostgreSQL backend.
 */
export function pids(backend: PostgresBackend): ReadonlySet<number> {
  return storeOf.of(backend).pids;
}

/**
 * `key`'s claims in `backend`'s tables, read and broken through its pool (which must reach the
 * server itself, not a transaction pooler, for session mode's locks). Lease mode: the key's row
 * (its owner while its lease runs), its waiters' rows in arrival order, its shared claims' rows.
 * Session mode: the advisory lock; its holder's owner id is read from the key's row, each session
 * waiting in the server's own lock queue is named `waiting session <pid>` (the server neither says
 * in which order nor knows owner ids), and it is lost by ending the holder's server process
 * (session mode has no shared claims). @throws InvalidArgumentError when `backend` is not a
 * PostgreSQL backend; its methods reject with BackendUnavailableError / BackendError.
 */
export function claimsOf(backend: PostgresBackend): StoreClaims {
  const s = storeOf.of(backend);
  const table = (suffix = '') => `"${s.table}${suffix}"`;
  const rows = async (statement: string, params: unknown[]) => {
    await s.tables.run();
    return (await s.run('inspect', statement, params)).rows;
  };
  const bytes = (key: string) => Buffer.from(key, 'utf8');
  const owners = (found: Record<string, unknown>[]) => found.map((r) => String(r['owner']));
  if (backend.mode === 'session') {
    /** The server processes holding (granted) or waiting for the key's advisory lock. */
    const sessions = async (key: string) =>
      (await rows(s.sql.sessionsOn, [bytes(key), s.namespace])) as { pid: number; granted: boolean }[];
    return {
      async inspect(key) {
        const [holder, found] = [await rows(s.sql.inspectSession, [bytes(key), s.namespace]), await sessions(key)];
        return [...owners(holder), ...found.filter((f) => !f.granted).map((f) => `waiting session ${f.pid}`)];
      },
      async loseClaim(key) {
        const holder = (await sessions(key)).find((f) => f.granted)?.pid;
        if (holder !== undefined) await rows('SELECT pg_terminate_backend($1)', [holder]);
      },
    };
  }
  return {
    async inspect(key) {
      return owners(
        await rows(
          `SELECT owner FROM ${table()} WHERE lock_key = $1 AND owner IS NOT NULL AND expires_at > clock_timestamp()
           UNION ALL SELECT owner FROM (SELECT owner FROM ${table('_waiters')} WHERE lock_key = $1 AND expires_at > clock_timestamp() ORDER BY arrival) w`,
          [bytes(key)],
        ),
      );
    },
    async loseClaim(key) {
      await rows(`UPDATE ${table()} SET owner = NULL, expires_at = NULL WHERE lock_key = $1`, [bytes(key)]);
    },
    async inspectShared(key) {
      return owners(
        await rows(`SELECT owner FROM ${table('_shared')} WHERE lock_key = $1 AND expires_at > clock_timestamp() ORDER BY token`, [
          bytes(key),
        ]),
      );
    },
    async loseSharedClaim(key, owner) {
      await rows(`DELETE FROM ${table('_shared')} WHERE lock_key = $1 AND owner = $2`, [bytes(key), owner]);
    },
  };
}

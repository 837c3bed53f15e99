import type { ConformanceHarness } from '@deadbolt/conformance';
import { restartMatrixServer } from '@deadbolt/conformance';
import type { LockBackend } from '@deadbolt/core';
import { MysqlBackend } from '@deadbolt/mysql';
import { createPool } from 'mysql2/promise';

/** Reads and breaks the lock table directly. */
export function mysqlHarness(url: string, table = 'deadbolt_locks'): ConformanceHarness {
  const admin = createPool({ uri: url, connectionLimit: 2 });
  return {
    async inspect(key) {
      const [rows] = await admin.query<any[]>(
        'SELECT owner FROM ?? WHERE key_hash = ? AND owner IS NOT NULL AND expires_at > NOW(6)',
        [table, MysqlBackend.hash(key)],
      );
      return rows.map((r) => String(r.owner));
    },
    async loseClaim(key) {
      await admin.query('UPDATE ?? SET owner = NULL, expires_at = NULL WHERE key_hash = ?', [table, MysqlBackend.hash(key)]);
    },
    async dropConnection(backend: LockBackend) {
      for (const id of (backend as MysqlBackend).threadIds) await admin.query('KILL ?', [id]).catch(() => undefined);
    },
    restartServer: () => restartMatrixServer('mysql'),
    async clearAll() {
      await admin.query('DELETE FROM ??', [table]).catch((e: { errno?: number }) => {
        if (e.errno !== 1146) throw e; // no table yet
      });
    },
  };
}

/** @module @deadbolt/cassandra/testing */
// @deadbolt/cassandra/testing: what tests, the benchmark and fault drills read of the store that is
// not the backend's API: where a lock's rows live, to read or delete them directly.
import type { StoreClaims } from '@deadbolt/core/testing';
import { types } from 'cassandra-driver';
import { setupOf, type CassandraBackend } from './cassandra-backend.js';
import { CLAIM_TABLES, idFor } from './schema.js';

export { CLAIM_TABLES, idFor } from './schema.js';

/**
 * `key`'s claims in the tables of `backend`'s keyspace, read and deleted through its client (every
 * algorithm's tables: a backend of one algorithm reads the others' too). Each call first runs the
 * backend's setup (connect, schema) if it has not. @throws InvalidArgumentError when `backend` is
 * not a Cassandra backend; its methods reject with the driver's or the setup's error.
 */
export function claimsOf(backend: CassandraBackend): StoreClaims {
  const setup = setupOf.of(backend);
  const table = (name: string) => `${backend.keyspace}.${name}`;
  const rows = async (query: string, key: string, serial = false) => {
    await setup.run();
    const options = serial ? { prepare: true, consistency: types.consistencies.serial } : { prepare: true };
    return (await backend.client.execute(query, [idFor(key)], options)).rows;
  };
  return {
    async inspect(key) {
      const owners = new Set<string>();
      for (const name of CLAIM_TABLES)
        for (const row of await rows(`SELECT owner FROM ${table(name)} WHERE lock_id = ?`, key))
          if (row['owner'] !== null) owners.add(row['owner'] as string);
      return [...owners];
    },
    async loseClaim(key) {
      for (const name of CLAIM_TABLES) await rows(`DELETE FROM ${table(name)} WHERE lock_id = ?`, key);
    },
    async inspectShared(key) {
      const found = await rows(`SELECT owner FROM ${table('shared_claims')} WHERE lock_id = ?`, key, true);
      return found.map((r) => r['owner'] as string | null).filter((o): o is string => o !== null);
    },
    async loseSharedClaim(key, owner) {
      for (const row of await rows(`SELECT seq, owner FROM ${table('shared_claims')} WHERE lock_id = ?`, key, true)) {
        if (row['owner'] !== owner) continue;
        await backend.client.execute(
          `DELETE FROM ${table('shared_claims')} WHERE lock_id = ? AND seq = ? IF owner = ?`,
          [idFor(key), row['seq'], owner],
          {
            prepare: true,
          },
        );
      }
    },
  };
}

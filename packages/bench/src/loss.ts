/**
 * Loss injection for scenario 5: make the store forget a held lock, as an operator deleting the
 * record, a failover losing it or an expired session would, through the backend's own connection.
 * The same faults the conformance harnesses inject (behaviour 11a), done here with each backend's
 * `/testing` helpers.
 */
import type { LockBackend } from '@deadbolt/core';
import type { CassandraBackend } from '@deadbolt/cassandra';
import { CLAIM_TABLES, idFor } from '@deadbolt/cassandra/testing';
import type { EtcdBackend } from '@deadbolt/etcd';
import { prefixFor } from '@deadbolt/etcd/testing';
import { MysqlBackend } from '@deadbolt/mysql';
import { holderThread } from '@deadbolt/mysql/testing';
import type { PostgresBackend } from '@deadbolt/postgres';
import type { RedisBackend } from '@deadbolt/redis';
import { keysFor } from '@deadbolt/redis/testing';
import type { ZooKeeperBackend } from '@deadbolt/zookeeper';
import { pathFor, session } from '@deadbolt/zookeeper/testing';
import type { Store } from './subjects.js';

/** Deletes every claim on `key` in the store behind `backend` (undefined: no injection for `store`). */
export const breakClaim: Partial<Record<Store, (backend: LockBackend, key: string) => Promise<void>>> = {
  async redis(backend, key) {
    const redis = backend as RedisBackend;
    await redis.client.del(keysFor(redis, key).lock);
  },
  async mysql(backend, key) {
    const mysql = backend as MysqlBackend;
    if (mysql.mode === 'lease') {
      await mysql.client.query('UPDATE deadbolt_locks SET owner = NULL, expires_at = NULL WHERE key_hash = ?', [MysqlBackend.hash(key)]);
      return;
    }
    // Session mode: the claim is the named lock; end the connection that holds it.
    const thread = await holderThread(mysql, key);
    if (thread !== null) await mysql.client.query('KILL ?', [thread]);
  },
  async postgres(backend, key) {
    const pg = backend as PostgresBackend;
    const keyBytes = Buffer.from(key, 'utf8');
    if (pg.mode === 'lease') {
      await pg.client.query('UPDATE deadbolt_locks SET owner = NULL, expires_at = NULL WHERE lock_key = $1', [keyBytes]);
      return;
    }
    // Session mode: the claim is the advisory lock; end the session that holds it.
    await pg.client.query(
      `SELECT pg_terminate_backend(l.pid) FROM pg_locks l JOIN deadbolt_locks t ON l.objid = t.id::oid
       WHERE t.lock_key = $1 AND l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted`,
      [keyBytes],
    );
  },
  async etcd(backend, key) {
    const etcd = backend as EtcdBackend;
    await etcd.client.delete().prefix(prefixFor(etcd, key)).exec();
  },
  async zookeeper(backend, key) {
    const zk = backend as ZooKeeperBackend;
    const { client } = await session(zk, 10_000);
    const call = <T>(start: (cb: (error: Error | null, result?: T) => void) => void) =>
      new Promise<T | undefined>((resolve, reject) => start((error, result) => (error ? reject(error) : resolve(result))));
    const parent = pathFor(zk, key);
    for (const node of (await call<string[]>((cb) => client.getChildren(parent, undefined, cb))) ?? [])
      await call((cb) => client.remove(`${parent}/${node}`, -1, cb));
  },
  async cassandra(backend, key) {
    const c = backend as CassandraBackend;
    for (const table of CLAIM_TABLES)
      await c.client.execute(`DELETE FROM ${c.keyspace}.${table} WHERE lock_id = ?`, [idFor(key)], { prepare: true });
  },
};

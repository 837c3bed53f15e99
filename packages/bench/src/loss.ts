/**
 * Loss injection for scenario 5: make the store forget a held lock, as an operator deleting the
 * record, a failover losing it or an expired session would, through the backend's own connection.
 * The same faults the conformance harnesses inject (behaviour 11a), with the same code: each
 * backend package's `/testing` `claimsOf`.
 */
import type { LockBackend } from '@deadbolt/core';
import type { StoreClaims } from '@deadbolt/core/testing';
import type { CassandraBackend } from '@deadbolt/cassandra';
import { claimsOf as cassandraClaims } from '@deadbolt/cassandra/testing';
import type { EtcdBackend } from '@deadbolt/etcd';
import { claimsOf as etcdClaims } from '@deadbolt/etcd/testing';
import type { MysqlBackend } from '@deadbolt/mysql';
import { claimsOf as mysqlClaims } from '@deadbolt/mysql/testing';
import type { PostgresBackend } from '@deadbolt/postgres';
import { claimsOf as postgresClaims } from '@deadbolt/postgres/testing';
import type { RedisBackend } from '@deadbolt/redis';
import { claimsOf as redisClaims } from '@deadbolt/redis/testing';
import type { ZooKeeperBackend } from '@deadbolt/zookeeper';
import { claimsOf as zookeeperClaims } from '@deadbolt/zookeeper/testing';
import type { Store } from './subjects.js';

const CLAIMS: Partial<Record<Store, (backend: LockBackend) => StoreClaims>> = {
  redis: (backend) => redisClaims(backend as RedisBackend),
  mysql: (backend) => mysqlClaims(backend as MysqlBackend),
  postgres: (backend) => postgresClaims(backend as PostgresBackend),
  etcd: (backend) => etcdClaims(backend as EtcdBackend),
  zookeeper: (backend) => zookeeperClaims(backend as ZooKeeperBackend),
  cassandra: (backend) => cassandraClaims(backend as CassandraBackend),
};

/** The claims in the store behind `backend`, a backend of `store`, to break (undefined: no injection for `store`). */
export function claimsIn(store: Store, backend: LockBackend): StoreClaims | undefined {
  return CLAIMS[store]?.(backend);
}

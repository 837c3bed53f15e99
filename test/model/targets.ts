/**
 * What the generated programs run on: each store kind of the test matrix in a scratch namespace of
 * its own (a store-wide token floor raised by a migration lifts nobody else's tokens), and
 * migrations between two of them. Each process of a program is a locker over new backends.
 */
import { cassandraFence } from '@deadbolt/cassandra';
import { matrixUrl } from '@deadbolt/conformance';
import { createLocker, memoryFence, migratingBackend, type Fence, type LockBackend, type MigrationPhase } from '@deadbolt/core';
import { etcdFence } from '@deadbolt/etcd';
import { mysqlFence } from '@deadbolt/mysql';
import { postgresFence } from '@deadbolt/postgres';
import { redisFence } from '@deadbolt/redis';
import { zookeeperFence } from '@deadbolt/zookeeper';
import { scratchNamespace, type Namespace, type StoreKind } from '../namespaces.js';
import type { Target } from './program.js';

/** Each store's fence, made from its test-matrix URL (resources are new for each run). */
const FENCES: Record<StoreKind, () => Fence> = {
  memory: () => memoryFence(),
  redis: () => redisFence({ url: matrixUrl('redis') }),
  mysql: () => mysqlFence({ url: matrixUrl('mysql') }),
  postgres: () => postgresFence({ url: matrixUrl('postgres') }),
  zookeeper: () => zookeeperFence({ url: matrixUrl('zookeeper') }),
  etcd: () => etcdFence({ url: matrixUrl('etcd') }),
  cassandra: () => cassandraFence({ url: matrixUrl('cassandra') }),
};

/** A ttl every store takes (whole seconds, and ZooKeeper's shortest session), but short: a lost lease shows soon. */
const ttlOf = (kinds: StoreKind[]) => (kinds.includes('zookeeper') ? 4000 : kinds.every((k) => k === 'memory') ? 1000 : 2000);

export interface TargetHandle extends Target {
  /** Removes the scratch namespaces. */
  purge(): Promise<void>;
}

/** One store kind, or (`to` given) a migration from `kind` to `to`, on namespaces made for it. */
export async function makeTarget(kind: StoreKind, to?: StoreKind): Promise<TargetHandle> {
  const spaces: Namespace[] = [scratchNamespace(kind), ...(to ? [scratchNamespace(to)] : [])];
  for (const space of spaces) await space.ready();
  const probe: LockBackend[] = await Promise.all(spaces.map((s) => s.backend()));
  const fifo = probe.every((b) => b.capabilities.fairness === 'fifo');
  await Promise.all(probe.map((b) => b.close()));
  const ttlMs = ttlOf(to ? [kind, to] : [kind]);
  const locker = async () => createLocker(await spaces[0]!.backend(), { ttlMs });
  const makeShared = async () => ({
    operator: await locker(),
    clients: [await locker(), await locker(), await locker()],
    fence: FENCES[kind](),
  });
  let shared: ReturnType<typeof makeShared> | undefined;
  return {
    name: to ? `${kind} -> ${to}` : kind,
    fifo,
    ttlMs,
    migration: to !== undefined,
    async newLocker(phase: MigrationPhase) {
      const backend = to
        ? migratingBackend({ from: await spaces[0]!.backend(), to: await spaces[1]!.backend(), phase })
        : await spaces[0]!.backend();
      return createLocker(backend, { ttlMs });
    },
    fence: FENCES[kind],
    shared: to ? undefined : () => (shared ??= makeShared()),
    async purge() {
      if (shared) {
        const { operator, clients, fence } = await shared;
        await Promise.allSettled([operator, ...clients].map((l) => l.close()));
        await fence.close();
      }
      await Promise.all(spaces.map((s) => s.purge()));
    },
  };
}

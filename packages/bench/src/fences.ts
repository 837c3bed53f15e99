/**
 * Scenario 9: what a fenced write costs beside the plain write it guards, on each store. One
 * connection each, one resource, the same token on every fenced write (a holder writing while it
 * holds); plain and fenced writes alternate in blocks, so both meet the same machine states.
 */
import { createRequire } from 'node:module';
import { memoryFence, type Fence } from '@deadbolt/core';
import { cassandraFence } from '@deadbolt/cassandra';
import { etcdFence } from '@deadbolt/etcd';
import { mysqlFence } from '@deadbolt/mysql';
import { postgresFence } from '@deadbolt/postgres';
import { redisFence } from '@deadbolt/redis';
import { zookeeperFence } from '@deadbolt/zookeeper';
import cassandra from 'cassandra-driver';
import { Etcd3 } from 'etcd3';
import { Redis } from 'ioredis';
import { createPool } from 'mysql2/promise';
import pg from 'pg';
import { summarize, type Summary } from './stats.js';
import { urls, type Store } from './subjects.js';

export interface FenceCostResult {
  store: Store;
  /** What the plain write is, in the store's terms. */
  plainWrite: string;
  plain: Summary;
  fenced: Summary;
}

/** One store's plain write of `value` to the bench's resource, and the fence over the same connection where the fence can share it. */
interface Writers {
  plainWrite: string;
  plain(value: string): Promise<unknown>;
  fence: Fence;
  close(): Promise<unknown>;
}

const RESOURCE = `bench:fence:${process.pid}`;

interface ZkClient {
  connect(): void;
  close(): void;
  once(event: 'connected', listener: () => void): void;
  create(path: string, data: Buffer, mode: number, cb: (error: Error | null) => void): void;
  setData(path: string, data: Buffer, version: number, cb: (error: Error | null) => void): void;
}
const zookeeper = createRequire(import.meta.url)('node-zookeeper-client') as {
  createClient(hosts: string, options: object): ZkClient;
  CreateMode: { PERSISTENT: number };
};
const zk = <T>(start: (cb: (error: Error | null, result?: T) => void) => void) =>
  new Promise<T>((resolve, reject) => start((error, result) => (error ? reject(error) : resolve(result as T))));

const stores: Partial<Record<Store, () => Promise<Writers>>> = {
  async memory() {
    const map = new Map<string, string>();
    return { plainWrite: 'Map.set', plain: async (v) => map.set(RESOURCE, v), fence: memoryFence(), close: async () => undefined };
  },
  async redis() {
    const client = new Redis(urls.redis);
    return {
      plainWrite: 'HSET',
      plain: (v) => client.hset(RESOURCE, 'v', v),
      fence: redisFence({ client }),
      close: async () => client.disconnect(),
    };
  },
  async mysql() {
    const client = createPool({ uri: urls.mysql, connectionLimit: 1 });
    await client.query('CREATE TABLE IF NOT EXISTS bench_plain (resource VARCHAR(100) PRIMARY KEY, value TEXT) ENGINE=InnoDB');
    return {
      plainWrite: 'INSERT … ON DUPLICATE KEY UPDATE',
      plain: (v) => client.execute('INSERT INTO bench_plain VALUES (?, ?) ON DUPLICATE KEY UPDATE value = VALUES(value)', [RESOURCE, v]),
      fence: mysqlFence({ client }),
      close: () => client.end(),
    };
  },
  async postgres() {
    const client = new pg.Pool({ connectionString: urls.postgres, max: 1 });
    await client.query('CREATE TABLE IF NOT EXISTS bench_plain (resource text PRIMARY KEY, value text)');
    const text = 'INSERT INTO bench_plain VALUES ($1, $2) ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value';
    return {
      plainWrite: 'INSERT … ON CONFLICT DO UPDATE (prepared)',
      plain: (v) => client.query({ name: 'bench_plain', text, values: [RESOURCE, v] }),
      fence: postgresFence({ client }),
      close: () => client.end(),
    };
  },
  async etcd() {
    const client = new Etcd3({ hosts: urls.etcd.replace(/^etcd:/, 'http:') });
    return {
      plainWrite: 'put',
      plain: (v) => client.put(RESOURCE).value(v).exec(),
      fence: etcdFence({ client }),
      close: async () => client.close(),
    };
  },
  async zookeeper() {
    const client = zookeeper.createClient(urls.zookeeper.replace(/^zookeeper:\/\//, ''), { sessionTimeout: 4000 });
    await new Promise<void>((resolve) => (client.once('connected', resolve), client.connect()));
    const path = `/bench-plain-${process.pid}`;
    await zk((cb) => client.create(path, Buffer.alloc(0), zookeeper.CreateMode.PERSISTENT, cb)).catch(() => undefined);
    // The fence keeps a session of its own (a fence is made from a URL on ZooKeeper).
    return {
      plainWrite: 'setData (any version)',
      plain: (v) => zk((cb) => client.setData(path, Buffer.from(v), -1, cb)),
      fence: zookeeperFence({ url: urls.zookeeper }),
      close: async () => client.close(),
    };
  },
  async cassandra() {
    const [, hosts, keyspace] = /^cassandra:\/\/([^/]+)\/(\w+)/.exec(urls.cassandra)!;
    const client = new cassandra.Client({ contactPoints: hosts!.split(','), localDataCenter: 'datacenter1' });
    await client.connect();
    await client.execute(`CREATE TABLE IF NOT EXISTS ${keyspace}.bench_plain (resource text PRIMARY KEY, value text)`);
    const options = { prepare: true, consistency: cassandra.types.consistencies.quorum };
    return {
      plainWrite: 'UPDATE at QUORUM',
      plain: (v) => client.execute(`UPDATE ${keyspace}.bench_plain SET value = ? WHERE resource = ?`, [v, RESOURCE], options),
      fence: cassandraFence({ client, keyspace: keyspace! }),
      close: () => client.shutdown(),
    };
  },
};

/** The stores scenario 9 knows how to write to. */
export const fenceStores = Object.keys(stores) as Store[];

/**
 * `writes` plain and `writes` fenced writes on `store`, alternating in `rounds` blocks (each
 * block's order alternating too), after a warm-up of each.
 */
export async function fenceCost(store: Store, writes: number, rounds: number): Promise<FenceCostResult> {
  const writers = await stores[store]!();
  try {
    const plainMs: number[] = [];
    const fencedMs: number[] = [];
    const timed = async (into: number[], write: (value: string) => Promise<unknown>, count: number) => {
      for (let i = 0; i < count; i++) {
        const value = `value ${i}`;
        const started = performance.now();
        await write(value);
        into.push(performance.now() - started);
      }
    };
    const plain = (v: string) => writers.plain(v);
    const fenced = (v: string) => writers.fence.write(RESOURCE, 1n, v);
    await timed([], plain, 50);
    await timed([], fenced, 50);
    const block = Math.ceil(writes / rounds);
    for (let round = 0; round < rounds; round++) {
      const pair: [number[], (v: string) => Promise<unknown>][] = [
        [plainMs, plain],
        [fencedMs, fenced],
      ];
      for (const [into, write] of round % 2 ? pair.reverse() : pair) await timed(into, write, block);
    }
    return { store, plainWrite: writers.plainWrite, plain: summarize(plainMs), fenced: summarize(fencedMs) };
  } finally {
    await writers.fence.close();
    await writers.close();
  }
}

/** Scenario 9's table. */
export function fenceCostLines(results: FenceCostResult[], writes: number): string[] {
  const us = (ms: number) => Math.round(ms * 1000);
  return [
    `## Scenario 9: a fenced write beside the plain write it guards (${writes} of each, one connection, one resource)`,
    '',
    '| store | plain write | plain p50 µs | plain p99 µs | fenced p50 µs | fenced p99 µs | fenced / plain (p50) |',
    '|---|---|---|---|---|---|---|',
    ...results.map(
      (r) =>
        `| ${r.store} | ${r.plainWrite} | ${us(r.plain.p50)} | ${us(r.plain.p99)} | ${us(r.fenced.p50)} | ${us(r.fenced.p99)} | ${(r.fenced.p50 / r.plain.p50).toFixed(2)}× |`,
    ),
    '',
    "The fenced write is the store's Fence (`postgresFence`, `redisFence`, …) writing with the same token each time, as a holder does while it",
    "holds: the check and the write in one step of the store. ZooKeeper's fence reads, then sets at the version read (two requests); Cassandra's",
    'is a lightweight transaction (Paxos), against a plain QUORUM write.',
    '',
  ];
}

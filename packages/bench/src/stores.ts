/**
 * What each store says about itself: its version, how many client requests it has served so far
 * (its own counter, so "store operations per acquisition" is what the server saw, not what a client
 * believes it sent), and the CPU time of its server process. Used to label the report and to divide
 * request and CPU deltas by the acquisitions of a scenario.
 */
import cassandra from 'cassandra-driver';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { Redis } from 'ioredis';
import { createPool, type RowDataPacket } from 'mysql2/promise';
import pg from 'pg';
import { redlockNodes, urls, type Store } from './subjects.js';

export interface StoreProbe {
  /** e.g. `Redis 7.0.15`. */
  version(): Promise<string>;
  /**
   * Client requests the server has handled since it started, by its own counter (undefined where
   * it keeps none). The probe's own reads are not counted.
   */
  requests(): Promise<number | undefined>;
  /** CPU seconds used by the server process so far (this process for memory); undefined when unknown. */
  cpuSeconds(): number | undefined;
  close(): Promise<void>;
}

/** Linux reports process CPU time in clock ticks of 1/100 s (USER_HZ). */
const TICKS_PER_SECOND = 100;

/** CPU seconds of the process listening on `port` on this machine, read from /proc; undefined if unknown. */
function listenerCpu(port: string, withChildren = false): () => number | undefined {
  let pid: string | undefined;
  try {
    pid = /pid=(\d+)/.exec(execFileSync('ss', ['-Hltnp', `sport = :${port}`], { encoding: 'utf8' }))?.[1];
  } catch {
    pid = undefined;
  }
  const cpu = (id: string): number => {
    // Fields after the command name (which may hold spaces): utime and stime are the 12th and 13th.
    const fields = readFileSync(`/proc/${id}/stat`, 'utf8')
      .replace(/^.*\) /, '')
      .split(' ');
    let ticks = Number(fields[11]) + Number(fields[12]);
    // PostgreSQL serves each connection in a child process of the one that listens.
    if (withChildren) {
      for (const child of readFileSync(`/proc/${id}/task/${id}/children`, 'utf8').trim().split(/\s+/).filter(Boolean)) {
        try {
          ticks += cpu(child) * TICKS_PER_SECOND;
        } catch {
          /* it exited meanwhile */
        }
      }
    }
    return ticks / TICKS_PER_SECOND;
  };
  return () => {
    if (!pid) return undefined;
    try {
      return cpu(pid);
    } catch {
      return undefined;
    }
  };
}

/** Every command a Redis server has run (a script's inner commands included), but the INFO that asks. */
async function redisCommands(redis: Redis): Promise<number> {
  const stats = await redis.info('commandstats');
  return [...stats.matchAll(/^cmdstat_(\w+):calls=(\d+)/gm)]
    .filter(([, name]) => name !== 'info')
    .reduce((sum, [, , calls]) => sum + Number(calls), 0);
}

/** ZooKeeper's four-letter-word `srvr`: version, and `Received:`, the packets it has taken in. */
function zookeeperSrvr(): Promise<string> {
  const { hostname, port } = new URL(urls.zookeeper.replace(/^zookeeper:/, 'http:').replace(/,.*$/, ''));
  return new Promise((resolve, reject) => {
    let text = '';
    const socket = connect(Number(port), hostname, () => socket.end('srvr'));
    socket
      .setEncoding('utf8')
      .on('data', (chunk: string) => (text += chunk))
      .on('end', () => resolve(text))
      .on('error', reject);
  });
}

/**
 * CPU seconds this process has used so far (user + system, every thread: the event loop, the
 * garbage collector's helpers, a driver's own work). Read around a timed block, it is what the
 * client costs the host per operation, which wall time hides on an idle machine and shows on a busy
 * one. For the memory store it includes the store, which runs in this process.
 */
export function clientCpuSeconds(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1e6;
}

/**
 * A probe for `store`. @throws when the store cannot be reached (callers probe only stores that
 * answered).
 */
export async function openProbe(store: Store): Promise<StoreProbe> {
  const cpuSeconds = store === 'memory' ? clientCpuSeconds : listenerCpu(new URL(urls[store]).port, store === 'postgres');
  switch (store) {
    case 'memory':
      return {
        version: async () => `in-process (Node ${process.version})`,
        requests: async () => undefined,
        cpuSeconds,
        close: async () => undefined,
      };
    case 'redis': {
      const redis = new Redis(urls.redis);
      return {
        version: async () => `Redis ${/redis_version:(\S+)/.exec(await redis.info('server'))?.[1]}`,
        requests: () => redisCommands(redis),
        cpuSeconds,
        close: async () => void redis.disconnect(),
      };
    }
    case 'redlock': {
      // Three servers: their counters and CPU added up.
      const nodes = redlockNodes.map((url) => new Redis(url));
      const cpus = redlockNodes.map((url) => listenerCpu(new URL(url).port));
      return {
        version: async () => `3 independent Redis ${/redis_version:(\S+)/.exec(await nodes[0]!.info('server'))?.[1]} nodes`,
        requests: async () => (await Promise.all(nodes.map(redisCommands))).reduce((sum, n) => sum + n, 0),
        cpuSeconds() {
          let sum = 0;
          for (const cpu of cpus) sum += cpu() ?? NaN;
          return Number.isNaN(sum) ? undefined : sum;
        },
        close: async () => nodes.forEach((node) => node.disconnect()),
      };
    }
    case 'mysql': {
      const pool = createPool({ uri: urls.mysql, connectionLimit: 1 });
      let reads = 0;
      return {
        async version() {
          reads++;
          return `MySQL-protocol server ${((await pool.query<RowDataPacket[]>('SELECT VERSION() AS v'))[0][0] as { v: string }).v}`;
        },
        async requests() {
          // Questions counts client statements; this SHOW is one of them, and so were this probe's earlier ones.
          const [rows] = await pool.query<RowDataPacket[]>("SHOW GLOBAL STATUS LIKE 'Questions'");
          return Number(rows[0]!['Value']) - ++reads;
        },
        cpuSeconds,
        close: () => pool.end(),
      };
    }
    case 'postgres': {
      const pool = new pg.Pool({ connectionString: urls.postgres, max: 1 });
      return {
        version: async () => `PostgreSQL ${(await pool.query('SHOW server_version')).rows[0].server_version}`,
        // PostgreSQL counts statements only with the pg_stat_statements extension, and its
        // transaction counters reach the shared statistics up to seconds late: none is reported.
        requests: async () => undefined,
        cpuSeconds,
        close: () => pool.end(),
      };
    }
    case 'etcd': {
      const base = urls.etcd.replace(/^etcd:/, 'http:').replace(/,.*$/, '');
      return {
        version: async () => `etcd ${((await (await fetch(`${base}/version`)).json()) as { etcdserver: string }).etcdserver}`,
        async requests() {
          // gRPC messages received, unary calls and stream messages (lease keep-alives, watches) alike.
          const metrics = await (await fetch(`${base}/metrics`)).text();
          return [...metrics.matchAll(/^grpc_server_msg_received_total\{[^}]*\} (\S+)$/gm)].reduce((sum, [, n]) => sum + Number(n), 0);
        },
        cpuSeconds,
        close: async () => undefined,
      };
    }
    case 'zookeeper':
      return {
        version: async () => `ZooKeeper ${/Zookeeper version: ([^-,]+)/.exec(await zookeeperSrvr())?.[1]}`,
        requests: async () => Number(/Received: (\d+)/.exec(await zookeeperSrvr())?.[1]), // pings included
        cpuSeconds,
        close: async () => undefined,
      };
    case 'cassandra': {
      const [, hosts] = /^cassandra:\/\/([^/]+)/.exec(urls.cassandra)!;
      const client = new cassandra.Client({ contactPoints: hosts!.split(','), localDataCenter: 'datacenter1' });
      await client.connect();
      let reads = 0;
      return {
        async version() {
          reads++;
          return `Apache Cassandra ${(await client.execute('SELECT release_version FROM system.local')).rows[0]!['release_version']}`;
        },
        async requests() {
          // Requests the native protocol served (one per CQL statement), this probe's own excluded.
          const rows = (
            await client.execute("SELECT completed_tasks FROM system_views.thread_pools WHERE name = 'Native-Transport-Requests'")
          ).rows;
          return Number(rows[0]!['completed_tasks']) - ++reads;
        },
        cpuSeconds,
        close: () => client.shutdown(),
      };
    }
  }
}

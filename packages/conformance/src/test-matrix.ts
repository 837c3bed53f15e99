/** @module @deadbolt/conformance/test-matrix */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { ConformanceHarness } from './context.js';
import type { Address } from './fault-proxy.js';

/** The servers test-matrix runs. */
export type MatrixServer =
  'redis' | 'mysql' | 'postgres' | 'zookeeper' | 'etcd' | 'cassandra' | 'redis-cluster' | 'redis-replica' | 'redis-redlock' | 'pgbouncer';

const DEFAULT_URLS: Record<MatrixServer, string> = {
  redis: 'redis://127.0.0.1:6379',
  mysql: 'mysql://root@127.0.0.1:3306/test',
  postgres: 'postgres://postgres@127.0.0.1:5432/postgres',
  zookeeper: 'zookeeper://127.0.0.1:2181',
  etcd: 'etcd://127.0.0.1:2379',
  cassandra: 'cassandra://127.0.0.1:9042/deadbolt',
  // One node of a three-master Redis Cluster (three consecutive ports), and a primary with one replica (on the next port).
  'redis-cluster': 'redis://127.0.0.1:7101',
  'redis-replica': 'redis://127.0.0.1:6380',
  // The first of five independent Redis nodes on consecutive ports (Redlock).
  'redis-redlock': 'redis://127.0.0.1:6391',
  // PgBouncer in front of `postgres`, pooling by transaction; `/deadbolt_session` pools by session.
  pgbouncer: 'postgres://postgres@127.0.0.1:6432/deadbolt_tx',
};

const matrixDir = fileURLToPath(new URL('../../../test-matrix/', import.meta.url));

/** The connection URL of a test-matrix server; `DEADBOLT_<NAME>_URL` overrides it (`-` as `_`). */
export function matrixUrl(server: MatrixServer): string {
  return process.env[`DEADBOLT_${server.toUpperCase().replaceAll('-', '_')}_URL`] ?? DEFAULT_URLS[server];
}

/** The `host:port` a store URL points at (its first host). */
export function storeAddress(url: string): Address {
  const [host, port] = new URL(url).host.split(',')[0]!.split(':');
  return { host: host!, port: Number(port) };
}

/** `url` with its host and port replaced by `via` (a fault proxy's address). */
export function viaUrl(url: string, via: Address): string {
  const parsed = new URL(url);
  return url.replace(parsed.host, `${via.host}:${via.port}`);
}

/** `url` pointed at `address`, with `user:password@` (each percent-encoded) instead of any user it had. */
export function withCredentials(url: string, user: string, password: string, address: Address): string {
  return viaUrl(url, address).replace(/:\/\/(?:[^@/]*@)?/, `://${encodeURIComponent(user)}:${encodeURIComponent(password)}@`);
}

/**
 * Restart a test-matrix server and resolve once it answers again, and once `usable` (a query through
 * the caller's own long-lived client) succeeds: a driver reconnects in the background, so a client
 * that predates the restart fails fast for a while after the server is back (the Cassandra driver
 * re-prepares every statement before it marks the host up again).
 * @throws if the restart fails, or `usable` still fails 60 s after it.
 */
export async function restartMatrixServer(server: MatrixServer, usable?: () => Promise<unknown>): Promise<void> {
  const refusal = restartRefusal(server);
  if (refusal) throw new Error(`not restarting ${refusal}`);
  await promisify(execFile)('bash', [`${matrixDir}restart`, server], { timeout: 300_000 });
  if (usable) await retryFor(60_000, usable);
}

/**
 * Why this run may not restart `server`, or undefined when it may. A server test-matrix did not
 * start (one that was answering before `test-matrix/up`, such as a machine's own Redis) is someone
 * else's: a test never restarts it unless `DEADBOLT_RESTARTS=1` says so, or `CI=true` (a CI
 * machine's servers are the run's). test-matrix marks what it started: `.state/<name>/owned`.
 */
export function restartRefusal(server: MatrixServer): string | undefined {
  if (process.env['DEADBOLT_RESTARTS'] === '1' || process.env['CI'] === 'true') return undefined;
  if (existsSync(`${matrixDir}.state/${server}/owned`)) return undefined;
  return `${server}: test-matrix did not start it (DEADBOLT_RESTARTS=1 restarts it anyway)`;
}

/**
 * A harness's `restartServer` for a test-matrix server (see `restartMatrixServer`), or nothing when
 * the run may not restart it (`restartRefusal`): the behaviours that restart it are then listed n/a.
 */
export function matrixRestartHook(server: MatrixServer, usable?: () => Promise<unknown>): Pick<ConformanceHarness, 'restartServer'> {
  return restartRefusal(server) ? {} : { restartServer: () => restartMatrixServer(server, usable) };
}

/** Call `attempt` until it resolves or `ms` have passed since the first call (then its last error). */
export async function retryFor<T>(ms: number, attempt: () => Promise<T>, retryable: (error: unknown) => boolean = () => true): Promise<T> {
  const deadline = performance.now() + ms;
  for (;;) {
    try {
      return await attempt();
    } catch (error) {
      if (!retryable(error) || performance.now() > deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }
}

// `deadbolt check` as a user runs it (the built binary in a child process) against test-matrix's
// servers: the whole suite on Redis, a few behaviours on every other store, each leaving nothing
// of its namespace behind; a store that loses locks fails the check; an unreachable store and bad
// flags are one line. About 3 minutes: Redis's whole suite is 1, the others 10-20 s each.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { matrixUrl } from '@deadbolt/conformance';
import cassandra from 'cassandra-driver';
import { Etcd3 } from 'etcd3';
import { Redis } from 'ioredis';
import { createConnection } from 'mysql2/promise';
import { postgresBackend } from '@deadbolt/postgres';
import { zookeeperBackend } from '@deadbolt/zookeeper';
import { session } from '@deadbolt/zookeeper/testing';
import { describe, expect, it } from 'vitest';

const BIN = fileURLToPath(new URL('../dist/main.js', import.meta.url));

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

async function check(args: string[]): Promise<Ran> {
  const child = spawn(process.execPath, [BIN, 'check', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const [code] = await once(child, 'exit');
  return { code: code as number | null, stdout, stderr };
}

/** The rows of the printed table by result, and its summary line. */
function table(ran: Ran) {
  const rows = ran.stdout.split('\n').filter((l) => /^\| \S/.test(l) && !l.startsWith('| behaviour'));
  return {
    pass: rows.filter((r) => r.endsWith('| pass |')).length,
    fail: rows.filter((r) => r.includes('**FAIL**')),
    na: rows.filter((r) => r.includes('| n/a (')).length,
    summary: ran.stdout.trim().split('\n').at(-1) ?? '',
  };
}

/** What is left of any check's namespace on each store (none while no check runs). */
const leftovers: Record<string, (url: string) => Promise<string[]>> = {
  async redis(url) {
    const redis = new Redis(url);
    try {
      return await redis.keys('deadbolt-check:*');
    } finally {
      redis.disconnect();
    }
  },
  async postgres(url) {
    const backend = postgresBackend({ url });
    try {
      const { rows } = await backend.client.query<{ t: string }>(
        "SELECT tablename AS t FROM pg_tables WHERE tablename LIKE 'deadbolt\\_check\\_%'",
      );
      return rows.map((r) => r.t);
    } finally {
      await backend.close();
    }
  },
  async mysql(url) {
    const connection = await createConnection(url);
    try {
      const [rows] = await connection.query(
        "SELECT table_name AS t FROM information_schema.tables WHERE table_name LIKE 'deadbolt\\_check\\_%'",
      );
      return (rows as { t: string }[]).map((r) => r.t);
    } finally {
      await connection.end();
    }
  },
  async etcd(url) {
    const etcd = new Etcd3({ hosts: url.replace(/^etcd:/, 'http:') });
    try {
      return await etcd.getAll().prefix('deadbolt-check/').keys();
    } finally {
      etcd.close();
    }
  },
  async zookeeper(url) {
    const backend = zookeeperBackend({ url });
    try {
      const { client } = await session(backend, 10_000);
      const children = await new Promise<string[]>((resolve, reject) =>
        client.getChildren('/', undefined, (error, names) => (error ? reject(error) : resolve(names))),
      );
      return children.filter((n) => n.startsWith('deadbolt-check-'));
    } finally {
      await backend.close();
    }
  },
  async cassandra(url) {
    const client = new cassandra.Client({ contactPoints: [new URL(url).host], localDataCenter: 'datacenter1' });
    try {
      const result = await client.execute('SELECT keyspace_name FROM system_schema.keyspaces');
      return result.rows.map((r) => r['keyspace_name'] as string).filter((n) => n.startsWith('deadbolt_check_'));
    } finally {
      await client.shutdown();
    }
  },
};

describe('deadbolt check', () => {
  it('the whole suite on Redis: every behaviour that applies passes, the rest are listed n/a, nothing is left', async () => {
    const url = matrixUrl('redis');
    const ran = await check([url]);
    const seen = table(ran);
    expect(seen.fail, ran.stderr).toEqual([]);
    expect(ran.code).toBe(0);
    expect(seen.pass).toBeGreaterThanOrEqual(60);
    expect(seen.na).toBeGreaterThan(0);
    expect(seen.summary).toMatch(/^\d+ passed, 0 failed, \d+ not applicable here\. removed \d+ keys under deadbolt-check:[0-9a-f]{8}:\.$/);
    // Each behaviour is also told on stderr as it ends.
    expect(ran.stderr).toMatch(/^ok {3}1\. exclusion/m);
    expect(await leftovers['redis']!(url)).toEqual([]);
  }, 300_000);

  const stores: [string, string, string][] = [
    ['postgres', matrixUrl('postgres'), 'postgres'],
    ['postgres, session mode', `${matrixUrl('postgres')}?mode=session`, 'postgres'],
    ['mysql', matrixUrl('mysql'), 'mysql'],
    ['etcd', matrixUrl('etcd'), 'etcd'],
    ['zookeeper', matrixUrl('zookeeper'), 'zookeeper'],
    ['cassandra', matrixUrl('cassandra'), 'cassandra'],
    [
      'redlock (3 nodes)',
      `redlock://${[0, 1, 2].map((i) => `127.0.0.1:${Number(new URL(matrixUrl('redis-redlock')).port) + i}`).join(',')}`,
      'redis',
    ],
  ];
  it.each(stores)(
    '%s: exclusion, tryLock, tokens, order and inspect pass, and nothing is left',
    async (_name, url, kind) => {
      const ran = await check([url, '--only', '1,2,12a,13a,37a']);
      const seen = table(ran);
      expect(seen.fail, ran.stderr).toEqual([]);
      expect(ran.code).toBe(0);
      expect(seen.pass + seen.na).toBe(5);
      expect(seen.pass).toBeGreaterThanOrEqual(4); // 13a is n/a where fairness is none
      // It says what it removed (etcd's keys go with their leases: often nothing is left to remove).
      expect(seen.summary).toMatch(/ not applicable here\. removed \S/);
      const probe = kind === 'redis' ? url.replace(/^redlock:\/\/([^,]*),.*$/, 'redis://$1') : url.split('?')[0]!;
      expect(await leftovers[kind]!(probe)).toEqual([]);
    },
    120_000,
  );

  it('a store that loses locks (keys deleted behind the holders, as eviction does) fails: exit 1, the behaviour and why', async () => {
    const url = matrixUrl('redis');
    const evictor = new Redis(url);
    let evicting = true;
    const evicted = (async () => {
      while (evicting) {
        const keys = await evictor.keys('deadbolt-check:*lock:*');
        if (keys.length > 0) await evictor.del(...keys);
        await new Promise((r) => setTimeout(r, 2));
      }
    })();
    try {
      // A deleted key shows as two holders only when a fresh attempt lands within the 0-2 ms hold
      // it was deleted under; on a loaded machine (the lanes of the test command side by side) one
      // run of behaviour 1 missed every such window once. Up to three runs: one must catch it.
      let ran = await check([url, '--only', '1']);
      for (let run = 1; run < 3 && ran.code === 0; run++) ran = await check([url, '--only', '1']);
      expect(ran.code).toBe(1);
      expect(table(ran).fail).toHaveLength(1);
      expect(table(ran).fail[0]).toMatch(/^\| 1\. exclusion .*\*\*FAIL\*\*: /);
      expect(ran.stderr).toMatch(/^FAIL 1\. exclusion/m);
    } finally {
      evicting = false;
      await evicted;
      evictor.disconnect();
    }
    expect(await leftovers['redis']!(url)).toEqual([]);
  }, 120_000);

  it('Ctrl-C mid-run stops the suite, still removes the namespace, and exits 130', async () => {
    const url = matrixUrl('redis');
    const child = spawn(process.execPath, [BIN, 'check', url], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    const started = new Promise<void>((resolve) =>
      child.stderr.on('data', (d: Buffer) => {
        stderr += d.toString();
        if (/^ok {3}1\. /m.test(stderr)) resolve();
      }),
    );
    await started;
    child.kill('SIGINT');
    const [code] = await once(child, 'exit');
    expect(code, stderr).toBe(130);
    expect(stderr).toMatch(/^deadbolt: SIGINT: stopping the suite/m);
    expect(stdout).toMatch(/Stopped by SIGINT: the rest did not run\. \d+ passed, 0 failed, .* removed \d+ keys under deadbolt-check:/);
    expect(await leftovers['redis']!(url)).toEqual([]);
  }, 120_000);

  it('bad usage is 64 and an unreachable store 69, one line each, before the suite starts', async () => {
    for (const args of [['--only', 'one'], ['gopher://x'], ['redis://a', 'redis://b'], [`${matrixUrl('redis')}?nosuch=1`]]) {
      const ran = await check(args);
      expect(ran.code, args.join(' ')).toBe(64);
      expect(ran.stderr.trim().split('\n'), ran.stderr).toHaveLength(1);
    }
    const down = await check(['redis://127.0.0.1:1']);
    expect(down.code).toBe(69);
    expect(down.stderr.trim().split('\n')).toHaveLength(1);
    expect(down.stdout).toBe('');
  });
});

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
import { createLocker } from '@deadbolt/core';
import { zookeeperBackend, type ZooKeeperBackend } from '@deadbolt/zookeeper';
import { backendFor, storeOf } from '../src/stores.js';
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
const leftovers: Record<string, (url: string, prefix: string) => Promise<string[]>> = {
  async redis(url, prefix) {
    const redis = new Redis(url);
    try {
      return await redis.keys(`${prefix}*`);
    } finally {
      redis.disconnect();
    }
  },
  async postgres(url, prefix) {
    const backend = postgresBackend({ url });
    try {
      const { rows } = await backend.client.query<{ t: string }>('SELECT tablename AS t FROM pg_tables WHERE starts_with(tablename, $1)', [
        prefix,
      ]);
      return rows.map((r) => r.t);
    } finally {
      await backend.close();
    }
  },
  async mysql(url, prefix) {
    const connection = await createConnection(url);
    try {
      const [rows] = await connection.query('SELECT table_name AS t FROM information_schema.tables WHERE LEFT(table_name, ?) = ?', [
        prefix.length,
        prefix,
      ]);
      return (rows as { t: string }[]).map((r) => r.t);
    } finally {
      await connection.end();
    }
  },
  async etcd(url, prefix) {
    const etcd = new Etcd3({ hosts: url.replace(/^etcd:/, 'http:') });
    try {
      return await etcd.getAll().prefix(prefix).keys();
    } finally {
      etcd.close();
    }
  },
  async zookeeper(url, prefix) {
    const backend = zookeeperBackend({ url });
    try {
      const { client } = await session(backend, 10_000);
      const children = await new Promise<string[]>((resolve, reject) =>
        client.getChildren('/', undefined, (error, names) => (error ? reject(error) : resolve(names))),
      );
      return children.filter((n) => n.startsWith(prefix));
    } finally {
      await backend.close();
    }
  },
  async cassandra(url, prefix) {
    const client = new cassandra.Client({ contactPoints: [new URL(url).host], localDataCenter: 'datacenter1' });
    try {
      const result = await client.execute('SELECT keyspace_name FROM system_schema.keyspaces');
      return result.rows.map((r) => r['keyspace_name'] as string).filter((n) => n.startsWith(prefix));
    } finally {
      await client.shutdown();
    }
  },
};

/**
 * The namespace a check run wrote to, as each store names it, from the id its last line gives
 * (`removed … deadbolt-check:<id>:`). Its own only: other tests make namespaces of the same form
 * (test/namespaces.ts) side by side with this file, with ids that start with `test`.
 */
function namespaceOf(kind: string, stdout: string): string {
  const id = /deadbolt[-_]check[-_:/]([0-9a-f]{8})\b/.exec(stdout)?.[1];
  if (!id) throw new Error(`the check named no namespace of its own: ${stdout.slice(-300)}`);
  const names: Record<string, string> = {
    redis: `deadbolt-check:${id}:`,
    postgres: `deadbolt_check_${id}`,
    mysql: `deadbolt_check_${id}`,
    etcd: `deadbolt-check/${id}/`,
    zookeeper: `deadbolt-check-${id}`,
    cassandra: `deadbolt_check_${id}`,
  };
  return names[kind]!;
}

/** What is under a namespace of a user's (a prefix, a table's name, a root node, a keyspace) on each store. */
const leftoversUnder = {
  async redis(prefix: string) {
    const redis = new Redis(matrixUrl('redis'));
    try {
      return await redis.keys(`${prefix}*`);
    } finally {
      redis.disconnect();
    }
  },
  async postgres(prefix: string) {
    return (await leftovers['postgres']!(matrixUrl('postgres'), prefix)).filter((t) => t.startsWith(prefix));
  },
  async mysql(prefix: string) {
    return (await leftovers['mysql']!(matrixUrl('mysql'), prefix)).filter((t) => t.startsWith(prefix));
  },
  async etcd(prefix: string) {
    const etcd = new Etcd3({ hosts: matrixUrl('etcd').replace(/^etcd:/, 'http:') });
    try {
      return await etcd.getAll().prefix(prefix).keys();
    } finally {
      etcd.close();
    }
  },
  async zookeeper(name: string) {
    return (await leftovers['zookeeper']!(matrixUrl('zookeeper'), name)).filter((n) => n === name);
  },
  async cassandra(keyspace: string) {
    return (await leftovers['cassandra']!(matrixUrl('cassandra'), keyspace)).filter((n) => n === keyspace);
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
    expect(await leftovers['redis']!(url, namespaceOf('redis', ran.stdout))).toEqual([]);
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
      expect(await leftovers[kind]!(probe, namespaceOf(kind, ran.stdout))).toEqual([]);
    },
    120_000,
  );

  /** A user's own namespace in a store's URL (its path or an option), and what the check left in it. */
  const id = Math.random().toString(16).slice(2, 10);
  const userNamespaces: [string, string, () => Promise<string[]>][] = [
    ['redis, prefix', `${matrixUrl('redis')}?prefix=deadbolt-user-${id}:`, () => leftoversUnder.redis(`deadbolt-user-${id}:`)],
    ['postgres, namespace', `${matrixUrl('postgres')}?namespace=deadbolt_user_${id}`, () => leftoversUnder.postgres(`deadbolt_user_${id}`)],
    ['mysql, table', `${matrixUrl('mysql')}?table=deadbolt_user_${id}`, () => leftoversUnder.mysql(`deadbolt_user_${id}`)],
    ['etcd, prefix', `${matrixUrl('etcd')}?prefix=deadbolt-user/${id}/`, () => leftoversUnder.etcd(`deadbolt-user/${id}/`)],
    [
      'zookeeper, namespace',
      `${matrixUrl('zookeeper')}?namespace=/deadbolt-user-${id}`,
      () => leftoversUnder.zookeeper(`deadbolt-user-${id}`),
    ],
    [
      'cassandra, keyspace in the path',
      `cassandra://${new URL(matrixUrl('cassandra')).host}/deadbolt_user_${id}`,
      () => leftoversUnder.cassandra(`deadbolt_user_${id}`),
    ],
    [
      'cassandra, keyspace option',
      `cassandra://${new URL(matrixUrl('cassandra')).host}?keyspace=deadbolt_user_${id}`,
      () => leftoversUnder.cassandra(`deadbolt_user_${id}`),
    ],
  ];
  it.each(userNamespaces)(
    '%s: the check writes to its own namespace only, never the one the URL names',
    async (_name, url, left) => {
      const ran = await check([url, '--only', '2']);
      expect(table(ran).fail, ran.stderr).toEqual([]);
      expect(ran.code, ran.stderr).toBe(0);
      expect(await left(), "written in the URL's own namespace").toEqual([]);
    },
    120_000,
  );

  it('a store that loses locks (keys deleted behind the holders, as eviction does) fails: exit 1, the behaviour and why', async () => {
    const url = matrixUrl('redis');
    const evictor = new Redis(url);
    let evicting = true;
    const evicted = (async () => {
      while (evicting) {
        // The check's ids are hex; other tests' namespaces of the same form (ids starting with
        // `test`), in use side by side with this file, are not this store's to lose.
        const keys = await evictor.keys('deadbolt-check:[0-9a-f]*lock:*');
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
      expect(await leftovers['redis']!(url, namespaceOf('redis', ran.stdout))).toEqual([]);
    } finally {
      evicting = false;
      await evicted;
      evictor.disconnect();
    }
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
    expect(await leftovers['redis']!(url, namespaceOf('redis', stdout))).toEqual([]);
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

  it("ZooKeeper: the namespace's removal outlasts a node created under it between the listing and the removal", async () => {
    // Seen in CI: a late request of a session still open made a node after the children were
    // listed, and the removal of their parent failed with NOT_EMPTY. Here one is made right then.
    const id = `test${Date.now().toString(16)}`;
    const url = storeOf(matrixUrl('zookeeper')).scratch.url(matrixUrl('zookeeper'), id);
    const backend = await backendFor(url);
    const locker = createLocker(backend, { ttlMs: 6000 });
    try {
      await (await locker.lock('a')).release();
      const { client } = await session(backend as ZooKeeperBackend, 10_000);
      const root = `/deadbolt-check-${id}`;
      const remove = client.remove.bind(client);
      let late = 1;
      client.remove = (path, version, cb) => {
        if (path !== root || late-- <= 0) return remove(path, version, cb);
        client.create(`${root}/late`, Buffer.alloc(0), 0, () => remove(path, version, cb));
      };
      expect(await storeOf(url).scratch.purge(backend, id, url)).toMatch(/nodes under/);
      const gone = await new Promise((resolve) => client.exists(root, undefined, (error, stat) => resolve(!error && !stat)));
      expect(gone, 'the root is gone').toBe(true);
    } finally {
      await locker.close();
    }
  });

  it('a run in which no behaviour ran says why on stderr and exits 1', async () => {
    const ran = await check(['--only', '999', matrixUrl('redis')]);
    expect(ran.code).toBe(1);
    expect(ran.stderr).toContain('deadbolt: no behaviour ran: --only 999 names no behaviour of the suite');
  });
});

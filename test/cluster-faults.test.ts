// Locks on real three-member clusters under real faults, judged afterwards by the history checker:
// for each store (an etcd cluster, a ZooKeeper ensemble), fault and workload, four workers run
// (one of them through a fault proxy in front of every member), the fault comes and goes, and
// every step they took and saw is checked: no two believed holds at once beyond the family's rule,
// no stale write accepted by the fenced register, tokens unique and rising, every waiter answered
// after the heal. The run writes its table to test-matrix/results/clusters.md. About 13 s per
// scenario, 24 scenarios: these run after the lanes, on a machine of their own ("cluster fault").
import { execFile } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { createLocker, type Fence, type LockBackend, type Locker } from '@deadbolt/core';
import { sleep } from '@deadbolt/core/backend';
import { FaultProxy, matrixUrl } from '@deadbolt/conformance';
import { Cluster, clusterUrl, type ClusterName } from '@deadbolt/conformance/cluster';
import {
  checkHistory,
  HistoryRecorder,
  runWorker,
  type HistoryCheck,
  type KeyModel,
  type WorkerOptions,
} from '@deadbolt/conformance/history';
import { etcdBackend, etcdFence } from '@deadbolt/etcd';
import { postgresFence } from '@deadbolt/postgres';
import { redisBackend } from '@deadbolt/redis';
import { zookeeperBackend, zookeeperFence } from '@deadbolt/zookeeper';
import { afterAll, describe, expect, it } from 'vitest';

const TTL_MS = 3000;

interface Store {
  readonly cluster: ClusterName;
  /** A backend on the cluster at `url`; `proxied` maps member addresses to a worker's fault proxy. */
  backend(url: string, proxied?: Record<string, { host: string; port: number }>): LockBackend;
  /** The fenced register's store: the same cluster, or (Redis) one that keeps what it acknowledged. */
  fence(url: string): Fence;
  /** Which faults and workloads run on it. */
  readonly faults: readonly Fault[];
  readonly workloads: readonly Workload[];
  /** Why believed overlaps are expected here (a documented limitation); they are counted, not failed. */
  readonly overlapsExpected?: string;
}

/** A fault: what is done, and how it ends (the heal). `proxy` stands in front of the last worker only. */
interface Fault {
  readonly name: string;
  inject(cluster: Cluster, proxy: FaultProxy): Promise<void>;
  heal(cluster: Cluster, proxy: FaultProxy): Promise<void>;
}
let hit = 0; // the member a fault hit, for its heal
const faults: Fault[] = [
  {
    name: 'leader (primary) killed (SIGKILL), started again 3 s later',
    inject: async (c) => {
      hit = await c.leader();
      await c.node(hit, 'kill');
      await sleep(3000);
    },
    heal: async (c) => void (await c.node(hit, 'start')),
  },
  {
    name: 'leader (primary) paused (SIGSTOP) for 5 s, past every lease',
    inject: async (c) => {
      hit = await c.leader();
      await c.node(hit, 'pause');
      await sleep(5000);
    },
    heal: async (c) => void (await c.node(hit, 'resume')),
  },
  {
    name: 'every member restarted in turn (SIGTERM, start, healthy)',
    inject: async (c) => {
      for (const n of c.members) {
        await c.node(n, 'stop');
        await c.node(n, 'start');
        await c.allHealthy();
      }
    },
    heal: async () => undefined,
  },
  {
    name: "one client's links to every member silent for 5 s (no reset)",
    inject: async (_c, proxy) => {
      proxy.blackhole();
      await sleep(5000);
    },
    heal: async (_c, proxy) => proxy.heal(),
  },
];

/** A workload: the key's model, and how worker `i` takes the key. */
interface Workload {
  readonly name: string;
  readonly model: KeyModel;
  readonly fenced: boolean;
  take(i: number): Pick<WorkerOptions, 'take' | 'mode'>;
}
const workloads: Workload[] = [
  { name: 'mutex, fenced register', model: { kind: 'mutex' }, fenced: true, take: () => ({}) },
  {
    name: 'semaphore of 2',
    model: { kind: 'semaphore', limit: 2 },
    fenced: false,
    take: () => ({ take: (l: Locker, k: string, t: number) => l.semaphore(k, { limit: 2 }).acquire({ timeoutMs: t }) }),
  },
  {
    name: 'read-write (2 readers, 2 writers)',
    model: { kind: 'read-write' },
    fenced: false,
    take: (i) =>
      i < 2
        ? { mode: 'shared', take: (l: Locker, k: string, t: number) => l.readWriteLock(k).read({ timeoutMs: t }) }
        : { take: (l: Locker, k: string, t: number) => l.readWriteLock(k).write({ timeoutMs: t }) },
  },
];

const [killed, paused, rolling, cutOff] = faults as [Fault, Fault, Fault, Fault];
const [mutex] = workloads as [Workload];
const sentinelUrl = clusterUrl('redis-sentinel');
/** A Redis backend through the Sentinels, its data nodes reached through `proxied` where given. */
const sentinelBackend = (more: { syncReplicas?: number }) => (url: string, proxied?: Record<string, { host: string; port: number }>) =>
  redisBackend({ url, sentinel: 'deadbolt', ...more, ...(proxied ? { sentinelOptions: { natMap: proxied } } : {}) });
const stores: Record<string, Store> = {
  etcd: { cluster: 'etcd-cluster', backend: (url) => etcdBackend({ url }), fence: (url) => etcdFence({ url }), faults, workloads },
  zookeeper: {
    cluster: 'zookeeper-ensemble',
    backend: (url) => zookeeperBackend({ url }),
    fence: (url) => zookeeperFence({ url }),
    faults,
    workloads,
  },
  // The fenced register lives in PostgreSQL: a Redis fence would lose its highest token in the
  // same failover that loses the lock.
  'redis sentinel': {
    cluster: 'redis-sentinel',
    backend: sentinelBackend({}),
    fence: () => postgresFence({ url: matrixUrl('postgres') }),
    faults: [killed, paused, cutOff],
    // The mutex alone: the families run the same scripts on the same primary, which the
    // single-server suites cover; what differs here is the failover.
    workloads: [mutex],
    overlapsExpected: 'replication is asynchronous: a grant the promoted replica had not received is lost in the failover',
  },
  'redis sentinel, syncReplicas 1': {
    cluster: 'redis-sentinel',
    backend: sentinelBackend({ syncReplicas: 1 }),
    fence: () => postgresFence({ url: matrixUrl('postgres') }),
    faults: [killed, paused],
    workloads: [mutex],
  },
};
void rolling;

interface Row {
  store: string;
  fault: string;
  workload: string;
  check: HistoryCheck;
  grantsAfterHeal: number;
  /** Writes the fence refused as stale: a stale write it had to stop. */
  refused: number;
}
const rows: Row[] = [];

/** One scenario: four workers for ~13 s, the fault in the middle; its history checked. */
async function scenario(storeName: string, fault: Fault, workload: Workload): Promise<Row> {
  const store = stores[storeName]!;
  const cluster = new Cluster(store.cluster);
  await cluster.allHealthy();
  const url = clusterUrl(store.cluster);
  // The proxy fronts every address the client dials: the members, and for Redis the Sentinels too
  // (the data nodes the Sentinels name are mapped onto the proxy with ioredis's natMap).
  const dialed = url
    .replace(/^[a-z]+:\/\//, '')
    .split(',')
    .map((h) => Number(h.split(':')[1]));
  const members = await Promise.all(cluster.members.map((n) => cluster.port(n)));
  const sentinels = store.cluster === 'redis-sentinel' ? dialed : [];
  const targets = [...sentinels, ...members];
  const proxy = await FaultProxy.start(targets.map((port) => ({ host: '127.0.0.1', port })));
  const through = proxy.addresses;
  const viaProxy = url.replace(
    /\/\/[^/]+/,
    `//${through
      .slice(0, sentinels.length || members.length)
      .map((a) => `${a.host}:${a.port}`)
      .join(',')}`,
  );
  const natMap = Object.fromEntries(members.map((port, i) => [`127.0.0.1:${port}`, through[sentinels.length + i]!]));
  const recorder = new HistoryRecorder();
  const key = `cluster/${storeName}/${Math.random().toString(36).slice(2)}`;
  const lockers = [0, 1, 2, 3].map((i) =>
    createLocker(i === 3 ? store.backend(viaProxy, sentinels.length ? natMap : undefined) : store.backend(url), {
      ttlMs: TTL_MS,
    }),
  );
  const fence = workload.fenced ? store.fence(url) : undefined;
  const stop = new AbortController();
  try {
    const workers = lockers.map((locker, i) =>
      runWorker(recorder.worker(`w${i}`), locker, {
        key,
        holdMs: 50,
        timeoutMs: 5000,
        stop: stop.signal,
        ...(fence ? { resource: { name: key, target: fence } } : {}),
        ...workload.take(i),
      }),
    );
    await sleep(1500);
    await fault.inject(cluster, proxy);
    await fault.heal(cluster, proxy);
    recorder.add({ process: '', op: 'heal', type: 'info', key });
    const healTime = recorder.events.at(-1)!.time;
    await cluster.allHealthy();
    await sleep(5000);
    stop.abort();
    await Promise.all(workers);
    const check = checkHistory(recorder.events, { model: () => workload.model, livenessGraceMs: 4000 });
    // To read a run's history: DEADBOLT_HISTORY_DIR=/some/dir (one JSON file per scenario).
    const keep = process.env['DEADBOLT_HISTORY_DIR'];
    if (keep) writeFileSync(`${keep}/${`${storeName} ${fault.name} ${workload.name}`.replace(/[^\w]+/g, '-')}.json`, json(recorder.events));
    const grantsAfterHeal = recorder.events.filter((e) => e.op === 'acquire' && e.type === 'ok' && e.time > healTime).length;
    const refused = recorder.events.filter((e) => e.op === 'write' && e.code === 'STALE_TOKEN').length;
    return { store: storeName, fault: fault.name, workload: workload.name, check, grantsAfterHeal, refused };
  } finally {
    stop.abort();
    proxy.heal();
    await Promise.allSettled(lockers.map((l) => l.close()));
    await fence?.close();
    await proxy.close();
    // Leave the cluster whole for the next scenario, whatever happened.
    for (const n of cluster.members) await cluster.node(n, 'resume').catch(() => undefined);
    for (const n of cluster.members) await cluster.node(n, 'start').catch(() => undefined);
  }
}

const json = (value: unknown) => JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? String(v) : v));

afterAll(() => {
  if (!rows.length) return;
  const dir = new URL('../test-matrix/results/', import.meta.url);
  mkdirSync(dir, { recursive: true });
  const lines = [
    '# Locks on real clusters under faults',
    '',
    'Written by `test/cluster-faults.test.ts` (part of `pnpm test`). Four workers per scenario, one behind a fault proxy in front of every',
    `member; ttl ${TTL_MS} ms; 50 ms holds; the history checker (\`@deadbolt/conformance/history\`) judges each run. "Believed overlaps":`,
    'instants where more workers believed they held than the family allows (a holder believes from its grant to its last check that it',
    'still holds). "Stale writes": writes the fenced register accepted after a higher token. "Never answered": waits still open 4 s',
    'after the heal. "Longest unavailable": the longest time someone waited while nobody held the key.',
    '',
    '| store | fault | workload | holds | grants after heal | believed overlaps | stale writes accepted | stale writes refused | token anomalies | never answered | longest unavailable ms |',
    '|---|---|---|---|---|---|---|---|---|---|---|',
    ...rows.map(
      (r) =>
        `| ${r.store} | ${r.fault} | ${r.workload} | ${r.check.holds} | ${r.grantsAfterHeal} | ${r.check.overlaps.length} | ${r.check.staleWrites.length} | ${r.workload.includes('fenced') ? r.refused : 'n/a'} | ${r.check.tokenAnomalies.length} | ${r.check.neverGranted.length} | ${Math.round(r.check.longestUnavailableMs)} |`,
    ),
    '',
    ...Object.entries(stores)
      .filter(([, store]) => store.overlapsExpected)
      .map(
        ([name, store]) =>
          `Believed overlaps on ${name} are expected (and counted, not failed): ${store.overlapsExpected}. The fence refuses the stale writes they would make.`,
      ),
    '',
  ];
  writeFileSync(new URL('clusters.md', dir), lines.join('\n'));
  writeFileSync(
    new URL('clusters.json', dir),
    json(rows.map((r) => ({ ...r, check: { ...r.check, overlaps: r.check.overlaps.slice(0, 5) } }))),
  );
});

/**
 * Redis with Sentinel, the failover that loses a grant, staged step by step: the primary stops
 * replicating (its replica stopped and the link cut), grants the key to A, and dies; the replica
 * takes over without A's grant and grants the key to B while A still holds it. The fence (in
 * PostgreSQL) takes B's write and refuses A's. With syncReplicas 1 the grant to A is refused
 * instead (no replica acknowledged it), and nobody holds the key twice.
 */
async function lostGrant(syncReplicas: 0 | 1): Promise<Row> {
  const cluster = new Cluster('redis-sentinel');
  await cluster.allHealthy();
  const backend = () => redisBackend({ url: sentinelUrl, sentinel: 'deadbolt', syncReplicas });
  // A long ttl: A renews 10 s after its grant, long after the failover, so it is still sure it holds.
  const [a, b] = [createLocker(backend(), { ttlMs: 30_000 }), createLocker(backend(), { ttlMs: 30_000 })];
  const fence = postgresFence({ url: matrixUrl('postgres') });
  const recorder = new HistoryRecorder();
  const [wa, wb] = [recorder.worker('a'), recorder.worker('b')];
  const key = `cluster/redis-sentinel/lost-grant/${Math.random().toString(36).slice(2)}`;
  const write = async (w: typeof wa, token: bigint, value: string) => {
    w.held(key, token);
    const sent = w.invoke('write', key, { token, resource: key });
    await fence.write(key, token, value).then(
      () => w.complete(sent, 'write', key, 'ok', { token, resource: key }),
      (error: { code?: string }) => w.complete(sent, 'write', key, 'fail', { token, resource: key, code: error.code ?? '' }),
    );
  };
  const primary = await cluster.leader();
  const replica = cluster.members.find((n) => n !== primary)!;
  try {
    await (await a.lock(`${key}/warm`)).release(); // both connected before the fault
    await (await b.lock(`${key}/warm`)).release();
    await cluster.node(replica, 'pause');
    // The primary drops the link to its stopped replica: what it grants now, the replica never sees
    // (a stopped replica alone would still read it from its socket once resumed).
    await promisify(execFile)('redis-cli', ['-p', String(await cluster.port(primary)), 'client', 'kill', 'type', 'replica']);
    const asked = wa.invoke('acquire', key);
    const held = await a.lock(key, { timeoutMs: 3000 }).catch((error: { code?: string }) => {
      wa.complete(asked, 'acquire', key, 'fail', { code: error.code ?? '' });
      return undefined;
    });
    if (held) {
      wa.complete(asked, 'acquire', key, 'ok', { token: held.token });
      await write(wa, held.token, 'a');
    }
    await cluster.node(primary, 'kill');
    await cluster.node(replica, 'resume');
    // B asks once the Sentinels name the replica.
    for (let i = 0; i < 100 && (await cluster.leader().catch(() => primary)) === primary; i++) await sleep(100);
    const takeB = async () => {
      const bAsked = wb.invoke('acquire', key);
      return b.lock(key, { timeoutMs: 10_000 }).then(
        (lock) => (wb.complete(bAsked, 'acquire', key, 'ok', { token: lock.token }), lock),
        // With syncReplicas, the new primary has no replica yet: no grant can be acknowledged.
        (error: { code?: string }) => void wb.complete(bAsked, 'acquire', key, 'fail', { code: error.code ?? '' }),
      );
    };
    let got = await takeB();
    if (got) await write(wb, got.token, 'b');
    // A has not been told (its next renewal is due 10 s after its grant): it writes again.
    if (held?.held) await write(wa, held.token, 'a again');
    else if (held) wa.lost(key, held.token);
    await cluster.node(primary, 'start');
    recorder.add({ process: '', op: 'heal', type: 'info', key });
    await cluster.allHealthy();
    got ??= await takeB();
    if (!got) throw new Error('B was not granted the key after the heal');
    await write(wb, got.token, 'b again');
    const released = wb.invoke('release', key, { token: got.token });
    await got.release();
    wb.complete(released, 'release', key, 'ok', { token: got.token });
    if (held) await held.release().catch(() => undefined);
    const check = checkHistory(recorder.events);
    const refused = recorder.events.filter((e) => e.op === 'write' && e.code === 'STALE_TOKEN').length;
    const healTime = recorder.events.find((e) => e.op === 'heal')!.time;
    const grantsAfterHeal = recorder.events.filter((e) => e.op === 'acquire' && e.type === 'ok' && e.time > healTime).length;
    return {
      store: syncReplicas ? 'redis sentinel, syncReplicas 1' : 'redis sentinel',
      fault: 'a grant the replica never got (link cut), then the primary killed: failover',
      workload: 'two clients, one key, fenced register in PostgreSQL',
      check,
      grantsAfterHeal,
      refused,
    };
  } finally {
    await cluster.node(replica, 'resume').catch(() => undefined);
    for (const n of cluster.members) await cluster.node(n, 'start').catch(() => undefined);
    await Promise.allSettled([a.close(), b.close(), fence.close()]);
  }
}

describe('cluster fault: redis sentinel, a lost grant', () => {
  it("cluster fault: redis sentinel, without syncReplicas: two holders at once after the failover; the fence refuses the old holder's write", async () => {
    const row = await lostGrant(0);
    rows.push(row);
    expect(row.check.overlaps.length, 'the known Redis failover window, measured').toBeGreaterThan(0);
    expect(row.refused, "the old holder's write after the new holder's").toBe(1);
    expect(row.check.staleWrites).toEqual([]);
    expect(row.check.tokenAnomalies).toEqual([]);
  }, 120_000);

  it('cluster fault: redis sentinel, syncReplicas 1: the grant nobody replicated is refused, so nobody holds twice', async () => {
    const row = await lostGrant(1);
    rows.push(row);
    expect(row.check.overlaps).toEqual([]);
    // A's grant was refused, and B's first ask too (the new primary had no replica until the heal).
    expect(row.check.holds, 'only the grant after the heal').toBe(1);
    expect(row.check.staleWrites).toEqual([]);
  }, 120_000);
});

for (const storeName of Object.keys(stores)) {
  const store = stores[storeName]!;
  describe(`cluster fault: ${storeName}`, () => {
    for (const fault of store.faults) {
      for (const workload of store.workloads) {
        it(`cluster fault: ${storeName}, ${fault.name}, ${workload.name}`, async () => {
          const row = await scenario(storeName, fault, workload);
          rows.push(row);
          const { check } = row;
          if (!store.overlapsExpected) expect(check.overlaps, json(check.overlaps.slice(0, 3))).toEqual([]);
          expect(check.staleWrites, json(check.staleWrites)).toEqual([]);
          expect(check.wrongRefusals, json(check.wrongRefusals)).toEqual([]);
          expect(check.tokenAnomalies, json(check.tokenAnomalies.slice(0, 3))).toEqual([]);
          expect(check.neverGranted, json(check.neverGranted)).toEqual([]);
          expect(row.grantsAfterHeal, 'the key is taken again after the heal').toBeGreaterThan(0);
        }, 120_000);
      }
    }
  });
}

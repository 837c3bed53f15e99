// Locks on real three-member clusters under real faults, judged afterwards by the history checker:
// for each store (an etcd cluster, a ZooKeeper ensemble), fault and workload, four workers run
// (one of them through a fault proxy in front of every member), the fault comes and goes, and
// every step they took and saw is checked: no two believed holds at once beyond the family's rule,
// no stale write accepted by the fenced register, tokens unique and rising, every waiter answered
// after the heal. The run writes its table to test-matrix/results/clusters.md. About 13 s per
// scenario, 24 scenarios: these run after the lanes, on a machine of their own ("cluster fault").
import { mkdirSync, writeFileSync } from 'node:fs';
import { createLocker, type Fence, type LockBackend, type Locker } from '@deadbolt/core';
import { FaultProxy } from '@deadbolt/conformance';
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
import { zookeeperBackend, zookeeperFence } from '@deadbolt/zookeeper';
import { afterAll, describe, expect, it } from 'vitest';

const TTL_MS = 3000;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Store {
  readonly cluster: ClusterName;
  backend(url: string): LockBackend;
  fence(url: string): Fence;
}
const stores: Record<string, Store> = {
  etcd: { cluster: 'etcd-cluster', backend: (url) => etcdBackend({ url }), fence: (url) => etcdFence({ url }) },
  zookeeper: { cluster: 'zookeeper-ensemble', backend: (url) => zookeeperBackend({ url }), fence: (url) => zookeeperFence({ url }) },
};

/** A fault: what is done, and how it ends (the heal). `proxy` stands in front of the last worker only. */
interface Fault {
  readonly name: string;
  inject(cluster: Cluster, proxy: FaultProxy): Promise<void>;
  heal(cluster: Cluster, proxy: FaultProxy): Promise<void>;
}
let hit = 0; // the member a fault hit, for its heal
const faults: Fault[] = [
  {
    name: 'leader killed (SIGKILL), started again 3 s later',
    inject: async (c) => {
      hit = await c.leader();
      await c.node(hit, 'kill');
      await sleep(3000);
    },
    heal: async (c) => void (await c.node(hit, 'start')),
  },
  {
    name: 'leader paused (SIGSTOP) for 5 s, past every lease',
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
  { name: 'mutex, fenced register in the same store', model: { kind: 'mutex' }, fenced: true, take: () => ({}) },
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
  const ports = await Promise.all(cluster.members.map((n) => cluster.port(n)));
  const proxy = await FaultProxy.start(ports.map((port) => ({ host: '127.0.0.1', port })));
  const viaProxy = url.replace(/\/\/[^/]+/, `//${proxy.addresses.map((a) => `${a.host}:${a.port}`).join(',')}`);
  const recorder = new HistoryRecorder();
  const key = `cluster/${storeName}/${Math.random().toString(36).slice(2)}`;
  const lockers = [0, 1, 2, 3].map((i) => createLocker(store.backend(i === 3 ? viaProxy : url), { ttlMs: TTL_MS }));
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
        `| ${r.store} | ${r.fault} | ${r.workload} | ${r.check.holds} | ${r.grantsAfterHeal} | ${r.check.overlaps.length} | ${r.check.staleWrites.length} | ${r.workload.startsWith('mutex') ? r.refused : 'n/a'} | ${r.check.tokenAnomalies.length} | ${r.check.neverGranted.length} | ${Math.round(r.check.longestUnavailableMs)} |`,
    ),
    '',
  ];
  writeFileSync(new URL('clusters.md', dir), lines.join('\n'));
  writeFileSync(
    new URL('clusters.json', dir),
    json(rows.map((r) => ({ ...r, check: { ...r.check, overlaps: r.check.overlaps.slice(0, 5) } }))),
  );
});

for (const storeName of Object.keys(stores)) {
  describe(`cluster fault: ${storeName}`, () => {
    for (const fault of faults) {
      for (const workload of workloads) {
        it(`cluster fault: ${storeName}, ${fault.name}, ${workload.name}`, async () => {
          const row = await scenario(storeName, fault, workload);
          rows.push(row);
          const { check } = row;
          expect(check.overlaps, json(check.overlaps.slice(0, 3))).toEqual([]);
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

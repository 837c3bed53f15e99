/**
 * Scenario 11: leader election and once-per-fleet jobs on each store. A handover chain: candidates
 * of one election, each leader publishing its value, then resigning at once; elections per second
 * and each handover (a resignation to the next leader's value published). Failover while a
 * candidate waits: a leader process killed with SIGKILL, to the next leader's first fenced write,
 * beside the ttl. And `runOnce` of an empty job beside the `tryLock` + `release` cycle it is built on,
 * and a fleet's :00: many calls of one job at the same moment, of which exactly one may run.
 */
import { createLocker, memoryBackend, memoryFence, MemoryLockStore, type Fence, type LockBackend, type Locker } from '@deadbolt/core';
import { cassandraBackend, cassandraFence } from '@deadbolt/cassandra';
import { etcdBackend, etcdFence } from '@deadbolt/etcd';
import { mysqlBackend, mysqlFence } from '@deadbolt/mysql';
import { postgresBackend, postgresFence } from '@deadbolt/postgres';
import { redisBackend, redisFence } from '@deadbolt/redis';
import { zookeeperBackend, zookeeperFence } from '@deadbolt/zookeeper';
import { fork } from 'node:child_process';
import { summarize, type Summary } from './stats.js';
import { urls, type Store } from './subjects.js';

/** Each store's backend and fence. The memory store is one per scenario run, shared by its lockers. */
export const electionBackends: Partial<Record<Store, () => { backend: () => LockBackend; fence: () => Fence }>> = {
  memory: () => {
    const store = new MemoryLockStore();
    const fence = memoryFence();
    return { backend: () => memoryBackend({ store }), fence: () => fence };
  },
  redis: () => ({ backend: () => redisBackend({ url: urls.redis }), fence: () => redisFence({ url: urls.redis }) }),
  mysql: () => ({ backend: () => mysqlBackend({ url: urls.mysql }), fence: () => mysqlFence({ url: urls.mysql }) }),
  postgres: () => ({ backend: () => postgresBackend({ url: urls.postgres }), fence: () => postgresFence({ url: urls.postgres }) }),
  etcd: () => ({ backend: () => etcdBackend({ url: urls.etcd }), fence: () => etcdFence({ url: urls.etcd }) }),
  zookeeper: () => ({ backend: () => zookeeperBackend({ url: urls.zookeeper }), fence: () => zookeeperFence({ url: urls.zookeeper }) }),
  cassandra: () => ({ backend: () => cassandraBackend({ url: urls.cassandra }), fence: () => cassandraFence({ url: urls.cassandra }) }),
};

/** The stores scenario 11 runs on. */
export const electionStores = Object.keys(electionBackends) as Store[];

export interface ElectionResult {
  store: Store;
  ttlMs: number;
  /** Handover chain: elections per second, and each handover's time. */
  electionsPerSecond: number;
  handover: Summary;
  /** Failover after the leader was killed, each one's time; none for memory (in-process). */
  failover: Summary | undefined;
  /** One `runOnce` of an empty job, and one `tryLock` + `release`, each call's time. */
  runOnce: Summary;
  tryLock: Summary;
  /**
   * A fleet's :00: `calls` runOnce calls of one job fired at once from BURST_LOCKERS lockers (each
   * with its own connections, as processes would be): how many ran (one, or the job ran twice),
   * and each skipped call's time from the fire to its answer.
   */
  burst: { calls: number; ran: number; skip: Summary };
}

/** The lockers a :00 burst is fired from (the SQL stores open up to 10 connections each). */
const BURST_LOCKERS = 4;

/** The shortest ttl every store takes (ZooKeeper's sessions: 4 s); a failover waits it out. */
export const ELECTION_TTL_MS = 4000;
const TTL_MS = ELECTION_TTL_MS;

/**
 * Scenario 11 on `store`: `elections` handovers among 3 candidates, `failovers` failovers,
 * `cycles` runOnce calls and as many tryLock cycles (alternating in blocks), and a :00 burst of
 * `burst` runOnce calls of one job at once.
 */
export async function electionCost(
  store: Store,
  elections: number,
  failovers: number,
  cycles: number,
  burst: number,
): Promise<ElectionResult> {
  const { backend, fence } = electionBackends[store]!();
  const fences: Fence[] = [];
  const lockers: Locker[] = [];
  const locker = () => {
    const f = fence();
    fences.push(f);
    const l = createLocker(backend(), { ttlMs: TTL_MS, fence: f });
    lockers.push(l);
    return l;
  };
  const name = `bench/election/${process.pid}/${Date.now()}`;
  try {
    // Handover chain: each candidate campaigns again as soon as its term ends.
    const candidates = [locker(), locker(), locker()];
    let left = elections;
    let resignedAt = 0;
    const handoverMs: number[] = [];
    const started = performance.now();
    await Promise.all(
      candidates.map(async (candidate, i) => {
        while (left > 0) {
          const term = await candidate.elect(name, { value: `candidate ${i}` });
          if (resignedAt > 0) handoverMs.push(performance.now() - resignedAt);
          left--;
          resignedAt = performance.now();
          await term.resign();
        }
      }),
    );
    const electionsPerSecond = elections / ((performance.now() - started) / 1000);

    // Failover: a leader in a process of its own (memory: in this one, where nothing can kill it),
    // killed with SIGKILL once elected; a candidate waits; the new leader writes through the fence at once.
    const failoverMs: number[] = [];
    const next = locker();
    const writer = fence();
    fences.push(writer);
    for (let i = 0; i < failovers && store !== 'memory'; i++) {
      const key = `${name}/failover/${i}`;
      const leader = fork(new URL('./election-leader.js', import.meta.url), [store, key], {
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      });
      try {
        await new Promise<void>((resolve, reject) => {
          leader.once('message', () => resolve());
          leader.once('exit', (code) => reject(new Error(`the leader process exited (${code}) before it was elected`)));
        });
        const campaign = next.elect(key, { value: 'next', timeoutMs: 4 * TTL_MS });
        const killedAt = performance.now();
        leader.kill('SIGKILL');
        const term = await campaign;
        await writer.write(`${key}/resource`, term.token, 'first write');
        failoverMs.push(performance.now() - killedAt);
        await term.resign();
      } finally {
        leader.kill('SIGKILL');
      }
    }

    // runOnce of an empty job beside the tryLock + release it is built on, alternating in blocks.
    const job = locker();
    const runOnceMs: number[] = [];
    const tryLockMs: number[] = [];
    const jobName = `${name}/job`;
    const block = Math.max(1, Math.floor(cycles / 10));
    for (let done = 0; done < cycles; done += block) {
      for (let i = 0; i < block; i++) {
        const t0 = performance.now();
        await job.runOnce(jobName, () => undefined, { lockAtMostForMs: TTL_MS });
        runOnceMs.push(performance.now() - t0);
      }
      for (let i = 0; i < block; i++) {
        const t0 = performance.now();
        await (await job.tryLock(jobName))?.release();
        tryLockMs.push(performance.now() - t0);
      }
    }
    // A fleet's :00: every call of the burst fired within the same few ms, each locker warmed up
    // first (its connections open), and no second run allowed in the window.
    const fleet = Array.from({ length: BURST_LOCKERS }, () => locker());
    await Promise.all(fleet.map(async (l) => (await l.tryLock(`${name}/warm-up`))?.release()));
    let ran = 0;
    const skipMs: number[] = [];
    const fired = performance.now();
    await Promise.all(
      Array.from({ length: burst }, async (_, i) => {
        const result = await fleet[i % BURST_LOCKERS]!.runOnce(`${name}/burst`, () => void ran++, {
          // ZooKeeper's sessions last at most 40 s: a claim's lease within that on every store.
          lockAtMostForMs: 30_000,
          lockAtLeastForMs: 20_000,
        });
        if (!result.ran) skipMs.push(performance.now() - fired);
      }),
    );
    return {
      store,
      ttlMs: TTL_MS,
      burst: { calls: burst, ran, skip: summarize(skipMs) },
      electionsPerSecond,
      handover: summarize(handoverMs),
      failover: failoverMs.length ? summarize(failoverMs) : undefined,
      runOnce: summarize(runOnceMs),
      tryLock: summarize(tryLockMs),
    };
  } finally {
    await Promise.allSettled(lockers.map((l) => l.close()));
    await Promise.allSettled([...new Set(fences)].map((f) => f.close()));
  }
}

/** Scenario 11's table, with a one-line reading per store. */
export function electionLines(results: ElectionResult[], elections: number, failovers: number, cycles: number, burst: number): string[] {
  const f = (ms: number) => ms.toFixed(ms < 10 ? 2 : 0);
  return [
    `## Scenario 11: leader election and runOnce (${elections} handovers among 3 candidates, ${failovers} failovers at ttl ${TTL_MS / 1000} s, ${cycles} runOnce calls, a :00 of ${burst})`,
    '',
    `| store | elections/s (handover chain) | handover p50 / p99 ms | failover p50 / max ms (ttl 4000) | runOnce p50 / p99 ms | tryLock + release p50 ms | runOnce / tryLock (p50) | :00, ${burst} calls: ran / skip p50 / p99 ms |`,
    '|---|---|---|---|---|---|---|---|',
    ...results.map(
      (r) =>
        `| ${r.store} | ${Math.round(r.electionsPerSecond)} | ${f(r.handover.p50)} / ${f(r.handover.p99)} | ${r.failover ? `${f(r.failover.p50)} / ${f(r.failover.max)}` : 'n/a'} | ${f(r.runOnce.p50)} / ${f(r.runOnce.p99)} | ${f(r.tryLock.p50)} | ${(r.runOnce.p50 / r.tryLock.p50).toFixed(2)}× | ${r.burst.ran === 1 ? 'once' : `**${r.burst.ran} times**`} / ${f(r.burst.skip.p50)} / ${f(r.burst.skip.p99)} |`,
    ),
    '',
    'A handover is a resignation to the next leader having published its value (its lock granted, the previous record read, its own',
    "written through the fence). A failover starts when the leader's process (a process of its own, elected a moment before) is killed with",
    "SIGKILL and ends at the next leader's first fenced write: the rest of its lease (almost a whole ttl), then the handover. None for memory.",
    "runOnce is the claim (tryLock), a look for the window's marker, the job and the release: a second store read per call.",
    `A :00 is a fleet whose cron fires at the same second: ${burst} runOnce calls of one job fired at once from ${BURST_LOCKERS} lockers, each with`,
    'connections of its own (opened before), `lockAtLeastForMs` 20 s: the job must run once, and every other call skip; a skip is',
    'timed from the fire to its answer, so its p99 is the whole burst queueing at the store.',
    '',
    ...results.map(
      (r) =>
        `- ${r.store}: ${r.failover ? `a failover takes ${(r.failover.p50 / r.ttlMs).toFixed(2)}× the ttl at p50; ` : ''}` +
        `a handover ${f(r.handover.p50)} ms; runOnce costs ${(r.runOnce.p50 / r.tryLock.p50).toFixed(2)}× a tryLock cycle.`,
    ),
    '',
  ];
}
